package consensus

import (
	"context"
	"slices"

	"github.com/teapot-lb/teapot-lb/api"
	"github.com/teapot-lb/teapot-lb/api/client"
	"github.com/teapot-lb/teapot-lb/api/pki"
)

// WriteAdminConfig writes the admin config at path (DATA/admin.conf): the
// cluster's API addresses and an admin certificate, which the CLI finds
// without flags. The certificate is issued once and kept; the file is
// rewritten only when the addresses change.
func (n *Node) WriteAdminConfig(path string) error {
	conf, err := client.LoadConfig(path)
	if err != nil {
		cert, key, err := n.CA().Issue(pki.IssueRequest{Identity: pki.Identity{Role: pki.RoleAdmin, Name: "admin"}})
		if err != nil {
			return err
		}
		conf = &client.Config{CA: string(n.CA().CertPEM), Cert: string(cert), Key: string(key)}
	}
	servers := n.APIAddrs()
	if slices.Equal(servers, conf.Servers) {
		return nil
	}
	conf.Servers = servers
	return client.SaveConfig(path, conf)
}

// KeepAdminConfig rewrites the admin config at path whenever hosts join or
// leave, until ctx ends.
func (n *Node) KeepAdminConfig(ctx context.Context, path string) {
	w := n.Watch(n.Revision() + 1)
	for {
		ev, err := w.Next(ctx)
		if err != nil {
			return
		}
		touched := ev.Reset
		for _, c := range ev.Changes {
			touched = touched || c.Ref.GetKind() == api.KindNode
		}
		if touched {
			if err := n.WriteAdminConfig(path); err != nil {
				n.log.Warn("update admin credentials", "path", path, "err", err)
			}
		}
	}
}
