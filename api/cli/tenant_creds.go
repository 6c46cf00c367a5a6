package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"sigs.k8s.io/yaml"

	"github.com/teapot-lb/teapot-lb/api/client"
	pb "github.com/teapot-lb/teapot-lb/api/proto/teapotv1"
)

// Defaults of the Secret that carries an agent's credentials; the agent's
// manifests in packaging/k8s mount it.
const (
	DefaultAgentNamespace = "teapot-lb-system"
	DefaultAgentSecret    = "teapot-lb-credentials"
)

// tenantCredentialCmds are the tenant subcommands for agent credentials.
func (a *app) tenantCredentialCmds() []*cobra.Command {
	var (
		namespace, secret string
		ttl               time.Duration
	)
	issue := &cobra.Command{
		Use:   "credentials NAME",
		Short: "Issue agent credentials for a tenant and print them as a Kubernetes Secret",
		Long: "Issues a new client certificate for the tenant's agent, signed by the cluster CA, and prints a\n" +
			"Secret holding it, the CA and the LB hosts' addresses, ready for kubectl apply -f -.\n" +
			"Earlier credentials stay valid: to rotate, apply the new Secret, then revoke the old serial.",
		Example: "  teapot-lb tenant credentials acme | kubectl apply -f -\n" +
			"  teapot-lb tenant revoke-credentials acme 5f3a9c...",
		Args: args(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, argv []string) error {
			if ttl < 0 {
				return fmt.Errorf("--ttl must be positive, got %s", ttl)
			}
			return a.call(cmd, func(ctx context.Context, c *client.Conn) error {
				resp, err := pb.NewTenantCredentialsClient(c.ClientConn()).Issue(ctx, &pb.IssueCredentialsRequest{
					Tenant: argv[0], TtlSeconds: uint32(ttl / time.Second),
				})
				if err != nil {
					return err
				}
				return writeSecret(cmd.OutOrStdout(), string(a.output), argv[0], namespace, secret, resp)
			})
		},
	}
	f := issue.Flags()
	f.StringVar(&namespace, "namespace", DefaultAgentNamespace, "namespace of the Secret (where the agent runs)")
	f.StringVar(&secret, "secret-name", DefaultAgentSecret, "name of the Secret")
	f.DurationVar(&ttl, "ttl", 0, "validity of the credential (default one year)")

	revoke := &cobra.Command{
		Use:   "revoke-credentials NAME SERIAL...",
		Short: "Revoke agent credentials of a tenant; their open streams are closed",
		Example: "  teapot-lb tenant revoke-credentials acme 5f3a9c...\n" +
			"  (the serial is in the Secret's teapot-lb.io/credential-serial annotation)",
		Args: args(cobra.MinimumNArgs(2)),
		RunE: func(cmd *cobra.Command, argv []string) error {
			return a.call(cmd, func(ctx context.Context, c *client.Conn) error {
				resp, err := pb.NewTenantCredentialsClient(c.ClientConn()).Revoke(ctx, &pb.RevokeCredentialsRequest{
					Tenant: argv[0], Serials: argv[1:],
				})
				if err != nil {
					return err
				}
				fmt.Fprintf(cmd.OutOrStdout(), "tenant/%s: revoked %s (%d revoked in all)\n", argv[0], strings.Join(argv[1:], ", "), len(resp.GetRevoked()))
				return nil
			})
		},
	}
	return []*cobra.Command{issue, revoke}
}

// agentSecret is a Kubernetes Secret as the agent's manifests expect it.
type agentSecret struct {
	APIVersion string            `json:"apiVersion"`
	Kind       string            `json:"kind"`
	Metadata   secretMeta        `json:"metadata"`
	Type       string            `json:"type"`
	StringData map[string]string `json:"stringData"`
}

type secretMeta struct {
	Name        string            `json:"name"`
	Namespace   string            `json:"namespace"`
	Labels      map[string]string `json:"labels"`
	Annotations map[string]string `json:"annotations"`
}

// Keys of the agent's Secret.
const (
	SecretKeyTenant  = "tenant"
	SecretKeyServers = "servers"
	SecretKeyCA      = "ca.crt"
	SecretKeyCert    = "tls.crt"
	SecretKeyKey     = "tls.key"
)

func writeSecret(w io.Writer, output, tenant, namespace, name string, resp *pb.IssueCredentialsResponse) error {
	expires := resp.GetExpires().AsTime().UTC().Format(time.RFC3339)
	s := agentSecret{
		APIVersion: "v1",
		Kind:       "Secret",
		Metadata: secretMeta{
			Name:      name,
			Namespace: namespace,
			Labels:    map[string]string{"app.kubernetes.io/name": "teapot-lb-agent"},
			Annotations: map[string]string{
				"teapot-lb.io/tenant":            tenant,
				"teapot-lb.io/credential-serial": resp.GetSerial(),
				"teapot-lb.io/expires":           expires,
			},
		},
		Type: "Opaque",
		StringData: map[string]string{
			SecretKeyTenant:  tenant,
			SecretKeyServers: strings.Join(resp.GetServers(), ","),
			SecretKeyCA:      string(resp.GetCaPem()),
			SecretKeyCert:    string(resp.GetCertPem()),
			SecretKeyKey:     string(resp.GetKeyPem()),
		},
	}
	var out []byte
	var err error
	if output == OutputJSON {
		out, err = json.MarshalIndent(s, "", "  ")
		out = append(out, '\n')
	} else {
		out, err = yaml.Marshal(s)
		out = append([]byte(fmt.Sprintf("# Agent credential %s of tenant %s, valid until %s.\n", resp.GetSerial(), tenant, expires)), out...)
	}
	if err != nil {
		return fmt.Errorf("encode secret: %w", err)
	}
	_, err = w.Write(out)
	return err
}
