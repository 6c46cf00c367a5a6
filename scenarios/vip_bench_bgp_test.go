package scenarios

import (
	"fmt"
	"net/netip"
	"testing"
	"time"
)

// BenchmarkVIPFailoverBGP measures, in the BGP lab (BIRD with ECMP and
// BFD 100ms × 3), the time from an LB host's death to the moment the
// router's kernel no longer routes the VIP via it: after a process crash
// (the kernel closes the sessions) and after a host death (only BFD can
// tell), vipTrials each, alternating the IPv4 and IPv6 VIP.
func BenchmarkVIPFailoverBGP(b *testing.B) {
	needTools(b, "bird", "birdc")
	l := newVIPLab(b, labOptions{bgp: true, teapot: true})
	for _, a := range []netip.Addr{bgpVIP4, bgpVIP6} {
		l.waitHops(b, a, l.lbs)
	}
	var rows []failoverRow
	// reaped: from the kill to the process being gone and reaped, for
	// reference: the kernel closes the sessions before it is done.
	var reaped latencies
	for _, kind := range []struct {
		label  string
		unplug bool
	}{{"teapot-lb bgp, process crash", false}, {"teapot-lb bgp, host death (BFD)", true}} {
		var lat latencies
		for i := range vipTrials {
			a := bgpVIP4
			if i%2 == 1 {
				a = bgpVIP6
			}
			n := l.lbs[i%len(l.lbs)]
			killed := l.killNoWait(n, kind.unplug)
			gone := l.waitGone(b, n, killed, a)
			l.reap(n)
			if !kind.unplug {
				reaped = append(reaped, time.Since(killed))
			}
			d, ok := gone[a]
			if !ok {
				b.Fatalf("the route to %s via %s did not go within 5s", a, n.id)
			}
			lat = append(lat, d)
			l.revive(n)
			l.waitHops(b, bgpVIP4, l.lbs)
			l.waitHops(b, bgpVIP6, l.lbs)
		}
		rows = append(rows, failoverRow{kind.label, lat})
		b.ReportMetric(ms(lat.percentile(99)), "p99-ms-"+metricName(kind.label))
	}
	rows = append(rows, failoverRow{"(crashed process gone and reaped)", reaped})
	fmt.Printf("\nVIP failover (BGP): from the host's death to its route leaving the router's kernel\n")
	fmt.Printf("(3 LB hosts, BIRD with ECMP and BFD 100ms x 3, %d trials each)\n", vipTrials)
	fmt.Printf("%-36s %10s %10s %10s\n", "", "median ms", "p99 ms", "max ms")
	for _, r := range rows {
		fmt.Printf("%-36s %10.1f %10.1f %10.1f\n", r.label, ms(r.lat.percentile(50)), ms(r.lat.percentile(99)), ms(r.lat.percentile(100)))
	}
	b.ReportMetric(0, "ns/op")
}
