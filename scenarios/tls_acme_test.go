package scenarios

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

// TestTLSClusteredACME: a three-host cluster obtains a certificate from a
// real ACME server (pebble) for an https listener, every host serves it,
// it is renewed, the leader dies during an issuance and the certificate
// still arrives, and another tenant can neither obtain nor upload nor be
// served a certificate for the first tenant's host.
func TestTLSClusteredACME(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: the TLS lab runs for minutes")
	}
	parallelScenarioTaking(t, 90*time.Second) // most of it waiting for issuances and a renewal
	l := newTLSLab(t)
	if err := l.apply(fmt.Sprintf(tlsManifest, routes("shop.acme.example"))); err != nil {
		t.Fatal(err)
	}
	if !l.servesHTTPS() {
		t.Fatal("serve opens no https listener: the data plane reports that https listeners need the L7 handler")
	}

	first := l.waitValid("acme", "shop.acme.example", time.Time{}, tlsIssue)
	t.Logf("issued by %s, valid until %s", first.Issuer, first.NotAfter)

	t.Run("every host serves the page over TLS", func(t *testing.T) {
		for _, n := range l.nodes {
			l.route(n)
			p := l.waitPage(tlsVIP, "shop.acme.example", time.Time{}, 30*time.Second)
			if err := p.leaf.VerifyHostname("shop.acme.example"); err != nil {
				t.Errorf("%s: %v", n.id, err)
			}
		}
	})

	t.Run("the certificate is renewed", func(t *testing.T) {
		was, _ := time.Parse(time.RFC3339, first.NotAfter)
		renewed := l.waitValid("acme", "shop.acme.example", was, tlsValidity+tlsIssue)
		t.Logf("renewed: valid until %s", renewed.NotAfter)
		for _, n := range l.nodes {
			l.route(n)
			l.waitPage(tlsVIP, "shop.acme.example", was, 60*time.Second)
		}
	})

	t.Run("the leader dies during an issuance", func(t *testing.T) {
		l.route(l.nodes[0])
		if err := l.apply(fmt.Sprintf(tlsManifest, routes("shop.acme.example", "late.acme.example"))); err != nil {
			t.Fatal(err)
		}
		// The hosts start managing the name: its status appears (pending,
		// or already valid on a fast machine). Then the leader dies.
		var st certStatus
		waitFor(t, 30*time.Second, "late.acme.example being managed", func() error {
			var err error
			st, err = l.certStatus("acme", "late.acme.example")
			return err
		})
		leader := l.leader()
		l.kill(leader)
		t.Logf("killed the leader %s while late.acme.example was %s", leader.id, st.State)
		var live []*tlsNode
		for _, n := range l.nodes {
			if n != leader {
				live = append(live, n)
			}
		}
		l.route(live[0])
		l.waitValid("acme", "late.acme.example", time.Time{}, tlsIssue)
		for _, n := range live {
			l.route(n)
			l.waitPage(tlsVIP, "late.acme.example", time.Time{}, 60*time.Second)
		}
		l.start(leader)
		l.route(leader)
		l.waitPage(tlsVIP, "late.acme.example", time.Time{}, startTimeout)
	})

	t.Run("another tenant gets no certificate for acme's host", func(t *testing.T) {
		l.route(l.nodes[0])
		// Through ACME: its load balancer may not route acme's host.
		steal := `
kind: LoadBalancer
name: steal
tenant: globex
vip: { pool: tls, address: "198.51.100.11" }
listeners: [{ port: 443, protocol: https, tls: { acme: true } }]
routes: [{ host: shop.acme.example, path: /, pool: web }]
pools: { web: { members: ["192.0.2.101:8080"] } }
`
		if err := l.apply(steal); err == nil || !strings.Contains(err.Error(), "not inside the tenant's domains") {
			t.Fatalf("globex routed shop.acme.example: %v", err)
		}
		// Through an upload: the certificate's names must be its own.
		dir := t.TempDir()
		certFile, keyFile := selfSignedFiles(t, dir, "shop.acme.example")
		if _, err := l.cli(l.live(), "cert", "upload", "--tenant", "globex", "--cert", certFile, "--key", keyFile); err == nil ||
			!strings.Contains(err.Error(), "not inside the tenant's domains") {
			t.Fatalf("globex uploaded a certificate for shop.acme.example: %v", err)
		}
		// With its own certificate on its own VIP, acme's name is refused.
		ownCert, ownKey := selfSignedFiles(t, dir, "shop.globex.example")
		if _, err := l.cli(l.live(), "cert", "upload", "own", "--tenant", "globex", "--cert", ownCert, "--key", ownKey); err != nil {
			t.Fatal(err)
		}
		own := `
kind: LoadBalancer
name: own
tenant: globex
vip: { pool: tls, address: "198.51.100.11" }
listeners: [{ port: 443, protocol: https, tls: { certificates: [own] } }]
routes: [{ host: shop.globex.example, path: /, pool: web }]
pools: { web: { members: ["192.0.2.101:8080"] } }
`
		if err := l.apply(own); err != nil {
			t.Fatal(err)
		}
		waitFor(t, 30*time.Second, "globex's VIP refuses acme's name", func() error {
			if _, err := l.get(tlsVIPGlobex, "shop.acme.example"); err == nil {
				return errStop(fmt.Errorf("globex's listener completed a handshake for shop.acme.example"))
			} else if !strings.Contains(err.Error(), "internal error") && !strings.Contains(err.Error(), "handshake failure") {
				return err // not up yet
			}
			return nil
		})
		out, err := l.cli(l.live(), "cert", "list")
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("cert list:\n%s", out)
		if strings.Contains(out, "PRIVATE KEY") {
			t.Fatal("cert list shows key material")
		}
	})
}
