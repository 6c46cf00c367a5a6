package proxy

import (
	"context"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/teapot-lb/teapot-lb/proxy/l7"
)

// TestRouteFeaturesH2C runs the cases of TestRouteFeaturesHTTP1 over
// cleartext HTTP/2: routes chosen by method, header and query take the
// HTTP/2 fast path and choose as they do for HTTP/1.1.
func TestRouteFeaturesH2C(t *testing.T) {
	bes := map[string]*routingBackend{}
	for _, n := range []string{"main", "beta", "other", "mirror"} {
		bes[n] = startRoutingBackend(t, n)
	}
	srv := l7.New(l7.Config{})
	t.Cleanup(func() { srv.Close() })
	p, _ := newProxy(t, Config{HTTP: NewHTTP(srv, nil)})
	port := freePort(t)
	update(t, p, routingLB(port, bes))
	if st := p.Status()["acme/gw"]; len(st) != 0 {
		t.Fatalf("problems: %v", st)
	}
	target := vipAddr("127.0.0.2", port)
	var d net.Dialer
	tr := &http.Transport{Protocols: new(http.Protocols), DialContext: func(ctx context.Context, network, _ string) (net.Conn, error) {
		return d.DialContext(ctx, network, target)
	}}
	tr.Protocols.SetUnencryptedHTTP2(true)
	t.Cleanup(tr.CloseIdleConnections)
	c := &http.Client{Transport: tr, Timeout: 20 * time.Second,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	runRoutingCases(t, routingCases(), func(method, path string, h http.Header, body string) (*http.Response, error) {
		if method == "" {
			method = http.MethodGet
		}
		req, err := http.NewRequest(method, "http://gw.acme.example:"+portOf(target)+path, strings.NewReader(body))
		if err != nil {
			return nil, err
		}
		for k, v := range h {
			req.Header[k] = v
		}
		resp, err := c.Do(req)
		if err == nil && resp.ProtoMajor != 2 {
			t.Errorf("%s %s: protocol %s, want HTTP/2", method, path, resp.Proto)
		}
		return resp, err
	}, portOf(target))
}
