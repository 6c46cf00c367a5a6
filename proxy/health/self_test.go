package health

import (
	"fmt"
	"net/netip"
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
