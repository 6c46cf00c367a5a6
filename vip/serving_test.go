package vip

import (
	"log/slog"
	"maps"
	"net/netip"
	"slices"
	"time"

	"github.com/teapot-lb/teapot-lb/api"
	pb "github.com/teapot-lb/teapot-lb/api/proto/teapotv1"
	"testing"
)

func TestServedSomewhere(t *testing.T) {
	t.Parallel()
	a := netip.MustParseAddr("192.0.2.10")
	arp := &record{spec: vipSpec{Addr: a, Mode: ModeARP}}
	bgp := &record{spec: vipSpec{Addr: a, Mode: ModeBGP}}
	held := &record{spec: vipSpec{Addr: a, Mode: ModeARP}, held: true}
	alive := func(h hostView) view { return view{Alive: map[string]hostView{"n2": h}} }
	holding := map[string]*peerState{"n2": {HoldingKnown: true, Holding: map[netip.Addr]bool{a: true}}}
	// sets: the peer's heartbeats carry tenant sets, and so list the bgp
	// VIPs it is not ready for.
	sets := map[string]*peerState{"n2": {TenantsKnown: true}}
	cases := []struct {
		name  string
		r     *record
		v     view
		peers map[string]*peerState
		want  bool
	}{
		{"held here", held, view{}, nil, true},
		{"arp: nobody holds it", arp, alive(hostView{Eligible: true}), map[string]*peerState{"n2": {HoldingKnown: true}}, false},
		{"arp: a live peer holds it", arp, alive(hostView{Eligible: true}), holding, true},
		{"arp: a dead peer held it", arp, view{}, holding, false},
		{"arp: a peer of an earlier release says nothing", arp, alive(hostView{Eligible: true}), map[string]*peerState{"n2": {}}, false},
		{"bgp: a live eligible peer announces it", bgp, alive(hostView{Eligible: true}), sets, true},
		{"bgp: the peer is not ready for it", bgp, alive(hostView{Eligible: true, NotReady: map[netip.Addr]bool{a: true}}), sets, false},
		{"bgp: the peer is not ready at all", bgp, alive(hostView{Eligible: true, NotReadyAll: true}), sets, false},
		{"bgp: the peer is not eligible", bgp, alive(hostView{}), sets, false},
		{"bgp: the peer's not-ready list did not fit with its bgp VIPs (no sets)", bgp, alive(hostView{Eligible: true}), map[string]*peerState{"n2": {}}, false},
		{"bgp: a peer of an earlier release lists no bgp VIP", bgp, alive(hostView{Eligible: true}), nil, false},
		{"static: a live eligible peer binds it", &record{spec: vipSpec{Addr: a, Mode: ModeStatic}}, alive(hostView{Eligible: true}), nil, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			if got := servedSomewhere(a, tc.r, tc.v, tc.peers); got != tc.want {
				t.Fatalf("served %t, want %t", got, tc.want)
			}
		})
	}
}

// TestServedFor: the serving rule of an address that the attachments of
// tenants ta, tb and tc share, by tenant: this host carries it for the
// tenants it holds it for; a peer that holds it for every tenant (not in
// its partly ready list) for every one; a peer that holds it for some of
// them (partly ready) for those its tenant set names, and for none when
// it sends no set, or one made from another list of tenants (the two
// hosts' states differ by an entry) or is not ready for any address; a
// bgp peer for those of its set, every one when its heartbeats carry sets
// but none for the address, and none when they carry no sets. Several
// hosts add up. A bgp peer that lists the address as not ready counts for
// none of its tenants, and so does one whose sets, and with them its bgp
// not-ready addresses, did not fit. Where this host's state gives the address one tenant and
// a peer's lists it as partly ready or sends a set of it (its state gives
// the address more tenants), the set decides, as for several. A peer
// whose state is behind the revision that gave the address a tenant here
// counts for the others alone, whether it holds it for every tenant of
// its state or sends a set (whose digest can match by chance).
func TestServedFor(t *testing.T) {
	t.Parallel()
	a := netip.MustParseAddr("10.0.0.100")
	spaces := []string{"ta", "tb", "tc"}
	arp := vipSpec{Addr: a, Mode: ModeARP, Spaces: spaces}
	bgp := vipSpec{Addr: a, Mode: ModeBGP, Spaces: spaces}
	only := func(tenants ...string) map[string]string {
		out := map[string]string{}
		for _, t := range spaces {
			if !slices.Contains(tenants, t) {
				out[t] = "tenant " + t + "'s attachment is not up on this host"
			}
		}
		return out
	}
	set := func(tenants ...string) map[netip.Addr]tenantSet {
		s, _ := newTenantSet(a, spaces, only(tenants...))
		return map[netip.Addr]tenantSet{a: s}
	}
	// A set made from tenants ta and tb alone: the sender has not applied
	// the entry that gave the address to tc.
	lagging, _ := newTenantSet(a, []string{"ta", "tb"}, map[string]string{"ta": "down"})
	holds := map[netip.Addr]bool{a: true}
	partly := hostView{Eligible: true, NotReady: holds, Partly: holds}
	full := hostView{Eligible: true}
	type peer struct {
		hv hostView
		ps *peerState
	}
	cases := []struct {
		name  string
		r     *record
		peers map[string]peer
		want  []string // nil: not served
	}{
		{"held here for every tenant", &record{spec: arp, held: true}, nil, spaces},
		{"held here for some", &record{spec: arp, held: true, unserved: only("tb")}, nil, []string{"tb"}},
		{"not held anywhere", &record{spec: arp}, map[string]peer{"n2": {full, &peerState{HoldingKnown: true}}}, nil},
		{"a peer holds it for every tenant", &record{spec: arp},
			map[string]peer{"n2": {full, &peerState{HoldingKnown: true, Holding: holds}}}, spaces},
		{"a peer holds it partly, with its set", &record{spec: arp},
			map[string]peer{"n2": {partly, &peerState{HoldingKnown: true, Holding: holds, TenantsKnown: true, Tenants: set("tb")}}}, []string{"tb"}},
		{"a peer holds it partly, without sets (an earlier version, or they did not fit)", &record{spec: arp},
			map[string]peer{"n2": {partly, &peerState{HoldingKnown: true, Holding: holds}}}, nil},
		{"a peer holds it partly, its sets lack this address", &record{spec: arp},
			map[string]peer{"n2": {partly, &peerState{HoldingKnown: true, Holding: holds, TenantsKnown: true}}}, nil},
		{"a peer holds it partly, its set is of other tenants", &record{spec: arp},
			map[string]peer{"n2": {partly, &peerState{HoldingKnown: true, Holding: holds, TenantsKnown: true,
				Tenants: map[netip.Addr]tenantSet{a: lagging}}}}, nil},
		{"a peer holds it and is not ready for any address", &record{spec: arp},
			map[string]peer{"n2": {hostView{Eligible: true, NotReadyAll: true}, &peerState{HoldingKnown: true, Holding: holds}}}, nil},
		{"a peer holds it partly and does not say what it holds", &record{spec: arp},
			map[string]peer{"n2": {partly, &peerState{TenantsKnown: true, Tenants: set("tb")}}}, nil},
		{"here and a partly peer add up", &record{spec: arp, held: true, unserved: only("ta")},
			map[string]peer{"n2": {partly, &peerState{HoldingKnown: true, Holding: holds, TenantsKnown: true, Tenants: set("tc")}}}, []string{"ta", "tc"}},
		{"bgp: a peer's set", &record{spec: bgp},
			map[string]peer{"n2": {full, &peerState{TenantsKnown: true, Tenants: set("ta", "tc")}}}, []string{"ta", "tc"}},
		{"bgp: a peer's empty set (ready for none of them)", &record{spec: bgp},
			map[string]peer{"n2": {full, &peerState{TenantsKnown: true, Tenants: set()}}}, nil},
		{"bgp: a peer with sets, none for the address", &record{spec: bgp},
			map[string]peer{"n2": {full, &peerState{TenantsKnown: true}}}, spaces},
		{"bgp: a peer without sets", &record{spec: bgp}, map[string]peer{"n2": {full, &peerState{}}}, nil},
		{"bgp: a peer with a set of other tenants", &record{spec: bgp},
			map[string]peer{"n2": {full, &peerState{TenantsKnown: true, Tenants: map[netip.Addr]tenantSet{a: lagging}}}}, nil},
		{"bgp: a peer not eligible", &record{spec: bgp},
			map[string]peer{"n2": {hostView{}, &peerState{TenantsKnown: true, Tenants: set("ta")}}}, nil},
		{"bgp: held here for some", &record{spec: bgp, held: true, unserved: only("ta", "tb")}, nil, []string{"ta", "tb"}},
		{"bgp, one tenant: a peer that announces it", &record{spec: vipSpec{Addr: a, Mode: ModeBGP, Spaces: []string{"ta"}}},
			map[string]peer{"n2": {full, &peerState{TenantsKnown: true}}}, []string{"ta"}},
		{"bgp, one tenant: a peer not ready for it", &record{spec: vipSpec{Addr: a, Mode: ModeBGP, Spaces: []string{"ta"}}},
			map[string]peer{"n2": {hostView{Eligible: true, NotReady: holds}, &peerState{TenantsKnown: true}}}, nil},
		{"bgp, one tenant: a peer whose bgp VIPs did not fit in its not-ready list (no sets)", &record{spec: vipSpec{Addr: a, Mode: ModeBGP, Spaces: []string{"ta"}}},
			map[string]peer{"n2": {full, &peerState{}}}, nil},
		{"one tenant: a peer that holds it", &record{spec: vipSpec{Addr: a, Mode: ModeARP, Spaces: []string{"ta"}}},
			map[string]peer{"n2": {hostView{Eligible: true, NotReadyAll: true}, &peerState{HoldingKnown: true, Holding: holds}}}, []string{"ta"}},
		// The states of two hosts one entry apart: this host's gives the
		// address tenant ta alone, the peer's ta and tb (tb's load
		// balancer came in an entry this host has not applied), and the
		// peer holds it for tb, ta's attachment down there.
		{"one tenant here: a peer that holds it partly, with a set of its tenants", &record{spec: vipSpec{Addr: a, Mode: ModeARP, Spaces: []string{"ta"}}},
			map[string]peer{"n2": {partly, &peerState{HoldingKnown: true, Holding: holds, TenantsKnown: true,
				Tenants: map[netip.Addr]tenantSet{a: lagging}}}}, nil},
		{"one tenant here: a peer that holds it partly, without sets", &record{spec: vipSpec{Addr: a, Mode: ModeARP, Spaces: []string{"ta"}}},
			map[string]peer{"n2": {partly, &peerState{HoldingKnown: true, Holding: holds}}}, nil},
		{"bgp, one tenant here: a peer with a set of its tenants", &record{spec: vipSpec{Addr: a, Mode: ModeBGP, Spaces: []string{"ta"}}},
			map[string]peer{"n2": {full, &peerState{TenantsKnown: true, Tenants: map[netip.Addr]tenantSet{a: lagging}}}}, nil},
		// The other way round: this host's state gave the address tenants
		// ta and tb at revision 3 and tc at 10; a peer acting on revision
		// 9 holds it for every tenant of its own state, which lacks tc.
		{"a peer holds it for every tenant of a state behind the one that gave the address tc here", &record{spec: arp, tenantsSince: []uint64{3, 3, 10}},
			map[string]peer{"n2": {full, &peerState{Revision: 9, HoldingKnown: true, Holding: holds}}}, []string{"ta", "tb"}},
		{"a peer holds it for every tenant, its state as recent as this host's tenants of the address", &record{spec: arp, tenantsSince: []uint64{3, 3, 10}},
			map[string]peer{"n2": {full, &peerState{Revision: 10, HoldingKnown: true, Holding: holds}}}, spaces},
		{"a peer behind all of them", &record{spec: arp, tenantsSince: []uint64{3, 3, 10}},
			map[string]peer{"n2": {full, &peerState{Revision: 2, HoldingKnown: true, Holding: holds}}}, nil},
		{"a peer with a set, its state behind the one that gave the address tc: its bit for tc is not read", &record{spec: arp, tenantsSince: []uint64{3, 3, 10}},
			map[string]peer{"n2": {partly, &peerState{Revision: 9, HoldingKnown: true, Holding: holds, TenantsKnown: true, Tenants: set("ta", "tc")}}}, []string{"ta"}},
		{"a peer with a set, its state as recent as this host's tenants", &record{spec: arp, tenantsSince: []uint64{3, 3, 10}},
			map[string]peer{"n2": {partly, &peerState{Revision: 10, HoldingKnown: true, Holding: holds, TenantsKnown: true, Tenants: set("ta", "tc")}}}, []string{"ta", "tc"}},
		{"held here for a tenant whatever the peers' revisions", &record{spec: arp, held: true, unserved: only("ta", "tb"), tenantsSince: []uint64{3, 3, 10}},
			map[string]peer{"n2": {partly, &peerState{Revision: 9, HoldingKnown: true, Holding: holds, TenantsKnown: true, Tenants: set("tc")}}}, []string{"ta", "tb"}},
		{"one tenant here, a peer behind that holds it", &record{spec: vipSpec{Addr: a, Mode: ModeARP, Spaces: []string{"ta"}}, tenantsSince: []uint64{10}},
			map[string]peer{"n2": {full, &peerState{Revision: 9, HoldingKnown: true, Holding: holds}}}, nil},
		{"bgp: a peer behind with sets, none for the address", &record{spec: bgp, tenantsSince: []uint64{3, 3, 10}},
			map[string]peer{"n2": {full, &peerState{Revision: 9, TenantsKnown: true}}}, []string{"ta", "tb"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			v := view{Alive: map[string]hostView{}}
			peers := map[string]*peerState{}
			for id, p := range tc.peers {
				v.Alive[id], peers[id] = p.hv, p.ps
			}
			got, ok := servedFor(a, tc.r, v, peers)
			if ok != (tc.want != nil) || !slices.Equal(got, tc.want) {
				t.Fatalf("served for %q (%t), want %q", got, ok, tc.want)
			}
		})
	}
	// An address of the hosts' network: every tenant (none listed).
	if got, ok := servedFor(a, &record{spec: vipSpec{Addr: a, Mode: ModeARP}, held: true}, view{}, nil); !ok || got != nil {
		t.Errorf("the hosts' network: %q (%t), want every tenant", got, ok)
	}
}

func setOfAddrs(as []netip.Addr) map[netip.Addr]bool {
	out := map[netip.Addr]bool{}
	for _, a := range as {
		out[a] = true
	}
	return out
}

// TestTenantSetsReachThePeersServingWatch: host n1, whose attachment of
// tenant a is down, holds the arp VIP that the attachments of tenants a
// and b share for b alone and announces the bgp VIP they share for b
// alone; its heartbeats carry the tenant sets to n2, which reads them,
// and n2's serving watch reports both VIPs served for b only. When n1's
// data plane is ready for neither bgp load balancer, the set of the bgp
// VIP names no tenant and n2 reports it served for none; when it is
// ready again, for b. While n1 has applied an entry that adds tenant c
// to the arp VIP and n2 has not, n2 cannot read n1's set of it and counts
// n1 for none of its tenants. A VIP that goes takes its set along. A peer
// that does not read the sets gets none.
func TestTenantSetsReachThePeersServingWatch(t *testing.T) {
	lb := func(tenant, name, pool, addr string) *pb.LoadBalancer {
		return &pb.LoadBalancer{Name: name, Tenant: tenant, Vip: &pb.VIPRequest{Pool: pool}, Status: &pb.LoadBalancerStatus{Address: addr}}
	}
	d := desiredState([]*pb.Object{
		api.Wrap(&pb.VIPPool{Name: "a-private", Cidrs: []string{"10.0.0.100/32"}, Mode: ModeARP, Attachment: "a"}),
		api.Wrap(&pb.VIPPool{Name: "b-private", Cidrs: []string{"10.0.0.100/32"}, Mode: ModeARP, Attachment: "b"}),
		api.Wrap(&pb.VIPPool{Name: "a-bgp", Cidrs: []string{"10.0.0.101/32"}, Mode: ModeBGP, Attachment: "a"}),
		api.Wrap(&pb.VIPPool{Name: "b-bgp", Cidrs: []string{"10.0.0.101/32"}, Mode: ModeBGP, Attachment: "b"}),
		api.Wrap(&pb.VIPPool{Name: "c-private", Cidrs: []string{"10.0.0.100/32"}, Mode: ModeARP, Attachment: "c"}),
		api.Wrap(lb("a", "web", "a-private", "10.0.0.100")), api.Wrap(lb("b", "web", "b-private", "10.0.0.100")),
		api.Wrap(lb("a", "api", "a-bgp", "10.0.0.101")), api.Wrap(lb("b", "api", "b-bgp", "10.0.0.101")),
	})
	vip, vipBGP := netip.MustParseAddr("10.0.0.100"), netip.MustParseAddr("10.0.0.101")
	host := func(id, peer string) *Manager {
		m := &Manager{cfg: Config{NodeID: id, HeartbeatInterval: 20 * time.Millisecond}, dead: 100 * time.Millisecond,
			log: slog.New(slog.DiscardHandler)}
		m.loop.init()
		m.loop.members = map[string]member{peer: {}}
		m.loop.lastTrigger = time.Now().Add(time.Hour) // sends no heartbeats
		m.loop.want = &d
		return m
	}
	now := time.Now()
	n1 := host("n1", "n2")
	n1.beats = newBeatSender(n1)
	n1.arrivals.Store(&map[string]*peerArrival{})
	n1.key = testKey
	n1.loop.eligible = true
	n1.loop.heldARP = []netip.Addr{vip}
	n1.loop.ready.attProblems = map[string]string{"a": "tenant a's attachment is not up on this host"}
	n1.ready, n1.haveReady, n1.readyAll = map[string]string{"a/web": "", "b/web": "", "a/api": "", "b/api": ""}, true, true
	n1.takeReadiness(nil)

	n2 := host("n2", "n1")
	for vs := range d.VIPs.All() {
		n2.loop.records[vs.Addr] = &record{spec: vs}
	}
	var served map[netip.Addr][]string
	n2.SetServingWatch(func(m map[netip.Addr][]string) { served = m })
	seq := uint64(0)
	// beat has n2 read what n1 sends it now; readsTenants: n2 sets the
	// flag in its own heartbeats, which n1 reads first.
	beat := func(readsTenants bool) *heartbeat {
		t.Helper()
		seq++
		now = now.Add(20 * time.Millisecond)
		n1.receive(received{hb: &heartbeat{ID: "n2", Incarnation: 1, Seq: seq, Eligible: true, Holdings: true, HoldingSent: true,
			ReadsPartly: true, PartlySent: true, ReadsTenants: readsTenants}, at: now})
		n1.planBeats(now)
		p := n1.beats.plan.Load()
		if len(p.to) != 1 || p.to[0].withTenants != readsTenants {
			t.Fatalf("sent to %+v; want the tenant sets sent: %t", p.to, readsTenants)
		}
		d := p.to[0]
		b := p.hb.appendTo(nil, d.withHolding, d.withPartly, d.withTenants)
		hb, err := parseHeartbeat(append(b, sign(testKey, b)...), testKey)
		if err != nil {
			t.Fatal(err)
		}
		hb.Seq = seq
		n2.receive(received{hb: hb, at: now})
		n2.publishServing(n2.view(now), false)
		return hb
	}
	check := func(what string, want map[netip.Addr][]string) {
		t.Helper()
		if !maps.EqualFunc(served, want, slices.Equal) {
			t.Errorf("%s: served %q, want %q", what, served, want)
		}
	}
	if hb := beat(true); !hb.TenantsSent || len(hb.Tenants) != 2 {
		t.Fatalf("n1's heartbeat carries the sets %+v (sent %t), want those of both VIPs", hb.Tenants, hb.TenantsSent)
	}
	check("n1 carries both for b", map[netip.Addr][]string{vip: {"b"}, vipBGP: {"b"}})

	n1.mu.Lock()
	n1.readyDelta = map[string]bool{"a/api": true, "b/api": true}
	n1.ready["a/api"], n1.ready["b/api"] = "no listener", "no listener"
	n1.mu.Unlock()
	n1.takeReadiness(nil)
	beat(true)
	check("n1 is not ready for the bgp VIP", map[netip.Addr][]string{vip: {"b"}})

	n1.mu.Lock()
	n1.readyDelta = map[string]bool{"b/api": true}
	n1.ready["b/api"] = ""
	n1.mu.Unlock()
	n1.takeReadiness(nil)
	beat(true)
	check("ready again", map[netip.Addr][]string{vip: {"b"}, vipBGP: {"b"}})

	// Tenant c's load balancer joins the arp VIP; n1 applies it first
	// (a state derived from the last): its set is made from a, b and c,
	// which n2 cannot read yet (not known: n1 counts for no tenant of
	// it), and can once it applies the entry too: b and c.
	cweb := lb("c", "web", "c-private", "10.0.0.100")
	d2, touched := d.withLoadBalancers([]lbChange{{next: cweb}})
	n1.loop.want = d2
	n1.ready["c/web"] = ""
	n1.mu.Lock()
	n1.readyDelta = map[string]bool{"c/web": true}
	n1.mu.Unlock()
	n1.takeReadiness(setOfAddrs(touched))
	beat(true)
	check("n1 applied c's load balancer, n2 not yet", map[netip.Addr][]string{vipBGP: {"b"}})
	n2.loop.want = d2
	vs, _ := d2.vip(vip)
	n2.loop.records[vip] = &record{spec: vs}
	n2.publishServing(n2.view(now), true)
	check("both applied it", map[netip.Addr][]string{vip: {"b", "c"}, vipBGP: {"b"}})
	// The arp VIP goes: so does its set.
	d3, touched := d2.withLoadBalancers([]lbChange{{prev: lb("a", "web", "a-private", "10.0.0.100")},
		{prev: lb("b", "web", "b-private", "10.0.0.100")}, {prev: cweb}})
	n1.loop.want = d3
	n1.takeReadiness(setOfAddrs(touched))
	if sets := n1.loop.ready.tenantSets; len(sets) != 1 || sets[0].Addr != vipBGP {
		t.Fatalf("sets %+v once the arp VIP is gone, want the bgp VIP's alone", sets)
	}

	// A peer that does not read the sets gets a datagram without them,
	// as a host of the previous version reads it.
	if hb := beat(false); hb.TenantsSent || !hb.PartlySent {
		t.Fatalf("to a peer that does not read them: sets sent %t, partly ready addresses sent %t", hb.TenantsSent, hb.PartlySent)
	}
}

// TestRecordKeepsTheRevisionOfItsTenants: a record notes, for each tenant
// of its address, the revision of the committed state from which the
// address has had it (servedFor compares the peers' with them): a tenant
// that comes takes the revision, those that stay keep theirs, also when
// the address's load balancers of the same tenants change.
func TestRecordKeepsTheRevisionOfItsTenants(t *testing.T) {
	m := &Manager{log: slog.New(slog.DiscardHandler)}
	m.loop.init()
	a := netip.MustParseAddr("10.0.0.100")
	now := time.Now()
	steps := []struct {
		revision uint64
		lbs      []string
		spaces   []string
		want     []uint64
	}{
		{5, []string{"tb/web"}, []string{"tb"}, []uint64{5}},
		{7, []string{"tb/api", "tb/web"}, []string{"tb"}, []uint64{5}},
		{9, []string{"ta/web", "tb/api", "tb/web"}, []string{"ta", "tb"}, []uint64{9, 5}},
		{11, []string{"ta/web", "tb/api"}, []string{"ta", "tb"}, []uint64{9, 5}},
		{12, []string{"ta/web", "tb/api", "tc/web"}, []string{"ta", "tb", "tc"}, []uint64{9, 5, 12}},
		{13, []string{"ta/web", "tc/web"}, []string{"ta", "tc"}, []uint64{9, 12}},
		{14, []string{"ta/web", "tb/web", "tc/web"}, []string{"ta", "tb", "tc"}, []uint64{9, 14, 12}},
	}
	for _, s := range steps {
		m.loop.revision = s.revision
		m.note(vipSpec{Addr: a, Mode: ModeARP, LBs: s.lbs, Spaces: s.spaces}, decision{}, nil, now)
		if got := m.loop.records[a].tenantsSince; !slices.Equal(got, s.want) {
			t.Errorf("at revision %d with tenants %q: tenants since %v, want %v", s.revision, s.spaces, got, s.want)
		}
	}
}

// TestServingWatchFollowsAPeerThatCatchesUp: a peer that holds an address
// for every tenant of its state, behind the one that gave the address
// tenant tb here, counts for ta alone; once its heartbeats act on that
// state, with nothing else changed in them, the serving watch reports
// the address served for both.
func TestServingWatchFollowsAPeerThatCatchesUp(t *testing.T) {
	m := &Manager{log: slog.New(slog.DiscardHandler)}
	m.loop.init()
	a := netip.MustParseAddr("10.0.0.100")
	now := time.Now()
	m.loop.revision = 5
	m.note(vipSpec{Addr: a, Mode: ModeARP, LBs: []string{"ta/web"}, Spaces: []string{"ta"}}, decision{}, nil, now)
	m.loop.revision = 10
	m.note(vipSpec{Addr: a, Mode: ModeARP, LBs: []string{"ta/web", "tb/web"}, Spaces: []string{"ta", "tb"}}, decision{}, nil, now)
	peer := &peerState{Revision: 9, HoldingKnown: true, Holding: map[netip.Addr]bool{a: true}}
	m.loop.peers["n2"] = peer
	v := view{Alive: map[string]hostView{"n2": {Eligible: true}}}
	var served map[netip.Addr][]string
	m.SetServingWatch(func(s map[netip.Addr][]string) { served = s })
	m.publishServing(v, true)
	if want := map[netip.Addr][]string{a: {"ta"}}; !maps.EqualFunc(served, want, slices.Equal) {
		t.Fatalf("peer behind: served %q, want %q", served, want)
	}
	peer.Revision = 10
	m.publishServing(v, false)
	if want := map[netip.Addr][]string{a: {"ta", "tb"}}; !maps.EqualFunc(served, want, slices.Equal) {
		t.Fatalf("peer caught up: served %q, want %q", served, want)
	}
}

// TestBGPNotReadyReachesThePeersServingWatch: host n1 announces a bgp VIP
// of the hosts' network and one of tenant a's attachment, and holds an arp
// VIP; n2, which carries none, reports the three served by n1. When n1's data plane is
// ready for neither load balancer, n1 withdraws them and its heartbeats
// list them as not ready: n2 leaves both out, so that DNS does not answer
// with them; ready again, both are in. n1's arp standing is unchanged
// meanwhile (its heartbeats still say what it holds, and not "not ready
// for any"). A bgp VIP that goes leaves the list.
func TestBGPNotReadyReachesThePeersServingWatch(t *testing.T) {
	lb := func(tenant, name, pool, addr string) *pb.LoadBalancer {
		return &pb.LoadBalancer{Name: name, Tenant: tenant, Vip: &pb.VIPRequest{Pool: pool}, Status: &pb.LoadBalancerStatus{Address: addr}}
	}
	d := desiredState([]*pb.Object{
		api.Wrap(&pb.VIPPool{Name: "fabric", Cidrs: []string{"192.0.2.10/32"}, Mode: ModeBGP}),
		api.Wrap(&pb.VIPPool{Name: "a-bgp", Cidrs: []string{"10.0.5.100/32"}, Mode: ModeBGP, Attachment: "a"}),
		api.Wrap(&pb.VIPPool{Name: "lan", Cidrs: []string{"192.0.2.20/32"}, Mode: ModeARP}),
		api.Wrap(lb("a", "web", "fabric", "192.0.2.10")), api.Wrap(lb("a", "api", "a-bgp", "10.0.5.100")),
		api.Wrap(lb("b", "web", "lan", "192.0.2.20")),
	})
	fabric, private, lan := netip.MustParseAddr("192.0.2.10"), netip.MustParseAddr("10.0.5.100"), netip.MustParseAddr("192.0.2.20")
	host := func(id, peer string) *Manager {
		m := &Manager{cfg: Config{NodeID: id, HeartbeatInterval: 20 * time.Millisecond}, dead: 100 * time.Millisecond,
			log: slog.New(slog.DiscardHandler)}
		m.loop.init()
		m.loop.members = map[string]member{peer: {}}
		m.loop.lastTrigger = time.Now().Add(time.Hour) // sends no heartbeats
		m.loop.want = &d
		return m
	}
	now := time.Now()
	n1 := host("n1", "n2")
	n1.beats = newBeatSender(n1)
	n1.arrivals.Store(&map[string]*peerArrival{})
	n1.key = testKey
	n1.loop.eligible = true
	n1.loop.heldARP = []netip.Addr{lan}
	n1.ready, n1.haveReady, n1.readyAll = map[string]string{"a/web": "", "a/api": "", "b/web": ""}, true, true
	n1.takeReadiness(nil)

	n2 := host("n2", "n1")
	for vs := range d.VIPs.All() {
		n2.loop.records[vs.Addr] = &record{spec: vs}
	}
	var served map[netip.Addr][]string
	n2.SetServingWatch(func(m map[netip.Addr][]string) { served = m })
	seq := uint64(0)
	beat := func() *heartbeat {
		t.Helper()
		seq++
		now = now.Add(20 * time.Millisecond)
		n1.receive(received{hb: &heartbeat{ID: "n2", Incarnation: 1, Seq: seq, Eligible: true, Holdings: true, HoldingSent: true,
			ReadsPartly: true, PartlySent: true, ReadsTenants: true}, at: now})
		n1.planBeats(now)
		p := n1.beats.plan.Load()
		d := p.to[0]
		b := p.hb.appendTo(nil, d.withHolding, d.withPartly, d.withTenants)
		hb, err := parseHeartbeat(append(b, sign(testKey, b)...), testKey)
		if err != nil {
			t.Fatal(err)
		}
		if hb.NotReadyAll || !slices.Equal(hb.Holding, []netip.Addr{lan}) || !hb.TenantsSent {
			t.Fatalf("n1's heartbeat: not ready for any %t, holds %v, sets sent %t; want its arp VIP held and the sets sent", hb.NotReadyAll, hb.Holding, hb.TenantsSent)
		}
		hb.Seq = seq
		n2.receive(received{hb: hb, at: now})
		n2.publishServing(n2.view(now), false)
		return hb
	}
	// setReady changes n1's readiness as the data plane does, and checks
	// the list kept up to date against one recomputed.
	setReady := func(why string, lbs ...string) {
		t.Helper()
		n1.mu.Lock()
		n1.readyDelta = map[string]bool{}
		for _, l := range lbs {
			n1.readyDelta[l] = true
			n1.ready[l] = why
		}
		n1.mu.Unlock()
		n1.takeReadiness(nil)
		var again readiness
		again.ready, again.have = n1.loop.ready.ready, true
		again.recompute(n1.loop.want)
		if !slices.Equal(again.bgpNotReady, n1.loop.ready.bgpNotReady) {
			t.Fatalf("bgp not-ready list %v, recomputed %v", n1.loop.ready.bgpNotReady, again.bgpNotReady)
		}
	}
	check := func(what string, want map[netip.Addr][]string) {
		t.Helper()
		if !maps.EqualFunc(served, want, slices.Equal) {
			t.Errorf("%s: served %q, want %q", what, served, want)
		}
	}
	if hb := beat(); len(hb.NotReady) != 0 {
		t.Fatalf("n1 ready for every VIP lists %v as not ready", hb.NotReady)
	}
	check("n1 announces both", map[netip.Addr][]string{fabric: nil, private: {"a"}, lan: nil})

	setReady("listener 192.0.2.10:443: address already in use", "a/web")
	setReady("not compiled: over the tenant's budget", "a/api")
	if hb := beat(); !slices.Equal(hb.NotReady, []netip.Addr{private, fabric}) {
		t.Errorf("n1 not ready for its bgp VIPs lists %v as not ready, want %v", hb.NotReady, []netip.Addr{private, fabric})
	}
	check("n1 is ready for neither", map[netip.Addr][]string{lan: nil})

	setReady("", "a/api")
	beat()
	check("n1 is ready for the tenant's VIP again", map[netip.Addr][]string{private: {"a"}, lan: nil})
	setReady("", "a/web")
	beat()
	check("ready for both again", map[netip.Addr][]string{fabric: nil, private: {"a"}, lan: nil})

	// A problem of n1's whole bgp side (eligible's bgp standing: its
	// state too old, its bgp interface down): it withdraws every bgp VIP
	// while its data plane is ready for them, and stays eligible for arp.
	n1.loop.bgpProblem = "interface bgp0 is down"
	if hb := beat(); !slices.Equal(hb.NotReady, []netip.Addr{private, fabric}) || !hb.Eligible {
		t.Errorf("n1 with its bgp side down lists %v as not ready (eligible %t), want %v and eligible", hb.NotReady, hb.Eligible, []netip.Addr{private, fabric})
	}
	check("n1's bgp side is down", map[netip.Addr][]string{lan: nil})
	n1.loop.bgpProblem = ""
	beat()
	check("n1's bgp side is up again", map[netip.Addr][]string{fabric: nil, private: {"a"}, lan: nil})

	// Not ready for the fabric VIP again, which then goes from the state.
	setReady("no listener", "a/web")
	if hb := beat(); !slices.Equal(hb.NotReady, []netip.Addr{fabric}) {
		t.Fatalf("not ready %v, want %v", hb.NotReady, []netip.Addr{fabric})
	}
	d2, touched := d.withLoadBalancers([]lbChange{{prev: lb("a", "web", "fabric", "192.0.2.10")}})
	n1.loop.want = d2
	n1.takeReadiness(setOfAddrs(touched))
	if got := n1.loop.ready.bgpNotReady; len(got) != 0 {
		t.Fatalf("bgp not-ready list %v once the VIP is gone, want none", got)
	}
	if got := n1.loop.bgpVIPs(); !slices.Equal(got, []netip.Addr{private}) {
		t.Fatalf("every bgp VIP, once the fabric one is gone: %v, want %v", got, []netip.Addr{private})
	}
}
