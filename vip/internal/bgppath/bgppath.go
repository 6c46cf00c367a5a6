// Package bgppath builds the gobgp paths this host originates: a prefix
// with next hop self, which the speaker (or an export policy) rewrites to
// the session's address.
package bgppath

import (
	"net/netip"

	"github.com/osrg/gobgp/v4/pkg/apiutil"
	"github.com/osrg/gobgp/v4/pkg/packet/bgp"
)

// Self is the gobgp path of prefix p, origin IGP, next hop self, with
// the extra attributes; withdraw makes it a withdrawal.
func Self(p netip.Prefix, withdraw bool, extra ...bgp.PathAttributeInterface) (*apiutil.Path, error) {
	nlri, err := bgp.NewIPAddrPrefix(p)
	if err != nil {
		return nil, err
	}
	attrs := []bgp.PathAttributeInterface{bgp.NewPathAttributeOrigin(bgp.BGP_ORIGIN_ATTR_TYPE_IGP)}
	fam := bgp.RF_IPv4_UC
	if p.Addr().Is4() {
		nh, err := bgp.NewPathAttributeNextHop(netip.IPv4Unspecified())
		if err != nil {
			return nil, err
		}
		attrs = append(attrs, nh)
	} else {
		fam = bgp.RF_IPv6_UC
		mp, err := bgp.NewPathAttributeMpReachNLRI(fam, []bgp.PathNLRI{{NLRI: nlri}}, netip.IPv6Unspecified())
		if err != nil {
			return nil, err
		}
		attrs = append(attrs, mp)
	}
	attrs = append(attrs, extra...)
	return &apiutil.Path{Family: fam, Nlri: nlri, Attrs: attrs, Withdrawal: withdraw}, nil
}
