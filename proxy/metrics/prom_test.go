package metrics

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/teapot-lb/teapot-lb/proxy/accesslog"
	"github.com/teapot-lb/teapot-lb/proxy/l7"
)

func TestCollectorExportsAndFolds(t *testing.T) {
	var m Memory
	member := netip.MustParseAddrPort("10.0.0.1:80")
	// acme has three load balancers; with a cap of two, "acme/c" folds.
	for _, lb := range []string{"acme/a", "acme/b", "acme/c"} {
		m.ConnOpened(lb, "192.0.2.1:80/tcp")
		m.Request(l7.RequestStats{LB: lb, Listener: "192.0.2.1:80/tcp", Member: member, Pool: "web", Status: 200,
			Duration: 3 * time.Millisecond, Upstream: 2 * time.Millisecond, RequestBytes: 5, ResponseBytes: 100})
	}
	m.Request(l7.RequestStats{LB: "acme/a", Listener: "192.0.2.1:80/tcp", Member: member, Pool: "web", Status: 502, Outcome: l7.OutcomeUpstreamError})
	// The same address in another pool of acme/a has its own series.
	m.Request(l7.RequestStats{LB: "acme/a", Listener: "192.0.2.1:80/tcp", Member: member, Pool: "api", Status: 200})
	m.ConnClosed("acme/a", "192.0.2.1:80/tcp", time.Second)
	m.ConnRefused("acme/a", "192.0.2.1:80/tcp", "tenant-limit")
	m.MemberRequest("other/tcp", "db", "10.1.0.1:5432", 0, time.Millisecond)
	m.MemberRequest("other/tcp", "db", "10.1.0.2:5432", 504, time.Millisecond)
	members := []Member{
		{LB: "other/tcp", Pool: "db", Addr: netip.MustParseAddrPort("10.1.0.1:5432"), Healthy: true},
		{LB: "other/tcp", Pool: "db", Addr: netip.MustParseAddrPort("10.1.0.2:5432"), Ejections: 2},
	}
	c := NewCollector(&m, CollectorConfig{MaxLBsPerTenant: 2, MaxMembersPerLB: 1, Members: each(members)})
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(c)

	want := `
# HELP teapot_lb_connections_active Connections (UDP: flows) open now.
# TYPE teapot_lb_connections_active gauge
teapot_lb_connections_active{lb="acme/_other",listener="_other",tenant="acme"} 1
teapot_lb_connections_active{lb="acme/a",listener="192.0.2.1:80/tcp",tenant="acme"} 0
teapot_lb_connections_active{lb="acme/b",listener="192.0.2.1:80/tcp",tenant="acme"} 1
# HELP teapot_lb_connections_refused_total Connections, flows or HTTP/2 streams turned away, by reason (no-member, listener-limit, tenant-limit, host-limit, not-tls, tenant-streams, source, rate-limit, client-source; HTTP/2 streams reset at the tenant's bound on buffered bodies, tenant-bodies; and for HTTP/3 listeners connection IDs not issued, connection-ids, stateless resets not sent, stateless-reset, and receive windows not grown, tenant-window).
# TYPE teapot_lb_connections_refused_total counter
teapot_lb_connections_refused_total{lb="acme/_other",listener="_other",reason="host-limit",tenant="acme"} 0
teapot_lb_connections_refused_total{lb="acme/_other",listener="_other",reason="listener-limit",tenant="acme"} 0
teapot_lb_connections_refused_total{lb="acme/_other",listener="_other",reason="no-member",tenant="acme"} 0
teapot_lb_connections_refused_total{lb="acme/_other",listener="_other",reason="not-tls",tenant="acme"} 0
teapot_lb_connections_refused_total{lb="acme/_other",listener="_other",reason="rate-limit",tenant="acme"} 0
teapot_lb_connections_refused_total{lb="acme/_other",listener="_other",reason="source",tenant="acme"} 0
teapot_lb_connections_refused_total{lb="acme/_other",listener="_other",reason="tenant-limit",tenant="acme"} 0
teapot_lb_connections_refused_total{lb="acme/_other",listener="_other",reason="tenant-streams",tenant="acme"} 0
teapot_lb_connections_refused_total{lb="acme/a",listener="192.0.2.1:80/tcp",reason="host-limit",tenant="acme"} 0
teapot_lb_connections_refused_total{lb="acme/a",listener="192.0.2.1:80/tcp",reason="listener-limit",tenant="acme"} 0
teapot_lb_connections_refused_total{lb="acme/a",listener="192.0.2.1:80/tcp",reason="no-member",tenant="acme"} 0
teapot_lb_connections_refused_total{lb="acme/a",listener="192.0.2.1:80/tcp",reason="not-tls",tenant="acme"} 0
teapot_lb_connections_refused_total{lb="acme/a",listener="192.0.2.1:80/tcp",reason="rate-limit",tenant="acme"} 0
teapot_lb_connections_refused_total{lb="acme/a",listener="192.0.2.1:80/tcp",reason="source",tenant="acme"} 0
teapot_lb_connections_refused_total{lb="acme/a",listener="192.0.2.1:80/tcp",reason="tenant-limit",tenant="acme"} 1
teapot_lb_connections_refused_total{lb="acme/a",listener="192.0.2.1:80/tcp",reason="tenant-streams",tenant="acme"} 0
teapot_lb_connections_refused_total{lb="acme/b",listener="192.0.2.1:80/tcp",reason="host-limit",tenant="acme"} 0
teapot_lb_connections_refused_total{lb="acme/b",listener="192.0.2.1:80/tcp",reason="listener-limit",tenant="acme"} 0
teapot_lb_connections_refused_total{lb="acme/b",listener="192.0.2.1:80/tcp",reason="no-member",tenant="acme"} 0
teapot_lb_connections_refused_total{lb="acme/b",listener="192.0.2.1:80/tcp",reason="not-tls",tenant="acme"} 0
teapot_lb_connections_refused_total{lb="acme/b",listener="192.0.2.1:80/tcp",reason="rate-limit",tenant="acme"} 0
teapot_lb_connections_refused_total{lb="acme/b",listener="192.0.2.1:80/tcp",reason="source",tenant="acme"} 0
teapot_lb_connections_refused_total{lb="acme/b",listener="192.0.2.1:80/tcp",reason="tenant-limit",tenant="acme"} 0
teapot_lb_connections_refused_total{lb="acme/b",listener="192.0.2.1:80/tcp",reason="tenant-streams",tenant="acme"} 0
# HELP teapot_lb_http_requests_total HTTP requests finished, by response code class (none: the client left before a response).
# TYPE teapot_lb_http_requests_total counter
teapot_lb_http_requests_total{code_class="1xx",lb="acme/_other",listener="_other",tenant="acme"} 0
teapot_lb_http_requests_total{code_class="2xx",lb="acme/_other",listener="_other",tenant="acme"} 1
teapot_lb_http_requests_total{code_class="3xx",lb="acme/_other",listener="_other",tenant="acme"} 0
teapot_lb_http_requests_total{code_class="4xx",lb="acme/_other",listener="_other",tenant="acme"} 0
teapot_lb_http_requests_total{code_class="5xx",lb="acme/_other",listener="_other",tenant="acme"} 0
teapot_lb_http_requests_total{code_class="none",lb="acme/_other",listener="_other",tenant="acme"} 0
teapot_lb_http_requests_total{code_class="1xx",lb="acme/a",listener="192.0.2.1:80/tcp",tenant="acme"} 0
teapot_lb_http_requests_total{code_class="2xx",lb="acme/a",listener="192.0.2.1:80/tcp",tenant="acme"} 2
teapot_lb_http_requests_total{code_class="3xx",lb="acme/a",listener="192.0.2.1:80/tcp",tenant="acme"} 0
teapot_lb_http_requests_total{code_class="4xx",lb="acme/a",listener="192.0.2.1:80/tcp",tenant="acme"} 0
teapot_lb_http_requests_total{code_class="5xx",lb="acme/a",listener="192.0.2.1:80/tcp",tenant="acme"} 1
teapot_lb_http_requests_total{code_class="none",lb="acme/a",listener="192.0.2.1:80/tcp",tenant="acme"} 0
teapot_lb_http_requests_total{code_class="1xx",lb="acme/b",listener="192.0.2.1:80/tcp",tenant="acme"} 0
teapot_lb_http_requests_total{code_class="2xx",lb="acme/b",listener="192.0.2.1:80/tcp",tenant="acme"} 1
teapot_lb_http_requests_total{code_class="3xx",lb="acme/b",listener="192.0.2.1:80/tcp",tenant="acme"} 0
teapot_lb_http_requests_total{code_class="4xx",lb="acme/b",listener="192.0.2.1:80/tcp",tenant="acme"} 0
teapot_lb_http_requests_total{code_class="5xx",lb="acme/b",listener="192.0.2.1:80/tcp",tenant="acme"} 0
teapot_lb_http_requests_total{code_class="none",lb="acme/b",listener="192.0.2.1:80/tcp",tenant="acme"} 0
# HELP teapot_lb_member_requests_total Requests (L7) and connects (L4) sent to a member of a pool.
# TYPE teapot_lb_member_requests_total counter
teapot_lb_member_requests_total{lb="acme/_other",member="_other",pool="_other",tenant="acme"} 1
teapot_lb_member_requests_total{lb="acme/a",member="10.0.0.1:80",pool="api",tenant="acme"} 1
teapot_lb_member_requests_total{lb="acme/a",member="10.0.0.1:80",pool="web",tenant="acme"} 2
teapot_lb_member_requests_total{lb="acme/b",member="10.0.0.1:80",pool="web",tenant="acme"} 1
teapot_lb_member_requests_total{lb="other/tcp",member="10.1.0.1:5432",pool="db",tenant="other"} 1
teapot_lb_member_requests_total{lb="other/tcp",member="_other",pool="db",tenant="other"} 1
# HELP teapot_lb_member_failures_total Requests or connects to a member of a pool that failed (5xx, connect failure or timeout).
# TYPE teapot_lb_member_failures_total counter
teapot_lb_member_failures_total{lb="acme/_other",member="_other",pool="_other",tenant="acme"} 0
teapot_lb_member_failures_total{lb="acme/a",member="10.0.0.1:80",pool="api",tenant="acme"} 0
teapot_lb_member_failures_total{lb="acme/a",member="10.0.0.1:80",pool="web",tenant="acme"} 1
teapot_lb_member_failures_total{lb="acme/b",member="10.0.0.1:80",pool="web",tenant="acme"} 0
teapot_lb_member_failures_total{lb="other/tcp",member="10.1.0.1:5432",pool="db",tenant="other"} 0
teapot_lb_member_failures_total{lb="other/tcp",member="_other",pool="db",tenant="other"} 1
# HELP teapot_lb_member_up 1 when the member may receive traffic (its check passes and it is not ejected), else 0.
# TYPE teapot_lb_member_up gauge
teapot_lb_member_up{lb="other/tcp",member="10.1.0.1:5432",pool="db",tenant="other"} 1
teapot_lb_member_up{lb="other/tcp",member="_other",pool="db",tenant="other"} 0
# HELP teapot_lb_member_ejections_total Passive ejections of a member after consecutive connect failures.
# TYPE teapot_lb_member_ejections_total counter
teapot_lb_member_ejections_total{lb="other/tcp",member="10.1.0.1:5432",pool="db",tenant="other"} 0
teapot_lb_member_ejections_total{lb="other/tcp",member="_other",pool="db",tenant="other"} 2
`
	names := []string{"teapot_lb_connections_active", "teapot_lb_connections_refused_total", "teapot_lb_http_requests_total",
		"teapot_lb_member_requests_total", "teapot_lb_member_failures_total", "teapot_lb_member_up", "teapot_lb_member_ejections_total"}
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), names...); err != nil {
		t.Error(err)
	}
	// Histograms: the folded load balancer's requests land in its series.
	var buf bytes.Buffer
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "teapot_lb_http_upstream_duration_seconds" {
			continue
		}
		for _, mt := range mf.GetMetric() {
			fmt.Fprintf(&buf, "%v %d %.3f\n", mt.GetLabel()[0].GetValue(), mt.GetHistogram().GetSampleCount(), mt.GetHistogram().GetSampleSum())
		}
	}
	if got, want := buf.String(), "acme/_other 1 0.002\nacme/a 1 0.002\nacme/b 1 0.002\n"; got != want {
		t.Errorf("upstream histograms (lb count sum):\n%swant:\n%s", got, want)
	}
	if n := testutil.CollectAndCount(c); n > 90 {
		t.Errorf("%d series for 4 load balancers under caps of 2 per tenant", n)
	}
}

// l7Client starts an L7 engine with cfg in front of a fixed backend and
// returns a function that sends one keep-alive request through it.
func l7Client(tb testing.TB, cfg l7.Config) func() {
	const resp = "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 13\r\n\r\nhello, world\n"
	be := fixedBackend(tb, resp)
	srv := l7.New(cfg)
	tb.Cleanup(func() { srv.Close() })
	rt := oneRoute{&l7.Route{Name: "acme/shop/routes[0]", Backend: &backend{m: &member{be}, opts: l7.BackendOptions{Pool: "web"}}}}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { ln.Close() })
	ctx, cancel := context.WithCancel(context.Background())
	tb.Cleanup(cancel)
	info := l7.ConnInfo{Listener: "192.0.2.1:80/tcp", LB: "acme/shop", Tenant: "acme", Router: func() l7.Router { return rt }}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() { defer c.Close(); srv.ServeConn(ctx, c, info) }()
		}
	}()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { c.Close() })
	req := []byte("GET /bench HTTP/1.1\r\nHost: shop.acme.example\r\nUser-Agent: wrk\r\nAccept: */*\r\n\r\n")
	buf := make([]byte, 4096)
	return func() {
		if _, err := c.Write(req); err != nil {
			tb.Fatal(err)
		}
		n := 0
		for n < len(resp) {
			k, err := c.Read(buf[n:])
			if err != nil {
				tb.Fatal(err)
			}
			n += k
		}
	}
}

// TestHotPathAllocsWithMetrics proxies keep-alive HTTP/1.1 requests
// through the L7 engine recording into a Memory behind the access logger,
// as serve wires them (the listener has no access log), and counts
// allocations.
func TestHotPathAllocsWithMetrics(t *testing.T) {
	var m Memory
	do := l7Client(t, l7.Config{Metrics: accesslog.New(accesslog.Config{Next: &m, Out: io.Discard})})
	for range 10 {
		do()
	}
	if allocs := testing.AllocsPerRun(1000, do); allocs > 0 {
		t.Errorf("%.2f allocations per proxied request with metrics on, want 0", allocs)
	}
	hs, ms := m.HTTP()
	if len(hs) != 1 || hs[0].ByClass[2] != 1011 || len(ms) != 1 || ms[0].Requests != 1011 || ms[0].Pool != "web" || hs[0].Upstream.Count != 1011 {
		// 10 warm-up requests, and AllocsPerRun runs once more than asked.
		t.Errorf("counted %+v %+v, want 1011 2xx requests to one member of pool web", hs, ms)
	}
}

// BenchmarkL7Metrics compares one keep-alive request through the L7
// engine with metrics off and on.
func BenchmarkL7Metrics(b *testing.B) {
	for _, on := range []bool{false, true} {
		b.Run(map[bool]string{false: "off", true: "on"}[on], func(b *testing.B) {
			cfg := l7.Config{}
			if on {
				cfg.Metrics = &Memory{}
			}
			do := l7Client(b, cfg)
			b.ReportAllocs()
			b.ResetTimer()
			for range b.N {
				do()
			}
		})
	}
}

type oneRoute struct{ r *l7.Route }

func (o oneRoute) Route(string, string) *l7.Route { return o.r }

type member struct{ addr netip.AddrPort }

func (m *member) Addr() netip.AddrPort                       { return m.addr }
func (m *member) Done(error, int, time.Duration)             {}
func (b *backend) Pick(netip.Addr, []byte) (l7.Member, bool) { return b.m, true }
func (b *backend) Options() *l7.BackendOptions               { return &b.opts }

type backend struct {
	m    *member
	opts l7.BackendOptions
}

// fixedBackend answers every request head with resp.
func fixedBackend(t testing.TB, resp string) netip.AddrPort {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				buf := make([]byte, 16<<10)
				out := []byte(resp)
				n := 0
				for {
					k, err := c.Read(buf[n:])
					if err != nil {
						return
					}
					n += k
					for {
						i := bytes.Index(buf[:n], []byte("\r\n\r\n"))
						if i < 0 {
							break
						}
						if _, err := c.Write(out); err != nil {
							return
						}
						n = copy(buf, buf[i+4:n])
					}
				}
			}()
		}
	}()
	return netip.MustParseAddrPort(ln.Addr().String())
}

func TestCollectorForgetsDeletedLoadBalancers(t *testing.T) {
	var m Memory
	m.ConnOpened("acme/kept", "192.0.2.1:80/tcp")
	m.ConnOpened("acme/deleted", "192.0.2.2:80/tcp")
	c := NewCollector(&m, CollectorConfig{Served: func() map[string]bool { return map[string]bool{"acme/kept": true} }})
	want := `
# HELP teapot_lb_connections_total Connections (UDP: flows) accepted by a listener.
# TYPE teapot_lb_connections_total counter
teapot_lb_connections_total{lb="acme/kept",listener="192.0.2.1:80/tcp",tenant="acme"} 1
`
	if err := testutil.CollectAndCompare(c, strings.NewReader(want), "teapot_lb_connections_total"); err != nil {
		t.Error(err)
	}
	if r := m.Report(); len(r.Listeners) != 1 {
		t.Errorf("the deleted load balancer's counters are still kept: %+v", r.Listeners)
	}
}

// TestSortedKeysOrderAndCost: keys of label values sort as their values
// joined would, value by value, and sorting allocates nothing per
// comparison (a scrape sorts one key per member with counters).
func TestSortedKeysOrderAndCost(t *testing.T) {
	m := map[[3]string]int{}
	for i := range 500 {
		m[[3]string{fmt.Sprintf("t%d", i%7), fmt.Sprintf("t%d/lb-%d", i%7, i%13), fmt.Sprintf("10.0.%d.%d:80", i%5, i)}] = i
	}
	m[[3]string{"t1", "t1/lb", "a"}] = 0
	m[[3]string{"t1", "t1/lbx", "a"}] = 0
	m[[3]string{"t10", "", ""}] = 0
	keys := sortedKeys(m)
	if !slices.IsSortedFunc(keys, func(a, b [3]string) int {
		return strings.Compare(strings.Join(a[:], "\x00"), strings.Join(b[:], "\x00"))
	}) || len(keys) != len(m) {
		t.Fatalf("keys not in the order of their joined values: %q", keys)
	}
	if a := testing.AllocsPerRun(20, func() {
		slices.Reverse(keys)
		slices.SortFunc(keys, compareKeys[[3]string])
	}); a > 0 {
		t.Errorf("sorting %d keys allocates %.0f times", len(keys), a)
	}
	if got := sortedKeys(map[string]int{"b": 1, "a": 2, "c": 3}); !slices.Equal(got, []string{"a", "b", "c"}) {
		t.Errorf("string keys sorted %q", got)
	}
}
