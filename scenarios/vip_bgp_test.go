package scenarios

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
)

// BFD runs at 100ms x 3 on both sides: a dead host's routes go within
// about 300ms; the test allows a second.
const bgpWithdrawBound = time.Second

// After a BFD reset the host dials the router again within its idle hold
// (2s after it reset the session itself, gobgp's fixed 5s after the
// router did) plus its first connect delay (up to 2s); the bound leaves
// room for a loaded machine.
const (
	bgpRedialBound = 12 * time.Second
	// bgpStableFor: how long after it is back the host is watched for
	// a reset of its own.
	bgpStableFor = 5 * time.Second
)

// birdConfig makes the router an eBGP peer of every LB host over IPv4
// and IPv6, with BFD, installing all equal routes as ECMP.
func birdConfig(dir string, lbs []*lbHost) string {
	var b strings.Builder
	fmt.Fprintf(&b, `log "%s" all;
router id 192.0.2.1;
protocol device { scan time 10; }
protocol kernel k4 { ipv4 { export all; import none; }; merge paths on; }
protocol kernel k6 { ipv6 { export all; import none; }; merge paths on; }
protocol bfd { interface "eth0" { min rx interval 100 ms; min tx interval 100 ms; multiplier 3; }; }
template bgp lb4 {
  local 192.0.2.1 as %[2]d;
  ipv4 { import all; export none; };
  bfd on; connect retry time 1; connect delay time 1; error wait time 1, 2;
}
template bgp lb6 {
  local 2001:db8::1 as %[2]d;
  ipv6 { import all; export none; };
  bfd on; connect retry time 1; connect delay time 1; error wait time 1, 2;
}
`, filepath.Join(dir, "bird.log"), labRouterASN)
	for _, n := range lbs {
		fmt.Fprintf(&b, "protocol bgp %s_4 from lb4 { neighbor %s as %d; }\n", n.id, n.ip4, labASN)
		fmt.Fprintf(&b, "protocol bgp %s_6 from lb6 { neighbor %s as %d; }\n", n.id, n.ip6, labASN)
	}
	return b.String()
}

// startRouter makes the router forward (ECMP hashed on ports), links the
// outside client to it, and runs BIRD.
func (l *vipLab) startRouter() {
	l.tb.Helper()
	must := func(err error) {
		l.tb.Helper()
		if err != nil {
			l.tb.Fatal(err)
		}
	}
	for k, v := range map[string]string{
		"net.ipv4.ip_forward": "1", "net.ipv6.conf.all.forwarding": "1",
		"net.ipv4.fib_multipath_hash_policy": "1", "net.ipv6.fib_multipath_hash_policy": "1",
	} {
		must(l.router.Sysctl(k, v))
	}
	var err error
	l.outside, err = l.lab.AddBareHost("outside")
	must(err)
	must(l.lab.Connect(l.router, "eth1", []string{"198.51.100.1/24", "2001:db8:c::1/64"},
		l.outside, "eth0", []string{"198.51.100.100/24", "2001:db8:c::100/64"}))
	must(l.outside.IP("route", "add", "default", "via", "198.51.100.1"))
	must(l.outside.IP("-6", "route", "add", "default", "via", "2001:db8:c::1"))
	conf := filepath.Join(l.dir, "bird.conf")
	must(os.WriteFile(conf, []byte(birdConfig(l.dir, l.lbs)), 0o644))
	p, err := l.router.Start(filepath.Join(l.dir, "bird.out"), nil, "bird", "-f", "-c", conf,
		"-s", l.birdSocket(), "-P", filepath.Join(l.dir, "bird.pid"))
	must(err)
	l.bird = p
	waitFor(l.tb, 10*time.Second, "BIRD to start", func() error {
		if !p.Running() {
			return errStop(fmt.Errorf("bird exited: %s", tail(filepath.Join(l.dir, "bird.out"), 20)))
		}
		_, err := l.birdc("show", "status")
		return err
	})
}

func (l *vipLab) birdSocket() string { return filepath.Join(l.dir, "bird.ctl") }

func (l *vipLab) birdc(args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), cliTimeout)
	defer cancel()
	out, err := l.router.Exec(ctx, "birdc", append([]string{"-s", l.birdSocket()}, args...)...)
	return string(out), err
}

// waitBFDUp waits until the router's BFD sessions with n, over IPv4 and
// IPv6, are up.
func (l *vipLab) waitBFDUp(tb testing.TB, n *lbHost) {
	tb.Helper()
	waitFor(tb, settleTimeout, fmt.Sprintf("the router's BFD sessions with %s up", n.id), func() error {
		out, err := l.birdc("show", "bfd", "sessions")
		if err != nil {
			return err
		}
		up := map[string]bool{}
		for _, line := range strings.Split(out, "\n") {
			if f := strings.Fields(line); len(f) >= 3 && f[2] == "Up" {
				up[f[0]] = true
			}
		}
		for _, a := range []string{n.ip4.String(), n.ip6.String()} {
			if !up[a] {
				return fmt.Errorf("no session with %s up:\n%s", a, out)
			}
		}
		return nil
	})
}

var viaRE = regexp.MustCompile(`via ([0-9a-f.:]+) on eth0`)

// nextHops returns the next hops BIRD has for a's host route, sorted.
func (l *vipLab) nextHops(a netip.Addr) ([]string, error) {
	out, err := l.birdc("show", "route", "for", netip.PrefixFrom(a, a.BitLen()).String())
	if err != nil {
		return nil, err
	}
	var hops []string
	for _, m := range viaRE.FindAllStringSubmatch(out, -1) {
		if !slices.Contains(hops, m[1]) {
			hops = append(hops, m[1])
		}
	}
	slices.Sort(hops)
	return hops, nil
}

// kernelHops returns the next hops of the router's kernel route to a
// (what BIRD installed), sorted; it reads them over netlink, which is
// cheap enough to poll every few milliseconds.
func (l *vipLab) kernelHops(a netip.Addr) ([]string, error) {
	family := netlink.FAMILY_V4
	if a.Is6() {
		family = netlink.FAMILY_V6
	}
	bits := a.BitLen()
	dst := &net.IPNet{IP: a.AsSlice(), Mask: net.CIDRMask(bits, bits)}
	var hops []string
	err := l.router.Do(func() error {
		rs, err := netlink.RouteListFiltered(family, &netlink.Route{Dst: dst}, netlink.RT_FILTER_DST)
		if err != nil {
			return err
		}
		for _, r := range rs {
			if r.Gw != nil {
				hops = append(hops, r.Gw.String())
			}
			for _, nh := range r.MultiPath {
				hops = append(hops, nh.Gw.String())
			}
		}
		return nil
	})
	slices.Sort(hops)
	return hops, err
}

// hopOf is n's next-hop address for a's family.
func hopOf(n *lbHost, a netip.Addr) string {
	if a.Is6() {
		return n.ip6.String()
	}
	return n.ip4.String()
}

// waitHops waits until BIRD and the router's kernel both have exactly
// want's addresses of a's family as next hops for a.
func (l *vipLab) waitHops(tb testing.TB, a netip.Addr, want []*lbHost) {
	tb.Helper()
	var wantHops []string
	for _, n := range want {
		wantHops = append(wantHops, hopOf(n, a))
	}
	slices.Sort(wantHops)
	waitFor(tb, settleTimeout, fmt.Sprintf("next hops %v for %s", wantHops, a), func() error {
		hops, err := l.nextHops(a)
		if err != nil {
			return err
		}
		if !slices.Equal(hops, wantHops) {
			return fmt.Errorf("BIRD has %v", hops)
		}
		if hops, err = l.kernelHops(a); err != nil {
			return err
		}
		if !slices.Equal(hops, wantHops) {
			return fmt.Errorf("the router's kernel has %v", hops)
		}
		return nil
	})
}

// waitGone polls the router's kernel every few milliseconds until no
// route to the VIPs goes via n, and returns how long after since each
// route lost n.
func (l *vipLab) waitGone(tb testing.TB, n *lbHost, since time.Time, vips ...netip.Addr) map[netip.Addr]time.Duration {
	tb.Helper()
	gone := map[netip.Addr]time.Duration{}
	for a, w := range l.waitGoneWindow(tb, n, since, vips...) {
		gone[a] = w.gone.Sub(since)
	}
	return gone
}

// vipMove is when a VIP moved off a host, as far as polling can tell:
// after seen (the last look that still found the old way to it: the
// router's next hop via the host, or the client's neighbour entry at it)
// and by gone (the first that did not: waitGoneWindow, watchMove).
type vipMove struct{ seen, gone time.Time }

// during reports whether a request ran at some moment of the move.
func (c vipMove) during(r probeResult) bool {
	return !r.start.After(c.gone) && !r.end.Before(c.seen)
}

// judgeMove fails the test for every request that failed without being
// in flight while a VIP moved (c): a request that ran wholly before the
// move, or began after it, must succeed; a failure there is a failure of
// the drain (a listener closed too early, a connection cut at exit, a
// second move). A request in flight during the move may fail: its next
// packets may reach another host.
func judgeMove(t *testing.T, what string, rs []probeResult, c vipMove, since time.Time) {
	t.Helper()
	at := func(tm time.Time) time.Duration { return tm.Sub(since).Round(time.Millisecond) }
	var bad, inFlight, excused int
	var first error
	for _, r := range rs {
		if c.during(r) {
			inFlight++
		}
		switch {
		case r.err == nil:
		case c.during(r):
			excused++
			t.Logf("%s: request %s..%s, in flight during the move, failed: %v", what, at(r.start), at(r.end), r.err)
		default:
			if bad == 0 {
				first = fmt.Errorf("request %s..%s: %w", at(r.start), at(r.end), r.err)
			}
			bad++
		}
	}
	t.Logf("%s: %d requests; %d in flight during the move (%s..%s), %d of them failed; %d others failed",
		what, len(rs), inFlight, at(c.seen), at(c.gone), excused, bad)
	if bad > 0 {
		t.Errorf("%s: %d requests that were not in flight during the move failed; first: %v", what, bad, first)
	}
}

// waitGoneWindow waits, for up to 5s from since, until the router has no
// route to each VIP via n, and returns when each route went.
func (l *vipLab) waitGoneWindow(tb testing.TB, n *lbHost, since time.Time, vips ...netip.Addr) map[netip.Addr]vipMove {
	tb.Helper()
	changes := map[netip.Addr]vipMove{}
	seen := map[netip.Addr]time.Time{}
	for _, a := range vips {
		seen[a] = since
	}
	deadline := since.Add(5 * time.Second)
	for len(changes) < len(vips) && time.Now().Before(deadline) {
		for _, a := range vips {
			if _, ok := changes[a]; ok {
				continue
			}
			looked := time.Now()
			hops, err := l.kernelHops(a)
			if err != nil {
				tb.Fatal(err)
			}
			if slices.Contains(hops, hopOf(n, a)) {
				seen[a] = looked
			} else {
				changes[a] = vipMove{seen: seen[a], gone: time.Now()}
			}
		}
		time.Sleep(2 * time.Millisecond)
	}
	return changes
}

func TestVIPBGP(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: builds a network lab with a three-host cluster and a BGP router")
	}
	needTools(t, "bird", "birdc")
	l := newVIPLab(t, labOptions{bgp: true, teapot: true})
	for _, a := range []netip.Addr{bgpVIP4, bgpVIP6} {
		l.waitHops(t, a, l.lbs)
		waitFor(t, settleTimeout, "the outside client reaches "+a.String(), func() error {
			return httpGet(l.outside, netip.AddrPortFrom(a, 80), labHTTPTimeout)
		})
	}

	t.Run("routes carry the pool's community and the status shows them", func(t *testing.T) {
		out, err := l.birdc("show", "route", "for", bgpVIP4.String()+"/32", "all")
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(out, "(65000,100)") {
			t.Errorf("route without the pool's community 65000:100:\n%s", out)
		}
		st, err := l.status(l.lbs[1])
		if err != nil {
			t.Fatal(err)
		}
		for _, ns := range st.GetNodes() {
			var announced []string
			for _, v := range ns.GetVips() {
				if v.GetMode() == "bgp" && v.GetState() == "announcing" {
					announced = append(announced, v.GetAddress())
				}
			}
			slices.Sort(announced)
			if want := []string{bgpVIP6.String(), bgpVIP4.String()}; !slices.Equal(announced, want) {
				t.Errorf("%s announces %v, want %v", ns.GetId(), announced, want)
			}
		}
	})

	for _, tc := range []struct {
		name   string
		unplug bool
	}{
		// The kernel closes the dead process's sessions: the router hears
		// it at once.
		{"kill -9: the routes via the dead host go", false},
		// Nothing reaches the router any more: only BFD can tell.
		{"host death: BFD drops the routes via the dead host", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n := l.lbs[1]
			if tc.unplug {
				// Only BFD can tell: its sessions with the host, made
				// again after the host came back, must be up first.
				l.waitBFDUp(t, n)
			}
			killed := l.killNoWait(n, tc.unplug)
			gone := l.waitGone(t, n, killed, bgpVIP4, bgpVIP6)
			l.reap(n)
			for _, a := range []netip.Addr{bgpVIP4, bgpVIP6} {
				d, ok := gone[a]
				t.Logf("route to %s via %s gone %s after the kill", a, n.id, d.Round(time.Millisecond))
				if !ok || d > bgpWithdrawBound {
					t.Errorf("route to %s via the dead host: gone %t after %s, want within %s", a, ok, d, bgpWithdrawBound)
				}
			}
			l.revive(n)
			l.waitHops(t, bgpVIP4, l.lbs)
			l.waitHops(t, bgpVIP6, l.lbs)
		})
	}

	t.Run("a BFD reset: the host is back on the router within seconds, without a reset of its own", func(t *testing.T) {
		n := l.lbs[0]
		l.waitBFDUp(t, n)
		sessions := len(logMoves(n, "BGP session"))
		// A stall longer than the router's BFD detection time (300ms):
		// the router drops the session, and the host, once it runs again,
		// hears the router's BFD down and resets its side.
		if err := n.proc.Signal(syscall.SIGSTOP); err != nil {
			t.Fatal(err)
		}
		stopped := time.Now()
		gone := l.waitGone(t, n, stopped, bgpVIP4)
		time.Sleep(200 * time.Millisecond)
		if err := n.proc.Signal(syscall.SIGCONT); err != nil {
			t.Fatal(err)
		}
		resumed := time.Now()
		if _, ok := gone[bgpVIP4]; !ok {
			t.Fatalf("the router kept the route via %s through a stall of %s: no BFD reset", n.id, resumed.Sub(stopped).Round(time.Millisecond))
		}
		var back time.Duration
		for back == 0 && time.Since(resumed) < bgpRedialBound {
			hops, err := l.kernelHops(bgpVIP4)
			if err != nil {
				t.Fatal(err)
			}
			if slices.Contains(hops, hopOf(n, bgpVIP4)) {
				back = time.Since(resumed)
			}
			time.Sleep(20 * time.Millisecond)
		}
		t.Logf("route via %s gone %s after the stall began; back %s after it ended", n.id, gone[bgpVIP4].Round(time.Millisecond), back.Round(time.Millisecond))
		if back == 0 {
			t.Fatalf("the route via %s is not back on the router %s after the BFD reset; its sessions:\n%s",
				n.id, bgpRedialBound, strings.Join(logMoves(n, "BGP session")[sessions:], "\n"))
		}
		// No reset loop: the host never ends a session of its own the
		// moment it is established (a reset left queued from the flap).
		// The router may still end one (its BFD times out when a loaded
		// machine delays this host's BFD): the host is then back again
		// within the bound.
		time.Sleep(bgpStableFor)
		var established time.Time
		for _, line := range logMoves(n, "BGP session")[sessions:] {
			if !strings.Contains(line, "peer=192.0.2.1 ") {
				continue
			}
			at, _ := time.Parse(time.RFC3339Nano, strings.TrimPrefix(strings.Fields(line)[0], "time="))
			switch {
			case strings.Contains(line, "state=ESTABLISHED"):
				established = at
			case strings.Contains(line, "notification-sent") && !established.IsZero() && at.Sub(established) < time.Second:
				t.Errorf("%s reset its session %s after it was established:\n%s", n.id, at.Sub(established), line)
			}
		}
		waitFor(t, bgpRedialBound, "the route via "+n.id+" on the router", func() error {
			hops, err := l.kernelHops(bgpVIP4)
			if err == nil && !slices.Contains(hops, hopOf(n, bgpVIP4)) {
				err = fmt.Errorf("next hops %v", hops)
			}
			return err
		})
		l.waitHops(t, bgpVIP6, l.lbs)
	})

	t.Run("SIGTERM withdraws before exit and only an in-flight request may fail", func(t *testing.T) {
		n := l.lbs[2]
		probes := []*prober{
			startProber(l.outside, netip.AddrPortFrom(bgpVIP4, 80), probeInterval, probeMax),
			startProber(l.outside, netip.AddrPortFrom(bgpVIP6, 80), probeInterval, probeMax),
		}
		time.Sleep(300 * time.Millisecond)
		if err := n.proc.Signal(syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
		signalled := time.Now()
		changes := l.waitGoneWindow(t, n, signalled, bgpVIP4, bgpVIP6)
		withdrawn := n.proc.Running()
		// The data plane may drain connections for up to 30s.
		if err := n.proc.Wait(40 * time.Second); err != nil {
			t.Errorf("%s did not exit cleanly: %v", n.id, err)
		}
		exited := time.Now()
		time.Sleep(300 * time.Millisecond)
		gone := map[netip.Addr]time.Duration{}
		for i, a := range []netip.Addr{bgpVIP4, bgpVIP6} {
			rs := probes[i].finish()
			c, ok := changes[a]
			if !ok {
				continue
			}
			gone[a] = c.gone.Sub(signalled)
			// The router spreads flows with hash-threshold ECMP: when a next
			// hop leaves, a request in flight at that moment may be hashed
			// to another host mid-connection and reset, whichever host it
			// began on.
			judgeMove(t, a.String()+"'s route", rs, c, signalled)
		}
		if len(gone) < 2 || !withdrawn {
			t.Fatalf("routes via the stopping host gone %v; process still running then: %t", gone, withdrawn)
		}
		t.Logf("routes withdrawn %v after SIGTERM; the process exited %s after SIGTERM",
			gone, exited.Sub(signalled).Round(time.Millisecond))
		l.revive(n)
		l.waitHops(t, bgpVIP4, l.lbs)
		l.waitHops(t, bgpVIP6, l.lbs)
	})
}
