package l7

import (
	"bufio"
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"golang.org/x/net/http2"
)

// The CORS filter is applied once, in serveExt: every case gives the same
// status and CORS fields over HTTP/1.1, HTTP/2 over TLS and h2c, and a
// preflight never reaches the member.
func TestCORSEveryProtocol(t *testing.T) {
	t.Parallel()
	got := make(chan string, 64)
	be := namedServer(t, "a", got)
	route := func(cfg CORSConfig) *Route { return &Route{Backend: be, Ext: &RouteExt{CORS: NewCORS(cfg)}} }
	router := testRouter{
		{prefix: "/list", route: route(CORSConfig{AllowOrigins: []string{"https://www.foo.com", "https://*.bar.com"},
			AllowMethods: []string{"GET", "OPTIONS"}, AllowHeaders: []string{"x-header-1", "x-header-2"},
			ExposeHeaders: []string{"x-header-3", "x-header-4"}, MaxAge: 3600, AllowCredentials: true})},
		{prefix: "/anycred", route: route(CORSConfig{AllowOrigins: []string{"*"}, AllowMethods: []string{"*"}, AllowHeaders: []string{"*"}, MaxAge: 5, AllowCredentials: true})},
		{prefix: "/any", route: route(CORSConfig{AllowOrigins: []string{"*"}, AllowMethods: []string{"*"}, AllowHeaders: []string{"*"}, MaxAge: 5})},
		{prefix: "/port", route: route(CORSConfig{AllowOrigins: []string{"http://a.example:8080", "https://*.b.example:443"}, MaxAge: 5})},
	}
	h1addr := proxyUnder(t, New(Config{}), router, nil)
	h2addr := proxyUnder(t, New(Config{}), router, selfSigned(t))
	h1 := &http.Client{Timeout: 20 * time.Second}
	h2 := h2TestClient()
	h2.Timeout = h1.Timeout
	h2c := &http.Client{Timeout: h1.Timeout, Transport: &http2.Transport{AllowHTTP: true,
		DialTLSContext: func(ctx context.Context, network, addr string, _ *tls.Config) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, network, addr)
		}}}
	pre := func(origin, method, headers string) http.Header {
		h := http.Header{"Origin": {origin}, "Access-Control-Request-Method": {method}}
		if headers != "" {
			h.Set("Access-Control-Request-Headers", headers)
		}
		return h
	}
	tests := []struct {
		name, method, path string
		hdr                http.Header
		status             int
		member             bool   // the member saw the request
		want               string // the CORS fields, sorted, "name: value; ..."
	}{
		{name: "preflight exact", method: "OPTIONS", path: "/list", hdr: pre("https://www.foo.com", "GET", "x-header-1, x-header-2"), status: 204,
			want: "Access-Control-Allow-Credentials: true; Access-Control-Allow-Headers: x-header-1, x-header-2; Access-Control-Allow-Methods: GET, OPTIONS; " +
				"Access-Control-Allow-Origin: https://www.foo.com; Access-Control-Expose-Headers: x-header-3, x-header-4; Access-Control-Max-Age: 3600"},
		{name: "preflight wildcard host many labels", method: "OPTIONS", path: "/list", hdr: pre("https://xpto.www.bar.com", "GET", ""), status: 204,
			want: "Access-Control-Allow-Credentials: true; Access-Control-Allow-Methods: GET, OPTIONS; Access-Control-Allow-Origin: https://xpto.www.bar.com; " +
				"Access-Control-Expose-Headers: x-header-3, x-header-4; Access-Control-Max-Age: 3600"},
		{name: "preflight wildcard needs a label", method: "OPTIONS", path: "/list", hdr: pre("https://bar.com", "GET", ""), status: 204},
		{name: "preflight other scheme", method: "OPTIONS", path: "/list", hdr: pre("http://www.foo.com", "GET", ""), status: 204},
		{name: "preflight denied", method: "OPTIONS", path: "/list", hdr: pre("https://foobar.com", "GET", ""), status: 204},
		{name: "simple allowed", method: "GET", path: "/list", hdr: http.Header{"Origin": {"https://www.foo.com"}}, status: 200, member: true,
			want: "Access-Control-Allow-Credentials: true; Access-Control-Allow-Origin: https://www.foo.com; Access-Control-Expose-Headers: x-header-3, x-header-4"},
		{name: "simple denied", method: "GET", path: "/list", hdr: http.Header{"Origin": {"https://foobar.com"}}, status: 200, member: true},
		{name: "no origin", method: "OPTIONS", path: "/list", status: 200, member: true},
		{name: "options without request method", method: "OPTIONS", path: "/list", hdr: http.Header{"Origin": {"https://www.foo.com"}}, status: 200, member: true,
			want: "Access-Control-Allow-Credentials: true; Access-Control-Allow-Origin: https://www.foo.com; Access-Control-Expose-Headers: x-header-3, x-header-4"},
		{name: "wildcard without credentials", method: "OPTIONS", path: "/any", hdr: pre("https://foobar.com:12345", "PUT", "x-a"), status: 204,
			want: "Access-Control-Allow-Headers: *; Access-Control-Allow-Methods: *; Access-Control-Allow-Origin: *; Access-Control-Max-Age: 5"},
		{name: "wildcard with credentials echoes", method: "OPTIONS", path: "/anycred", hdr: pre("https://other.foo.com", "PUT", "x-header-1, x-header-2"), status: 204,
			want: "Access-Control-Allow-Credentials: true; Access-Control-Allow-Headers: x-header-1, x-header-2; Access-Control-Allow-Methods: PUT; " +
				"Access-Control-Allow-Origin: https://other.foo.com; Access-Control-Max-Age: 5"},
		{name: "simple wildcard with credentials", method: "PUT", path: "/anycred", hdr: http.Header{"Origin": {"https://other.foo.com"}}, status: 200, member: true,
			want: "Access-Control-Allow-Credentials: true; Access-Control-Allow-Origin: https://other.foo.com"},
		{name: "port given", method: "GET", path: "/port", hdr: http.Header{"Origin": {"http://a.example:8080"}}, status: 200, member: true,
			want: "Access-Control-Allow-Origin: http://a.example:8080"},
		{name: "port differs", method: "GET", path: "/port", hdr: http.Header{"Origin": {"http://a.example"}}, status: 200, member: true},
		{name: "default port spelled out", method: "GET", path: "/port", hdr: http.Header{"Origin": {"https://x.b.example"}}, status: 200, member: true,
			want: "Access-Control-Allow-Origin: https://x.b.example"},
	}
	protos := []struct {
		name, addr, scheme string
		client             *http.Client
	}{{"HTTP/1.1", h1addr, "http", h1}, {"HTTP/2", h2addr, "https", h2}, {"h2c", h1addr, "http", h2c}}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var first string
			for _, p := range protos {
				req, _ := http.NewRequest(tc.method, p.scheme+"://"+p.addr+tc.path, nil)
				for k, v := range tc.hdr {
					req.Header[k] = v
				}
				resp, err := p.client.Do(req)
				if err != nil {
					t.Fatalf("%s: %v", p.name, err)
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				fields := corsFields(resp.Header)
				outcome := fmt.Sprintf("%d %s", resp.StatusCode, fields)
				if resp.StatusCode != tc.status || fields != tc.want {
					t.Errorf("%s: got %q, want %d %q", p.name, outcome, tc.status, tc.want)
				}
				if first == "" {
					first = outcome
				} else if outcome != first {
					t.Errorf("%s differs from HTTP/1.1: %q, %q", p.name, outcome, first)
				}
				sawIt := false
				select {
				case <-got:
					sawIt = true
				default:
				}
				if sawIt != tc.member {
					t.Errorf("%s: the member saw the request: %v, want %v", p.name, sawIt, tc.member)
				}
			}
		})
	}
}

// corsFields lists the Access-Control-* fields of h, sorted.
func corsFields(h http.Header) string {
	var out []string
	for k, vs := range h {
		if strings.HasPrefix(k, "Access-Control-") {
			out = append(out, k+": "+strings.Join(vs, ", "))
		}
	}
	slices.Sort(out)
	return strings.Join(out, "; ")
}

// A preflight's 204 carries no body framing (RFC 9110: no Content-Length
// or Transfer-Encoding on a 204) and the connection serves the next
// request.
func TestCORSPreflightFraming(t *testing.T) {
	t.Parallel()
	be := namedServer(t, "a", nil)
	router := testRouter{{prefix: "/", route: &Route{Backend: be, Ext: &RouteExt{CORS: NewCORS(CORSConfig{AllowOrigins: []string{"*"}, MaxAge: 5})}}}}
	addr := proxyUnder(t, New(Config{}), router, nil)
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(20 * time.Second))
	pre := "OPTIONS /x HTTP/1.1\r\nHost: a\r\nOrigin: https://o.example\r\nAccess-Control-Request-Method: PUT\r\n\r\n"
	if _, err := io.WriteString(c, pre+"GET /x HTTP/1.1\r\nHost: a\r\nOrigin: https://o.example\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != 204 || resp.Header.Get("Content-Length") != "" || len(resp.TransferEncoding) > 0 || resp.Header.Get("Access-Control-Allow-Origin") != "*" {
		t.Fatalf("preflight: %d %v %v", resp.StatusCode, resp.TransferEncoding, resp.Header)
	}
	resp, err = http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 || !strings.HasPrefix(string(body), "a GET") || resp.Header.Get("Access-Control-Allow-Origin") != "*" {
		t.Errorf("next request: %d %q %v", resp.StatusCode, body, resp.Header)
	}
}
