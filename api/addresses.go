package api

import (
	"net/netip"

	pb "github.com/teapot-lb/teapot-lb/api/proto/teapotv1"
)

// StatusAddresses returns every address allocated to lb as stored:
// status.addresses when set (a load balancer with vip.families), else
// status.address; nil when it has none.
func StatusAddresses(lb *pb.LoadBalancer) []string {
	if as := lb.GetStatus().GetAddresses(); len(as) > 0 {
		return as
	}
	if a := lb.GetStatus().GetAddress(); a != "" {
		return []string{a}
	}
	return nil
}

// StatusAddrs is StatusAddresses parsed, skipping malformed entries.
func StatusAddrs(lb *pb.LoadBalancer) []netip.Addr {
	ss := StatusAddresses(lb)
	if len(ss) == 0 {
		return nil
	}
	out := make([]netip.Addr, 0, len(ss))
	for _, s := range ss {
		if a, err := netip.ParseAddr(s); err == nil {
			out = append(out, a)
		}
	}
	return out
}

// statusAddrOf returns lb's allocated address of family ("ipv4",
// "ipv6"), if it has one.
func statusAddrOf(lb *pb.LoadBalancer, family string) (netip.Addr, bool) {
	for _, a := range StatusAddrs(lb) {
		if familyOK(family, a) {
			return a, true
		}
	}
	return netip.Addr{}, false
}

// holdsAny reports whether lb holds a.
func holdsAny(lb *pb.LoadBalancer, a netip.Addr) bool {
	for _, b := range StatusAddrs(lb) {
		if b == a {
			return true
		}
	}
	return false
}
