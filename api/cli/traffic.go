package cli

import (
	"cmp"
	"fmt"
	"io"
	"maps"
	"slices"
	"strconv"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	pb "github.com/teapot-lb/teapot-lb/api/proto/teapotv1"
)

// lbTraffic is one load balancer's last interval summed over the hosts
// that report it.
type lbTraffic struct {
	rps, errs, p99 float64
	active         int64
	hosts          int
	// oldest is the end of the oldest host's interval: the age shown.
	oldest time.Time
}

// trafficOf sums each host's last interval (TrafficObservation.last) per
// load balancer: rates and connections add up, the p99 is the highest.
func trafficOf(hosts []*pb.HostObservation) map[string]*lbTraffic {
	out := map[string]*lbTraffic{}
	for _, h := range hosts {
		if !h.GetReachable() {
			continue
		}
		for _, t := range h.GetTraffic() {
			l := t.GetLast()
			if l == nil {
				continue
			}
			a := out[t.GetLoadBalancer()]
			if a == nil {
				a = &lbTraffic{}
				out[t.GetLoadBalancer()] = a
			}
			a.rps += l.GetRequestsPerSecond()
			a.errs += l.GetRequestsPerSecond() * l.GetErrorShare()
			a.p99 = max(a.p99, l.GetP99Seconds())
			a.active += t.GetActiveConnections()
			a.hosts++
			if at := l.GetTime().AsTime(); a.oldest.IsZero() || at.Before(a.oldest) {
				a.oldest = at
			}
		}
	}
	return out
}

// trafficCells are the wide columns REQ/S, 5XX, P99, CONNS and TRAFFIC
// AGE of one load balancer ("-" when no host reported an interval).
func trafficCells(t *lbTraffic, now time.Time) []string {
	if t == nil {
		return []string{"-", "-", "-", "-", "-"}
	}
	return []string{rate(t.rps), share(t.errs, t.rps), seconds(t.p99), strconv.FormatInt(t.active, 10),
		age(now, timestampOf(t.oldest))}
}

func rate(v float64) string {
	switch {
	case v == 0:
		return "0"
	case v < 10:
		return strconv.FormatFloat(v, 'f', 1, 64)
	}
	return strconv.FormatFloat(v, 'f', 0, 64)
}

func share(errs, total float64) string {
	if total == 0 {
		return "-"
	}
	return strconv.FormatFloat(100*errs/total, 'f', 1, 64) + "%"
}

func seconds(s float64) string {
	switch {
	case s == 0:
		return "-"
	case s < 1:
		return strconv.FormatFloat(s*1000, 'f', 0, 64) + "ms"
	}
	return strconv.FormatFloat(s, 'f', 1, 64) + "s"
}

// memberRow is one member's last interval summed over the hosts.
type memberRow struct {
	lb, pool, addr string
	rps, errs, p99 float64
	inFlight       int64
	hosts          int
	oldest         time.Time
}

// writeMemberTraffic lists each member's traffic of the last interval of
// the hosts' history rings, summed over the hosts (wide output): the
// busiest first per load balancer. Hosts report at most their 64 busiest
// members per load balancer; the others are counted, not hidden.
func writeMemberTraffic(w io.Writer, objs []*pb.Object, hosts []*pb.HostObservation, now time.Time) error {
	want := map[string]bool{}
	for _, o := range objs {
		if lb := o.GetLoadBalancer(); lb != nil {
			want[lb.GetTenant()+"/"+lb.GetName()] = true
		}
	}
	type key struct{ lb, pool, addr string }
	rows := map[key]*memberRow{}
	omitted := map[string]uint32{}
	inFlight := map[key]int64{}
	for _, h := range hosts {
		if !h.GetReachable() {
			continue
		}
		for _, p := range h.GetPools() {
			for _, m := range p.GetMembers() {
				inFlight[key{p.GetLoadBalancer(), p.GetPool(), m.GetAddress()}] += m.GetInFlight()
			}
		}
		for _, t := range h.GetTraffic() {
			lb := t.GetLoadBalancer()
			if !want[lb] {
				continue
			}
			if n := t.GetMembersOmitted(); n > omitted[lb] {
				omitted[lb] = n
			}
			for _, m := range t.GetMembers() {
				k := key{lb, m.GetPool(), m.GetAddress()}
				r := rows[k]
				if r == nil {
					r = &memberRow{lb: lb, pool: m.GetPool(), addr: m.GetAddress()}
					rows[k] = r
				}
				r.rps += m.GetRequestsPerSecond()
				r.errs += m.GetRequestsPerSecond() * m.GetErrorShare()
				r.p99 = max(r.p99, m.GetP99Seconds())
				r.hosts++
				if at := m.GetTime().AsTime(); r.oldest.IsZero() || at.Before(r.oldest) {
					r.oldest = at
				}
			}
		}
	}
	if len(rows) == 0 && len(omitted) == 0 {
		return nil
	}
	list := make([]*memberRow, 0, len(rows))
	for k, r := range rows {
		r.inFlight = inFlight[k]
		list = append(list, r)
	}
	slices.SortFunc(list, func(a, b *memberRow) int {
		return cmp.Or(cmp.Compare(a.lb, b.lb), cmp.Compare(b.rps, a.rps), cmp.Compare(a.pool, b.pool), cmp.Compare(a.addr, b.addr))
	})
	fmt.Fprintln(w)
	t := newTable(w)
	t.row("LOAD BALANCER", "POOL", "MEMBER", "REQ/S", "5XX", "P99", "IN FLIGHT", "HOSTS", "AGE")
	for _, r := range list {
		t.row(r.lb, r.pool, r.addr, rate(r.rps), share(r.errs, r.rps), seconds(r.p99), strconv.FormatInt(r.inFlight, 10),
			strconv.Itoa(r.hosts), age(now, timestampOf(r.oldest)))
	}
	if err := t.flush(); err != nil {
		return err
	}
	for _, lb := range slices.Sorted(maps.Keys(omitted)) {
		if n := omitted[lb]; n > 0 {
			fmt.Fprintf(w, "%s: %d more members not listed (each host reports the %d busiest of a load balancer)\n", lb, n, 64)
		}
	}
	return nil
}

func timestampOf(t time.Time) *timestamppb.Timestamp {
	if t.IsZero() {
		return nil
	}
	return timestamppb.New(t)
}
