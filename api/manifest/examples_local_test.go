package manifest

import (
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// onMachine reports whether a host trying the examples keeps traffic to p
// on the machine: loopback, or a documentation range nothing routes.
func onMachine(p netip.Prefix) bool {
	for _, local := range []string{"127.0.0.0/8", "::1/128", "192.0.2.0/24", "198.51.100.0/24", "203.0.113.0/24", "2001:db8::/32"} {
		l := netip.MustParsePrefix(local)
		if l.Bits() <= p.Bits() && l.Contains(p.Addr()) {
			return true
		}
	}
	return false
}

// The examples can be tried on one machine: every member and tenant
// network is on loopback (or in a documentation range), so health checks
// never dial a host of whatever network the machine is on, and no two
// files' VIP pools overlap each other or the README tour's pool, so each
// applies beside the others.
func TestExamplesStayOnTheMachine(t *testing.T) {
	t.Parallel()
	files, err := filepath.Glob("../../examples/*.yaml")
	if err != nil || len(files) < 8 {
		t.Fatalf("examples: %v %v", files, err)
	}
	type owned struct {
		p    netip.Prefix
		file string
	}
	pools := []owned{{netip.MustParsePrefix("127.0.10.0/28"), "README.md (the tour)"}}
	for _, f := range files {
		fh, err := os.Open(f)
		if err != nil {
			t.Fatal(err)
		}
		objs, err := Decode(fh, f)
		fh.Close()
		if err != nil {
			t.Fatal(err)
		}
		name := filepath.Base(f)
		for _, o := range objs {
			for _, n := range o.GetTenant().GetNetworks() {
				if p := netip.MustParsePrefix(n); !onMachine(p) {
					t.Errorf("%s: tenant %s has network %s off this machine", name, o.GetTenant().GetName(), n)
				}
			}
			for pool, bp := range o.GetLoadBalancer().GetPools() {
				for _, m := range bp.GetMembers() {
					ap, err := netip.ParseAddrPort(m.GetAddress())
					if err != nil {
						t.Fatalf("%s: member %q: %v", name, m.GetAddress(), err)
					}
					if !onMachine(netip.PrefixFrom(ap.Addr(), ap.Addr().BitLen())) {
						t.Errorf("%s: pool %s has member %s off this machine", name, pool, m.GetAddress())
					}
				}
			}
			for _, c := range o.GetVipPool().GetCidrs() {
				var ps []netip.Prefix
				if lo, hi, ok := strings.Cut(c, "-"); ok {
					a, b := netip.MustParseAddr(lo), netip.MustParseAddr(hi)
					for x := a; x.Compare(b) <= 0; x = x.Next() {
						ps = append(ps, netip.PrefixFrom(x, x.BitLen()))
					}
				} else {
					ps = append(ps, netip.MustParsePrefix(c))
				}
				for _, p := range ps {
					if !onMachine(p) {
						t.Errorf("%s: pool %s has %s off this machine", name, o.GetVipPool().GetName(), p)
					}
					for _, other := range pools {
						if other.p.Overlaps(p) {
							t.Errorf("%s: pool %s (%s) overlaps a pool of %s (%s)", name, o.GetVipPool().GetName(), c, other.file, other.p)
						}
					}
				}
				for _, p := range ps {
					pools = append(pools, owned{p, name})
				}
			}
		}
	}
}
