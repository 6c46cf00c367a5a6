package l7

import (
	"context"
	"crypto/tls"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"golang.org/x/net/http2"
)

// The field a listener names for the verified client's subject reaches
// the member with that subject only, over every protocol: what the client
// sent in it (in any case, or with '_' for '-') is dropped, and a
// connection without a verified certificate sends none.
func TestClientSubjectField(t *testing.T) {
	t.Parallel()
	be := newBackend(t, backendServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var vs []string
		for k, v := range r.Header {
			if strings.EqualFold(strings.ReplaceAll(k, "_", "-"), "X-Client-Subject") {
				vs = append(vs, k+"="+strings.Join(v, "|"))
			}
		}
		_, _ = io.WriteString(w, strings.Join(vs, ","))
	})))
	router := testRouter{{prefix: "/", route: &Route{Backend: be}}}
	h2c := &http.Client{Timeout: 20 * time.Second, Transport: &http2.Transport{AllowHTTP: true,
		DialTLSContext: func(ctx context.Context, network, addr string, _ *tls.Config) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, network, addr)
		}}}
	h2 := h2TestClient()
	h2.Timeout = h2c.Timeout
	h1 := &http.Client{Timeout: h2c.Timeout}
	for _, subject := range []string{"CN=alice,O=acme", ""} {
		info := ConnInfo{Listener: "test", LB: "t/lb", Tenant: "t", Router: func() Router { return router },
			ClientCertHeader: "X-Client-Subject", ClientSubject: subject}
		clear := proxyUnderInfo(t, New(Config{}), info, nil)
		tlsInfo := info
		tlsInfo.TLS = true
		secure := proxyUnderInfo(t, New(Config{}), tlsInfo, selfSigned(t))
		want := ""
		if subject != "" {
			want = "X-Client-Subject=" + subject
		}
		for _, p := range []struct {
			name, url string
			client    *http.Client
		}{{"HTTP/1.1", "http://" + clear, h1}, {"HTTP/2", "https://" + secure, h2}, {"h2c", "http://" + clear, h2c}} {
			req, _ := http.NewRequest("GET", p.url+"/x", nil)
			req.Header["X-Client-Subject"] = []string{"CN=mallory"}
			req.Header["x_client_subject"] = []string{"CN=mallory"}
			resp, err := p.client.Do(req)
			if err != nil {
				t.Fatalf("%s: %v", p.name, err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != 200 || string(body) != want {
				t.Errorf("%s, subject %q: %d %q, want %q", p.name, subject, resp.StatusCode, body, want)
			}
		}
	}
}
