package web

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"sync"
	"testing"
	"time"

	"github.com/teapot-lb/teapot-lb/api/pki"
	pb "github.com/teapot-lb/teapot-lb/api/proto/teapotv1"
)

// clock is a settable time.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) now() time.Time      { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *clock) add(d time.Duration) { c.mu.Lock(); c.t = c.t.Add(d); c.mu.Unlock() }

// TestHostDashboard serves the host dashboard over real TLS with a host
// certificate from a cluster CA and logs in with CA-signed tokens.
func TestHostDashboard(t *testing.T) {
	ca, err := pki.NewCA("c1")
	if err != nil {
		t.Fatal(err)
	}
	other, err := pki.NewCA("c2")
	if err != nil {
		t.Fatal(err)
	}
	certPEM, keyPEM, err := ca.Issue(pki.IssueRequest{Identity: pki.Identity{Role: pki.RoleNode, Name: "n1"}, Server: true})
	if err != nil {
		t.Fatal(err)
	}
	// The API's own TLS settings demand a client certificate; the
	// dashboard must not.
	apiTLS, err := pki.ServerTLS(ca.CertPEM, certPEM, keyPEM, true)
	if err != nil {
		t.Fatal(err)
	}
	c := &cluster{status: &pb.ClusterStatusResponse{LeaderId: "n1", Nodes: []*pb.NodeStatus{node("n1", "leader", true)}}, objs: map[string][]*pb.Object{}}
	h, err := ListenHost(HostConfig{Addr: "127.0.0.1:0", TLS: apiTLS, CA: ca.Cert, Source: c, Interval: 20 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	clk := &clock{t: time.Now()}
	h.srv.cfg.Now, h.srv.auth.now = clk.now, clk.now
	if h.srv.LoginToken() != "" {
		t.Fatal("the host dashboard has a one-time token; only CA-signed tokens may log in")
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- h.Run(ctx) }()
	defer func() { cancel(); <-done }()

	roots := x509.NewCertPool()
	roots.AddCert(ca.Cert)
	base := "https://" + h.Addr().String()
	newClient := func() *http.Client {
		jar, _ := cookiejar.New(nil)
		return &http.Client{Jar: jar, Timeout: 5 * time.Second,
			Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: roots, ServerName: pki.ServerName}}}
	}
	status := func(hc *http.Client, path string, host string) int {
		t.Helper()
		req, _ := http.NewRequest("GET", base+path, nil)
		if host != "" {
			req.Host = host
		}
		resp, err := hc.Do(req)
		if err != nil {
			t.Fatalf("GET %s: %v", path, err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	sign := func(key *pki.CA, ttl time.Duration) string {
		tok, _, err := pki.SignDashboardToken(key.Key, clk.now(), ttl)
		if err != nil {
			t.Fatal(err)
		}
		return tok
	}

	anon := newClient()
	// Any Host name is answered (the host is reached by its own name or
	// address), and nothing without a session.
	if got := status(anon, "/api/snapshot", "lb1.example"); got != http.StatusUnauthorized {
		t.Fatalf("no session: %d, want 401", got)
	}
	if got := status(anon, "/login?token="+url.QueryEscape(sign(other, time.Hour)), ""); got != http.StatusForbidden {
		t.Fatalf("token of another cluster: %d, want 403", got)
	}

	// A form login.
	hc := newClient()
	resp, err := hc.PostForm(base+"/login", url.Values{"token": {sign(ca, 30*time.Minute)}})
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || resp.Request.URL.Path != "/" {
		t.Fatalf("form login: %d at %s", resp.StatusCode, resp.Request.URL)
	}
	// The token works more than once, until it expires.
	tok := sign(ca, time.Hour)
	second := newClient()
	if got := status(second, "/login?token="+url.QueryEscape(tok), ""); got != http.StatusOK {
		t.Fatalf("login: %d", got)
	}
	if got := status(newClient(), "/login?token="+url.QueryEscape(tok), ""); got != http.StatusOK {
		t.Fatalf("second login with the same token: %d", got)
	}
	waitOK := time.Now().Add(5 * time.Second)
	for status(hc, "/api/snapshot", "") != http.StatusOK {
		if time.Now().After(waitOK) {
			t.Fatal("no snapshot in the session")
		}
		time.Sleep(20 * time.Millisecond)
	}
	// The 30-minute session ends with its token; the one-hour one lives on.
	clk.add(31 * time.Minute)
	if got := status(hc, "/api/snapshot", ""); got != http.StatusUnauthorized {
		t.Fatalf("session after its token expired: %d, want 401", got)
	}
	if got := status(second, "/api/snapshot", ""); got != http.StatusOK {
		t.Fatalf("session of the 1h token at 31m: %d, want 200", got)
	}
	clk.add(30 * time.Minute)
	if got := status(second, "/api/snapshot", ""); got != http.StatusUnauthorized {
		t.Fatalf("session of the 1h token at 61m: %d, want 401", got)
	}
	if got := status(newClient(), "/login?token="+url.QueryEscape(tok), ""); got != http.StatusForbidden {
		t.Fatalf("expired token: %d, want 403", got)
	}
}
