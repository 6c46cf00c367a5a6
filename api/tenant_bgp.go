package api

import (
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	pb "github.com/teapot-lb/teapot-lb/api/proto/teapotv1"
)

// Bounds of a tenant's BGP peering (Tenant.bgp).
const (
	// MaxTenantBGPPeers bounds bgp.peers: every LB host holds one session
	// per peer.
	MaxTenantBGPPeers = 16
	// DefaultTenantBGPMaxPrefixes is bgp.maxPrefixes when it is 0, and
	// MaxTenantBGPMaxPrefixes the most an operator may set: each prefix a
	// session holds costs every LB host memory in its speaker.
	DefaultTenantBGPMaxPrefixes = 1000
	MaxTenantBGPMaxPrefixes     = 100000
	// MaxBGPPasswordLen is the longest TCP MD5 key Linux takes.
	MaxBGPPasswordLen = 80
	// DefaultTenantBGPUpdateRate is bgp.maxUpdatesPerSecond when it is 0,
	// and MaxTenantBGPUpdateRate the most an operator may set: each route
	// a session announces or withdraws, and each UPDATE message it sends,
	// costs every LB host's speaker and relay work.
	DefaultTenantBGPUpdateRate = 100
	MaxTenantBGPUpdateRate     = 10000
	// MaxTenantBGPUpdateBurst bounds the burst of UPDATE messages beyond
	// the rate: every host takes in and judges what a session sends as
	// fast as it comes, so a burst of 100,000 messages (a table of that
	// many routes, one a message) cost each host of a small machine 10 s
	// of CPU in half a minute, enough that its own BFD sessions with the
	// fabric went down.
	MaxTenantBGPUpdateBurst = 1000
	// DefaultTenantBGPTotalSessions is how many sessions' maxPrefixes the
	// tenant's sessions together may hold on a host by default
	// (bgp.maxPrefixesTotal 0), and MaxTenantBGPMaxPrefixesTotal the most
	// they may ever hold: each route a host holds costs it memory (about
	// 2.5-3 KB) whichever session it came from.
	DefaultTenantBGPTotalSessions = 4
	MaxTenantBGPMaxPrefixesTotal  = 200000
	// DefaultTenantBFDInterval and DefaultTenantBFDMultiplier are a
	// tenant's bgp.bfd timers when left 0, as the VIP speaker's.
	// MinTenantBFDInterval is the shortest min-tx or min-rx: every host
	// sends one packet per session each min-tx and takes one each min-rx,
	// about 0.2 ms of CPU for the pair on a loaded 2-core host
	// (vip/bfd BenchmarkSessionCPU), so a tenant with 16 speakers at
	// 100ms costs each host about 3.5% of a core; at BIRD's least of 10ms
	// it would be a third of a core per tenant. MaxTenantBFDInterval is the longest. A multiplier of 1 resets
	// the BGP session (every host then takes the tenant's table again) on
	// a single lost packet, so it starts at MinTenantBFDMultiplier.
	DefaultTenantBFDInterval   = 300 * time.Millisecond
	DefaultTenantBFDMultiplier = 3
	MinTenantBFDInterval       = 100 * time.Millisecond
	MaxTenantBFDInterval       = time.Minute
	MinTenantBFDMultiplier     = 2
)

// TenantBFD is the BFD timers of b's sessions with the defaults filled
// in: min-tx, min-rx and the multiplier; ok is false without bgp.bfd.
func TenantBFD(b *pb.TenantBGP) (minTx, minRx time.Duration, mult uint8, ok bool) {
	f := b.GetBfd()
	if f == nil {
		return 0, 0, 0, false
	}
	minTx, minRx, mult = DefaultTenantBFDInterval, DefaultTenantBFDInterval, DefaultTenantBFDMultiplier
	if d := f.GetMinTx(); d != nil && d.AsDuration() > 0 {
		minTx = d.AsDuration()
	}
	if d := f.GetMinRx(); d != nil && d.AsDuration() > 0 {
		minRx = d.AsDuration()
	}
	if m := f.GetMultiplier(); m != 0 {
		mult = uint8(min(m, 255))
	}
	return minTx, minRx, mult, true
}

// checkTenantBFDPeers refuses bgp.bfd when a speaker is not on the
// prefix of every host's address in the tenant's network: BFD is single
// hop (RFC 5881), and a packet that comes through attachment.gateway
// arrives with TTL 254, which every host drops. Malformed peers and hosts
// are refused by their own checks.
func checkTenantBFDPeers(ck *checker, t *pb.Tenant) {
	var hosts []string
	for id := range t.GetAttachment().GetHosts() {
		hosts = append(hosts, id)
	}
	slices.Sort(hosts)
	for i, s := range t.GetBgp().GetPeers() {
		a, err := netip.ParseAddr(s)
		if err != nil {
			continue
		}
		for _, id := range hosts {
			p, err := netip.ParsePrefix(t.GetAttachment().GetHosts()[id])
			if err != nil || p.Addr().Is4() != a.Is4() || p.Contains(a) {
				continue
			}
			ck.invalidf("bgp.bfd", "bgp.peers[%d] %s is not on the prefix %s of host %s: single-hop BFD needs the speaker on the hosts' segment (its packets must arrive with TTL 255; through attachment.gateway they arrive with 254 and are dropped). Put the speaker on that segment, or leave bfd out", i, a, p.Masked(), id)
			break
		}
	}
}

// checkTenantBFD checks t.bgp.bfd.
func checkTenantBFD(ck *checker, t *pb.Tenant) {
	f := t.GetBgp().GetBfd()
	if f == nil {
		return
	}
	if t.GetAttachment() == nil {
		ck.invalidf("bgp.bfd", "needs attachment: a tenant's BFD runs from inside its namespace on each host, where port 3784 is its own; on the host's own addresses that port is the VIP speaker's BFD with the fabric routers, which would take (or lose) the tenant's packets. Attach the tenant's network, or leave bfd out")
	}
	checkTenantBFDPeers(ck, t)
	for _, d := range []struct {
		field string
		v     *durationpb.Duration
	}{{"bgp.bfd.minTx", f.GetMinTx()}, {"bgp.bfd.minRx", f.GetMinRx()}} {
		if d.v == nil {
			continue
		}
		checkPositive(ck, d.field, d.v)
		if d.v.CheckValid() != nil || d.v.AsDuration() <= 0 {
			continue
		}
		switch iv := d.v.AsDuration(); {
		case iv < MinTenantBFDInterval:
			ck.invalidf(d.field, "%s is shorter than %s: every host sends or reads a packet per speaker each interval, which it spends CPU on for the tenant", iv, MinTenantBFDInterval)
		case iv > MaxTenantBFDInterval:
			ck.invalidf(d.field, "%s is longer than %s", iv, MaxTenantBFDInterval)
		case iv%time.Microsecond != 0:
			ck.invalidf(d.field, "%s is not a whole number of microseconds (BFD's unit)", iv)
		}
	}
	if m := f.GetMultiplier(); m != 0 && (m < MinTenantBFDMultiplier || m > 255) {
		ck.invalidf("bgp.bfd.multiplier", "%d: use %d to 255 (1 would reset the BGP session on one lost packet)", m, MinTenantBFDMultiplier)
	}
}

// TenantBGPMaxPrefixesTotal is the prefixes all the sessions of b may
// hold together on one host.
func TenantBGPMaxPrefixesTotal(b *pb.TenantBGP) uint32 {
	if n := b.GetMaxPrefixesTotal(); n != 0 {
		return n
	}
	return min(DefaultTenantBGPTotalSessions*TenantBGPMaxPrefixes(b), MaxTenantBGPMaxPrefixesTotal)
}

// TenantBGPUpdateRate is the route changes per second one session of b
// may send: the prefixes its UPDATE messages announce and withdraw, an
// UPDATE that carries none (an End-of-RIB, one that changes only
// attributes) counting one. TenantBGPRouteBurst is how many it may send
// at once: the rate and a whole table of maxPrefixes routes, however
// they are packed. TenantBGPUpdateBurst bounds the UPDATE messages at
// the same rate, in bursts of maxPrefixes more, at most
// MaxTenantBGPUpdateBurst: a message costs a host more than a route it
// carries, so a table of more than 1,000 routes sent one a message is
// cut there.
func TenantBGPUpdateRate(b *pb.TenantBGP) uint32 {
	if n := b.GetMaxUpdatesPerSecond(); n != 0 {
		return n
	}
	return DefaultTenantBGPUpdateRate
}

// TenantBGPRouteBurst: see TenantBGPUpdateRate.
func TenantBGPRouteBurst(b *pb.TenantBGP) uint32 {
	return TenantBGPUpdateRate(b) + TenantBGPMaxPrefixes(b)
}

// TenantBGPUpdateBurst: see TenantBGPUpdateRate.
func TenantBGPUpdateBurst(b *pb.TenantBGP) uint32 {
	return TenantBGPUpdateRate(b) + min(TenantBGPMaxPrefixes(b), MaxTenantBGPUpdateBurst)
}

// TenantBGPMaxPrefixes is the prefixes one session of b may announce.
func TenantBGPMaxPrefixes(b *pb.TenantBGP) uint32 {
	if n := b.GetMaxPrefixes(); n != 0 {
		return n
	}
	return DefaultTenantBGPMaxPrefixes
}

// TenantBGPMaxLength is the most specific prefix length of a's family
// that b accepts.
func TenantBGPMaxLength(b *pb.TenantBGP, v6 bool) int {
	if v6 {
		if n := b.GetMaxPrefixLength6(); n != 0 {
			return int(n)
		}
		return 128
	}
	if n := b.GetMaxPrefixLength(); n != 0 {
		return int(n)
	}
	return 32
}

// checkTenantBGP checks t.bgp against the tenant's well-formed networks.
func checkTenantBGP(ck *checker, t *pb.Tenant, nets []netip.Prefix) {
	b := t.GetBgp()
	if b == nil {
		return
	}
	if b.GetAsn() == 0 {
		ck.invalidf("bgp.asn", "is required: the autonomous system number of the tenant's speakers")
	}
	if len(b.GetPeers()) == 0 {
		ck.invalidf("bgp.peers", "is empty: list the addresses of the tenant's speakers, or leave bgp out")
	}
	if tooMany(ck, "bgp.peers", len(b.GetPeers()), MaxTenantBGPPeers) {
		return
	}
	seen := map[netip.Addr]int{}
	for i, s := range b.GetPeers() {
		f := fmt.Sprintf("bgp.peers[%d]", i)
		if tooLong(ck, f, s, MaxAddressLen) {
			continue
		}
		a, err := netip.ParseAddr(s)
		switch {
		case err != nil || a.Zone() != "":
			ck.invalidf(f, "%q is not an IP address (like 10.20.0.5 or 2001:db8:20::5)", s)
			continue
		case a.Is4In6():
			ck.invalidf(f, "%s is an IPv4-mapped IPv6 address; write it in IPv4 form", s)
			continue
		case !inPrefixes(nets, a):
			ck.invalidf(f, "%s is outside the tenant's networks; a tenant's speakers live inside them", s)
			continue
		}
		if j, dup := seen[a]; dup {
			ck.invalidf(f, "%s is already listed as bgp.peers[%d]", s, j)
			continue
		}
		seen[a] = i
	}
	if len(b.GetPassword()) > MaxBGPPasswordLen {
		ck.invalidf("bgp.password", "is %d characters long; TCP MD5 takes at most %d", len(b.GetPassword()), MaxBGPPasswordLen)
	}
	if n := b.GetMaxPrefixes(); n > MaxTenantBGPMaxPrefixes {
		ck.invalidf("bgp.maxPrefixes", "%d is over the bound of %d prefixes per session", n, MaxTenantBGPMaxPrefixes)
	}
	switch n, per := b.GetMaxPrefixesTotal(), b.GetMaxPrefixes(); {
	case n > MaxTenantBGPMaxPrefixesTotal:
		ck.invalidf("bgp.maxPrefixesTotal", "%d is over the bound of %d prefixes per tenant and host", n, MaxTenantBGPMaxPrefixesTotal)
	case n != 0 && per != 0 && n < per:
		// Both set: the total would make maxPrefixes a bound no session
		// could reach.
		ck.invalidf("bgp.maxPrefixesTotal", "%d is under bgp.maxPrefixes (%d): no session could hold the prefixes maxPrefixes allows it; give at least %d, or lower maxPrefixes", n, per, per)
	}
	switch c := b.GetCommunity(); {
	case b.GetReannounce() && c == "":
		ck.invalidf("bgp.community", "is required with bgp.reannounce: the community (like 64512:100) the tenant's routes carry to the fabric routers")
	case !b.GetReannounce() && c != "":
		ck.invalidf("bgp.community", "is set but bgp.reannounce is not: set reannounce: true to announce the tenant's routes upstream, or leave community out")
	case c != "":
		if tooLong(ck, "bgp.community", c, 11) {
			break
		}
		if _, err := ParseBGPCommunity(c); err != nil {
			ck.invalidf("bgp.community", "%q: %v", c, err)
		}
	}
	if n := b.GetMaxUpdatesPerSecond(); n > MaxTenantBGPUpdateRate {
		ck.invalidf("bgp.maxUpdatesPerSecond", "%d is over the bound of %d route changes per second and session", n, MaxTenantBGPUpdateRate)
	}
	if n := b.GetMaxPrefixLength(); n > 32 {
		ck.invalidf("bgp.maxPrefixLength", "%d is not an IPv4 prefix length (1 to 32)", n)
	}
	if n := b.GetMaxPrefixLength6(); n > 128 {
		ck.invalidf("bgp.maxPrefixLength6", "%d is not an IPv6 prefix length (1 to 128)", n)
	}
	checkTenantBFD(ck, t)
}

func inPrefixes(ps []netip.Prefix, a netip.Addr) bool {
	for _, p := range ps {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

// ParseBGPCommunity parses a standard BGP community, "ASN:value" with
// each part 0 to 65535, into its 32-bit value.
func ParseBGPCommunity(s string) (uint32, error) {
	asn, val, ok := strings.Cut(s, ":")
	if !ok {
		return 0, errors.New("write it as ASN:value, like 64512:100")
	}
	a, err1 := strconv.ParseUint(asn, 10, 16)
	v, err2 := strconv.ParseUint(val, 10, 16)
	if err1 != nil || err2 != nil {
		return 0, errors.New("both parts are numbers from 0 to 65535, like 64512:100")
	}
	return uint32(a)<<16 | uint32(v), nil
}
