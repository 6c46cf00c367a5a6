package proxy

import (
	"bufio"
	"context"
	"crypto/tls"
	"io"
	"net"
	"testing"

	pb "github.com/teapot-lb/teapot-lb/api/proto/teapotv1"
	"github.com/teapot-lb/teapot-lb/proxy/snapshot"
)

// streamTLS is an L7 handler that serves nothing and terminates the
// terminated server names with one certificate, offering h2 as the
// https configuration would (the proxy must not care).
type streamTLS struct {
	cfg   *tls.Config
	calls int
}

func (s *streamTLS) ServeConn(context.Context, net.Conn, func() *ListenerSnapshot) {}

func (s *streamTLS) StreamConfig(l *snapshot.Listener) *tls.Config {
	s.calls++
	if l.TLS == nil || len(l.TLS.Certificates) != 1 {
		return nil
	}
	return s.cfg
}

// TestTLSTerminateSNIRoutes: on one tls-passthrough listener, a server
// name routed with terminate has its TLS terminated by the load balancer
// and its decrypted bytes echoed by a plain TCP member, both ways and
// across several writes; a name routed without it still reaches its TLS
// member untouched (mixed). A ClientHello that does not finish its
// handshake is refused and counted.
func TestTLSTerminateSNIRoutes(t *testing.T) {
	t.Parallel()
	plain := startBackend(t, "127.0.0.1", echo)
	pass := tlsNamed(t, "pass")
	st := &streamTLS{cfg: &tls.Config{Certificates: []tls.Certificate{selfSigned(t, "term.acme.example")}}}
	p, m := newProxy(t, Config{HTTP: st})
	port := freePort(t)
	lb := &pb.LoadBalancer{Name: "term", Tenant: "acme",
		Listeners: []*pb.Listener{
			{Port: uint32(port), Protocol: "tls-passthrough", Pool: "pass", Tls: &pb.TLSPolicy{Certificates: []string{"term"}},
				SniRoutes: []*pb.SNIRoute{
					{Host: "term.acme.example", Pool: "plain", Terminate: true},
					{Host: "pass.acme.example", Pool: "pass"},
				}},
		},
		Pools: map[string]*pb.BackendPool{
			"plain": {Members: []*pb.Member{{Address: plain.addr}}},
			"pass":  {Members: []*pb.Member{{Address: pass.addr}}},
		},
		Status: &pb.LoadBalancerStatus{Address: "127.0.0.2"},
	}
	update(t, p, lb)
	addr := vipAddr("127.0.0.2", port)

	c, err := tls.Dial("tcp", addr, &tls.Config{ServerName: "term.acme.example", InsecureSkipVerify: true, NextProtos: []string{"h2", "http/1.1"}})
	if err != nil {
		t.Fatalf("terminated handshake: %v", err)
	}
	if cs := c.ConnectionState(); cs.PeerCertificates[0].Subject.CommonName != "term.acme.example" {
		t.Fatalf("served certificate %q", cs.PeerCertificates[0].Subject.CommonName)
	}
	r := bufio.NewReader(c)
	for _, line := range []string{"hello\n", "decrypted at the load balancer\n"} {
		if _, err := io.WriteString(c, line); err != nil {
			t.Fatal(err)
		}
		got, err := r.ReadString('\n')
		if err != nil || got != line {
			t.Fatalf("echo %q, %v; want %q", got, err, line)
		}
	}
	if err := c.CloseWrite(); err != nil {
		t.Fatal(err)
	}
	if rest, err := io.ReadAll(r); err != nil || len(rest) != 0 {
		t.Fatalf("after the client's close_notify: %q, %v; want a clean end", rest, err)
	}
	c.Close()

	pc, err := tls.Dial("tcp", addr, &tls.Config{ServerName: "pass.acme.example", InsecureSkipVerify: true})
	if err != nil {
		t.Fatal(err)
	}
	if got, err := io.ReadAll(pc); err != nil || string(got) != "pass" {
		t.Fatalf("passthrough name reached %q (%v), want the TLS member", got, err)
	}
	pc.Close()

	// A client that speaks TLS 1.1 at most cannot finish the handshake.
	bad, err := tls.Dial("tcp", addr, &tls.Config{ServerName: "term.acme.example", InsecureSkipVerify: true, MinVersion: tls.VersionTLS10, MaxVersion: tls.VersionTLS11})
	if err == nil {
		bad.Close()
		t.Fatal("a TLS 1.1 handshake on a terminated name succeeded")
	}
	eventually(t, "the failed handshake counted", func() bool { return refusedFor(m, RefusedTLSHandshake) == 1 })
}
