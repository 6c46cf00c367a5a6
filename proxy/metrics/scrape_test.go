package metrics

import (
	"bytes"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"net/netip"
	"os"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/teapot-lb/teapot-lb/proxy/l7"
)

var update = flag.Bool("update", false, "rewrite testdata/scrape.golden")

// scrapeCase is a host's counters and members and the caps they are
// folded under.
type scrapeCase struct {
	name               string
	maxLBs, maxMembers int
	build              func(m *Memory) []Member
}

// foldingCase folds on every axis: load balancers over the cap, among
// them one named TENANT/_other that is kept and one that is not; members
// over the cap in several pools, listed twice, in IPv4 and IPv6, with
// zones that need escaping, and in an order where the addresses and
// their strings sort differently; tenants whose names sort differently
// from their load balancers' ("a" < "a-b" but "a-b/x" < "a/x"), and
// load balancer names without a tenant.
func foldingCase() scrapeCase {
	return scrapeCase{name: "folding", maxLBs: 3, maxMembers: 3, build: func(m *Memory) []Member {
		ap := netip.MustParseAddrPort
		var ms []Member
		add := func(lb, pool string, healthy bool, ej int64, addrs ...netip.AddrPort) {
			for _, a := range addrs {
				ms = append(ms, Member{LB: lb, Pool: pool, Addr: a, Healthy: healthy, Ejections: ej})
			}
		}
		// a: "a/_other" is kept, "a/lb-2" and "a/x" fold into its label.
		add("a/lb-10", "app", true, 0, ap("10.0.0.10:80"), ap("10.0.0.9:80"), ap("10.0.0.100:80"), ap("10.0.0.9:8080"), ap("10.0.0.9:9"))
		add("a/lb-10", "api", false, 1, ap("10.0.0.9:80"), ap("[::1]:80"), ap("[::ffff:10.0.0.9]:80"))
		add("a/lb-1", "app", true, 2, ap("10.1.0.1:443"), ap("10.1.0.1:443"), ap("[fe80::1%eth0]:80"), ap(`[fe80::1%e"0\x]:80`))
		add("a/lb-1", "_other", true, 0, ap("10.1.0.2:443"), ap("10.1.0.3:443"))
		add("a/_other", "app", true, 3, ap("10.2.0.1:80"), ap("10.2.0.2:80"))
		add("a/_other", "_other", false, 0, ap("10.2.0.3:80"))
		add("a/lb-2", "app", true, 5, ap("10.3.0.1:80"), ap("10.3.0.2:80"))
		add("a/x", "db", false, 7, ap("10.4.0.1:5432"))
		add("a/x", "db", true, 0, ap("10.4.0.2:5432"))
		// a-b sorts after a, but its load balancers before a's.
		add("a-b/x", "app", true, 0, ap("192.0.2.1:80"), netip.AddrPort{}, netip.AddrPortFrom(netip.Addr{}, 80))
		add("a.b/y", "app", false, 0, ap("192.0.2.2:80"))
		add("ab/z", "app", true, 1, ap("[2001:db8::a]:443"), ap("[2001:db8::a]:80"), ap("[2001:db8::a%z]:80"))
		add("ab/w", "app", true, 0, ap(`[fe80::1%e"0\x]:80`), ap("[fe80::1%eth0]:80"))
		// b: "b/_other" sorts after three others and folds under its own
		// name.
		for _, lb := range []string{"b/0", "b/1", "b/2", "b/_other", "b/c"} {
			add(lb, "app", true, 1, ap("10.9.0.1:80"), ap("10.9.0.2:80"), ap("10.9.0.3:80"), ap("10.9.0.4:80"))
		}
		add(`odd/"quoted\`+"\nname", `p"q`, true, 0, ap("10.8.0.1:80"))
		// A name without a tenant is its own tenant's: "abc", "abc/x"
		// and "abc/y" are kept, though "abc-x/y" sorts among them.
		for _, lb := range []string{"abc", "abc-x/y", "abc/x", "abc/y", "abc/z"} {
			add(lb, "app", true, 0, ap("10.7.0.1:80"))
		}

		// Counters: listeners, L7 requests to members (some not listed
		// as members), L4 connects by address and by an unparsable name.
		for _, lb := range []string{"a/lb-1", "a/lb-2", "a/x", "c/only-counters", "b/_other"} {
			m.ConnOpened(lb, "192.0.2.1:80/tcp")
		}
		m.ConnRefused("a/x", "192.0.2.1:80/tcp", "tenant-limit")
		m.ConnClosed("a/lb-1", "192.0.2.1:80/tcp", 2*time.Second)
		for _, r := range []struct {
			lb, pool, member string
			status           int
		}{{"a/lb-10", "app", "10.0.0.1:80", 200}, {"a/lb-10", "api", "10.0.0.9:80", 503}, {"a/lb-10", "app", "10.0.0.9:80", 200},
			{"a/lb-2", "app", "10.3.0.1:80", 200}, {"b/_other", "app", "10.9.0.4:80", 500}, {"b/c", "app", "10.9.0.1:80", 200}} {
			m.Request(l7.RequestStats{LB: r.lb, Listener: "192.0.2.1:443/tcp", Member: ap(r.member), Pool: r.pool, Status: r.status,
				Duration: 3 * time.Millisecond, Upstream: time.Millisecond, RequestBytes: 10, ResponseBytes: 20})
		}
		m.MemberRequest("a/x", "db", "10.4.0.0:5432", 0, time.Millisecond)
		m.MemberRequest("a/x", "db", "10.4.0.3:5432", 504, time.Millisecond)
		m.MemberRequest("ab/z", "app", "db.internal:5432", 200, time.Millisecond)
		m.MemberRequest("ab/z", "app", "[2001:db8::a]:443", 200, time.Millisecond)
		return ms
	}}
}

// randomCase is a seeded jumble of the same kinds of names and addresses.
func randomCase(seed uint64) scrapeCase {
	r := rand.New(rand.NewPCG(seed, 7))
	pick := func(s ...string) string { return s[r.IntN(len(s))] }
	return scrapeCase{name: fmt.Sprintf("random %d", seed), maxLBs: 1 + r.IntN(4), maxMembers: 1 + r.IntN(5), build: func(m *Memory) []Member {
		var ms []Member
		addrs := []string{"10.0.0.1:80", "10.0.0.9:80", "10.0.0.10:80", "10.0.0.100:8080", "10.0.0.9:9", "10.0.1.1:80",
			"[::1]:80", "[::ffff:10.0.0.9]:80", "[2001:db8::a]:443", "[fe80::1%eth0]:80", "[fe80::1%eth1]:80", "1.2.3.4:65535"}
		for _, t := range []string{"a", "a-b", "ab", "t0001", "Z"} {
			for _, name := range []string{"lb-1", "lb-10", "lb-2", "_other", "0", "x"} {
				if r.IntN(3) == 0 {
					continue
				}
				lb := t + "/" + name
				for range r.IntN(12) {
					ms = append(ms, Member{LB: lb, Pool: pick("app", "api", "_other", "db"), Addr: netip.MustParseAddrPort(pick(addrs...)),
						Healthy: r.IntN(2) == 0, Ejections: int64(r.IntN(3))})
				}
				if r.IntN(2) == 0 {
					m.ConnOpened(lb, pick("192.0.2.1:80/tcp", "192.0.2.2:53/udp"))
				}
				if r.IntN(2) == 0 {
					m.Request(l7.RequestStats{LB: lb, Listener: "192.0.2.1:443/tcp", Member: netip.MustParseAddrPort(pick(addrs...)),
						Pool: pick("app", "api"), Status: pick2(r, 200, 502), Duration: time.Millisecond})
				}
				if r.IntN(3) == 0 {
					m.MemberRequest(lb, "db", pick(addrs...), pick2(r, 0, 504), time.Millisecond)
				}
			}
		}
		r.Shuffle(len(ms), func(i, j int) { ms[i], ms[j] = ms[j], ms[i] })
		return ms
	}}
}

func pick2(r *rand.Rand, a, b int) int {
	if r.IntN(2) == 0 {
		return a
	}
	return b
}

func (sc scrapeCase) collector() *Collector {
	var m Memory
	members := sc.build(&m)
	return NewCollector(&m, CollectorConfig{MaxLBsPerTenant: sc.maxLBs, MaxMembersPerLB: sc.maxMembers, Members: each(members)})
}

// TestWriteTextGolden: WriteText writes testdata/scrape.golden byte for
// byte (families, series, label values, their order and values), and a
// registry gathers the same series from Collect.
func TestWriteTextGolden(t *testing.T) {
	cases := []scrapeCase{foldingCase(), randomCase(1), randomCase(2), randomCase(3), randomCase(4)}
	var all bytes.Buffer
	for _, sc := range cases {
		var text bytes.Buffer
		c := sc.collector()
		if err := c.WriteText(&text); err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(&all, "# case %s: %d load balancers per tenant, %d members per load balancer\n", sc.name, sc.maxLBs, sc.maxMembers)
		all.Write(text.Bytes())

		reg := prometheus.NewPedanticRegistry()
		reg.MustRegister(c)
		gathered, err := reg.Gather()
		if err != nil {
			t.Fatalf("%s: %v", sc.name, err)
		}
		if got, want := canonical(t, parseText(t, text.Bytes())), canonical(t, gathered); got != want {
			t.Errorf("%s: WriteText:\n%s\nthe registry:\n%s", sc.name, got, want)
		}
	}
	const golden = "testdata/scrape.golden"
	if *update {
		if err := os.WriteFile(golden, all.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatal(err)
	}
	if got := all.String(); got != string(want) {
		gl, wl := strings.Split(got, "\n"), strings.Split(string(want), "\n")
		for i := range min(len(gl), len(wl)) {
			if gl[i] != wl[i] {
				t.Fatalf("WriteText differs from %s at line %d:\n got %s\nwant %s", golden, i+1, gl[i], wl[i])
			}
		}
		t.Fatalf("WriteText wrote %d lines, %s has %d", len(gl), golden, len(wl))
	}
}

// parseText parses the text format.
func parseText(t *testing.T, text []byte) []*dto.MetricFamily {
	t.Helper()
	p := expfmt.NewTextParser(model.LegacyValidation)
	parsed, err := p.TextToMetricFamilies(bytes.NewReader(text))
	if err != nil {
		t.Fatalf("parse WriteText's output: %v\n%s", err, text)
	}
	var out []*dto.MetricFamily
	for _, mf := range parsed {
		out = append(out, mf)
	}
	return out
}

// scaleMembers lists lbs load balancers of ten members, a hundred load
// balancers per tenant, as the scale report does: tenant tNNNN, load
// balancer tNNNN/lb-i, members 10.x.y.z:30000+j.
func scaleMembers(lbs int) []Member {
	ms := make([]Member, 0, lbs*10)
	for i := range lbs {
		lb := fmt.Sprintf("t%04d/lb-%d", i/100, i)
		for j := range 10 {
			a := netip.AddrFrom4([4]byte{10, byte(i >> 16), byte(i >> 8), byte(i)})
			ms = append(ms, Member{LB: lb, Pool: "bulk", Addr: netip.AddrPortFrom(a, uint16(30000+j)), Healthy: j != 3})
		}
	}
	return ms
}

// scrapeAllocated returns the bytes one WriteText of c allocates, the
// least of a few scrapes.
func scrapeAllocated(tb testing.TB, c *Collector) uint64 {
	best := ^uint64(0)
	for range 3 {
		var a, b runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&a)
		if err := c.WriteText(io.Discard); err != nil {
			tb.Fatal(err)
		}
		runtime.ReadMemStats(&b)
		best = min(best, b.TotalAlloc-a.TotalAlloc)
	}
	return best
}

// TestScrapeBytesPerMember: a scrape of 100,000 members (10,000 load
// balancers, half of each tenant's folded under the default cap)
// allocates a bounded number of bytes per member; at 1,000,000 members a
// scrape every 15 seconds is what the heap grows by between collections.
// The first scrape allocates the member records (40 bytes each); the
// next ones take the last scrape's.
func TestScrapeBytesPerMember(t *testing.T) {
	const lbs = 10000
	c := NewCollector(new(Memory), CollectorConfig{Members: each(scaleMembers(lbs))})
	var a, b runtime.MemStats
	runtime.ReadMemStats(&a)
	if err := c.WriteText(io.Discard); err != nil {
		t.Fatal(err)
	}
	runtime.ReadMemStats(&b)
	first := float64(b.TotalAlloc-a.TotalAlloc) / (lbs * 10)
	next := float64(scrapeAllocated(t, c)) / (lbs * 10)
	t.Logf("%.1f bytes allocated per member by the first scrape, %.1f by the next", first, next)
	if first > 64 {
		t.Errorf("the first scrape allocates %.1f bytes per member, want at most 64", first)
	}
	if next > 16 {
		t.Errorf("a scrape after another allocates %.1f bytes per member, want at most 16", next)
	}
}

// TestScrapesAtOnceShareNoRecords: scrapes at the same time each write
// every member, whichever takes the last scrape's records.
func TestScrapesAtOnceShareNoRecords(t *testing.T) {
	const lbs = 2000
	c := NewCollector(new(Memory), CollectorConfig{Members: each(scaleMembers(lbs))})
	var want bytes.Buffer
	if err := c.WriteText(&want); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	outs := make([]bytes.Buffer, 4)
	for i := range outs {
		wg.Go(func() {
			for range 5 {
				outs[i].Reset()
				if err := c.WriteText(&outs[i]); err != nil {
					t.Error(err)
				}
			}
		})
	}
	wg.Wait()
	for i := range outs {
		if !bytes.Equal(outs[i].Bytes(), want.Bytes()) {
			t.Errorf("scrape %d at once with others wrote %d bytes, alone %d", i, outs[i].Len(), want.Len())
		}
	}
}

// BenchmarkScrape writes the series of members in load balancers of ten,
// as a scrape does; -benchmem's B/op divided by the members is the
// figure TestScrapeBytesPerMember bounds.
func BenchmarkScrape(b *testing.B) {
	for _, lbs := range []int{10000, 100000} {
		b.Run(fmt.Sprintf("members=%d", lbs*10), func(b *testing.B) {
			c := NewCollector(new(Memory), CollectorConfig{Members: each(scaleMembers(lbs))})
			b.ReportAllocs()
			for b.Loop() {
				if err := c.WriteText(io.Discard); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
