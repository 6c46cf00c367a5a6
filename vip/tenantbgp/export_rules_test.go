package tenantbgp

import (
	"context"
	"maps"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	gobgpapi "github.com/osrg/gobgp/v4/api"

	pb "github.com/teapot-lb/teapot-lb/api/proto/teapotv1"
)

// A change of one tenant's VIPs soft resets that tenant's sessions only:
// another tenant's, whose VIPs, next hop and sessions stay, are not
// sent their table again for it. A tenant leaving or coming has its
// sessions reset (what it was sent is withdrawn, what it is now sent
// goes).
func TestPolicyChangeResetsTheChangedTenantsSessionsOnly(t *testing.T) {
	t.Parallel()
	ad := netip.MustParseAddr
	a1, a2, b1 := ad("169.254.77.1"), ad("169.254.77.2"), ad("169.254.77.3")
	old := map[string]exportPlan{
		"a": {nh: ad("10.0.0.2"), vips: []netip.Addr{ad("10.0.1.100")}, neighbors: []netip.Addr{a1, a2}},
		"b": {nh: ad("10.0.0.2"), vips: []netip.Addr{ad("10.0.1.100")}, neighbors: []netip.Addr{b1}},
	}
	moved := map[string]exportPlan{
		"a": {nh: ad("10.0.0.2"), vips: []netip.Addr{ad("10.0.1.100"), ad("10.0.1.101")}, neighbors: []netip.Addr{a1, a2}},
		"b": old["b"],
	}
	if got := changedNeighbors(old, moved); !slices.Equal(got, []netip.Addr{a1, a2}) {
		t.Errorf("a's VIP added: reset %v, want a's sessions %v only", got, []netip.Addr{a1, a2})
	}
	if got := changedNeighbors(old, old); len(got) != 0 {
		t.Errorf("no change: reset %v", got)
	}
	gone := map[string]exportPlan{"b": old["b"]}
	if got := changedNeighbors(old, gone); !slices.Equal(got, []netip.Addr{a1, a2}) {
		t.Errorf("a's VIPs all withdrawn: reset %v, want %v", got, []netip.Addr{a1, a2})
	}
	if got := changedNeighbors(gone, old); !slices.Equal(got, []netip.Addr{a1, a2}) {
		t.Errorf("a's VIPs back: reset %v, want %v", got, []netip.Addr{a1, a2})
	}
	b2 := map[string]exportPlan{"a": old["a"], "b": {nh: ad("10.0.0.2"), vips: old["b"].vips, neighbors: []netip.Addr{a2}}}
	if got := changedNeighbors(old, b2); !slices.Equal(got, []netip.Addr{a2, b1}) {
		t.Errorf("b's session moved: reset %v, want %v", got, []netip.Addr{a2, b1})
	}
}

// A new attached session never takes a loopback address the export
// policy in place names for a tenant: until the next policy is in place,
// gobgp would send that tenant's VIPs to whichever session has it.
func TestLoopbackNamedByThePolicyIsNotReused(t *testing.T) {
	t.Parallel()
	x := loopbackBase
	r := &Relay{sessions: map[netip.Addr]*session{}, retiring: map[netip.Addr]*retiring{}}
	w := &world{peers: map[peerKey]string{}}
	if got, err := loopbackFor(func(a netip.Addr) bool { return r.loopbackTaken(w, a) }); err != nil || got != x {
		t.Fatalf("first loopback %v, %v; want %v", got, err, x)
	}
	// Tenant a's session at x is gone; the policy in place still names x.
	r.exp.plan = map[string]exportPlan{"a": {nh: netip.MustParseAddr("10.0.0.2"), vips: []netip.Addr{netip.MustParseAddr("10.0.1.100")}, neighbors: []netip.Addr{x}}}
	got, err := loopbackFor(func(a netip.Addr) bool { return r.loopbackTaken(w, a) })
	if err != nil || got == x {
		t.Fatalf("a new session took %v (%v), which the policy names for tenant a", got, err)
	}
	r.exp.plan = nil
	if got, _ := loopbackFor(func(a netip.Addr) bool { return r.loopbackTaken(w, a) }); got != x {
		t.Fatalf("the policy no longer names %v, yet a new session took %v", x, got)
	}
}

// A change of one tenant's part of the plan makes that tenant's
// statement anew and keeps the others': another tenant is not charged
// for it, and gobgp holds one statement per tenant afterwards.
func TestPolicyChangeKeepsOtherTenantsStatements(t *testing.T) {
	// Not parallel: gobgp's StartBgp writes package variables.
	r, err := New(Config{ASN: 65001, RouterID: "127.0.0.1", Routes: &memRoutes{}, NodeID: "lb1"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	ctx := context.Background()
	ad := netip.MustParseAddr
	plan := map[string]exportPlan{
		"a": {nh: ad("10.0.0.2"), vips: []netip.Addr{ad("10.0.1.100")}, neighbors: []netip.Addr{ad("169.254.77.1")}},
		"b": {nh: ad("10.0.0.2"), vips: []netip.Addr{ad("10.0.1.100")}, neighbors: []netip.Addr{ad("169.254.77.2")}},
	}
	set := func(p map[string]exportPlan) {
		t.Helper()
		if err := r.setExportPolicy(ctx, p); err != nil {
			t.Fatal(err)
		}
		r.exp.plan = p
	}
	set(plan)
	first := maps.Clone(r.exp.names)
	next := maps.Clone(plan)
	next["a"] = exportPlan{nh: ad("10.0.0.2"), vips: []netip.Addr{ad("10.0.1.100"), ad("10.0.1.101")}, neighbors: plan["a"].neighbors}
	set(next)
	if r.exp.names["b"] != first["b"] {
		t.Errorf("a's change made b's statement anew: %v, was %v", r.exp.names["b"], first["b"])
	}
	if r.exp.names["a"] == first["a"] {
		t.Errorf("a's change kept a's statement %v", first["a"])
	}
	var pols []string
	if err := r.srv.ListPolicy(ctx, &gobgpapi.ListPolicyRequest{}, func(p *gobgpapi.Policy) { pols = append(pols, p.GetName()) }); err != nil {
		t.Fatal(err)
	}
	slices.Sort(pols)
	want := []string{"local-only", r.exp.names["a"].policy, r.exp.names["b"].policy}
	slices.Sort(want)
	if !slices.Equal(pols, want) {
		t.Errorf("gobgp holds policies %v, want %v", pols, want)
	}
}

// A tenant whose VIPs have no session of their family here is not
// observed as announced to: it is told why, and since when.
func TestVIPsWithoutASessionAreNotObservedAnnounced(t *testing.T) {
	t.Parallel()
	ad := netip.MustParseAddr
	since := time.Unix(1700000000, 0)
	r := &Relay{}
	r.exp.since = since
	r.exp.plan = map[string]exportPlan{
		"a": {nh: ad("10.0.0.2"), vips: []netip.Addr{ad("10.0.1.100")}},
		"b": {nh: ad("10.0.0.2"), vips: []netip.Addr{ad("10.0.1.100")}, neighbors: []netip.Addr{ad("169.254.77.1")}},
	}
	a, b := &pb.TenantBGPObservation{}, &pb.TenantBGPObservation{}
	r.observeExports("a", a)
	r.observeExports("b", b)
	if len(a.GetAnnounced()) != 0 || !strings.Contains(a.GetAnnounceError(), "1 VIPs wait for a session with one of the tenant's IPv4 speakers") ||
		!a.GetAnnounceSince().AsTime().Equal(since) {
		t.Errorf("a without a session: announced %v, error %q, since %v", a.GetAnnounced(), a.GetAnnounceError(), a.GetAnnounceSince())
	}
	if len(b.GetAnnounced()) != 1 || b.GetAnnounceError() != "" {
		t.Errorf("b: announced %v, error %q", b.GetAnnounced(), b.GetAnnounceError())
	}
	if got := announcedOf(r.exp.plan); len(got) != 1 || got["b"] == nil {
		t.Errorf("announcedOf %v, want b's only", got)
	}
}
