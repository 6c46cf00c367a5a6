package metrics

import (
	"bytes"
	"fmt"
	"io"
	"net/netip"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"

	"github.com/teapot-lb/teapot-lb/proxy/l7"
)

// canonical is families in the text format with their series in one
// order, whatever order they came in.
func canonical(t *testing.T, mfs []*dto.MetricFamily) string {
	t.Helper()
	slices.SortFunc(mfs, func(a, b *dto.MetricFamily) int { return strings.Compare(a.GetName(), b.GetName()) })
	var out bytes.Buffer
	for _, mf := range mfs {
		for _, m := range mf.Metric {
			slices.SortFunc(m.Label, func(a, b *dto.LabelPair) int { return strings.Compare(a.GetName(), b.GetName()) })
		}
		key := func(m *dto.Metric) string {
			var b strings.Builder
			for _, l := range m.Label {
				fmt.Fprintf(&b, "%s=%q,", l.GetName(), l.GetValue())
			}
			return b.String()
		}
		slices.SortFunc(mf.Metric, func(a, b *dto.Metric) int { return strings.Compare(key(a), key(b)) })
		if _, err := expfmt.MetricFamilyToText(&out, mf); err != nil {
			t.Fatal(err)
		}
	}
	return out.String()
}

// TestWriteTextIsWhatTheRegistryWrites: WriteText's families, series,
// labels and values are those of the same collector gathered through a
// registry, with folded series, histograms, every family and label
// values that need escaping.
func TestWriteTextIsWhatTheRegistryWrites(t *testing.T) {
	var m Memory
	member := netip.MustParseAddrPort("10.0.0.1:80")
	for _, lb := range []string{"acme/a", "acme/b", "acme/c", `odd/"quoted\` + "\nname"} {
		m.ConnOpened(lb, "192.0.2.1:80/tcp")
		m.Request(l7.RequestStats{LB: lb, Listener: "192.0.2.1:80/tcp", Member: member, Status: 200,
			Duration: 3 * time.Millisecond, Upstream: 2 * time.Millisecond, RequestBytes: 5, ResponseBytes: 100})
	}
	m.Request(l7.RequestStats{LB: "acme/a", Listener: "192.0.2.1:80/tcp", Member: member, Status: 502, Outcome: l7.OutcomeUpstreamError,
		Duration: 90 * time.Second})
	m.ConnClosed("acme/a", "192.0.2.1:80/tcp", 1500*time.Millisecond)
	m.ConnRefused("acme/a", "192.0.2.1:80/tcp", "tenant-limit")
	m.ConnOpened("tcp/db", "192.0.2.9:5432/tcp")
	m.BytesIn("tcp/db", "192.0.2.9:5432/tcp", 1234567891)
	m.ConnOpened("udp/dns", "192.0.2.9:53/udp")
	m.UDPReplyDropped("udp/dns", "192.0.2.9:53/udp", 61440)
	m.MemberRequest("tcp/db", "db", "10.1.0.1:5432", 0, time.Millisecond)
	m.MemberRequest("tcp/db", "db", "10.1.0.2:5432", 504, time.Millisecond)
	members := []Member{
		{LB: "tcp/db", Pool: "db", Addr: netip.MustParseAddrPort("10.1.0.1:5432"), Healthy: true},
		{LB: "tcp/db", Pool: "db", Addr: netip.MustParseAddrPort("10.1.0.2:5432"), Ejections: 2},
		{LB: "tcp/db", Pool: "db", Addr: netip.MustParseAddrPort("10.1.0.3:5432"), Healthy: true},
	}
	c := NewCollector(&m, CollectorConfig{MaxLBsPerTenant: 2, MaxMembersPerLB: 1, Members: each(members)})
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(c)
	gathered, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	if len(gathered) != len(families) {
		t.Fatalf("the registry gathered %d families, want all %d", len(gathered), len(families))
	}

	var text bytes.Buffer
	if err := c.WriteText(&text); err != nil {
		t.Fatal(err)
	}
	if got, want := canonical(t, parseText(t, text.Bytes())), canonical(t, gathered); got != want {
		t.Errorf("WriteText:\n%s\nthe registry:\n%s", got, want)
	}
	if !strings.Contains(text.String(), `lb="odd/\"quoted\\\nname"`) {
		t.Errorf("label value not escaped:\n%s", text.String())
	}
}

// TestWriteTextNothingToSay: no counters, no families (a registry writes
// no HELP or TYPE for a family without series).
func TestWriteTextNothingToSay(t *testing.T) {
	var text bytes.Buffer
	if err := NewCollector(new(Memory), CollectorConfig{}).WriteText(&text); err != nil || text.Len() != 0 {
		t.Errorf("WriteText of nothing: %q, %v", text.String(), err)
	}
}

// TestWriteTextCostsLessThanGathering: at 2,000 load balancers of ten
// members (20,000 members, every one with its own series), writing the
// text allocates a fraction of gathering through a registry and encoding,
// which builds a Metric and a dto.Metric per series.
func TestWriteTextCostsLessThanGathering(t *testing.T) {
	var m Memory
	var members []Member
	for i := range 2000 {
		lb := fmt.Sprintf("t%03d/lb-%d", i/20, i)
		m.ConnOpened(lb, fmt.Sprintf("127.1.%d.%d:80/tcp", i/250, i%250))
		for j := range 10 {
			members = append(members, Member{LB: lb, Pool: "app", Addr: netip.AddrPortFrom(netip.AddrFrom4([4]byte{10, byte(i / 250), byte(i % 250), byte(j)}), 8080), Healthy: j%2 == 0})
		}
	}
	c := NewCollector(&m, CollectorConfig{Members: each(members)})
	reg := prometheus.NewRegistry()
	reg.MustRegister(c)
	allocated := func(f func()) uint64 {
		var a, b runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&a)
		f()
		runtime.ReadMemStats(&b)
		return b.TotalAlloc - a.TotalAlloc
	}
	viaRegistry := allocated(func() {
		mfs, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		enc := expfmt.NewEncoder(io.Discard, expfmt.NewFormat(expfmt.TypeTextPlain))
		for _, mf := range mfs {
			if err := enc.Encode(mf); err != nil {
				t.Fatal(err)
			}
		}
	})
	var lines int
	written := allocated(func() {
		var cw countingWriter
		if err := c.WriteText(&cw); err != nil {
			t.Fatal(err)
		}
		lines = cw.lines
	})
	t.Logf("%d lines: through a registry %.1f MiB allocated, WriteText %.1f MiB", lines, float64(viaRegistry)/(1<<20), float64(written)/(1<<20))
	if lines < 2000*10*2 {
		t.Fatalf("%d lines for 20,000 members", lines)
	}
	if written*6 > viaRegistry {
		t.Errorf("WriteText allocated %d bytes, more than a sixth of gathering through a registry (%d)", written, viaRegistry)
	}
}

type countingWriter struct{ lines int }

func (w *countingWriter) Write(b []byte) (int, error) {
	w.lines += bytes.Count(b, []byte{'\n'})
	return len(b), nil
}

// each is a CollectorConfig.Members of members.
func each(members []Member) func(func(Member)) {
	return func(f func(Member)) {
		for _, m := range members {
			f(m)
		}
	}
}
