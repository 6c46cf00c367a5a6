package pki

import (
	"crypto/tls"
	"net"
	"strings"
	"testing"
)

func TestIssueAndIdentity(t *testing.T) {
	ca, err := NewCA("c1")
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		req  IssueRequest
		want Identity
	}{
		{"node", IssueRequest{Identity: Identity{RoleNode, "n1", ""}, Server: true, IPs: []net.IP{net.IPv4(127, 0, 0, 1)}}, Identity{RoleNode, "n1", ""}},
		{"admin", IssueRequest{Identity: Identity{RoleAdmin, "ops", ""}}, Identity{RoleAdmin, "ops", ""}},
		{"tenant", IssueRequest{Identity: Identity{RoleTenant, "acme", ""}}, Identity{RoleTenant, "acme", ""}},
		{"tenant with uid", IssueRequest{Identity: Identity{RoleTenant, "acme", "3f2a"}}, Identity{RoleTenant, "acme", "3f2a"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			certPEM, _, err := ca.Issue(tt.req)
			if err != nil {
				t.Fatal(err)
			}
			cert, err := ParseCert(certPEM)
			if err != nil {
				t.Fatal(err)
			}
			got, err := IdentityOf(cert)
			if err != nil || got != tt.want {
				t.Fatalf("identity %v %v, want %v", got, err, tt.want)
			}
			if tt.req.Server != (len(cert.DNSNames) > 0 && cert.DNSNames[0] == ServerName) {
				t.Fatalf("server name SAN: %v", cert.DNSNames)
			}
		})
	}
	if _, _, err := ca.Issue(IssueRequest{}); err == nil {
		t.Fatal("issued a certificate without identity")
	}
}

func TestSignCSRUsesGivenIdentity(t *testing.T) {
	ca, _ := NewCA("c1")
	csr, _, err := NewCSR(Identity{RoleAdmin, "sneaky", ""})
	if err != nil {
		t.Fatal(err)
	}
	certPEM, err := ca.SignCSR(csr, IssueRequest{Identity: Identity{RoleNode, "n2", ""}, Server: true})
	if err != nil {
		t.Fatal(err)
	}
	cert, _ := ParseCert(certPEM)
	if id, _ := IdentityOf(cert); id != (Identity{RoleNode, "n2", ""}) {
		t.Fatalf("identity taken from the request: %v", id)
	}
	if _, err := ca.SignCSR([]byte("junk"), IssueRequest{Identity: Identity{RoleNode, "x", ""}}); err == nil {
		t.Fatal("signed junk")
	}
}

func TestJoinTokenRoundTrip(t *testing.T) {
	ca, _ := NewCA("c1")
	tok := NewJoinToken(ca.Fingerprint())
	got, err := ParseJoinToken(tok.String())
	if err != nil || got != tok {
		t.Fatalf("round trip: %v %v", got, err)
	}
	if !got.MatchesHash(tok.SecretHash()) {
		t.Fatal("hash does not match")
	}
	other := NewJoinToken(ca.Fingerprint())
	if other.MatchesHash(tok.SecretHash()) {
		t.Fatal("another token matches")
	}
	for _, bad := range []string{"", "teapot1", "teapot1.abc.id.secretsecretsecret", "x." + ca.Fingerprint() + ".id.secretsecretsecret", "teapot1." + ca.Fingerprint() + "..secretsecretsecret", "teapot1." + ca.Fingerprint() + ".id.short"} {
		if _, err := ParseJoinToken(bad); err == nil {
			t.Errorf("accepted %q", bad)
		}
	}
}

func TestPinnedTLS(t *testing.T) {
	ca, _ := NewCA("c1")
	cert, key, _ := ca.Issue(IssueRequest{Identity: Identity{RoleNode, "n1", ""}, Server: true, IPs: []net.IP{net.IPv4(127, 0, 0, 1)}})
	srvTLS, err := ServerTLS(ca.CertPEM, cert, key, false)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := tls.Listen("tcp", "127.0.0.1:0", srvTLS)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			_ = c.(*tls.Conn).Handshake()
			c.Close()
		}
	}()
	dial := func(fp string) error {
		c, err := tls.Dial("tcp", ln.Addr().String(), PinnedTLS(fp))
		if err == nil {
			c.Close()
		}
		return err
	}
	if err := dial(ca.Fingerprint()); err != nil {
		t.Fatalf("right fingerprint refused: %v", err)
	}
	other, _ := NewCA("c2")
	if err := dial(other.Fingerprint()); err == nil || !strings.Contains(err.Error(), "fingerprint") {
		t.Fatalf("wrong fingerprint: %v", err)
	}
}

func FuzzParseJoinToken(f *testing.F) {
	ca, _ := NewCA("c1")
	f.Add(NewJoinToken(ca.Fingerprint()).String())
	f.Add("teapot1...")
	f.Fuzz(func(t *testing.T, s string) {
		tok, err := ParseJoinToken(s)
		if err != nil {
			return
		}
		again, err := ParseJoinToken(tok.String())
		if err != nil || again != tok {
			t.Fatalf("%q parsed to %v, which does not round-trip", s, tok)
		}
	})
}
