package api

import (
	"fmt"
	"net/netip"
	"strings"
	"time"

	pb "github.com/teapot-lb/teapot-lb/api/proto/teapotv1"
)

// maxWeight is the highest member weight.
const maxWeight = 1000

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
	own := clusterAddrs(c)
	udpUsers := map[string]int{}
	for i, l := range lb.GetListeners() {
		if l.GetProtocol() == "udp" {
			if _, seen := udpUsers[l.GetPool()]; !seen {
				udpUsers[l.GetPool()] = i
			}
		}
	}
	for _, key := range sortedKeys(lb.GetPools()) {
		f := "pools." + key
		checkName(ck, f, key)
		bp := lb.GetPools()[key]
		checkAlgorithm(ck, f, bp)
		checkMembers(ck, f, bp, tenant, nets, own)
		checkHealthCheck(ck, f+".healthCheck", bp.GetHealthCheck())
		switch pp := bp.GetProxyProtocol(); pp {
		case "":
		case "v1", "v2":
			if i, ok := udpUsers[key]; ok {
				ck.invalidf(f+".proxyProtocol", "PROXY protocol cannot be sent to UDP backends, and udp listeners[%d] uses this pool; remove proxyProtocol or use a separate pool", i)
			}
		default:
			ck.invalidf(f+".proxyProtocol", "%q is not one of v1, v2 (or empty for none)", pp)
		}
		switch bpp := bp.GetBackendProtocol(); bpp {
		case "", "http1", "h2c", "tls":
		default:
			ck.invalidf(f+".backendProtocol", "%q is not one of http1, h2c, tls", bpp)
		}
		checkPositive(ck, f+".connectTimeout", bp.GetConnectTimeout())
	}
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
	if name, ok := strings.CutPrefix(on, "header:"); ok && isToken(name) {
		return
	}
	ck.invalidf(f+".hashOn", "%q is not client-ip or header:NAME (like header:X-User)", on)
}

// isToken reports whether s is an HTTP header name (RFC 9110 token).
func isToken(s string) bool {
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
// VIP pools' ranges and the LB hosts' service addresses (IP:port).
type ownAddrs struct {
	vips  []poolRange
	hosts map[netip.AddrPort]bool
}

func clusterAddrs(c Catalog) ownAddrs {
	own := ownAddrs{hosts: map[netip.AddrPort]bool{}}
	for _, p := range parsePools(c) {
		own.vips = append(own.vips, p.ranges...)
	}
	if nl, ok := c.(NodeLister); ok {
		for _, n := range nl.Nodes() {
			for _, a := range []string{n.GetApiAddr(), n.GetRaftAddr(), n.GetHeartbeatAddr()} {
				if ap, err := netip.ParseAddrPort(a); err == nil {
					own.hosts[netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port())] = true
				}
			}
		}
	}
	return own
}

// problem says why the member ap (health-checked on port hcPort, 0: its
// own port) is one of the cluster's own addresses, or returns "".
func (o ownAddrs) problem(ap netip.AddrPort, hcPort uint32) string {
	if rangesContain(o.vips, ap.Addr()) {
		return fmt.Sprintf("%s is a virtual IP of this cluster and is never a member", ap.Addr())
	}
	if o.hosts[ap] {
		return fmt.Sprintf("%s is a service port of an LB host and is never a member", ap)
	}
	if hcPort != 0 && hcPort <= 65535 {
		if hp := netip.AddrPortFrom(ap.Addr(), uint16(hcPort)); o.hosts[hp] {
			return fmt.Sprintf("healthCheck.port %d: %s is a service port of an LB host and is never checked", hcPort, hp)
		}
	}
	return ""
}

func checkMembers(ck *checker, f string, bp *pb.BackendPool, tenant *pb.Tenant, nets []netip.Prefix, own ownAddrs) {
	seen := map[netip.AddrPort]int{}
	for i, m := range bp.GetMembers() {
		mf := fmt.Sprintf("%s.members[%d]", f, i)
		if tooLong(ck, mf, m.GetAddress(), MaxAddressLen) {
			continue
		}
		ap, why := parseMember(m.GetAddress())
		if why != "" {
			ck.invalidf(mf, "%s", why)
		} else if j, dup := seen[ap]; dup {
			ck.invalidf(mf, "%s duplicates members[%d]", ap, j)
		} else {
			seen[ap] = i
			if why := own.problem(ap, bp.GetHealthCheck().GetPort()); why != "" {
				ck.invalidf(mf, "%s", why)
			} else if tenant != nil {
				if why := memberProblem(ap.Addr(), nets, tenant.GetNetworks()); why != "" {
					ck.invalidf(mf, "%s", why)
				}
			}
		}
		if m.Weight != nil && m.GetWeight() > maxWeight {
			ck.invalidf(mf+".weight", "must be at most %d, got %d", maxWeight, m.GetWeight())
		}
	}
}

func checkHealthCheck(ck *checker, f string, hc *pb.HealthCheck) {
	if hc == nil {
		return
	}
	if hc.GetTcp() != nil && hc.GetHttp() != nil {
		ck.invalidf(f, "set tcp or http, not both")
	}
	if h := hc.GetHttp(); h != nil {
		p := h.GetPath()
		switch {
		case tooLong(ck, f+".http.path", p, MaxPathLen):
		case p != "" && !strings.HasPrefix(p, "/"):
			ck.invalidf(f+".http.path", "%q must start with /", p)
		case strings.ContainsAny(p, " \t\r\n"):
			ck.invalidf(f+".http.path", "%q must not contain spaces", p)
		}
		if s := h.GetExpectStatus(); s != 0 && (s < 100 || s > 599) {
			ck.invalidf(f+".http.expectStatus", "must be an HTTP status from 100 to 599, got %d", s)
		}
		if host := h.GetHost(); host != "" {
			if _, err := netip.ParseAddr(host); err != nil {
				if why := dnsNameProblem(host); why != "" {
					ck.invalidf(f+".http.host", "%s", why)
				}
			}
		}
	}
	checkPositive(ck, f+".interval", hc.GetInterval())
	checkPositive(ck, f+".timeout", hc.GetTimeout())
	iv := DefaultHealthInterval
	if d := hc.GetInterval(); d != nil && d.CheckValid() == nil && d.AsDuration() > 0 {
		iv = d.AsDuration()
		switch {
		case iv < MinHealthInterval:
			ck.invalidf(f+".interval", "%s is shorter than %s; checks run at most once a second per member", iv, MinHealthInterval)
		case iv > MaxHealthInterval:
			ck.invalidf(f+".interval", "%s is longer than %s", iv, MaxHealthInterval)
		}
	}
	if d := hc.GetTimeout(); d != nil && d.CheckValid() == nil && d.AsDuration() > 0 {
		to := d.AsDuration()
		switch {
		case to > MaxHealthTimeout:
			ck.invalidf(f+".timeout", "%s is longer than %s; a check that takes longer counts as failed", to, MaxHealthTimeout)
		case to > iv && hc.GetInterval() != nil:
			ck.invalidf(f+".timeout", "%s is longer than interval %s; make it shorter than the interval", to, iv)
		case to == iv && hc.GetInterval() != nil:
			ck.invalidf(f+".timeout", "%s equals the interval; make it shorter than the interval", to)
		case to >= iv:
			ck.invalidf(f+".timeout", "%s is not shorter than the default interval %s; make it shorter or set interval", to, iv)
		}
	}
	if hc.GetRise() > 100 {
		ck.invalidf(f+".rise", "must be at most 100, got %d", hc.GetRise())
	}
	if hc.GetFall() > 100 {
		ck.invalidf(f+".fall", "must be at most 100, got %d", hc.GetFall())
	}
	if hc.GetPort() > 65535 {
		ck.invalidf(f+".port", "must be between 0 (the member's port) and 65535, got %d", hc.GetPort())
	}
}
