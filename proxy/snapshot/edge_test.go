package snapshot

import (
	"fmt"
	"net/netip"
	"testing"
)

// Allow gives the same answers whether a set is scanned (few prefixes)
// or looked up by prefix length (many), for IPv4, IPv6 and IPv4-mapped
// clients, and allocates nothing.
func TestSourcesAllow(t *testing.T) {
	for _, pad := range []int{0, 40} {
		allowed := []netip.Prefix{netip.MustParsePrefix("192.0.2.0/24"), netip.MustParsePrefix("2001:db8::/32"), netip.MustParsePrefix("198.51.100.7/32")}
		for i := range pad {
			allowed = append(allowed, netip.MustParsePrefix(fmt.Sprintf("10.%d.0.0/16", i)), netip.MustParsePrefix(fmt.Sprintf("fd00:%x::/48", i)))
		}
		s := NewSources(allowed, []netip.Prefix{netip.MustParsePrefix("192.0.2.128/25")})
		for addr, want := range map[string]bool{
			"192.0.2.1": true, "192.0.2.200": false, "::ffff:192.0.2.1": true, "198.51.100.7": true, "198.51.100.8": false,
			"2001:db8:1::9": true, "2001:db9::1": false, "203.0.113.1": false,
		} {
			if got := s.Allow(netip.MustParseAddr(addr)); got != want {
				t.Errorf("pad %d: Allow(%s) = %v, want %v", pad, addr, got, want)
			}
		}
		a := netip.MustParseAddr("2001:db8:1::9")
		if n := testing.AllocsPerRun(100, func() { s.Allow(a) }); n != 0 {
			t.Errorf("pad %d: %v allocations", pad, n)
		}
	}
	if !(*Sources)(nil).Allow(netip.MustParseAddr("203.0.113.1")) {
		t.Error("nil sources refused")
	}
	deny := NewSources(nil, []netip.Prefix{netip.MustParsePrefix("203.0.113.0/24")})
	if deny.Allow(netip.MustParseAddr("203.0.113.1")) || !deny.Allow(netip.MustParseAddr("192.0.2.1")) {
		t.Error("denied only")
	}
}
