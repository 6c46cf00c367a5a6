package dns

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	mdns "github.com/miekg/dns"
)

// lookDelv finds BIND's validator: missing, the test skips, or fails
// under CI (which installs bind9-dnsutils).
func lookDelv(t *testing.T) string {
	t.Helper()
	p, err := exec.LookPath("delv")
	if err != nil {
		if os.Getenv("CI") != "" { // .ci/run installs bind9-dnsutils: missing there is a failure
			t.Fatal("CI: delv is not installed: apt-get install bind9-dnsutils")
		}
		t.Skip("delv is not installed: apt-get install bind9-dnsutils")
	}
	return p
}

// delv asks addr for name with the trust anchor file anchors and returns
// what it printed.
func delv(t *testing.T, bin, addr, anchors, name, qtype string) string {
	t.Helper()
	host, port, _ := net.SplitHostPort(addr)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	out, _ := exec.CommandContext(ctx, bin, "@"+host, "-p", port, "-a", anchors, "+root=acme.example", name, qtype).CombinedOutput()
	return string(out)
}

// tamperer forwards queries to addr and changes every A record of the
// answers to 192.0.2.99, leaving the signatures as they were.
func tamperer(t *testing.T, addr string) string {
	t.Helper()
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &mdns.Server{PacketConn: pc, Handler: mdns.HandlerFunc(func(w mdns.ResponseWriter, req *mdns.Msg) {
		m, _, err := (&mdns.Client{Net: "udp", UDPSize: 1232, Timeout: 5 * time.Second}).Exchange(req, addr)
		if err != nil {
			return
		}
		for _, rr := range m.Answer {
			if a, ok := rr.(*mdns.A); ok {
				a.A = net.IPv4(192, 0, 2, 99)
			}
		}
		_ = w.WriteMsg(m)
	})}
	go func() { _ = srv.ActivateAndServe() }()
	t.Cleanup(func() { _ = srv.Shutdown() })
	return pc.LocalAddr().String()
}

// TestDelvValidatesSignedAnswers runs BIND's validator (delv) against a
// signed zone with our DNSKEY as its trust anchor: a name, a name under a
// wildcard, NODATA and a name that does not exist validate; an answer
// changed on the way does not.
func TestDelvValidatesSignedAnswers(t *testing.T) {
	t.Parallel()
	bin := lookDelv(t)
	s, addr := startSigned(t, signedConfig(newMemKeys()))
	k := s.sec.key("acme.example.")
	anchors := filepath.Join(t.TempDir(), "anchors.conf")
	conf := fmt.Sprintf("trust-anchors {\n\t%s static-key %d %d %d %q;\n};\n", k.zone, k.dnskey.Flags, k.dnskey.Protocol, k.dnskey.Algorithm, k.dnskey.PublicKey)
	if err := os.WriteFile(anchors, []byte(conf), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ name, qtype, want string }{
		{"shop.acme.example", "A", "192.0.2.10"},
		{"x.apps.acme.example", "A", "192.0.2.20"},
		{"acme.example", "SOA", "SOA"},
		{"shop.acme.example", "AAAA", "; negative response, fully validated"},
		{"nope.acme.example", "A", "; negative response, fully validated"},
	} {
		out := delv(t, bin, addr, anchors, c.name, c.qtype)
		t.Logf("delv %s %s: %s", c.name, c.qtype, strings.TrimSpace(out))
		if !strings.Contains(out, "fully validated") || !strings.Contains(out, c.want) {
			t.Fatalf("delv %s %s:\n%s", c.name, c.qtype, out)
		}
	}
	bad := tamperer(t, addr)
	out := delv(t, bin, bad, anchors, "shop.acme.example", "A")
	if strings.Contains(out, "fully validated") || strings.Contains(out, "192.0.2.99") && !strings.Contains(out, "failed") {
		t.Fatalf("delv validated a tampered answer:\n%s", out)
	}
	t.Logf("delv on a tampered answer: %s", strings.TrimSpace(out))
}
