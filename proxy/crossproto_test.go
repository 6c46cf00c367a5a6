package proxy

import (
	"cmp"
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"golang.org/x/net/http2"
)

// TestRouteFeaturesAcrossProtocols sends every case of
// TestRouteFeaturesHTTP1 (the model's route features compiled as serve
// compiles them) over HTTP/1.1, HTTP/2 and HTTP/3 to one https listener
// that serves all three, and fails when one protocol gets another answer
// than the others: the status, the response fields (but the framing
// ones, Date and Alt-Svc), and what the member saw (method, path, query,
// Host, body and every field but the client's own User-Agent and
// Accept-Encoding). It is the proxy's half of proxy/l7's TestCoreTable,
// which cannot speak HTTP/3.
func TestRouteFeaturesAcrossProtocols(t *testing.T) {
	_, target, _ := startH3(t)
	dial := func(ctx context.Context, network, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, network, target)
	}
	tlsCfg := &tls.Config{InsecureSkipVerify: true, ServerName: "gw.acme.example"}
	noRedirect := func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	h1 := &http.Client{Timeout: 20 * time.Second, CheckRedirect: noRedirect,
		Transport: &http.Transport{TLSClientConfig: tlsCfg, DialContext: dial, ForceAttemptHTTP2: false}}
	h2 := &http.Client{Timeout: 20 * time.Second, CheckRedirect: noRedirect,
		Transport: &http2.Transport{TLSClientConfig: tlsCfg, DialTLSContext: func(ctx context.Context, network, addr string, cfg *tls.Config) (net.Conn, error) {
			c, err := dial(ctx, network, addr)
			if err != nil {
				return nil, err
			}
			tc := tls.Client(c, cfg)
			if err := tc.HandshakeContext(ctx); err != nil {
				c.Close()
				return nil, err
			}
			return tc, nil
		}}}
	h3 := newH3Client(t, target)
	t.Cleanup(func() { h1.CloseIdleConnections(); h2.CloseIdleConnections() })
	clients := []struct {
		name  string
		c     *http.Client
		major int
	}{{"HTTP/1.1", h1, 1}, {"HTTP/2", h2, 2}, {"HTTP/3", h3.Client, 3}}
	url := "https://gw.acme.example:" + portOf(target)
	for _, tc := range routingCases() {
		t.Run(tc.name, func(t *testing.T) {
			var got []string
			for _, cl := range clients {
				method := cmp.Or(tc.method, http.MethodGet)
				req, err := http.NewRequest(method, url+tc.path, strings.NewReader(tc.body))
				if err != nil {
					t.Fatal(err)
				}
				if tc.body == "" {
					req.Body, req.ContentLength = http.NoBody, 0
				}
				for k, v := range tc.header {
					req.Header[k] = v
				}
				resp, err := cl.c.Do(req)
				if err != nil {
					t.Fatalf("%s: %v", cl.name, err)
				}
				data, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				if resp.ProtoMajor != cl.major {
					t.Errorf("%s: answered over %s", cl.name, resp.Proto)
				}
				got = append(got, crossAnswer(resp, data))
			}
			for i := 1; i < len(got); i++ {
				if got[i] != got[0] {
					t.Errorf("protocols differ:\n%s: %.600s\n%s: %.600s", clients[0].name, got[0], clients[i].name, got[i])
				}
			}
		})
	}
}

var requestID = regexp.MustCompile(`^[0-9a-f]{32}$`)

// crossAnswer writes what TestRouteFeaturesAcrossProtocols compares of
// an answer.
func crossAnswer(resp *http.Response, body []byte) string {
	var fields []string
	for k, vv := range resp.Header {
		switch k {
		case "Date", "Content-Length", "Transfer-Encoding", "Connection", "Keep-Alive", "Alt-Svc":
			continue
		}
		fields = append(fields, k+"="+strings.Join(vv, ";"))
	}
	slices.Sort(fields)
	out := fmt.Sprintf("%d [%s]", resp.StatusCode, strings.Join(fields, " "))
	var s seen
	if json.Unmarshal(body, &s) != nil || s.Backend == "" {
		return out + " body=" + string(body)
	}
	var sf []string
	for k, vv := range s.Header {
		switch k {
		case "User-Agent", "Accept-Encoding":
			continue
		case "X-Request-Id":
			vv = []string{fmt.Sprint(len(vv) == 1 && requestID.MatchString(vv[0]))}
		}
		sf = append(sf, k+"="+strings.Join(vv, ";"))
	}
	slices.Sort(sf)
	return fmt.Sprintf("%s member %s %s %s?%s host=%s body=%q [%s]", out, s.Backend, s.Method, s.Path, s.Query, s.Host, s.Body, strings.Join(sf, " "))
}
