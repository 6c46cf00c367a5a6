package proxy

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"io"
	"math/big"
	"net"
	"testing"
	"time"

	pb "github.com/teapot-lb/teapot-lb/api/proto/teapotv1"
)

// selfSigned returns a throwaway certificate for name.
func selfSigned(t testing.TB, name string) tls.Certificate {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: name}, DNSNames: []string{name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour)}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
}

// tlsNamed is a TLS member that answers every connection with its name:
// TLS reaches it untouched, it terminates it.
func tlsNamed(t testing.TB, name string) *backend {
	cfg := &tls.Config{Certificates: []tls.Certificate{selfSigned(t, name)}}
	return startBackend(t, "127.0.0.1", func(c net.Conn) {
		tc := tls.Server(c, cfg)
		if tc.Handshake() != nil {
			return
		}
		io.WriteString(tc, name)
		tc.Close()
	})
}

func TestTLSPassthroughRoutesByServerName(t *testing.T) {
	a, b := tlsNamed(t, "a"), tlsNamed(t, "b")
	p, m := newProxy(t, Config{})
	port, httpPort := freePort(t), freePort(t)
	lb := &pb.LoadBalancer{Name: "pass", Tenant: "acme",
		Listeners: []*pb.Listener{
			{Port: uint32(port), Protocol: "tls-passthrough", Pool: "b"},
			{Port: uint32(httpPort), Protocol: "http"}, // routes need one; it stays closed here
		},
		Routes: []*pb.Route{{Host: "a.acme.example", Pool: "a"}},
		Pools: map[string]*pb.BackendPool{
			"a": {Members: []*pb.Member{{Address: a.addr}}},
			"b": {Members: []*pb.Member{{Address: b.addr}}},
		},
		Status: &pb.LoadBalancerStatus{Address: "127.0.0.2"},
	}
	update(t, p, lb)
	tests := []struct{ serverName, want string }{
		{"a.acme.example", "a"},
		{"A.Acme.Example", "a"},
		{"other.acme.example", "b"},
		{"", "b"},
	}
	for _, tc := range tests {
		t.Run("sni "+tc.serverName, func(t *testing.T) {
			c, err := tls.Dial("tcp", vipAddr("127.0.0.2", port), &tls.Config{ServerName: tc.serverName, InsecureSkipVerify: true})
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			got, err := io.ReadAll(c)
			if err != nil || string(got) != tc.want {
				t.Fatalf("reached %q (%v), want member %s", got, err, tc.want)
			}
		})
	}
	t.Run("not TLS", func(t *testing.T) {
		c, err := net.Dial("tcp", vipAddr("127.0.0.2", port))
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		io.WriteString(c, "GET / HTTP/1.1\r\nHost: a.acme.example\r\n\r\n")
		c.SetReadDeadline(time.Now().Add(5 * time.Second))
		if n, err := c.Read(make([]byte, 1)); err == nil {
			t.Fatalf("read %d bytes from a refused connection", n)
		}
		eventually(t, "a not-tls refusal counted", func() bool {
			for _, l := range m.Report().Listeners {
				if l.LB == "acme/pass" && l.Refused[RefusedNotTLS] == 1 {
					return true
				}
			}
			return false
		})
	})
}
