package health

import (
	"fmt"
	"net/netip"
	"slices"
	"testing"
)

// TestChangeSelfLooksAtItsAddressesOnly: with 10,000 targets, a listener
// opened at one member's address and another closed look at the targets
// at those two addresses, not at the 10,000; the first is never usable
// from then on, the second is again, and a target acquired later at a
// listened address starts out as the host's own.
func TestChangeSelfLooksAtItsAddressesOnly(t *testing.T) {
	const n = 10000
	r := NewRegistry(Options{})
	defer r.Close()
	addr := func(i int) netip.AddrPort {
		return netip.AddrPortFrom(netip.AddrFrom4([4]byte{10, byte(i >> 16), byte(i >> 8), byte(i)}), 80)
	}
	targets := make([]*Target, n)
	for i := range targets {
		targets[i] = r.AcquireFor(fmt.Sprintf("t%d", i%7), addr(i), nil)
	}
	// The last one shares its address with a target of another tenant.
	twin := r.AcquireFor("other", addr(n-1), nil)
	r.SetSelf(map[netip.AddrPort]bool{addr(5): true})
	if targets[5].Healthy() || !targets[6].Healthy() {
		t.Fatalf("after SetSelf: target 5 healthy %v, 6 healthy %v; want false, true", targets[5].Healthy(), targets[6].Healthy())
	}

	r.mu.Lock()
	r.selfLooks = 0
	r.mu.Unlock()
	// A listener opens at target n-1's address, the one at target 5's
	// closes.
	r.ChangeSelf([]netip.AddrPort{addr(n - 1)}, []netip.AddrPort{addr(5)})
	r.mu.Lock()
	looks := r.selfLooks
	r.mu.Unlock()
	if looks != 3 {
		t.Errorf("ChangeSelf of two addresses looked at %d targets, want the 3 at them", looks)
	}
	for _, c := range []struct {
		name    string
		target  *Target
		healthy bool
	}{
		{"at the closed listener", targets[5], true},
		{"at the opened listener", targets[n-1], false},
		{"another tenant's at the opened listener", twin, false},
		{"elsewhere", targets[6], true},
	} {
		if got := c.target.Healthy(); got != c.healthy {
			t.Errorf("target %s: healthy %v, want %v", c.name, got, c.healthy)
		}
	}
	if late := r.AcquireFor("late", addr(n-1), nil); late.Healthy() {
		t.Error("a target acquired at a listened address is healthy")
	}
}

// TestSelfChangesAreReported: SetSelf and ChangeSelf report each target
// whose health they change to OnChange, once, in its new state, and no
// other: whoever follows member health through OnChange sees a member
// become the host's own listener and stop being it.
func TestSelfChangesAreReported(t *testing.T) {
	type change struct {
		addr    netip.AddrPort
		healthy bool
	}
	var got []change
	r := NewRegistry(Options{OnChange: func(tg *Target, healthy bool, _ string) {
		got = append(got, change{tg.Addr(), healthy})
	}})
	defer r.Close()
	a := netip.MustParseAddrPort("192.0.2.1:80")
	b := netip.MustParseAddrPort("192.0.2.2:80")
	c := netip.MustParseAddrPort("192.0.2.3:80")
	r.AcquireFor("t", a, nil)
	r.AcquireFor("t", b, nil)
	r.AcquireFor("t", c, nil)
	take := func(step string, want ...change) {
		t.Helper()
		slices.SortFunc(got, func(x, y change) int { return x.addr.Compare(y.addr) })
		if !slices.Equal(got, want) {
			t.Errorf("%s: OnChange got %v, want %v", step, got, want)
		}
		got = nil
	}
	r.SetSelf(map[netip.AddrPort]bool{a: true})
	take("SetSelf(a)", change{a, false})
	r.SetSelf(map[netip.AddrPort]bool{a: true})
	take("SetSelf(a) again")
	r.ChangeSelf([]netip.AddrPort{b}, []netip.AddrPort{a})
	take("ChangeSelf(+b, -a)", change{a, true}, change{b, false})
	r.ChangeSelf([]netip.AddrPort{b}, nil)
	take("ChangeSelf(+b) again")
	r.SetSelf(nil)
	take("SetSelf(nil)", change{b, true})
}
