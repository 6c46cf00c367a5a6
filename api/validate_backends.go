package api

import (
	"fmt"
	"net/netip"
	"strings"
	"time"

	pb "github.com/teapot-lb/teapot-lb/api/proto/teapotv1"
)

// MaxWeight is the highest member weight.
const MaxWeight = 1000

// Health-check bounds: one tenant's checks cannot hold the checker with
// long timeouts or flood members with short intervals.
const (
	// DefaultHealthInterval is the interval of a check that sets none (the
	// data plane's default).
	DefaultHealthInterval = 5 * time.Second
	MinHealthInterval     = time.Second
	MaxHealthInterval     = 5 * time.Minute
	MaxHealthTimeout      = 10 * time.Second
)

// checkBackendPools checks every backend pool, in key order.
func checkBackendPools(ck *checker, lb *pb.LoadBalancer, tenant *pb.Tenant, c Catalog) {
	var nets []netip.Prefix
	if tenant != nil {
		nets = tenantNetworks(tenant)
	}
	own := clusterAddrs(c, lb.GetTenant())
	for _, key := range sortedKeys(lb.GetPools()) {
		f := "pools." + key
		checkName(ck, f, key)
		bp := lb.GetPools()[key]
		checkAlgorithm(ck, f, bp)
		checkMembers(ck, f, bp, tenant, nets, own)
		checkHealthCheck(ck, f+".healthCheck", bp.GetHealthCheck(), true)
		checkPoolProtocols(ck, f, bp, FirstUDPListener(lb, key))
		checkBackendClientCert(ck, f, bp, lb.GetTenant(), c)
		checkBackendTLSUse(ck, f, lb, key)
		checkClientSource(ck, f, lb, key, tenant)
	}
}

// CheckBackendPool checks the settings of the backend pool at field
// ("pools.web") that stand on their own: algorithm and hashOn,
// proxyProtocol (udp: the index of the first udp listener that uses the
// pool, or -1), backendProtocol and connectTimeout. Its members and health
// check have CheckMember and CheckHealthCheck. It returns the rules broken,
// with the field paths of the manifest: field followed by the setting's
// own path (".hashOn"), so a caller that passes "" gets paths relative to
// the pool and builds the pool's path only when something is broken, as
// every Check* function of this package allows.
func CheckBackendPool(field string, bp *pb.BackendPool, udp int) []FieldError {
	var ck checker
	checkAlgorithm(&ck, field, bp)
	checkPoolProtocols(&ck, field, bp, udp)
	return ck.errs
}

// FirstUDPListener returns the index of the first udp listener of lb that
// sends to the backend pool named pool, or -1.
func FirstUDPListener(lb *pb.LoadBalancer, pool string) int {
	for i, l := range lb.GetListeners() {
		if l.GetProtocol() == "udp" && l.GetPool() == pool {
			return i
		}
	}
	return -1
}

// checkPoolProtocols checks proxyProtocol, backendProtocol and
// connectTimeout.
func checkPoolProtocols(ck *checker, f string, bp *pb.BackendPool, udp int) {
	switch pp := bp.GetProxyProtocol(); pp {
	case "":
	case "v1", "v2":
		if udp >= 0 {
			ck.invalidf(f+".proxyProtocol", "PROXY protocol cannot be sent to UDP backends, and udp listeners[%d] uses this pool; remove proxyProtocol or use a separate pool", udp)
		}
	default:
		ck.invalidf(f+".proxyProtocol", "%q is not one of v1, v2 (or empty for none)", pp)
	}
	switch bpp := bp.GetBackendProtocol(); bpp {
	case "", "http1", "h2c", "tls", "h2":
	default:
		ck.invalidf(f+".backendProtocol", "%q is not one of http1, h2c, tls, h2", bpp)
	}
	checkPositive(ck, f+".connectTimeout", bp.GetConnectTimeout())
	checkBackendTLS(ck, f, bp)
}

func checkAlgorithm(ck *checker, f string, bp *pb.BackendPool) {
	alg, on := bp.GetAlgorithm(), bp.GetHashOn()
	switch alg {
	case "", "round-robin", "least-request", "hash":
	default:
		ck.invalidf(f+".algorithm", "%q is not one of round-robin, least-request, hash", alg)
		return
	}
	if on == "" {
		return
	}
	if alg != "hash" {
		ck.invalidf(f+".hashOn", "only used with algorithm: hash; remove it or set the algorithm")
		return
	}
	if on == "client-ip" {
		return
	}
	if tooLong(ck, f+".hashOn", on, len("header:")+MaxHeaderNameLen) {
		return
	}
	name, ok := strings.CutPrefix(on, "header:")
	switch {
	case !ok || !IsToken(name):
		ck.invalidf(f+".hashOn", "%q is not client-ip or header:NAME (like header:X-User)", on)
	case IsRequestID(name):
		ck.invalidf(f+".hashOn", "%s is the request id, one for each request (the proxy makes one when no trusted proxy sent it), so hashing it sends each request to a member at random and no client keeps one; hash on client-ip, or on a header that names the client or its session (like header:X-User)", name)
	}
}

// IsToken reports whether s is an HTTP header name (RFC 9110 token).
func IsToken(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0 {
			continue
		}
		return false
	}
	return true
}

// ownAddrs are the cluster's own addresses, which are never members: the
// VIP pools' ranges and the LB hosts' own services (HostPorts).
type ownAddrs struct {
	vips  []poolRange
	hosts *HostPorts
}

func clusterAddrs(c Catalog, tenant string) ownAddrs {
	var own ownAddrs
	for _, p := range parsePools(c) {
		// Another tenant's private VIPs live in its own network, which
		// this tenant's members never reach.
		if ownPool(p.pool, tenant) {
			own.vips = append(own.vips, p.ranges...)
		}
	}
	if nl, ok := c.(NodeLister); ok {
		own.hosts = NewHostPorts(nl.Nodes())
	}
	return own
}

// problem says why the member ap (health-checked on port hcPort, 0: its
// own port) is one of the cluster's own addresses, or returns "".
func (o ownAddrs) problem(ap netip.AddrPort, hcPort uint32) string {
	if rangesContain(o.vips, ap.Addr()) {
		return fmt.Sprintf("%s is a virtual IP of this cluster and is never a member", ap.Addr())
	}
	return o.hosts.Problem(ap, hcPort)
}

func checkMembers(ck *checker, f string, bp *pb.BackendPool, tenant *pb.Tenant, nets []netip.Prefix, own ownAddrs) {
	seen := map[netip.AddrPort]int{}
	for i, m := range bp.GetMembers() {
		mf := fmt.Sprintf("%s.members[%d]", f, i)
		ap, ok := checkMemberAddress(ck, mf, m)
		if ok {
			if why := DuplicateMember(ap, seen, i); why != "" {
				ck.invalidf(mf, "%s", why)
			} else if why := own.problem(ap, bp.GetHealthCheck().GetPort()); why != "" {
				ck.invalidf(mf, "%s", why)
			} else if tenant != nil {
				if why := MemberNetworkProblem(ap.Addr(), nets, tenant.GetNetworks()); why != "" {
					ck.invalidf(mf, "%s", why)
				}
			}
		}
		checkMemberWeight(ck, mf, m)
	}
}

// CheckMember checks the form of the member at field
// ("pools.web.members[2]"): its address, IP:port, and its weight. It
// returns the address (valid when the address is well-formed) and the
// rules broken. Whether the member may be dialled for its tenant is
// MemberNetworkProblem; whether it repeats another, DuplicateMember.
func CheckMember(field string, m *pb.Member) (netip.AddrPort, []FieldError) {
	var ck checker
	ap, _ := checkMemberAddress(&ck, field, m)
	checkMemberWeight(&ck, field, m)
	return ap, ck.errs
}

// DuplicateMember says why member i at address ap repeats an earlier
// member of its pool, or records it in seen and returns "".
func DuplicateMember(ap netip.AddrPort, seen map[netip.AddrPort]int, i int) string {
	if j, dup := seen[ap]; dup {
		return fmt.Sprintf("%s duplicates members[%d]", ap, j)
	}
	seen[ap] = i
	return ""
}

func checkMemberAddress(ck *checker, mf string, m *pb.Member) (netip.AddrPort, bool) {
	if tooLong(ck, mf, m.GetAddress(), MaxAddressLen) {
		return netip.AddrPort{}, false
	}
	ap, why := parseMember(m.GetAddress())
	if why != "" {
		ck.invalidf(mf, "%s", why)
		return netip.AddrPort{}, false
	}
	return ap, true
}

func checkMemberWeight(ck *checker, mf string, m *pb.Member) {
	if m.Weight != nil && m.GetWeight() > MaxWeight {
		ck.invalidf(mf+".weight", "must be at most %d, got %d", MaxWeight, m.GetWeight())
	}
}
