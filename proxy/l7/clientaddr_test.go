package l7

import (
	"bufio"
	"crypto/tls"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"testing"
)

// clientAddrFields are fields that proxies, CDNs and frameworks read as
// the client's address, in the spellings a client may send: each must be
// dropped from an untrusted client, and kept from a trusted proxy.
var clientAddrFields = []string{
	"CF-Connecting-IP", "Client-IP", "Fastly-Client-IP", "X-Cluster-Client-IP",
	"X-Forwarded", "X-Originating-IP", "X-Original-Forwarded-For",
	"X_Forwarded_For", "x_real_ip", "X-Forwarded_Proto", "X_Forwarded-Host",
	"True_Client_IP", "Cf_Connecting_Ip", "X-Forwarded-Server", "X-Forwarded-Scheme",
	"X-Forwarded-Ssl", "x_cluster_client_ip", "Forwarded", "X-Real-IP",
}

// allFieldsHandler answers with every field the member received, one
// "name: value" line each (names in lower case).
func allFieldsHandler(w http.ResponseWriter, r *http.Request) {
	for k, vv := range r.Header {
		for _, v := range vv {
			fmt.Fprintf(w, "%s: %s\n", strings.ToLower(k), v)
		}
	}
}

// TestClientAddrFieldsStrippedUnlessTrusted sends every field of
// clientAddrFields, each with its own value, over HTTP/1.1 and HTTP/2 to
// HTTP/1.1 and HTTP/2 members: from an untrusted client none reaches the
// member, from a trusted proxy all do.
func TestClientAddrFieldsStrippedUnlessTrusted(t *testing.T) {
	t.Parallel()
	h1 := newBackend(t, backendServer(t, http.HandlerFunc(allFieldsHandler)))
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var p http.Protocols
	p.SetUnencryptedHTTP2(true)
	srv := &http.Server{Handler: http.HandlerFunc(allFieldsHandler), Protocols: &p}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	h2 := newBackend(t, ln.Addr().String())
	h2.opts.Protocol = H2C
	value := func(i int) string { return fmt.Sprintf("10.66.%d.%d", i/256, i%256) }
	for _, trusted := range []bool{false, true} {
		cfg := Config{}
		if trusted {
			cfg.TrustedProxies = []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}
		}
		for member, be := range map[string]*testBackend{"h1": h1, "h2c": h2} {
			addr := proxyUnder(t, New(cfg), oneRoute(be), selfSigned(t))
			for _, proto := range []string{"http/1.1", "h2"} {
				t.Run(fmt.Sprintf("%s to %s trusted=%v", proto, member, trusted), func(t *testing.T) {
					t.Parallel()
					var body string
					if proto == "h2" {
						req, _ := http.NewRequest("GET", "https://"+addr+"/", nil)
						for i, k := range clientAddrFields {
							req.Header[k] = []string{value(i)}
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
						for i, k := range clientAddrFields {
							req += k + ": " + value(i) + "\r\n"
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
					if !strings.Contains(body, "x-forwarded-for: ") {
						t.Fatalf("the member saw no X-Forwarded-For; it saw:\n%s", body)
					}
					for i, k := range clientAddrFields {
						v := value(i)
						var got bool
						for _, line := range strings.Split(body, "\n") {
							if _, lv, _ := strings.Cut(line, ": "); strings.Contains(lv, v) {
								got = true
							}
						}
						if got != trusted {
							t.Errorf("%s (%s): reached the member %v, want %v", k, v, got, trusted)
						}
					}
				})
			}
		}
	}
}
