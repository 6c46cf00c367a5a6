package l7

import (
	"bytes"
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"
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
	// wantStats, when set, is the start of the request's RequestStats
	// as statsLine writes them.
	wantStats string
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
	// header is the response's fields but those of the framing and
	// the date; stats the request's RequestStats (statsLine).
	header string
	stats  string
}

// coreHost is the Host of every request of the table.
const coreHost = "app.example"

// statsRecorder keeps the RequestStats of every request.
type statsRecorder struct {
	mu    sync.Mutex
	stats []RequestStats
}

func (r *statsRecorder) Request(s RequestStats) {
	r.mu.Lock()
	r.stats = append(r.stats, s)
	r.mu.Unlock()
}

func (*statsRecorder) Conn(*ConnInfo, bool) {}

// await returns the first request's stats once they are in (the engine
// reports them after the response), or "none".
func (r *statsRecorder) await() string {
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(2 * time.Millisecond) {
		r.mu.Lock()
		if len(r.stats) > 0 {
			s := r.stats[0]
			r.mu.Unlock()
			return statsLine(s)
		}
		r.mu.Unlock()
	}
	return "none"
}

// statsLine writes what the table compares of a request's RequestStats
// (the access-log fields included).
func statsLine(s RequestStats) string {
	return fmt.Sprintf("route=%s status=%d outcome=%d %s %s %s req=%d resp=%d retries=%d member=%t",
		s.Route, s.Status, s.Outcome, s.Method, s.Host, s.Path, s.RequestBytes, s.ResponseBytes, s.Retries, s.Member.IsValid())
}

// headerLine writes a response's fields, sorted, without those that
// differ by protocol only (framing, connection management) and Date.
func headerLine(h http.Header) string {
	var out []string
	for k, vv := range h {
		switch k {
		case "Date", "Content-Length", "Transfer-Encoding", "Connection", "Keep-Alive":
			continue
		}
		out = append(out, k+"="+strings.Join(vv, ";"))
	}
	slices.Sort(out)
	return strings.Join(out, " ")
}

// normalise replaces what differs between the table's servers but not
// by what they did: the server's port by PORT, and the scheme the
// protocol uses, in a Location or forwarding field, by "$".
// A Location is changed only when locations is set (the row's wanted
// Location keeps the request's scheme).
func normalise(s, port string, tls, locations bool) string {
	s = strings.ReplaceAll(s, ":"+port, ":PORT")
	scheme := "http"
	if tls {
		scheme = "https"
	}
	prefixes := []string{"proto=", "X-Forwarded-Proto="}
	if locations {
		prefixes = append(prefixes, "Location=")
	}
	for _, pre := range prefixes {
		s = strings.ReplaceAll(s, pre+scheme+"://", pre+"$://")
		s = strings.ReplaceAll(s, pre+scheme+" ", pre+"$ ")
		if strings.HasSuffix(s, pre+scheme) {
			s = strings.TrimSuffix(s, scheme) + "$"
		}
	}
	return s
}

// TestCoreTable is not parallel with the package's other tests: its rows
// run in parallel with each other and start many HTTP/2 stream workers,
// which tests that count them process-wide (TestH2TenantStreamBound)
// would take for their own.
func TestCoreTable(t *testing.T) {
	for _, row := range coreRows {
		t.Run(row.name, func(t *testing.T) {
			t.Parallel()
			var results []coreResult
			for _, p := range coreProtocols {
				results = append(results, runCoreRow(t, row, p))
			}
			a := results[0]
			for _, r := range results[1:] {
				if r.status != a.status || r.seen != a.seen || r.body != a.body || r.header != a.header || r.stats != a.stats {
					t.Errorf("protocols differ:\n%s got %d %.100q\n  fields %s\n  members saw %.400q\n  stats %s\n%s got %d %.100q\n  fields %s\n  members saw %.400q\n  stats %s",
						a.proto, a.status, a.body, a.header, a.seen, a.stats, r.proto, r.status, r.body, r.header, r.seen, r.stats)
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
	stats := &statsRecorder{}
	router := testRouter{{route: route}}
	addr := proxyUnderInfo(t, New(Config{Metrics: stats}), ConnInfo{Listener: "test", LB: "t/lb", Tenant: "t", AccessLog: 1,
		Router: func() Router { return router }}, tlsCfg)
	_, port, _ := net.SplitHostPort(addr)
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
	req.Host = coreHost
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
	res := coreResult{proto: p.name, status: resp.StatusCode, body: string(data),
		header: normalise(headerLine(resp.Header), port, p.tls, strings.Contains(row.wantHeader.Get("Location"), "$")), stats: stats.await()}
	if seen != nil {
		res.seen = normalise(seen(), port, p.tls, false)
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
		got := resp.Header.Values(k)
		for i := range got {
			if strings.Contains(strings.Join(vv, ""), "$") {
				got[i] = normalise("Location="+got[i], port, p.tls, true)[len("Location="):]
			}
		}
		if strings.Join(got, ", ") != strings.Join(vv, ", ") {
			t.Errorf("%s: response field %s %q, want %q", p.name, k, got, vv)
		}
	}
	if seen != nil && res.seen != row.wantSeen {
		t.Errorf("%s: members saw\n%.400q, want\n%.400q", p.name, res.seen, row.wantSeen)
	}
	if !strings.HasPrefix(res.stats, row.wantStats) {
		t.Errorf("%s: stats %q, want them to start with %q", p.name, res.stats, row.wantStats)
	}
	return res
}
