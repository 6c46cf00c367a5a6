package certs

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"runtime"
	"testing"
	"time"

	"github.com/teapot-lb/teapot-lb/api/porttest"
	pb "github.com/teapot-lb/teapot-lb/api/proto/teapotv1"
	"github.com/teapot-lb/teapot-lb/proxy"
)

// transportReporter answers with the type of the connection under the
// TLS connection it is handed.
type transportReporter struct{}

func (transportReporter) ServeConn(_ context.Context, c net.Conn, _ func() *proxy.ListenerSnapshot) {
	if tc, ok := c.(*tls.Conn); ok {
		fmt.Fprintf(tc, "%T", tc.NetConn())
	}
}

// The https terminator builds its TLS connections over the L7 engine's
// ClientTransport, which lets the engine wait for a keep-alive client's
// next request without a read that finds nothing (on Linux; elsewhere it
// is the TCP connection).
func TestTerminatorUsesClientTransport(t *testing.T) {
	ca := newTestCA(t)
	store := newMemStore()
	store.put(acmeTenant("acme", 0, "acme.example"))
	nb, na := time.Now().Add(-time.Hour), time.Now().Add(24*time.Hour)
	cert, key := ca.issue(t, nb, na, "shop.acme.example")
	if _, err := NewService(store).Upload(ctxT(t), &pb.UploadCertificateRequest{Tenant: "acme", Name: "shop", CertPem: cert, KeyPem: key}); err != nil {
		t.Fatal(err)
	}
	m, err := New(Config{Store: store, Host: "h", CA: "https://127.0.0.1:1/dir", Logger: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(m.Close)
	m.Update(store.objectsWith())
	m.reconcile(m.latest.Load())
	addr := porttest.Addr(t, "127.0.0.1")
	serveTLS(t, addr, m.Terminator(transportReporter{}), listener("acme", false, []string{"shop"}))
	c, err := tls.Dial("tcp", addr, &tls.Config{ServerName: "shop.acme.example", RootCAs: ca.pool})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(20 * time.Second))
	got, _ := io.ReadAll(c)
	want := "*net.TCPConn"
	if runtime.GOOS == "linux" {
		want = "*l7.tlsTransport"
	}
	if string(got) != want {
		t.Errorf("the TLS connection is over %s, want %s", got, want)
	}
}
