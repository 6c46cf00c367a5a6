package scenarios

import (
	"os"
	"strings"
	"testing"
	"time"

	pb "github.com/teapot-lb/teapot-lb/api/proto/teapotv1"
)

// A tenant uploads a certificate whose every handshake costs the hosts
// seconds of CPU (RSA 8192: ~60 ms a signature; RSA 16384: ~2 s): the
// real binary refuses it through the agent's stream and through the
// admin API's `cert upload` alike, naming the field and the keys
// accepted, and takes RSA 4096 (openssl-made fixtures for shop.b.example
// in testdata/keys).
func TestCostlyCertificateKeysAreRefused(t *testing.T) {
	c := newCluster(t)
	n := c.bootstrap()
	l := &tenantLab{t: t, c: c, conn: dialAll(t, c)}
	tenants := c.dir + "/tenants.yaml"
	if err := os.WriteFile(tenants, []byte("kind: Tenant\nname: b\ndomains: [b.example]\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	l.cliOK("apply", "-f", tenants)
	const accepted = "use an ECDSA P-256 or P-384, Ed25519, or RSA key of at most 4096 bits"

	t.Run("admin API", func(t *testing.T) {
		out, err := c.cli(n, "cert", "upload", "big", "--tenant", "b", "--cert", "testdata/keys/rsa8192.crt", "--key", "testdata/keys/rsa8192.key")
		if err == nil || !strings.Contains(err.Error(), "cert: has an RSA key of 8192 bits; "+accepted) {
			t.Fatalf("cert upload of RSA 8192: %q %v", out, err)
		}
		if _, err := c.cli(n, "cert", "upload", "ok", "--tenant", "b", "--cert", "testdata/keys/rsa4096.crt", "--key", "testdata/keys/rsa4096.key"); err != nil {
			t.Fatalf("cert upload of RSA 4096: %v", err)
		}
	})

	t.Run("tenant stream", func(t *testing.T) {
		read := func(name string) []byte {
			b, err := os.ReadFile("testdata/keys/" + name)
			if err != nil {
				t.Fatal(err)
			}
			return b
		}
		a := dialTenant(t, "b", l.credentials("b"))
		st, err := a.open(true)
		if err != nil {
			t.Fatal(err)
		}
		defer st.close()
		ch := &pb.SyncChange{Seq: 1, Certificates: []*pb.SyncCertificate{
			{Name: "k8s-shop-big", CertPem: read("rsa8192.crt"), KeyPem: read("rsa8192.key")},
			{Name: "k8s-shop-ok", CertPem: read("rsa4096.crt"), KeyPem: read("rsa4096.key")},
		}}
		if err := st.s.Send(&pb.SyncRequest{Msg: &pb.SyncRequest_Change{Change: ch}}); err != nil {
			t.Fatal(err)
		}
		var ack *pb.SyncAck
		select {
		case ack = <-st.acks:
		case <-st.done:
			t.Fatalf("stream ended: %v", st.err)
		case <-time.After(streamTimeout):
			t.Fatal("no ack")
		}
		got := map[string]string{}
		for _, r := range ack.GetCertificates() {
			got[r.GetName()] = r.GetError()
		}
		if e := got["k8s-shop-big"]; !strings.Contains(e, "cert: has an RSA key of 8192 bits; "+accepted) {
			t.Errorf("RSA 8192 through the stream: %q", e)
		}
		if e, ok := got["k8s-shop-ok"]; !ok || e != "" {
			t.Errorf("RSA 4096 through the stream: %q (present %v)", e, ok)
		}
	})
}
