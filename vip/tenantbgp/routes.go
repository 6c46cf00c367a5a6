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

var _ Installer = (*kernelRoutes)(nil)

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
