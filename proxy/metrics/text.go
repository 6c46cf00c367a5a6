package metrics

import (
	"io"

	"github.com/teapot-lb/teapot-lb/api/promtext"
)

// WriteText writes the collector's series in the Prometheus text format
// (version 0.0.4), family by family. It holds one scrape's sums, as
// Collect does, but builds no prometheus.Metric per series: through a
// registry each series becomes a Metric and a dto.Metric with its label
// pairs, all kept until the last is encoded (about 1.5 KiB a series; a
// host of 10,000 load balancers has about 100,000).
func (c *Collector) WriteText(w io.Writer) error {
	a := c.sum()
	defer c.keepRecords(a)
	t := textWriter{promtext.NewText(w)}

	listenerFamily := func(f *family, httpOnly bool, sample func(labels []string, s *listenerSums)) {
		t.family(f, len(a.lkeys))
		for _, k := range a.lkeys {
			if s := a.ls[k]; s.http || !httpOnly {
				sample(k[:], s)
			}
		}
	}
	value := func(f *family, httpOnly bool, v func(*listenerSums) float64) {
		listenerFamily(f, httpOnly, func(labels []string, s *listenerSums) {
			t.sample(f.name, "", f.labels, labels, "", "", v(s))
		})
	}
	histogram := func(f *family, httpOnly bool, h func(*listenerSums) HistogramValues) {
		listenerFamily(f, httpOnly, func(labels []string, s *listenerSums) {
			t.histogram(f, labels, h(s))
		})
	}
	value(famConns, false, func(s *listenerSums) float64 { return float64(s.opened) })
	value(famActive, false, func(s *listenerSums) float64 { return float64(max(0, s.opened-s.closed)) })
	listenerFamily(famRefused, false, func(labels []string, s *listenerSums) {
		for _, r := range sortedKeys(s.refused) {
			t.sample(famRefused.name, "", lbLabels, labels, "reason", r, float64(s.refused[r]))
		}
	})
	histogram(famConnDur, false, func(s *listenerSums) HistogramValues { return s.duration })
	value(famBytesIn, false, func(s *listenerSums) float64 { return float64(s.bytesIn) })
	value(famBytesOut, false, func(s *listenerSums) float64 { return float64(s.bytesOut) })
	// Only the listeners that dropped UDP replies have the series.
	dropped := 0
	for _, s := range a.ls {
		if s.udpDropped > 0 {
			dropped++
		}
	}
	t.family(famUDPDropped, dropped)
	for _, k := range a.lkeys {
		if s := a.ls[k]; s.udpDropped > 0 {
			t.sample(famUDPDropped.name, "", famUDPDropped.labels, k[:], "", "", float64(s.udpDropped))
		}
	}
	http := 0
	for _, s := range a.ls {
		if s.http {
			http++
		}
	}
	if http > 0 {
		listenerFamily(famRequests, true, func(labels []string, s *listenerSums) {
			for i, n := range s.byClass {
				t.sample(famRequests.name, "", lbLabels, labels, "code_class", ClassNames[i], float64(n))
			}
		})
		histogram(famReqDur, true, func(s *listenerSums) HistogramValues { return s.latency })
		histogram(famUpDur, true, func(s *listenerSums) HistogramValues { return s.upstream })
		listenerFamily(famRetries, true, func(labels []string, s *listenerSums) {
			t.sample(famRetries.name, "", lbLabels, labels, "result", "retried", float64(s.retries))
			t.sample(famRetries.name, "", lbLabels, labels, "result", "budget_spent", float64(s.retriesDenied))
		})
	}

	t.family(famMemberReq, len(a.mkeys))
	for _, k := range a.mkeys {
		t.sample(famMemberReq.name, "", memberLabels, k[:], "", "", float64(a.ms[k].requests))
	}
	t.family(famMemberFail, len(a.mkeys))
	for _, k := range a.mkeys {
		t.sample(famMemberFail.name, "", memberLabels, k[:], "", "", float64(a.ms[k].failures))
	}
	t.family(famMemberUp, len(a.pools.members))
	a.pools.each(func(r poolRow) { t.poolSample(famMemberUp.name, &r, r.upValue()) })
	t.family(famMemberEj, len(a.pools.members))
	a.pools.each(func(r poolRow) { t.poolSample(famMemberEj.name, &r, float64(r.ejections)) })
	return t.Flush()
}

// textWriter is the text format writer with the collector's own lines:
// families by their descriptions, members' lines, histograms.
type textWriter struct{ *promtext.Text }

// family writes a family's HELP and TYPE lines, unless it has no series.
func (t textWriter) family(f *family, series int) { t.Family(f.name, f.help, f.typ, series) }

// sample writes one line: name+suffix{names=values[,extra=extraValue]} v.
func (t textWriter) sample(name, suffix string, names, values []string, extra, extraValue string, v float64) {
	t.Sample(name, suffix, names, values, extra, extraValue, v)
}

// poolSample writes one line of member_up or member_ejections_total,
// with the member's address written in place rather than made a string.
func (t textWriter) poolSample(name string, r *poolRow, v float64) {
	b := append(t.Line(), name...)
	b = append(b, '{')
	for i, value := range [...]string{r.tenant, r.lb, r.pool} {
		b = promtext.AppendLabel(b, poolLabels[i], value)
		b = append(b, ',')
	}
	b = append(b, poolLabels[3]...)
	b = append(b, '=', '"')
	b = r.appendMember(b)
	b = append(b, "\"} "...)
	b = promtext.AppendFloat(b, v)
	b = append(b, '\n')
	t.Write(b)
}

// histogram writes a histogram's buckets (cumulative, then +Inf), sum and
// count.
func (t textWriter) histogram(f *family, labels []string, h HistogramValues) {
	var cum uint64
	for i, le := range bucketLabels {
		if i < len(h.Counts) {
			cum += h.Counts[i]
		}
		t.sample(f.name, "_bucket", f.labels, labels, "le", le, float64(cum))
	}
	t.sample(f.name, "_bucket", f.labels, labels, "le", "+Inf", float64(h.Count))
	t.sample(f.name, "_sum", f.labels, labels, "", "", h.Sum.Seconds())
	t.sample(f.name, "_count", f.labels, labels, "", "", float64(h.Count))
}

// bucketLabels are the values of le of Buckets.
var bucketLabels = func() []string {
	out := make([]string, len(Buckets))
	for i, b := range Buckets {
		out[i] = string(promtext.AppendFloat(nil, b.Seconds()))
	}
	return out
}()
