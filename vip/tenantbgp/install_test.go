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
	// Not parallel: gobgp's StartBgp writes package variables, which
	// two servers starting at once race on.
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
		if failed := k.Reread(want); len(failed) > 0 {
			return fmt.Errorf("reread: %v", failed)
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
		causes map[string]bool
		counts map[string]int
		want   map[string]time.Duration
	}{
		{"the tenants that changed it, evenly", map[string]bool{"a": true, "b": true}, map[string]int{"a": 1, "c": 99},
			map[string]time.Duration{"a": 50 * time.Millisecond, "b": 50 * time.Millisecond}},
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
