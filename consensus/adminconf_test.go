package consensus

import (
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/teapot-lb/teapot-lb/api/client"
)

func TestWriteAdminConfigIssuesOnceAndTracksServers(t *testing.T) {
	h := startHost(t, Config{NodeID: "n1"})
	path := filepath.Join(t.TempDir(), "admin.conf")
	if err := h.node.WriteAdminConfig(path); err != nil {
		t.Fatal(err)
	}
	conf, err := client.LoadConfig(path)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(conf.Servers, []string{h.cfg.APIAddr}) || conf.Cert == "" || conf.CA != string(h.node.CA().CertPEM) {
		t.Fatalf("admin config: servers %v, cert set %v", conf.Servers, conf.Cert != "")
	}
	before, _ := os.ReadFile(path)
	if err := h.node.WriteAdminConfig(path); err != nil {
		t.Fatal(err)
	}
	if after, _ := os.ReadFile(path); string(after) != string(before) {
		t.Error("an unchanged cluster rewrote the admin config (and its certificate)")
	}
}
