package tenantbgp

import (
	"context"
	"fmt"
	"maps"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/osrg/gobgp/v4/pkg/apiutil"
	"github.com/osrg/gobgp/v4/pkg/packet/bgp"
	"github.com/osrg/gobgp/v4/pkg/server"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	pb "github.com/teapot-lb/teapot-lb/api/proto/teapotv1"
)

// countedPairs are real namespaces (pairs) that count the installs in
// each tenant's namespace (nsRoutes enters it once an install) and make
// some of them slow.
type countedPairs struct {
	pairs
	slow map[string]time.Duration
	mu   sync.Mutex
	n    map[string]int
}

func (c *countedPairs) InNamespace(tenant string, fn func() error) error {
	c.mu.Lock()
	c.n[tenant]++
	c.mu.Unlock()
	time.Sleep(c.slow[tenant])
	return c.pairs.InNamespace(tenant, fn)
}

func (c *countedPairs) counts() map[string]int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return maps.Clone(c.n)
}

// countedRoutes is memRoutes that counts its installs.
type countedRoutes struct {
	memRoutes
	cmu sync.Mutex
	n   int
}

func (c *countedRoutes) Set(rs map[netip.Prefix]netip.Addr) map[netip.Prefix]error {
	c.cmu.Lock()
	c.n++
	c.cmu.Unlock()
	return c.memRoutes.Set(rs)
}

func (c *countedRoutes) count() int {
	c.cmu.Lock()
	defer c.cmu.Unlock()
	return c.n
}

// nodePath announces (or withdraws) prefix via 10.0.0.10 on a node's
// speaker.
func nodePath(t *testing.T, srv *server.BgpServer, prefix string, withdraw bool) {
	t.Helper()
	nlri, err := bgp.NewIPAddrPrefix(netip.MustParsePrefix(prefix))
	if err != nil {
		t.Fatal(err)
	}
	nh, err := bgp.NewPathAttributeNextHop(netip.MustParseAddr("10.0.0.10"))
	if err != nil {
		t.Fatal(err)
	}
	p := &apiutil.Path{Family: bgp.RF_IPv4_UC, Nlri: nlri, Withdrawal: withdraw,
		Attrs: []bgp.PathAttributeInterface{bgp.NewPathAttributeOrigin(bgp.BGP_ORIGIN_ATTR_TYPE_IGP), nh}}
	if withdraw {
		err = srv.DeletePath(apiutil.DeletePathRequest{Paths: []*apiutil.Path{p}})
	} else {
		_, err = srv.AddPath(apiutil.AddPathRequest{Paths: []*apiutil.Path{p}})
	}
	if err != nil {
		t.Fatal(err)
	}
}

func (r *Relay) judgeTimes() map[string]time.Duration {
	r.mu.Lock()
	defer r.mu.Unlock()
	return maps.Clone(r.judgeTime)
}

// One attached tenant's churn costs the install of its own namespace
// only: three attached tenants in real namespaces, a's speaker flapping
// an accepted route and b's a route it may not have, c's quiet (and its
// namespace slow to enter, 50 ms). Over 2 s of flapping, a's namespace
// is installed at every change, b's, c's and the host's table only at
// the resync (500 ms here); each install's time is charged to its tenant.
// Then a route removed by hand from c's namespace is back within the
// resync.
func TestRelayInstallsPerSpace(t *testing.T) {
	if ownProcess(t) {
		return
	}
	const resync = 500 * time.Millisecond
	const slow = 50 * time.Millisecond
	pa, pb2, pc := newNSPair(t, "pa"), newNSPair(t, "pb"), newNSPair(t, "pc")
	att := &countedPairs{pairs: pairs{"a": pa, "b": pb2, "c": pc}, slow: map[string]time.Duration{"c": slow}, n: map[string]int{}}
	host := &countedRoutes{}
	r, err := New(Config{ASN: 65001, RouterID: "127.0.0.1", Routes: host, NodeID: "lb1", Attachments: att, SpaceResync: resync,
		HostAddrs: func() []netip.Addr { return []netip.Addr{netip.MustParseAddr("10.0.0.1")} }})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	sa := startNodeSpeaker(t, pa, "", "10.0.1.0/24")
	sb := startNodeSpeaker(t, pb2, "", "10.0.1.0/24")
	startNodeSpeaker(t, pc, "", "10.0.1.0/24")
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	go r.Run(ctx)
	r.Update([]*pb.Object{attachedTenant("a", 100, ""), attachedTenant("b", 200, ""), attachedTenant("c", 300, "")})

	nh := netip.MustParseAddr("10.0.0.10")
	base := map[netip.Prefix]netip.Addr{netip.MustParsePrefix("10.0.1.0/24"): nh}
	routesIn := func(ns string, want map[netip.Prefix]netip.Addr) func() error {
		return func() error {
			got, err := nsRoutesOf(ns)
			if err != nil {
				return err
			}
			if !maps.Equal(got, want) {
				return fmt.Errorf("routes in %s %v, want %v", ns, got, want)
			}
			return nil
		}
	}
	for _, p := range []nsPair{pa, pb2, pc} {
		waitUntil(t, "the routes in "+p.host, routesIn(p.host, base))
	}

	// Flap: a's extra route is accepted, b's is outside its networks.
	// Counts taken between two passes: an install counted is charged.
	snapshot := func() (map[string]int, int, map[string]time.Duration) {
		r.closeMu.Lock()
		defer r.closeMu.Unlock()
		return att.counts(), host.count(), r.judgeTimes()
	}
	installs0, host0, charged0 := snapshot()
	start := time.Now()
	flaps := 0
	for time.Since(start) < 2*time.Second {
		nodePath(t, sa, "10.0.1.128/25", flaps%2 == 1)
		nodePath(t, sb, "10.9.0.0/24", flaps%2 == 1)
		flaps++
		time.Sleep(150 * time.Millisecond)
	}
	nodePath(t, sa, "10.0.1.128/25", true)
	nodePath(t, sb, "10.9.0.0/24", true)
	waitUntil(t, "a's flapped route withdrawn", routesIn(pa.host, base))
	installs1, host1, charged1 := snapshot()
	window := time.Since(start)

	// At most one resync per period, one more for where the window falls.
	most := int(window/resync) + 1
	n := map[string]int{}
	for _, tenant := range []string{"a", "b", "c"} {
		n[tenant] = installs1[tenant] - installs0[tenant]
	}
	n["host"] = host1 - host0
	t.Logf("over %s (%d flaps): installs %v; charged a %s, b %s, c %s", window.Round(time.Millisecond), flaps, n,
		charged1["a"]-charged0["a"], charged1["b"]-charged0["b"], charged1["c"]-charged0["c"])
	if n["a"] < flaps/3 {
		t.Errorf("a's namespace installed %d times for %d flaps of its routes", n["a"], flaps)
	}
	for _, space := range []string{"b", "c", "host"} {
		if n[space] > most {
			t.Errorf("%s's table installed %d times in %s, whose routes did not change (at most %d resyncs)", space, n[space], window, most)
		}
	}
	if n["c"] == 0 {
		t.Errorf("c's namespace not installed in %s (resync %s)", window, resync)
	}
	if got := charged1["c"] - charged0["c"]; got < time.Duration(n["c"])*slow {
		t.Errorf("c charged %s for %d installs of %s each", got, n["c"], slow)
	}

	// A route removed by hand from c's namespace comes back at its
	// resync, though nothing changed: at the first pass once it is due
	// (one at least every resync when it is shorter than 2 s).
	err = inNetns(pc.host, func() error {
		return netlink.RouteDel(kernelRoute(netip.MustParsePrefix("10.0.1.0/24"), nh))
	})
	if err != nil {
		t.Fatal(err)
	}
	removed := time.Now()
	deadline := removed.Add(2*resync + time.Second)
	for routesIn(pc.host, base)() != nil {
		if time.Now().After(deadline) {
			t.Fatalf("the route removed by hand not back in %s (resync %s)", time.Since(removed), resync)
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Logf("the route removed by hand back after %s", time.Since(removed).Round(time.Millisecond))
}

// The host's table trusts what it installed (Set costs what changed) and
// reads the table again on Reread: a route removed by hand is put back,
// one marked as the relay's by hand removed.
func TestKernelRoutesReread(t *testing.T) {
	t.Parallel()
	p := newNSPair(t, "k")
	nh := netip.MustParseAddr("10.0.0.10")
	want := map[netip.Prefix]netip.Addr{netip.MustParsePrefix("10.0.1.0/24"): nh, netip.MustParsePrefix("10.0.2.0/24"): nh}
	err := inNetns(p.host, func() error {
		k, err := newKernelRoutes()
		if err != nil {
			return err
		}
		if failed := k.Set(want); len(failed) > 0 {
			return fmt.Errorf("set: %v", failed)
		}
		if err := netlink.RouteDel(kernelRoute(netip.MustParsePrefix("10.0.1.0/24"), nh)); err != nil {
			return err
		}
		stray := kernelRoute(netip.MustParsePrefix("10.0.3.0/24"), nh)
		if err := netlink.RouteAdd(stray); err != nil {
			return err
		}
		if failed := k.Set(want); len(failed) > 0 {
			return fmt.Errorf("set again: %v", failed)
		}
		if got := tableRoutes(); len(got) != 2 || got[netip.MustParsePrefix("10.0.1.0/24")].IsValid() {
			return fmt.Errorf("Set read the table: %v", got)
		}
		if failed, err := k.Reread(want); len(failed) > 0 || err != nil {
			return fmt.Errorf("reread: %v, %v", failed, err)
		}
		if got := tableRoutes(); !maps.Equal(got, want) {
			return fmt.Errorf("after Reread %v, want %v", got, want)
		}
		return k.Close()
	})
	if err != nil {
		t.Fatal(err)
	}
}

// tableRoutes are the routes marked RouteProtocol in the calling
// thread's namespace.
func tableRoutes() map[netip.Prefix]netip.Addr {
	got := map[netip.Prefix]netip.Addr{}
	rs, _ := netlink.RouteListFiltered(netlink.FAMILY_ALL, &netlink.Route{Protocol: RouteProtocol, Table: unix.RT_TABLE_MAIN},
		netlink.RT_FILTER_PROTOCOL|netlink.RT_FILTER_TABLE)
	for i := range rs {
		if p, nh, ok := routeOf(&rs[i]); ok {
			got[p] = nh
		}
	}
	return got
}

func TestHostShares(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		causes map[string]int
		counts map[string]int
		want   map[string]time.Duration
	}{
		{"the tenants that changed it, by routes changed", map[string]int{"a": 1, "b": 3}, map[string]int{"a": 1, "c": 99},
			map[string]time.Duration{"a": 25 * time.Millisecond, "b": 75 * time.Millisecond}},
		{"a resync, by routes held", nil, map[string]int{"a": 1, "c": 3},
			map[string]time.Duration{"a": 25 * time.Millisecond, "c": 75 * time.Millisecond}},
		{"a resync of an empty table, nobody", nil, nil, map[string]time.Duration{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := hostShares(100*time.Millisecond, tt.causes, tt.counts); !maps.Equal(got, tt.want) {
				t.Errorf("got %v, want %v", got, tt.want)
			}
		})
	}
}

// refusingRoutes is countedRoutes that refuses every route while refuse
// is set.
type refusingRoutes struct {
	countedRoutes
	refuse bool
}

func (f *refusingRoutes) Set(rs map[netip.Prefix]netip.Addr) map[netip.Prefix]error {
	f.countedRoutes.Set(rs)
	failed := map[netip.Prefix]error{}
	if f.refuse {
		for p := range rs {
			failed[p] = fmt.Errorf("refused")
		}
	}
	return failed
}

// When a pass installs a space, with no route changing: a new space at
// once, a space whose attachment or networks changed, a space whose
// last install had a route refused, every space at its resync; never a
// space whose tenant object was written again unchanged.
func TestInstallWhen(t *testing.T) {
	t.Parallel()
	host := &countedRoutes{}
	spaces := map[string]*refusingRoutes{"a": {}, "b": {}}
	r, err := New(Config{Routes: host, NodeID: "lb1", SpaceResync: time.Hour,
		SpaceRoutes: func(tenant string) Installer { return spaces[tenant] }})
	if err != nil {
		t.Fatal(err)
	}
	state := func(vniA uint32, netB string) *world {
		a, b := attachedTenant("a", vniA, ""), attachedTenant("b", 200, "")
		b.GetTenant().Networks = []string{"10.0.0.0/24", netB}
		return compile([]*pb.Object{a, b}, "lb1")
	}
	t0 := time.Unix(1000, 0)
	last := map[string]int{}
	step := func(name string, w *world, now time.Time, want ...string) {
		t.Helper()
		// A route of a's, refused while a's installer refuses.
		r.judged[netip.MustParseAddr("127.77.0.1")] = &peerRoutes{tenant: "a", space: "a", routes: map[netip.Prefix]*judged{
			netip.MustParsePrefix("10.0.1.0/24"): {prefix: netip.MustParsePrefix("10.0.1.0/24"), nh: netip.MustParseAddr("10.0.0.10")}}}
		r.sessions[netip.MustParseAddr("127.77.0.1")] = &session{key: peerKey{space: "a", addr: netip.MustParseAddr("10.0.0.10")}, tenant: "a"}
		r.install(w, newJudgedChanges(), now)
		got := map[string]bool{}
		for space, n := range map[string]int{"a": spaces["a"].count(), "b": spaces["b"].count(), "host": host.count()} {
			if n != last[space] {
				got[space] = true
			}
			last[space] = n
		}
		wantSet := map[string]bool{}
		for _, s := range want {
			wantSet[s] = true
		}
		if !maps.Equal(got, wantSet) {
			t.Errorf("%s: installed %v, want %v", name, got, want)
		}
	}
	step("first", state(100, "10.0.1.0/24"), t0, "a", "b", "host")
	step("the same state written again", state(100, "10.0.1.0/24"), t0.Add(time.Second))
	step("a's attachment changed", state(101, "10.0.1.0/24"), t0.Add(2*time.Second), "a")
	step("b's networks changed", state(101, "10.0.2.0/24"), t0.Add(3*time.Second), "b")
	spaces["a"].refuse = true
	step("a refused at the resync", state(101, "10.0.2.0/24"), t0.Add(61*time.Minute), "a", "b", "host")
	if l := r.lists["a"]; l == nil || l.nDropped != 1 || !strings.HasPrefix(l.dropped[0].GetReason(), ReasonInstallFailed) {
		t.Errorf("a's lists after the refusal: %v", l)
	}
	step("a tried again", state(101, "10.0.2.0/24"), t0.Add(62*time.Minute), "a")
	spaces["a"].refuse = false
	step("a tried again and taken", state(101, "10.0.2.0/24"), t0.Add(63*time.Minute), "a")
	if l := r.lists["a"]; l == nil || l.nDropped != 0 || l.nAccepted != 1 {
		t.Errorf("a's lists once taken: %v", l)
	}
	step("quiet", state(101, "10.0.2.0/24"), t0.Add(64*time.Minute))
}

// costedRoutes is a host's table whose Set costs perRoute for each
// route it adds, changes or removes, and whose Reread costs perHeld for
// each route it then holds, as reading the kernel's table does. It
// refuses the prefixes in refuse, and its Reread fails while readErr is
// set.
type costedRoutes struct {
	have              map[netip.Prefix]netip.Addr
	perRoute, perHeld time.Duration
	refuse            map[netip.Prefix]bool
	readErr           error
	rereads           int
}

func (c *costedRoutes) Set(rs map[netip.Prefix]netip.Addr) map[netip.Prefix]error {
	if c.have == nil {
		c.have = map[netip.Prefix]netip.Addr{}
	}
	n := 0
	failed := map[netip.Prefix]error{}
	for p, nh := range rs {
		if cur, ok := c.have[p]; ok && cur == nh {
			continue
		}
		n++
		if c.refuse[p] {
			failed[p] = fmt.Errorf("refused")
			continue
		}
		c.have[p] = nh
	}
	for p := range c.have {
		if _, ok := rs[p]; !ok {
			n++
			delete(c.have, p)
		}
	}
	for p := range rs {
		if c.refuse[p] {
			failed[p] = fmt.Errorf("refused")
		}
	}
	time.Sleep(time.Duration(n) * c.perRoute)
	return failed
}

func (c *costedRoutes) Reread(rs map[netip.Prefix]netip.Addr) (map[netip.Prefix]error, error) {
	c.rereads++
	if c.readErr != nil {
		return nil, c.readErr
	}
	failed := c.Set(rs)
	time.Sleep(time.Duration(len(c.have)) * c.perHeld)
	return failed, nil
}

func (c *costedRoutes) Close() error { return nil }

// hostTenant is a tenant of the host's table with one speaker.
func hostTenant(name, network string) *pb.Object {
	return &pb.Object{Kind: &pb.Object_Tenant{Tenant: &pb.Tenant{Name: name, Networks: []string{network},
		Bgp: &pb.TenantBGP{Asn: 64600, Peers: []string{"192.0.2.1"}}}}}
}

// routesFrom are n accepted /24s from base's first two bytes, via nh.
func routesFrom(base string, n int, nh string) map[netip.Prefix]*judged {
	out := map[netip.Prefix]*judged{}
	b := netip.MustParsePrefix(base).Addr().As4()
	for i := range n {
		p := netip.PrefixFrom(netip.AddrFrom4([4]byte{b[0], b[1], byte(i), 0}), 24)
		out[p] = &judged{prefix: p, nh: netip.MustParseAddr(nh)}
	}
	return out
}

// An install of the host's table is charged to whom it is for: a change
// by the count of changed routes of each tenant that made it; a resync
// that falls on a change, its change to that change's tenant and its
// reading of the table by the routes each tenant has there; a retry of
// a refused route to the tenant whose route it is, not to the tenant
// whose route is refused this time; a resync alone by the routes each
// has there.
func TestInstallChargesHostTable(t *testing.T) {
	// Not parallel: the charges are times the installs sleep. A loaded
	// host stretches the small charges by a few ms, so each check allows
	// a quarter where the right charge is about a hundredth (and a wrong
	// one is the whole, or an even half).
	host := &costedRoutes{perRoute: time.Millisecond, perHeld: time.Millisecond / 2}
	r, err := New(Config{Routes: host, NodeID: "lb1", SpaceResync: 30 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	w := compile([]*pb.Object{hostTenant("big", "10.1.0.0/16"), hostTenant("small", "10.2.0.0/16")}, "lb1")
	ab, as := netip.MustParseAddr("192.0.2.1"), netip.MustParseAddr("192.0.2.2")
	r.sessions[ab] = &session{key: peerKey{addr: ab}, tenant: "big"}
	r.sessions[as] = &session{key: peerKey{addr: as}, tenant: "small"}
	r.judged[ab] = &peerRoutes{tenant: "big", routes: routesFrom("10.1.0.0/16", 200, "10.1.255.1")}
	r.judged[as] = &peerRoutes{tenant: "small", routes: routesFrom("10.2.0.0/16", 1, "10.2.255.1")}
	t0 := time.Unix(1000, 0)
	r.install(w, newJudgedChanges(), t0)
	step := func(ch judgedChanges, now time.Time) (big, small time.Duration) {
		before := r.judgeTimes()
		r.install(w, ch, now)
		after := r.judgeTimes()
		return after["big"] - before["big"], after["small"] - before["small"]
	}

	// big changes 100 routes, small 1: one Set of 101 routes (~101 ms).
	for p, j := range r.judged[ab].routes {
		if p.Addr().As4()[2] < 100 {
			j.nh = netip.MustParseAddr("10.1.255.2")
		}
	}
	r.judged[as].routes = routesFrom("10.2.0.0/16", 1, "10.2.255.2")
	ch := newJudgedChanges()
	ch.accepted("", "big", 100)
	ch.accepted("", "small", 1)
	big, small := step(ch, t0.Add(time.Second))
	t.Logf("a change of 100 routes of big's and 1 of small's: big charged %s, small %s", big, small)
	if big < 80*time.Millisecond || small > big/4 {
		t.Errorf("the change not shared by routes changed: big %s, small %s", big, small)
	}

	// small's route changes at big's resync: small is charged its change
	// (~1 ms), the reading of 201 routes (~100 ms) is big's but for 1/201.
	r.judged[as].routes = routesFrom("10.2.0.0/16", 1, "10.2.255.3")
	ch = newJudgedChanges()
	ch.accepted("", "small", 1)
	big, small = step(ch, t0.Add(31*time.Second))
	t.Logf("a resync with small's change: big charged %s, small %s", big, small)
	if big < 80*time.Millisecond || small > big/4 {
		t.Errorf("the resync charged to the change: big %s, small %s", big, small)
	}

	// small's new route is refused; at the next pass it is retried while
	// big's new route is refused: the retry is small's.
	host.perRoute = 30 * time.Millisecond
	sp := netip.MustParsePrefix("10.2.9.0/24")
	bp := netip.MustParsePrefix("10.1.250.0/24")
	r.judged[as].routes[sp] = &judged{prefix: sp, nh: netip.MustParseAddr("10.2.255.3")}
	host.refuse = map[netip.Prefix]bool{sp: true}
	ch = newJudgedChanges()
	ch.accepted("", "small", 1)
	step(ch, t0.Add(32*time.Second))
	if r.failed[sp] == nil {
		t.Fatalf("small's route not refused: %v", r.failed)
	}
	host.refuse = map[netip.Prefix]bool{bp: true}
	r.judged[ab].routes[bp] = &judged{prefix: bp, nh: netip.MustParseAddr("10.1.255.1")} // judged earlier, refused now
	big, small = step(newJudgedChanges(), t0.Add(33*time.Second))
	t.Logf("a retry of small's refused route, big's refused: big charged %s, small %s", big, small)
	if small < 25*time.Millisecond || big > small/3 {
		t.Errorf("the retry not charged to small: big %s, small %s", big, small)
	}
	delete(r.judged[ab].routes, bp)
	host.refuse, host.perRoute = nil, time.Millisecond
	step(newJudgedChanges(), t0.Add(34*time.Second))

	// A resync alone: ~100 ms of reading, by routes held.
	big, small = step(newJudgedChanges(), t0.Add(65*time.Second))
	t.Logf("a resync alone: big charged %s, small %s", big, small)
	if big < 80*time.Millisecond || small > big/4 {
		t.Errorf("the resync not shared by routes held: big %s, small %s", big, small)
	}
}

// A read of a table that fails (the table could not be read, the
// namespace not entered) is tried again at the next pass, and each pass
// until one succeeds; only that one counts as the table's resync.
func TestInstallFailedReadRetried(t *testing.T) {
	t.Parallel()
	host := &costedRoutes{readErr: fmt.Errorf("netlink dump interrupted")}
	r, err := New(Config{Routes: host, NodeID: "lb1", SpaceResync: 30 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	w := compile([]*pb.Object{hostTenant("small", "10.2.0.0/16")}, "lb1")
	as := netip.MustParseAddr("192.0.2.2")
	r.sessions[as] = &session{key: peerKey{addr: as}, tenant: "small"}
	r.judged[as] = &peerRoutes{tenant: "small", routes: routesFrom("10.2.0.0/16", 1, "10.2.255.1")}
	t0 := time.Unix(1000, 0)
	want := []int{1, 2, 3, 3, 4}
	for i, ok := range []bool{false, false, true, true, true} {
		if ok {
			host.readErr = nil
		}
		at := t0.Add(time.Duration(i) * time.Second)
		if i == 4 {
			at = t0.Add(32 * time.Second) // 30 s after the read that succeeded
		}
		r.install(w, newJudgedChanges(), at)
		if host.rereads != want[i] {
			t.Errorf("pass %d: %d reads of the table, want %d", i, host.rereads, want[i])
		}
	}
	if len(host.have) != 1 {
		t.Errorf("the table holds %v", host.have)
	}
}

// A route the relay could not remove when it read the table (here while
// its thread lacks CAP_NET_ADMIN) stays the relay's: the next Set removes
// it.
func TestKernelRoutesRereadKeepsUnremoved(t *testing.T) {
	t.Parallel()
	p := newNSPair(t, "u")
	nh := netip.MustParseAddr("10.0.0.10")
	a, b := netip.MustParsePrefix("10.0.1.0/24"), netip.MustParsePrefix("10.0.2.0/24")
	err := inNetns(p.host, func() error {
		k, err := newKernelRoutes()
		if err != nil {
			return err
		}
		if failed := k.Set(map[netip.Prefix]netip.Addr{a: nh, b: nh}); len(failed) > 0 {
			return fmt.Errorf("set: %v", failed)
		}
		// Drop CAP_NET_ADMIN from this thread's effective set (the
		// thread is locked to this goroutine and ends with it).
		hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
		var caps [2]unix.CapUserData
		if err := unix.Capget(&hdr, &caps[0]); err != nil {
			return err
		}
		full := caps
		caps[0].Effective &^= 1 << unix.CAP_NET_ADMIN
		if err := unix.Capset(&hdr, &caps[0]); err != nil {
			return err
		}
		failed, err := k.Reread(map[netip.Prefix]netip.Addr{a: nh})
		if err := unix.Capset(&hdr, &full[0]); err != nil {
			return err
		}
		if err != nil || failed[b] == nil {
			return fmt.Errorf("reread without CAP_NET_ADMIN: %v, %v (want %s refused)", failed, err, b)
		}
		if got := tableRoutes(); !got[b].IsValid() {
			return fmt.Errorf("%s removed without CAP_NET_ADMIN: %v", b, got)
		}
		if failed := k.Set(map[netip.Prefix]netip.Addr{a: nh}); len(failed) > 0 {
			return fmt.Errorf("set again: %v", failed)
		}
		if got := tableRoutes(); !maps.Equal(got, map[netip.Prefix]netip.Addr{a: nh}) {
			return fmt.Errorf("after Set the table has %v, want only %s", got, a)
		}
		return k.Close()
	})
	if err != nil {
		t.Fatal(err)
	}
}
