package l7

import (
	"bytes"
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

// The cross-protocol table: every row is a route feature, run over
// HTTP/1.1, HTTP/2 over TLS and h2c (cleartext HTTP/2 with prior
// knowledge), each on a server and members of its own. A row fails when
// a protocol gets other than the row wants, or other than the others got.
//
// To add a feature, append rows from an init func in a file of its own
// (core_table_<feature>_test.go):
//
//	func init() { coreRows = append(coreRows, corsRows...) }

// coreRow is one feature case of the table.
type coreRow struct {
	name string
	// route builds the row's route, on members of its own; seen, when
	// not nil, says what the members saw (compared between protocols and
	// with wantSeen).
	route func(t *testing.T) (r *Route, seen func() string)
	// The request: method (default GET), path, fields and body.
	// unknownLength sends the body without a length (chunked in
	// HTTP/1.1, no content-length in HTTP/2).
	method, path  string
	header        http.Header
	body          string
	unknownLength bool
	// What the client must get: status (default 200), a body starting
	// with wantBody, response fields with these values; and what the
	// members saw.
	status     int
	wantBody   string
	wantHeader http.Header
	wantSeen   string
}

// coreRows are the table's rows, appended by each feature's file.
var coreRows []coreRow

// coreProtocol is one way of reaching the server.
type coreProtocol struct {
	name   string
	tls    bool
	client func() *http.Client
}

var coreProtocols = []coreProtocol{
	{"HTTP/1.1", false, func() *http.Client {
		return &http.Client{Transport: &http.Transport{ForceAttemptHTTP2: false}}
	}},
	{"HTTP/2", true, h2TestClient},
	{"h2c", false, func() *http.Client {
		return &http.Client{Transport: &http2.Transport{AllowHTTP: true,
			DialTLSContext: func(ctx context.Context, network, addr string, _ *tls.Config) (net.Conn, error) {
				var d net.Dialer
				return d.DialContext(ctx, network, addr)
			}}}
	}},
}

// coreResult is what one protocol got for a row.
type coreResult struct {
	proto  string
	status int
	body   string
	seen   string
}

func TestCoreTable(t *testing.T) {
	t.Parallel()
	for _, row := range coreRows {
		t.Run(row.name, func(t *testing.T) {
			t.Parallel()
			var results []coreResult
			for _, p := range coreProtocols {
				results = append(results, runCoreRow(t, row, p))
			}
			for _, r := range results[1:] {
				if r.status != results[0].status || r.seen != results[0].seen {
					t.Errorf("protocols differ: %s got %d (members saw %q), %s got %d (members saw %q)",
						results[0].proto, results[0].status, results[0].seen, r.proto, r.status, r.seen)
				}
			}
		})
	}
}

// runCoreRow sends the row's request over p to a server of its own and
// checks what came back.
func runCoreRow(t *testing.T, row coreRow, p coreProtocol) coreResult {
	t.Helper()
	route, seen := row.route(t)
	var tlsCfg *tls.Config
	scheme := "http"
	if p.tls {
		tlsCfg, scheme = selfSigned(t), "https"
	}
	addr := proxyUnder(t, New(Config{}), testRouter{{route: route}}, tlsCfg)
	method := row.method
	if method == "" {
		method = "GET"
	}
	var body io.Reader
	if row.body != "" {
		body = strings.NewReader(row.body)
		if row.unknownLength {
			body = io.MultiReader(body) // hides the length from net/http
		}
	}
	req, err := http.NewRequest(method, scheme+"://"+addr+row.path, body)
	if err != nil {
		t.Fatal(err)
	}
	if row.body != "" && !row.unknownLength {
		req.ContentLength = int64(len(row.body))
		req.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader([]byte(row.body))), nil }
	}
	for k, v := range row.header {
		req.Header[k] = v
	}
	client := p.client()
	client.Timeout = 20 * time.Second
	client.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	defer client.CloseIdleConnections()
	resp, err := client.Do(req)
	if err != nil {
		t.Fatalf("%s: %v", p.name, err)
	}
	data, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	res := coreResult{proto: p.name, status: resp.StatusCode, body: string(data)}
	if seen != nil {
		res.seen = seen()
	}
	want := row.status
	if want == 0 {
		want = 200
	}
	if resp.StatusCode != want {
		t.Errorf("%s: status %d, want %d (body %.200q)", p.name, resp.StatusCode, want, data)
	}
	if !strings.HasPrefix(res.body, row.wantBody) {
		t.Errorf("%s: body %.200q, want it to start with %q", p.name, data, row.wantBody)
	}
	for k, vv := range row.wantHeader {
		if got := resp.Header.Values(k); strings.Join(got, ", ") != strings.Join(vv, ", ") {
			t.Errorf("%s: response field %s %q, want %q", p.name, k, got, vv)
		}
	}
	if seen != nil && res.seen != row.wantSeen {
		t.Errorf("%s: members saw %q, want %q", p.name, res.seen, row.wantSeen)
	}
	return res
}
