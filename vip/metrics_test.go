package vip

import (
	"bytes"
	"fmt"
	"io"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	pb "github.com/teapot-lb/teapot-lb/api/proto/teapotv1"
)

// collectOnly hides WriteText, so that a registry gathers Collect.
type collectOnly struct{ prometheus.Collector }

// series flattens families into "name{label=value,...}" = value.
func series(fams []*dto.MetricFamily) map[string]float64 {
	out := map[string]float64{}
	for _, f := range fams {
		for _, m := range f.GetMetric() {
			var ls []string
			for _, l := range m.GetLabel() {
				ls = append(ls, l.GetName()+"="+l.GetValue())
			}
			slices.Sort(ls)
			v := m.GetGauge().GetValue() + m.GetCounter().GetValue()
			out[fmt.Sprintf("%s %s{%s}", f.GetType(), f.GetName(), strings.Join(ls, ","))] = v
		}
	}
	return out
}

// TestWriteTextIsWhatCollectWrites: the text a scrape writes for a host
// with VIPs held and not, moves and peers parses to the series a
// registry gathers from Collect.
func TestWriteTextIsWhatCollectWrites(t *testing.T) {
	m, tick := scaleManager(t, 300)
	// A load balancer that stops being ready: this host releases its VIP
	// and still publishes it (held 0).
	lb := m.pub.vips[0].LoadBalancers[0]
	m.setReadyFor(map[string]string{lb: "its listeners are not open"}, nil)
	for range 5 {
		tick()
	}
	m.moves.note(true, time.Unix(1700000000, 5e8))
	m.moves.note(false, time.Unix(1700000001, 0))
	c := m.Collector()
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectOnly{c})
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	want := series(fams)

	tw, ok := c.(interface{ WriteText(io.Writer) error })
	if !ok {
		t.Fatal("the VIP collector is not a TextWriter")
	}
	var buf bytes.Buffer
	if err := tw.WriteText(&buf); err != nil {
		t.Fatal(err)
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	parsed, err := parser.TextToMetricFamilies(bytes.NewReader(buf.Bytes()))
	if err != nil {
		t.Fatalf("the text does not parse: %v\n%s", err, buf.String())
	}
	var pf []*dto.MetricFamily
	for _, f := range parsed {
		pf = append(pf, f)
	}
	got := series(pf)
	held, vips := 0, 0
	for k, v := range want {
		if strings.Contains(k, "teapot_lb_vip_held{") {
			vips++
			if v == 1 {
				held++
			}
		}
		if g, ok := got[k]; !ok || g != v {
			t.Errorf("%s: text %v (present %v), Collect %v", k, g, ok, v)
		}
	}
	t.Logf("%d series, %d VIPs, %d held", len(want), vips, held)
	if vips < 100 || held == 0 || held == vips {
		t.Errorf("%d VIPs, %d held: the comparison covers both values only with some of each", vips, held)
	}
	if len(got) != len(want) {
		t.Errorf("the text has %d series, Collect %d", len(got), len(want))
	}
	for _, f := range parsed {
		if f.GetHelp() == "" {
			t.Errorf("%s has no help", f.GetName())
		}
	}
}

// TestWriteTextAllocatesNothingPerVIP: a scrape of a host with 20,000
// VIPs allocates about the same as one with 2,000 (a copy of each VIP
// per scrape was 300 bytes and more).
func TestWriteTextAllocatesNothingPerVIP(t *testing.T) {
	if testing.Short() {
		t.Skip("a scale test: make test runs it; -short (make test-quick) skips it")
	}
	measure := func(n int) float64 {
		m, _ := scaleManager(t, n)
		tw := m.Collector().(interface{ WriteText(io.Writer) error })
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		before := ms.TotalAlloc
		const scrapes = 5
		for range scrapes {
			if err := tw.WriteText(io.Discard); err != nil {
				t.Fatal(err)
			}
		}
		runtime.ReadMemStats(&ms)
		return float64(ms.TotalAlloc-before) / scrapes
	}
	small, large := measure(1000), measure(10000)
	perVIP := (large - small) / 9000
	t.Logf("a scrape allocates %.0f bytes at 1,000 VIPs, %.0f at 10,000: %.2f bytes per VIP", small, large, perVIP)
	if perVIP > 4 {
		t.Errorf("a scrape allocates %.2f bytes per VIP", perVIP)
	}
}

// refusedSeries returns the teapot_lb_vip_heartbeats_refused_total series
// of c, "peer/reason" = value, as Collect and as WriteText export them;
// they must agree.
func refusedSeries(t *testing.T, c prometheus.Collector) map[string]float64 {
	t.Helper()
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectOnly{c})
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if err := c.(interface{ WriteText(io.Writer) error }).WriteText(&buf); err != nil {
		t.Fatal(err)
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	parsed, err := parser.TextToMetricFamilies(&buf)
	if err != nil {
		t.Fatalf("the text does not parse: %v", err)
	}
	pick := func(fams []*dto.MetricFamily) map[string]float64 {
		out := map[string]float64{}
		for _, f := range fams {
			if f.GetName() != nameRefused {
				continue
			}
			if f.GetType() != dto.MetricType_COUNTER {
				t.Errorf("%s is a %s", f.GetName(), f.GetType())
			}
			for _, m := range f.GetMetric() {
				l := map[string]string{}
				for _, p := range m.GetLabel() {
					l[p.GetName()] = p.GetValue()
				}
				out[l["peer"]+"/"+l["reason"]] = m.GetCounter().GetValue()
			}
		}
		return out
	}
	var pf []*dto.MetricFamily
	for _, f := range parsed {
		pf = append(pf, f)
	}
	got, text := pick(fams), pick(pf)
	if fmt.Sprint(got) != fmt.Sprint(text) {
		t.Errorf("Collect exports %v, the text %v", got, text)
	}
	return got
}

// TestRefusedHeartbeatsOnTheMetric: heartbeats refused for their process
// show on teapot_lb_vip_heartbeats_refused_total by peer and reason:
// another process of n2 while its process is heard, and an earlier
// process of n2 than the latest taken. Every member has both series (0
// until a refusal); a host that is not a member has none, and a peer's
// series go when it leaves the members.
func TestRefusedHeartbeatsOnTheMetric(t *testing.T) {
	l := newPeerLoop(t, 10)
	m := l.m
	l.ordered = true
	for range 3 {
		l.tick()
	}
	c := m.Collector()
	want := map[string]float64{
		"n2/another-process": 0, "n2/earlier-process": 0,
		"n3/another-process": 0, "n3/earlier-process": 0,
	}
	if got := refusedSeries(t, c); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("before any refusal: %v, want %v", got, want)
	}
	inc := l.inc["n2"]
	for i := range 3 {
		// Another process of n2, later than the one heard.
		m.receive(received{at: l.now, hb: &heartbeat{ID: "n2", Incarnation: inc + 1, Seq: uint64(100 + i), Ordered: true, Eligible: true}})
	}
	for i := range 2 {
		// An earlier process of n2 than the latest taken.
		m.receive(received{at: l.now, hb: &heartbeat{ID: "n2", Incarnation: inc - 1, Seq: uint64(100 + i), Ordered: true, Eligible: true}})
	}
	// A host that is not a member.
	m.receive(received{at: l.now, hb: &heartbeat{ID: "n9", Incarnation: 1, Seq: 1, Ordered: true}})
	l.tick()
	want["n2/another-process"], want["n2/earlier-process"] = 3, 2
	if got := refusedSeries(t, c); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("after 3 heartbeats of another process and 2 of an earlier one: %v, want %v", got, want)
	}
	if m.loop.refusedIncarnations != 5 {
		t.Errorf("the loop counted %d refusals, want 5", m.loop.refusedIncarnations)
	}

	// n3 leaves the members.
	objs := []*pb.Object{{Kind: &pb.Object_VipPool{VipPool: &pb.VIPPool{Name: "l2", Cidrs: []string{"198.18.0.0/24"}, Mode: ModeARP}}}}
	for _, id := range []string{"n1", "n2"} {
		objs = append(objs, &pb.Object{Kind: &pb.Object_Node{Node: &pb.Node{Id: id, HeartbeatAddr: "127.0.0.1:9"}}})
	}
	m.Update(objs, 2)
	l.alive["n3"] = false
	for range 3 {
		l.tick()
	}
	delete(want, "n3/another-process")
	delete(want, "n3/earlier-process")
	if got := refusedSeries(t, c); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("after n3 left the members: %v, want %v", got, want)
	}
}
