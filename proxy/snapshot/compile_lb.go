package snapshot

import (
	"crypto/tls"
	"fmt"
	"net/netip"
	"net/textproto"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/teapot-lb/teapot-lb/api"
	pb "github.com/teapot-lb/teapot-lb/api/proto/teapotv1"
	"google.golang.org/protobuf/types/known/durationpb"
)

// maxWeight is the highest member weight.
const maxWeight = 1000

// duration returns d, or def when d is unset or not a positive duration
// (then reported).
func (b *lbCompile) duration(field string, d *durationpb.Duration, def time.Duration) time.Duration {
	if d == nil {
		return def
	}
	if d.CheckValid() != nil || d.AsDuration() <= 0 {
		b.problem(field, "must be a positive duration; using %s", def)
		return def
	}
	return d.AsDuration()
}

func (b *lbCompile) pool(name string, bp *pb.BackendPool, t *tenantInfo) *Pool {
	f := "pools." + name
	p := &Pool{LB: b.id, Name: name, Algorithm: RoundRobin, BackendProtocol: "http1"}
	switch a := Algorithm(bp.GetAlgorithm()); a {
	case "":
	case RoundRobin, LeastRequest, Hash:
		p.Algorithm = a
	default:
		b.problem(f+".algorithm", "%q is not one of round-robin, least-request, hash; using round-robin", a)
	}
	if p.Algorithm == Hash {
		switch on := bp.GetHashOn(); {
		case on == "" || on == "client-ip":
		case strings.HasPrefix(on, "header:") && isToken(on[len("header:"):]):
			p.HashHeader = textproto.CanonicalMIMEHeaderKey(on[len("header:"):])
		default:
			b.problem(f+".hash_on", "%q is not client-ip or header:NAME; hashing the client IP", on)
		}
	}
	p.Members = b.members(f, bp.GetMembers(), bp.GetHealthCheck().GetPort(), t)
	p.Health = b.healthCheck(f+".health_check", bp.GetHealthCheck())
	switch pp := bp.GetProxyProtocol(); pp {
	case "":
	case "v1":
		p.ProxyProtocol = 1
	case "v2":
		p.ProxyProtocol = 2
	default:
		b.problem(f+".proxy_protocol", "%q is not one of v1, v2; sending no PROXY header", pp)
	}
	switch bpp := bp.GetBackendProtocol(); bpp {
	case "":
	case "http1", "h2c", "tls", "h2":
		p.BackendProtocol = bpp
	default:
		b.problem(f+".backend_protocol", "%q is not one of http1, h2c, tls, h2; using http1", bpp)
	}
	p.ConnectTimeout = b.duration(f+".connect_timeout", bp.GetConnectTimeout(), b.c.d.ConnectTimeout)
	return p
}

func (b *lbCompile) members(f string, ms []*pb.Member, hcPort uint32, t *tenantInfo) []Member {
	out := make([]Member, 0, len(ms))
	seen := make(map[netip.AddrPort]int, len(ms))
	for i, m := range ms {
		mf := func() string { return fmt.Sprintf("%s.members[%d]", f, i) }
		ap, err := netip.ParseAddrPort(m.GetAddress())
		switch {
		case err != nil:
			b.problem(mf(), "%q is not IP:port (like 10.20.0.11:30080 or [2001:db8::1]:80); member skipped", m.GetAddress())
			continue
		case ap.Addr().Zone() != "" || ap.Addr().Is4In6() || ap.Port() == 0:
			b.problem(mf(), "%s must be a plain IP address with a port from 1 to 65535; member skipped", m.GetAddress())
			continue
		}
		if j, dup := seen[ap]; dup {
			b.problem(mf(), "%s duplicates members[%d]; member skipped", ap, j)
			continue
		}
		seen[ap] = i
		if why := memberProblem(ap.Addr(), t.nets); why != "" {
			b.problem(mf(), "%s; member skipped", why)
			continue
		}
		if why := b.hostPortProblem(ap, hcPort); why != "" {
			b.problem(mf(), "%s; member skipped", why)
			continue
		}
		w := uint32(1)
		if m.Weight != nil {
			w = m.GetWeight()
		}
		if w > maxWeight {
			b.problem(mf()+".weight", "must be at most %d, got %d; member skipped", maxWeight, w)
			continue
		}
		out = append(out, Member{Addr: ap, Weight: w})
	}
	return out
}

// hostPortProblem says why the member ap (checked on hcPort, 0: its own
// port) reaches an LB host's own service, or returns "": on a host
// address or loopback, or on a VIP when the service listens on every
// address. Such a member is never dialled nor checked.
func (b *lbCompile) hostPortProblem(ap netip.AddrPort, hcPort uint32) string {
	hosts := b.c.env.hosts
	if why := hosts.Problem(ap, hcPort); why != "" {
		return why
	}
	for _, port := range []uint32{uint32(ap.Port()), hcPort} {
		if port == 0 || port > 65535 {
			continue
		}
		if what := hosts.OnEveryAddress(uint16(port)); what != "" && b.c.isVIP(ap.Addr()) {
			return fmt.Sprintf("%s is a virtual IP and port %d is %s", ap.Addr(), port, what)
		}
	}
	return ""
}

// specialBlocks may hold members only when a tenant network lies inside
// the block: the operator put them there on purpose.
var specialBlocks = []netip.Prefix{
	netip.MustParsePrefix("0.0.0.0/8"),
	netip.MustParsePrefix("::/128"),
	netip.MustParsePrefix("127.0.0.0/8"),
	netip.MustParsePrefix("::1/128"),
	netip.MustParsePrefix("169.254.0.0/16"),
	netip.MustParsePrefix("fe80::/10"),
	netip.MustParsePrefix("224.0.0.0/4"),
	netip.MustParsePrefix("ff00::/8"),
	netip.MustParsePrefix("255.255.255.255/32"),
}

// memberProblem says why a may not be dialled for a tenant with networks
// nets, or returns "". Nothing outside the tenant's networks is dialled.
func memberProblem(a netip.Addr, nets []netip.Prefix) string {
	var special, in netip.Prefix
	for _, n := range nets {
		if !n.Contains(a) {
			continue
		}
		sb, ok := specialBlock(a)
		if !ok || sb.Bits() <= n.Bits() && sb.Contains(n.Addr()) {
			return ""
		}
		special, in = sb, n
	}
	if special.IsValid() {
		return fmt.Sprintf("%s is a special-purpose address (%s) that the tenant's network %s does not name on purpose", a, special, in)
	}
	return fmt.Sprintf("%s is outside the tenant's networks", a)
}

func specialBlock(a netip.Addr) (netip.Prefix, bool) {
	for _, sb := range specialBlocks {
		if sb.Contains(a) {
			return sb, true
		}
	}
	return netip.Prefix{}, false
}

func (b *lbCompile) healthCheck(f string, hc *pb.HealthCheck) *HealthCheck {
	if hc == nil {
		return nil
	}
	d := b.c.d
	h := &HealthCheck{Rise: d.HealthRise, Fall: d.HealthFall}
	if hh := hc.GetHttp(); hh != nil {
		b.httpRequest(f+".http", h, hh.GetPath(), hh.GetHost(), hh.GetExpectStatus())
		if hc.GetTcp() != nil {
			b.problem(f, "set tcp or http, not both; using http")
		}
	}
	if hs := hc.GetHttps(); hs != nil {
		if hc.GetTcp() != nil || hc.GetHttp() != nil {
			b.problem(f, "set one of tcp, http or https; using https")
		}
		*h = HealthCheck{Rise: h.Rise, Fall: h.Fall}
		b.httpRequest(f+".https", h, hs.GetPath(), hs.GetHost(), hs.GetExpectStatus())
		h.TLS = true
		h.ServerName = hs.GetServerName()
		if strings.ContainsAny(h.ServerName, " \t\r\n/") {
			b.problem(f+".https.server_name", "%q is not a host name; verifying the member address", h.ServerName)
			h.ServerName = ""
		}
		h.CAPEM, h.InsecureSkipVerify = hs.GetCaPem(), hs.GetInsecureSkipVerify()
		h.ClientCertPEM, h.ClientKeyPEM = hs.GetClientCertPem(), hs.GetClientKeyPem()
	}
	h.CloseOnDown = hc.GetCloseOnDown()
	h.Interval = b.duration(f+".interval", hc.GetInterval(), d.HealthInterval)
	h.Timeout = b.duration(f+".timeout", hc.GetTimeout(), min(d.HealthTimeout, h.Interval))
	if h.Timeout > h.Interval {
		b.problem(f+".timeout", "%s is longer than interval %s; using the interval", h.Timeout, h.Interval)
		h.Timeout = h.Interval
	}
	if r := hc.GetRise(); r > 0 {
		h.Rise = int(min(r, 100))
	}
	if r := hc.GetFall(); r > 0 {
		h.Fall = int(min(r, 100))
	}
	if p := hc.GetPort(); p > 65535 {
		b.problem(f+".port", "must be between 0 (the member's port) and 65535, got %d; checking the member's port", p)
	} else {
		h.Port = uint16(p)
	}
	return h
}

// httpRequest fills the request of an http or https check.
func (b *lbCompile) httpRequest(f string, h *HealthCheck, path, host string, status uint32) {
	h.HTTP = true
	h.Path = path
	if h.Path == "" {
		h.Path = "/"
	}
	if !strings.HasPrefix(h.Path, "/") || strings.ContainsAny(h.Path, " \t\r\n") {
		b.problem(f+".path", "%q must start with / and hold no spaces; checking /", h.Path)
		h.Path = "/"
	}
	h.Host = host
	if strings.ContainsAny(h.Host, " \t\r\n/") {
		b.problem(f+".host", "%q is not a host name; sending the member address", h.Host)
		h.Host = ""
	}
	if status != 0 {
		if status < 100 || status > 599 {
			b.problem(f+".expect_status", "must be an HTTP status from 100 to 599, got %d; accepting 2xx and 3xx", status)
		} else {
			h.ExpectStatus = int(status)
		}
	}
}

func (b *lbCompile) listener(f string, i int, l *pb.Listener, tenant string, vip netip.Addr, pools poolSet, routes *RouteTable) *Listener {
	port := l.GetPort()
	if port < 1 || port > 65535 {
		b.problem(f+".port", "must be between 1 and 65535, got %d; listener skipped", port)
		return nil
	}
	proto := Protocol(l.GetProtocol())
	d := b.c.d
	out := &Listener{
		Key:      Key{Addr: netip.AddrPortFrom(vip, uint16(port)), Network: proto.Network()},
		LB:       b.id,
		Tenant:   tenant,
		Index:    i,
		Protocol: proto,
		Limits:   Limits{MaxConnections: d.MaxConnections, IdleTimeout: d.TCPIdleTimeout},
	}
	out.Name = out.Key.String()
	switch proto {
	case ProtoTCP, ProtoUDP, ProtoTLSPassthrough:
		out.Pool = pools.get(l.GetPool())
		if out.Pool == nil {
			b.problem(f+".pool", "backend pool %q is not defined in pools; listener skipped", l.GetPool())
			return nil
		}
		if proto == ProtoTLSPassthrough {
			out.Routes = routes // routed by server name, when the load balancer has routes
			if len(l.GetSniRoutes()) > 0 {
				out.Routes = b.sniRoutes(f, l.GetSniRoutes(), pools, b.c.tenants[tenant])
			}
		}
		if proto == ProtoUDP {
			out.Limits = Limits{MaxConnections: d.MaxUDPFlows, IdleTimeout: d.UDPIdleTimeout}
			if out.Pool.ProxyProtocol != 0 {
				b.problem(f+".pool", "PROXY protocol cannot be sent to UDP members; sending none")
			}
		}
	case ProtoHTTP, ProtoHTTPS:
		out.Routes = routes
		out.Limits.IdleTimeout = d.HTTPIdleTimeout
		out.RedirectToHTTPS = l.GetRedirectToHttps() && proto == ProtoHTTP
		for j, c := range l.GetTrustedProxies() {
			pfx, err := netip.ParsePrefix(c)
			if err != nil {
				b.problem(fmt.Sprintf("%s.trustedProxies[%d]", f, j), "%q is not a CIDR (like 192.0.2.0/24); not trusted", c)
				continue
			}
			out.TrustedProxies = append(out.TrustedProxies, pfx.Masked())
		}
		if proto == ProtoHTTPS {
			var ok bool
			if out.TLS, ok = b.tls(f+".tls", l.GetTls()); !ok {
				return nil
			}
		}
	default:
		b.problem(f+".protocol", "%q is not one of tcp, udp, http, https, tls-passthrough; listener skipped", proto)
		return nil
	}
	if t := b.c.tenants[tenant]; t != nil {
		out.Limits.TenantConnections = t.conns
		out.Limits.RegexCPUMillicores = t.regexCPU
		if t.connsPerListener > 0 {
			out.Limits.MaxConnections = t.connsPerListener
		}
	}
	if m := l.GetMaxConnections(); m > 0 {
		out.Limits.MaxConnections = int(m)
	}
	out.Limits.IdleTimeout = b.duration(f+".idle_timeout", l.GetIdleTimeout(), out.Limits.IdleTimeout)
	return out
}

func (b *lbCompile) tls(f string, p *pb.TLSPolicy) (*TLS, bool) {
	t := &TLS{ACME: p.GetAcme(), Certificates: p.GetCertificates(), MinVersion: tls.VersionTLS12}
	if !t.ACME && len(t.Certificates) == 0 {
		b.problem(f, "https listeners need tls.acme: true or tls.certificates; listener skipped")
		return nil, false
	}
	switch v := p.GetMinVersion(); v {
	case "", "tls1.2":
	case "tls1.3":
		t.MinVersion = tls.VersionTLS13
	default:
		b.problem(f+".min_version", "%q is not one of tls1.2, tls1.3; using tls1.2", v)
	}
	return t, true
}

type routeKey struct {
	host, path string
	t          PathType
	ports      string // the sorted ports of a route served by some listeners only
}

// routes compiles the load balancer's routes, in order, before a
// RouteTable drops the plain ones that an earlier route shadows (per
// listener port when routes have ports).
func (b *lbCompile) routes(rs []*pb.Route, pools poolSet, t *tenantInfo) []Route {
	out := make([]Route, 0, len(rs))
	seen := map[routeKey]int{}
	var regex api.RegexUsage
	for i, r := range rs {
		f := "routes[" + strconv.Itoa(i) + "]"
		host := strings.ToLower(r.GetHost())
		if host != "" {
			if why := routeHostProblem(host, t.domains); why != "" {
				b.problem(f+".host", "%s; route skipped", why)
				continue
			}
		}
		if extended(r) {
			// The API refuses a load balancer over its regex budget; a
			// route that would take it over is skipped, with the API's
			// reason.
			ru := api.RouteRegexUsage(r)
			if err := (api.RegexUsage{Insts: regex.Insts + ru.Insts}).CheckLB(); err != nil {
				b.problem(f, "%v; route skipped", err)
				continue
			}
			regex.Insts += ru.Insts
			out = append(out, b.extRoutes(f, i, host, r, pools)...)
			continue
		}
		var pt PathType
		switch r.GetPathType() {
		case "", "prefix":
		case "exact":
			pt = PathExact
		default:
			b.problem(f+".path_type", "%q is not one of prefix, exact, regex; route skipped", r.GetPathType())
			continue
		}
		path := r.GetPath()
		if path != "" && (!strings.HasPrefix(path, "/") || strings.ContainsAny(path, " ?#\t\r\n")) {
			b.problem(f+".path", "%q must start with / and hold no spaces, '?' or '#'; route skipped", path)
			continue
		}
		path = cleanRoutePath(path, pt)
		pool := pools.get(r.GetPool())
		if pool == nil {
			b.problem(f+".pool", "backend pool %q is not defined in pools; route skipped", r.GetPool())
			continue
		}
		var ports string
		if ps := r.GetPorts(); len(ps) > 0 {
			ps = slices.Clone(ps)
			slices.Sort(ps)
			ports = fmt.Sprint(ps)
		}
		k := routeKey{host, path, pt, ports}
		if j, dup := seen[k]; dup {
			b.problem(f, "duplicates routes[%d]; route skipped", j)
			continue
		}
		seen[k] = i
		out = append(out, Route{Host: host, Path: path, PathType: pt, Pool: pool, Index: i})
	}
	return out
}

// sniRoutes compiles the server-name routes of a tls-passthrough listener
// into a route table matched with path "/".
func (b *lbCompile) sniRoutes(f string, rs []*pb.SNIRoute, pools poolSet, t *tenantInfo) *RouteTable {
	var domains []string
	if t != nil {
		domains = t.domains
	}
	out := make([]Route, 0, len(rs))
	seen := map[string]int{}
	for i, r := range rs {
		rf := f + ".sni_routes[" + strconv.Itoa(i) + "]"
		host := strings.ToLower(r.GetHost())
		if why := routeHostProblem(host, domains); why != "" {
			b.problem(rf+".host", "%s; route skipped", why)
			continue
		}
		pool := pools.get(r.GetPool())
		if pool == nil {
			b.problem(rf+".pool", "backend pool %q is not defined in pools; route skipped", r.GetPool())
			continue
		}
		if j, dup := seen[host]; dup {
			b.problem(rf, "duplicates sni_routes[%d]; route skipped", j)
			continue
		}
		seen[host] = i
		out = append(out, Route{Host: host, Path: "/", Pool: pool, Index: i})
	}
	return NewRouteTable(out)
}

// routeHostProblem checks an exact or "*." host and that it lies inside
// the tenant's domains.
func routeHostProblem(host string, domains []string) string {
	name := strings.TrimPrefix(host, "*.")
	if !isDNSName(name) {
		return fmt.Sprintf("%q is not a DNS name or a wildcard like *.acme.example", host)
	}
	for _, d := range domains {
		if name == d || strings.HasSuffix(name, "."+d) {
			return ""
		}
	}
	return fmt.Sprintf("%s is not inside the tenant's domains", host)
}

// isDNSName reports whether s is a lowercase DNS name of labels
// [a-z0-9-], 1 to 63 long, not starting or ending with '-'.
func isDNSName(s string) bool {
	if s == "" || len(s) > maxHostLen {
		return false
	}
	for _, label := range strings.Split(s, ".") {
		if label == "" || len(label) > 63 || label[0] == '-' || label[len(label)-1] == '-' {
			return false
		}
		for i := 0; i < len(label); i++ {
			c := label[i]
			if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-') {
				return false
			}
		}
	}
	return true
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

// isVIP reports whether a lies in a VIP pool.
func (c *compiler) isVIP(a netip.Addr) bool {
	for _, r := range c.vipRanges {
		if r.Contains(a) {
			return true
		}
	}
	return false
}
