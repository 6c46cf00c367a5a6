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
