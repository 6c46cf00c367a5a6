package certs

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"net"
	"testing"
	"time"

	"github.com/teapot-lb/teapot-lb/api/porttest"
	pb "github.com/teapot-lb/teapot-lb/api/proto/teapotv1"
	"github.com/teapot-lb/teapot-lb/proxy"
	"github.com/teapot-lb/teapot-lb/proxy/cpubudget"
	"github.com/teapot-lb/teapot-lb/proxy/snapshot"
)

// subjectGreeter answers with the client subject the Terminator passed on.
type subjectGreeter struct{}

func (subjectGreeter) ServeConn(ctx context.Context, c net.Conn, _ func() *proxy.ListenerSnapshot) {
	fmt.Fprintf(c, "subject=%s", proxy.ClientSubject(ctx))
}

// An https listener with client validation: required, a client without a
// certificate of its CAs fails the handshake; optional, every client is
// served and only a verified certificate's subject is passed on.
func TestClientCertificateValidation(t *testing.T) {
	t.Parallel()
	ca, clientCA, otherCA := newTestCA(t), newTestCA(t), newTestCA(t)
	store := newMemStore()
	svc := NewService(store)
	store.put(acmeTenant("a", 0, "a.example"))
	cert, key := ca.issue(t, time.Now().Add(-time.Hour), time.Now().Add(24*time.Hour), "shop.a.example")
	if _, err := svc.Upload(ctxT(t), &pb.UploadCertificateRequest{Tenant: "a", Name: "shop", CertPem: cert, KeyPem: key}); err != nil {
		t.Fatal(err)
	}
	cpu := cpubudget.New(cpubudget.Options{})
	m, err := New(Config{Store: store, Host: "h", CA: "https://127.0.0.1:1/dir", Logger: testLogger(t), CPU: cpu})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(m.Close)
	m.Update(store.objectsWith())
	m.reconcile(m.latest.Load())
	term := m.Terminator(subjectGreeter{})
	clientPair := func(c *testCA, cn string) tls.Certificate {
		crt, k := c.issueWith(t, time.Now().Add(-time.Hour), time.Now().Add(24*time.Hour), func(x *x509.Certificate) {
			x.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}
		}, cn)
		p, err := tls.X509KeyPair(crt, k)
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	good, foreign := clientPair(clientCA, "alice"), clientPair(otherCA, "mallory")
	serve := func(required bool) string {
		addr := porttest.Addr(t, "127.0.0.1")
		l := listener("a", false, []string{"shop"})
		l.TLS.Client = &snapshot.ClientTLS{CAs: clientCA.pool, Bundle: "bundle", Required: required, SubjectHeader: "X-Client-Subject"}
		serveTLS(t, addr, term, l)
		return addr
	}
	get := func(addr string, c *tls.Certificate) (string, error) {
		cfg := &tls.Config{ServerName: "shop.a.example", RootCAs: ca.pool}
		if c != nil {
			cfg.Certificates = []tls.Certificate{*c}
		}
		conn, err := tls.DialWithDialer(&net.Dialer{Timeout: 10 * time.Second}, "tcp", addr, cfg)
		if err != nil {
			return "", err
		}
		defer conn.Close()
		_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
		b, err := io.ReadAll(conn)
		if len(b) == 0 && err == nil {
			err = io.ErrUnexpectedEOF
		}
		return string(b), err
	}
	required, optional := serve(true), serve(false)
	// Every chain the listeners check is charged to tenant a's budget:
	// a client without a certificate costs no check.
	wantChecks := uint64(0)
	for _, tc := range []struct {
		name, addr string
		cert       *tls.Certificate
		want       string // "" when the connection must fail
	}{
		{"required, verified", required, &good, "subject=CN=alice"},
		{"required, none", required, nil, ""},
		{"required, another CA", required, &foreign, ""},
		{"optional, verified", optional, &good, "subject=CN=alice"},
		{"optional, none", optional, nil, "subject="},
		{"optional, another CA", optional, &foreign, "subject="},
	} {
		if tc.cert != nil {
			wantChecks++
		}
		got, err := get(tc.addr, tc.cert)
		switch {
		case tc.want == "" && err == nil:
			t.Errorf("%s: served %q, want a failed handshake", tc.name, got)
		case tc.want != "" && got != tc.want:
			t.Errorf("%s: %q (%v), want %q", tc.name, got, err, tc.want)
		}
	}
	if st := cpu.Tenant("a").Stat(); st.Verified != wantChecks || st.Spent == 0 {
		t.Errorf("a's account %+v, want %d checks charged", st, wantChecks)
	}
}
