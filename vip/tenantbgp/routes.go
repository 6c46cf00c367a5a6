package tenantbgp

import (
	"fmt"
	"net"
	"net/netip"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// RouteProtocol marks the routes the relay installs in the kernel
// (rtm_protocol; `ip route show proto 196` lists them). The relay owns
// every route so marked: it removes those it did not install when it
// starts, and all of them when it stops.
const RouteProtocol = 196

// kernelRoutes installs routes in the kernel's main table.
type kernelRoutes struct {
	have map[netip.Prefix]netip.Addr
}

var (
	_ Installer = (*kernelRoutes)(nil)
	_ rereader  = (*kernelRoutes)(nil)
)

// newKernelRoutes removes the routes a previous run left behind.
func newKernelRoutes() (*kernelRoutes, error) {
	k := &kernelRoutes{have: map[netip.Prefix]netip.Addr{}}
	if err := k.Close(); err != nil {
		return nil, fmt.Errorf("remove the tenant routes of a previous run: %w", err)
	}
	return k, nil
}

// Set makes the relay's routes in the kernel exactly routes.
func (k *kernelRoutes) Set(routes map[netip.Prefix]netip.Addr) map[netip.Prefix]error {
	failed := map[netip.Prefix]error{}
	for p, nh := range k.have {
		if want, ok := routes[p]; ok && want == nh {
			continue
		}
		if err := netlink.RouteDel(kernelRoute(p, nh)); err != nil && err != unix.ESRCH {
			failed[p] = err
			continue
		}
		delete(k.have, p)
	}
	for p, nh := range routes {
		if _, ok := k.have[p]; ok {
			continue
		}
		if err := netlink.RouteReplace(kernelRoute(p, nh)); err != nil {
			failed[p] = err
			continue
		}
		k.have[p] = nh
	}
	return failed
}

// Reread converges the table on routes after reading the routes marked
// RouteProtocol from it (convergeTable): one removed or changed by hand
// is put back, one marked so by hand removed. Set trusts what it
// installed before; the relay rereads every SpaceResync. When it cannot
// read the table it changes nothing and returns why.
func (k *kernelRoutes) Reread(routes map[netip.Prefix]netip.Addr) (map[netip.Prefix]error, error) {
	have, failed, err := convergeTable(routes)
	if err != nil {
		return nil, err
	}
	k.have = have
	return failed, nil
}

// convergeTable makes the routes marked RouteProtocol in the main table
// of the calling thread's namespace exactly routes: it reads them,
// removes those not wanted and adds those missing. It returns the routes
// in place after (with those it could not remove, so that the next Set
// removes them), those it could not remove or add, and an error when it
// could not read the table.
func convergeTable(routes map[netip.Prefix]netip.Addr) (map[netip.Prefix]netip.Addr, map[netip.Prefix]error, error) {
	failed := map[netip.Prefix]error{}
	have := make(map[netip.Prefix]netip.Addr, len(routes))
	stale := map[netip.Prefix]netip.Addr{} // not wanted, and not removed
	for _, fam := range []int{netlink.FAMILY_V4, netlink.FAMILY_V6} {
		rs, err := netlink.RouteListFiltered(fam, &netlink.Route{Protocol: RouteProtocol, Table: unix.RT_TABLE_MAIN},
			netlink.RT_FILTER_PROTOCOL|netlink.RT_FILTER_TABLE)
		if err != nil {
			return nil, nil, err
		}
		for i := range rs {
			p, nh, ok := routeOf(&rs[i])
			want, wanted := routes[p]
			if _, dup := have[p]; !ok || !wanted || want != nh || dup {
				if err := netlink.RouteDel(&rs[i]); err != nil && err != unix.ESRCH && ok {
					failed[p] = err
					stale[p] = nh
				}
				continue
			}
			have[p] = nh
		}
	}
	for p, nh := range routes {
		if _, ok := have[p]; ok {
			continue
		}
		if err := netlink.RouteReplace(kernelRoute(p, nh)); err != nil {
			failed[p] = err
			continue
		}
		delete(failed, p) // its old route, which could not be removed, is replaced
		have[p] = nh
	}
	for p, nh := range stale {
		if _, ok := have[p]; !ok {
			have[p] = nh
		}
	}
	return have, failed, nil
}

// Close removes every route marked RouteProtocol.
func (k *kernelRoutes) Close() error {
	var first error
	for _, fam := range []int{netlink.FAMILY_V4, netlink.FAMILY_V6} {
		rs, err := netlink.RouteListFiltered(fam, &netlink.Route{Protocol: RouteProtocol, Table: unix.RT_TABLE_MAIN},
			netlink.RT_FILTER_PROTOCOL|netlink.RT_FILTER_TABLE)
		if err != nil {
			first = cmpErr(first, err)
			continue
		}
		for i := range rs {
			if err := netlink.RouteDel(&rs[i]); err != nil && err != unix.ESRCH {
				first = cmpErr(first, err)
			}
		}
	}
	clear(k.have)
	return first
}

func kernelRoute(p netip.Prefix, nh netip.Addr) *netlink.Route {
	return &netlink.Route{
		Dst:      &net.IPNet{IP: p.Addr().AsSlice(), Mask: net.CIDRMask(p.Bits(), p.Addr().BitLen())},
		Gw:       nh.AsSlice(),
		Protocol: RouteProtocol,
		Table:    unix.RT_TABLE_MAIN,
	}
}

func cmpErr(first, err error) error {
	if first != nil {
		return first
	}
	return err
}
