package l7

import (
	"bufio"
	"crypto/tls"
	"fmt"
	"net/http"
	"net/netip"
	"strings"
	"testing"
)

// spoofed are client-address and request-id fields a client may send.
var spoofed = map[string]string{
	"X-Real-Ip":         "10.6.6.6",
	"True-Client-Ip":    "10.6.6.7",
	"X-Client-Ip":       "10.6.6.8",
	"X-Forwarded-Port":  "1",
	"X-Forwarded-For":   "10.6.6.9",
	"X-Forwarded-Proto": "gopher",
	"X-Forwarded-Host":  "evil.example",
	"Forwarded":         "for=10.6.6.10",
	"X-Request-Id":      "client-chosen-id",
}

// fieldsHandler answers with the fields the member received, one
// "Name: v1|v2" line each.
func fieldsHandler(w http.ResponseWriter, r *http.Request) {
	for k := range spoofed {
		fmt.Fprintf(w, "%s: %s\n", k, strings.Join(r.Header.Values(k), "|"))
	}
}

func parseFields(body string) map[string]string {
	out := map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(body), "\n") {
		k, v, _ := strings.Cut(line, ": ")
		out[k] = v
	}
	return out
}

// TestClientFieldsStrippedUnlessTrusted: over HTTP/1.1 and HTTP/2 the
// fields naming the client (X-Real-IP, True-Client-IP, X-Client-IP,
// X-Forwarded-*, Forwarded) and its X-Request-Id never reach a member as
// the client wrote them, unless the client is a trusted proxy: then its
// X-Forwarded-For is appended to and the others are kept.
func TestClientFieldsStrippedUnlessTrusted(t *testing.T) {
	be := newBackend(t, backendServer(t, http.HandlerFunc(fieldsHandler)))
	for _, trusted := range []bool{false, true} {
		cfg := Config{}
		if trusted {
			cfg.TrustedProxies = []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}
		}
		tlsCfg := selfSigned(t)
		addr := proxyUnder(t, New(cfg), oneRoute(be), tlsCfg)
		for _, proto := range []string{"http/1.1", "h2"} {
			t.Run(fmt.Sprintf("%s trusted=%v", proto, trusted), func(t *testing.T) {
				var body string
				if proto == "h2" {
					req, _ := http.NewRequest("GET", "https://"+addr+"/", nil)
					for k, v := range spoofed {
						req.Header.Set(k, v)
					}
					resp, err := h2TestClient().Do(req)
					if err != nil {
						t.Fatal(err)
					}
					defer resp.Body.Close()
					if resp.ProtoMajor != 2 {
						t.Fatalf("client spoke %s", resp.Proto)
					}
					var sb strings.Builder
					_, _ = bufio.NewReader(resp.Body).WriteTo(&sb)
					body = sb.String()
				} else {
					c, err := tls.Dial("tcp", addr, &tls.Config{InsecureSkipVerify: true, NextProtos: []string{"http/1.1"}})
					if err != nil {
						t.Fatal(err)
					}
					defer c.Close()
					req := "GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n"
					for k, v := range spoofed {
						req += k + ": " + v + "\r\n"
					}
					fmt.Fprint(c, req+"\r\n")
					resp, err := http.ReadResponse(bufio.NewReader(c), nil)
					if err != nil {
						t.Fatal(err)
					}
					var sb strings.Builder
					_, _ = bufio.NewReader(resp.Body).WriteTo(&sb)
					body = sb.String()
				}
				got := parseFields(body)
				if trusted {
					for k, v := range spoofed {
						if !strings.Contains(got[k], v) {
							t.Errorf("%s = %q from a trusted proxy, want %q kept", k, got[k], v)
						}
					}
					if got["X-Forwarded-For"] != "10.6.6.9|127.0.0.1" && got["X-Forwarded-For"] != "10.6.6.9, 127.0.0.1" {
						t.Errorf("X-Forwarded-For = %q, want the client's with 127.0.0.1 appended", got["X-Forwarded-For"])
					}
					return
				}
				for k, v := range spoofed {
					if strings.Contains(got[k], v) {
						t.Errorf("%s = %q reached the member from an untrusted client", k, got[k])
					}
				}
				want := map[string]string{"X-Forwarded-For": "127.0.0.1", "X-Forwarded-Proto": "https", "X-Forwarded-Host": "x",
					"Forwarded": "for=127.0.0.1;host=x;proto=https", "X-Real-Ip": "", "True-Client-Ip": "", "X-Client-Ip": "", "X-Forwarded-Port": ""}
				if proto == "h2" {
					want["X-Forwarded-Host"] = addr
					want["Forwarded"] = `for=127.0.0.1;host="` + addr + `";proto=https`
				}
				for k, v := range want {
					if got[k] != v {
						t.Errorf("%s = %q, want %q", k, got[k], v)
					}
				}
				if id := got["X-Request-Id"]; len(id) != 32 {
					t.Errorf("X-Request-Id = %q, want the LB's own 32 hex digits", id)
				}
			})
		}
	}
}

// TestRoutesOnNormalisedPath: "/%69nternal" routes as "/internal" and the
// member receives the normalised form, over HTTP/1.1 and HTTP/2; escapes of
// reserved characters stay escaped (upper-case).
func TestRoutesOnNormalisedPath(t *testing.T) {
	internal := newBackend(t, backendServer(t, http.HandlerFunc(echoHandler)))
	public := newBackend(t, backendServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprint(w, "public")
	})))
	router := testRouter{
		{prefix: "/internal", route: &Route{Name: "internal", Backend: internal}},
		{prefix: "/", route: &Route{Name: "public", Backend: public}},
	}
	addr := proxyUnder(t, New(Config{}), router, selfSigned(t))
	tests := []struct{ path, body, uri string }{
		{"/%69nternal", "ok /internal", "/internal"},
		{"/%69nt%65rnal/a%2fb?q=%69", "ok /internal/a/b", "/internal/a%2Fb?q=%69"},
		{"/x/..%2F%2e%2E/%69nternal", "public", ""},
		{"/x/%2E%2e/%49nternal", "public", ""}, // case matters: /Internal
		{"/x/%2E%2e/internal", "ok /internal", "/internal"},
	}
	for _, proto := range []string{"http/1.1", "h2"} {
		for _, tc := range tests {
			t.Run(proto+" "+tc.path, func(t *testing.T) {
				var body, uri string
				if proto == "h2" {
					req, _ := http.NewRequest("GET", "https://"+addr+"/", nil)
					req.URL.Opaque = "//" + addr + tc.path // sent as written
					resp, err := h2TestClient().Do(req)
					if err != nil {
						t.Fatal(err)
					}
					defer resp.Body.Close()
					var sb strings.Builder
					_, _ = bufio.NewReader(resp.Body).WriteTo(&sb)
					body, uri = sb.String(), resp.Header.Get("X-Uri")
				} else {
					c, err := tls.Dial("tcp", addr, &tls.Config{InsecureSkipVerify: true, NextProtos: []string{"http/1.1"}})
					if err != nil {
						t.Fatal(err)
					}
					defer c.Close()
					fmt.Fprintf(c, "GET %s HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n", tc.path)
					resp, err := http.ReadResponse(bufio.NewReader(c), nil)
					if err != nil {
						t.Fatal(err)
					}
					var sb strings.Builder
					_, _ = bufio.NewReader(resp.Body).WriteTo(&sb)
					body, uri = sb.String(), resp.Header.Get("X-Uri")
				}
				if body != tc.body || uri != tc.uri {
					t.Fatalf("body %q, member saw %q; want %q, %q", body, uri, tc.body, tc.uri)
				}
			})
		}
	}
}
