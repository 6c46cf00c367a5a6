package snapshot

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
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

// The compile applies the API's rules (api.CheckBackendPool, CheckMember,
// CheckHealthCheck, CheckListener, CheckRouteHost, CheckRoute,
// CheckSNIRoutes): what a stored object breaks, because it was stored
// before a rule was added or restored from an old backup, becomes a
// problem under the field path the API names, with what the data plane
// does instead, and the rest of the object is served.

// report adds the rules broken, prefixed with field (for checks called
// with a relative path), each with what the data plane does instead.
func (b *lbCompile) report(field string, errs []api.FieldError, then string) {
	for _, e := range errs {
		b.finding(field+e.Field, e.Reason, then)
	}
}

func (b *lbCompile) finding(field, reason, then string) {
	b.problems = append(b.problems, Problem{Field: api.Clip(field, api.MaxFieldPath), Reason: reason + "; " + then})
}

// provisional is a finding that says what the data plane does in place
// of a field of a listener or route ("using tls1.2", "requestsPerSecond
// not enforced"): true only while the listener or route is served.
type provisional struct {
	at     int    // its index in the load balancer's problems
	reason string // the rule broken, without what is done instead
}

// provisional adds a finding that holds only while its listener or route
// is served.
func (b *lbCompile) provisional(field, reason, then string) provisional {
	b.finding(field, reason, then)
	return provisional{at: len(b.problems) - 1, reason: reason}
}

// withdraw rewords the findings held of a listener or route (what) that
// is skipped after all, for the problem under the field cause: what they
// said is done in place of a field is not done, since nothing of it is
// served.
func (b *lbCompile) withdraw(held []provisional, what, cause string) {
	for _, p := range held {
		b.problems[p.at].Reason = skippedFor(p.reason, what, cause)
	}
}

func skippedFor(reason, what, cause string) string {
	return reason + "; " + what + " skipped for " + cause
}

// broken reports whether one of errs is about field itself.
func broken(errs []api.FieldError, field string) bool {
	for _, e := range errs {
		if e.Field == field {
			return true
		}
	}
	return false
}

// duration returns d, or def when d is unset or field is broken.
func duration(errs []api.FieldError, field string, d *durationpb.Duration, def time.Duration) time.Duration {
	if d == nil || broken(errs, field) {
		return def
	}
	return d.AsDuration()
}

func (b *lbCompile) pool(lb *pb.LoadBalancer, name string, udp int, t *tenantInfo) *Pool {
	f := "pools." + name
	bp := lb.GetPools()[name]
	p := &Pool{LB: b.id, Name: name, Algorithm: RoundRobin, BackendProtocol: "http1"}
	errs := api.CheckBackendPool("", bp, udp)
	for _, e := range errs {
		then := "ignored"
		switch e.Field {
		case ".algorithm":
			then = "using round-robin"
		case ".hashOn":
			if !broken(errs, ".algorithm") && bp.GetAlgorithm() == string(Hash) {
				then = "hashing the client IP"
			}
		case ".proxyProtocol":
			then = "sending no PROXY header"
			if pp := bp.GetProxyProtocol(); pp == "v1" || pp == "v2" {
				then = "udp listeners send none"
			}
		case ".backendProtocol":
			then = "using http1"
		case ".connectTimeout":
			then = "using " + b.c.d.ConnectTimeout.String()
		}
		if strings.HasPrefix(e.Field, ".tls") {
			then = "members are not trusted: requests get 502"
		}
		b.finding(f+e.Field, e.Reason, then)
	}
	if a := Algorithm(bp.GetAlgorithm()); a != "" && !broken(errs, ".algorithm") {
		p.Algorithm = a
	}
	if name, ok := strings.CutPrefix(bp.GetHashOn(), "header:"); ok && p.Algorithm == Hash && !broken(errs, ".hashOn") {
		p.HashHeader = textproto.CanonicalMIMEHeaderKey(name)
	}
	p.Members = b.members(f, bp.GetMembers(), bp.GetHealthCheck().GetPort(), t)
	p.Health = b.healthCheck(f+".healthCheck", bp.GetHealthCheck())
	switch bp.GetProxyProtocol() {
	case "v1":
		p.ProxyProtocol = 1
	case "v2":
		p.ProxyProtocol = 2
	}
	if bpp := bp.GetBackendProtocol(); bpp != "" && !broken(errs, ".backendProtocol") {
		p.BackendProtocol = bpp
	}
	p.ConnectTimeout = duration(errs, ".connectTimeout", bp.GetConnectTimeout(), b.c.d.ConnectTimeout)
	p.TLS = b.backendTLS(f, errs, bp.GetTls())
	if why := api.ClientSourceProblem(lb, name, t.src); why != "" {
		b.finding(f+".clientSource", why, "members are dialled from the host's address")
	} else {
		p.ClientSource = bp.GetClientSource()
	}
	return p
}

func (b *lbCompile) members(f string, ms []*pb.Member, hcPort uint32, t *tenantInfo) []Member {
	out := make([]Member, 0, len(ms))
	seen := make(map[netip.AddrPort]int, len(ms))
	for i, m := range ms {
		mf := func() string { return f + ".members[" + strconv.Itoa(i) + "]" }
		// Checked with a relative field path: the member's is built only
		// for a problem.
		ap, errs := api.CheckMember("", m)
		if errs != nil {
			b.report(mf(), errs, "member skipped")
			continue
		}
		why := api.DuplicateMember(ap, seen, i)
		if why == "" {
			why = api.MemberNetworkProblem(ap.Addr(), t.nets, t.src.GetNetworks())
		}
		if why == "" {
			why = b.hostPortProblem(ap, hcPort)
		}
		if why != "" {
			b.finding(mf(), why, "member skipped")
			continue
		}
		w := uint32(1)
		if m.Weight != nil {
			w = m.GetWeight()
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

func (b *lbCompile) healthCheck(f string, hc *pb.HealthCheck) *HealthCheck {
	if hc == nil {
		return nil
	}
	d := b.c.d
	errs := api.CheckHealthCheck("", hc)
	h := &HealthCheck{Rise: d.HealthRise, Fall: d.HealthFall}
	h.Interval = duration(errs, ".interval", hc.GetInterval(), d.HealthInterval)
	h.Timeout = duration(errs, ".timeout", hc.GetTimeout(), min(d.HealthTimeout, h.Interval))
	h.Timeout = min(h.Timeout, h.Interval)
	for _, e := range errs {
		then := "ignored"
		switch e.Field {
		case "":
			then = "checking by http"
			if hc.GetHttps() != nil {
				then = "checking by https"
			}
		case ".http.path", ".https.path":
			then = "checking /"
		case ".http.expectStatus", ".https.expectStatus":
			then = "accepting 2xx and 3xx"
		case ".http.host", ".https.host":
			then = "sending the member address"
		case ".https.serverName":
			then = "verifying the member address"
		case ".https.caPem":
			then = "used as written"
			if hc.GetHttps().GetCaPem() == "" {
				then = "verifying with the host's CA roots"
			}
		case ".https.insecureSkipVerify":
			then = "accepting any certificate"
		case ".https.clientCertPem", ".https.clientKeyPem":
			then = "used as written"
			if hc.GetHttps().GetClientCertPem() == "" || hc.GetHttps().GetClientKeyPem() == "" {
				then = "checks fail until it is fixed"
			}
		case ".interval":
			then = "using " + h.Interval.String()
		case ".timeout":
			then = "using " + h.Timeout.String()
		case ".rise", ".fall":
			then = "using " + strconv.Itoa(api.MaxRiseFall)
		case ".port":
			then = "checking the member's port"
		}
		b.finding(f+e.Field, e.Reason, then)
	}
	if hh := hc.GetHttp(); hh != nil {
		b.httpRequest(errs, ".http", h, hh.GetPath(), hh.GetHost(), hh.GetExpectStatus())
	}
	if hs := hc.GetHttps(); hs != nil {
		*h = HealthCheck{Rise: h.Rise, Fall: h.Fall, Interval: h.Interval, Timeout: h.Timeout}
		b.httpRequest(errs, ".https", h, hs.GetPath(), hs.GetHost(), hs.GetExpectStatus())
		h.TLS = true
		if !broken(errs, ".https.serverName") {
			h.ServerName = hs.GetServerName()
		}
		h.CAPEM, h.InsecureSkipVerify = hs.GetCaPem(), hs.GetInsecureSkipVerify()
		h.ClientCertPEM, h.ClientKeyPEM = hs.GetClientCertPem(), hs.GetClientKeyPem()
	}
	h.CloseOnDown = hc.GetCloseOnDown()
	if r := hc.GetRise(); r > 0 {
		h.Rise = int(min(r, api.MaxRiseFall))
	}
	if r := hc.GetFall(); r > 0 {
		h.Fall = int(min(r, api.MaxRiseFall))
	}
	if !broken(errs, ".port") {
		h.Port = uint16(hc.GetPort())
	}
	return h
}

// httpRequest fills the request of an http or https check (f: ".http"
// or ".https", as errs name it).
func (b *lbCompile) httpRequest(errs []api.FieldError, f string, h *HealthCheck, path, host string, status uint32) {
	h.HTTP = true
	h.Path = "/"
	if path != "" && !broken(errs, f+".path") {
		h.Path = path
	}
	if !broken(errs, f+".host") {
		h.Host = host
	}
	if !broken(errs, f+".expectStatus") {
		h.ExpectStatus = int(status)
	}
}

// listener compiles one listener, or returns nil when it is skipped. It
// also returns its findings that say what the data plane does in place of
// a field: they hold only while the listener is served, which the caller
// decides for its listen keys (see withdraw).
func (b *lbCompile) listener(f string, i int, l *pb.Listener, lb *pb.LoadBalancer, vip netip.Addr, pools poolSet, routes *RouteTable) (*Listener, []provisional) {
	proto := Protocol(l.GetProtocol())
	errs := api.CheckListener("", l, lb.GetPools())
	scopesBroken := false
	cause := -1 // the problem of the first field that skips the listener
	var held []provisional
	rate := rateSpec(l.GetRateLimit())
	for _, e := range errs {
		then, skip := "ignored", false
		switch e.Field {
		case ".rateLimit.header":
			if api.RequestIDRate(l.GetRateLimit()) {
				rate, then = requestIDRate(l.GetRateLimit())
				break
			}
			skip = true
		case ".port", ".protocol":
			skip = true
		case ".pool":
			skip = proto == ProtoTCP || proto == ProtoUDP || proto == ProtoTLSPassthrough
		case ".tls":
			skip = proto == ProtoHTTPS
		case ".tls.acme", ".tls.certificates":
			// Terminated names would be served without a certificate.
			skip = proto == ProtoTLSPassthrough
		case ".tls.minVersion":
			then = "using tls1.2"
		case ".idleTimeout":
			then = "using the default"
		case ".trustedProxies":
			then = "trusting none"
		default:
			if strings.HasPrefix(e.Field, ".trustedProxies[") {
				then = "not trusted"
			}
			if strings.HasPrefix(e.Field, ".tls.sniScopes") {
				then = "requests not checked against the server name"
				scopesBroken = true
			}
			// Served without its source ranges or rate limit, a listener
			// would be open to what the tenant closed it to.
			skip = edgeField(e.Field)
		}
		if !skip {
			held = append(held, b.provisional(f+e.Field, e.Reason, then))
			continue
		}
		if cause < 0 {
			cause = len(b.problems)
		}
		b.finding(f+e.Field, e.Reason, "listener skipped")
	}
	if cause >= 0 {
		b.withdraw(held, "listener", b.problems[cause].Field)
		return nil, nil
	}
	d := b.c.d
	out := &Listener{
		Key:      Key{Addr: netip.AddrPortFrom(vip, uint16(l.GetPort())), Network: proto.Network(), Space: b.c.spaceOf(lb.GetTenant(), vip)},
		LB:       b.id,
		Tenant:   lb.GetTenant(),
		Index:    i,
		Protocol: proto,
		Limits:   Limits{MaxConnections: d.MaxConnections, IdleTimeout: d.TCPIdleTimeout},
		Sources:  listenerSources(l),
		Rate:     rate,
	}
	out.Name = out.Key.String()
	t := b.c.tenants[lb.GetTenant()]
	switch proto {
	case ProtoTCP, ProtoUDP, ProtoTLSPassthrough:
		out.Pool = pools.get(l.GetPool())
		if proto == ProtoTLSPassthrough {
			out.Routes = routes // routed by server name, when the load balancer has routes
			if len(l.GetSniRoutes()) > 0 {
				out.Routes = b.sniRoutes(f, l, lb, pools, t)
				out.TLS = terminateTLS(l)
			}
		}
		if proto == ProtoUDP {
			out.Limits = Limits{MaxConnections: d.MaxUDPFlows, IdleTimeout: d.UDPIdleTimeout}
		}
	case ProtoHTTP, ProtoHTTPS:
		out.Routes = routes
		out.Limits.IdleTimeout = d.HTTPIdleTimeout
		out.RedirectToHTTPS = l.GetRedirectToHttps() && proto == ProtoHTTP
		out.HTTP3 = l.GetHttp3() && proto == ProtoHTTPS
		out.HTTP3ZeroRTT = out.HTTP3 && l.GetHttp3ZeroRtt()
		if !broken(errs, ".trustedProxies") {
			for _, c := range l.GetTrustedProxies() {
				if pfx, err := netip.ParsePrefix(c); err == nil {
					out.TrustedProxies = append(out.TrustedProxies, pfx.Masked())
				}
			}
		}
		if proto == ProtoHTTPS {
			out.TLS = &TLS{ACME: l.GetTls().GetAcme(), Certificates: l.GetTls().GetCertificates(), MinVersion: tls.VersionTLS12}
			if l.GetTls().GetMinVersion() == "tls1.3" {
				out.TLS.MinVersion = tls.VersionTLS13
			}
			if cv := l.GetTls().GetClientValidation(); cv != nil {
				out.TLS.Client = clientTLS(cv)
			}
			if sc := l.GetTls().GetSniScopes(); len(sc) > 0 && !scopesBroken {
				out.TLS.SNIScopes = SNIScopes(sc)
			}
		}
	}
	if t != nil {
		out.Limits.TenantConnections = t.conns
		out.Limits.RegexCPUMillicores = t.regexCPU
		out.Limits.RateLimitKeys = t.rateKeys
		out.Limits.WAFCPUMillicores = t.wafCPU
		out.Limits.CPUMillicores = t.cpu
		if t.connsPerListener > 0 {
			out.Limits.MaxConnections = t.connsPerListener
		}
	}
	if m := l.GetMaxConnections(); m > 0 {
		out.Limits.MaxConnections = int(m)
	}
	out.Limits.IdleTimeout = duration(errs, ".idleTimeout", l.GetIdleTimeout(), out.Limits.IdleTimeout)
	return out, held
}

type routeKey struct {
	host, path string
	t          PathType
	ports      string // the sorted ports of a route served by some listeners only
}

// routes compiles the load balancer's routes, in order, before a
// RouteTable drops the plain ones that an earlier route shadows (per
// listener port when routes have ports). It also returns the findings of
// the compiled routes that say what the data plane does in place of a
// field: they hold only while a listener that carries the route is
// served, which the caller decides.
func (b *lbCompile) routes(lb *pb.LoadBalancer, pools poolSet, t *tenantInfo) ([]Route, []heldFindings) {
	rs := lb.GetRoutes()
	out := make([]Route, 0, len(rs))
	var kept []heldFindings
	seen := map[routeKey]int{}
	var regex api.RegexUsage
	for i, r := range rs {
		f := "routes[" + strconv.Itoa(i) + "]"
		host := r.GetHost()
		if errs := api.CheckRouteHost(".host", host, t.src); errs != nil {
			b.report(f, errs, "route skipped")
			continue
		}
		insts, err := api.CheckRoute(lb, "", r)
		rate := rateSpec(r.GetRateLimit())
		var held []provisional
		if err != nil {
			var ve *api.ValidationError
			if !errors.As(err, &ve) {
				continue
			}
			if len(ve.Errors) != 1 || ve.Errors[0].Field != ".rateLimit.header" || !api.RequestIDRate(r.GetRateLimit()) {
				b.report(f, ve.Errors, "route skipped")
				continue
			}
			var then string
			rate, then = requestIDRate(r.GetRateLimit())
			held = append(held, b.provisional(f+ve.Errors[0].Field, ve.Errors[0].Reason, then))
		}
		// skipped rewords the findings held once a later check skips the
		// route, for the problem that check added last.
		skipped := func() {
			if len(held) > 0 {
				b.withdraw(held, "route", b.problems[len(b.problems)-1].Field)
			}
		}
		if extended(r) {
			// The API refuses a load balancer over its regex budget; a
			// route that would take it over is skipped, with the API's
			// reason.
			if err := (api.RegexUsage{Insts: regex.Insts + insts}).CheckLB(); err != nil {
				b.problem(f, "%v; route skipped", err)
				skipped()
				continue
			}
			regex.Insts += insts
			rs := b.extRoutes(f, i, host, r, pools)
			if rs == nil {
				skipped()
				continue
			}
			for j := range rs {
				rs[j].Rate, rs[j].WAF, rs[j].NotFound = rate, wafSpec(r.GetWaf()), r.GetNotFound()
			}
			out = append(out, rs...)
			if len(held) > 0 {
				kept = append(kept, heldFindings{field: f, carriers: carriers(lb, r), held: held})
			}
			continue
		}
		pt := PathPrefix
		if r.GetPathType() == "exact" {
			pt = PathExact
		}
		path := cleanRoutePath(r.GetPath(), pt)
		var ports string
		if ps := r.GetPorts(); len(ps) > 0 {
			ps = slices.Clone(ps)
			slices.Sort(ps)
			ports = fmt.Sprint(ps)
		}
		k := routeKey{host, path, pt, ports}
		if j, dup := seen[k]; dup {
			b.problem(f, "duplicates routes[%d]; route skipped", j)
			skipped()
			continue
		}
		seen[k] = i
		out = append(out, Route{Host: host, Path: path, PathType: pt, Pool: pools.get(r.GetPool()), Index: i, Rate: rate, WAF: wafSpec(r.GetWaf()), NotFound: r.GetNotFound()})
		if len(held) > 0 {
			kept = append(kept, heldFindings{field: f, carriers: carriers(lb, r), held: held})
		}
	}
	return out, kept
}

// carriers returns the fields of lb's http and https listeners that carry
// route r: those on one of its ports, or all of them when it names none.
func carriers(lb *pb.LoadBalancer, r *pb.Route) []string {
	out := []string{}
	for i, l := range lb.GetListeners() {
		if Protocol(l.GetProtocol()).L7() && (len(r.GetPorts()) == 0 || slices.Contains(r.GetPorts(), l.GetPort())) {
			out = append(out, "listeners["+strconv.Itoa(i)+"]")
		}
	}
	return out
}

// sniRoutes compiles the server-name routes of a tls-passthrough listener
// into a route table matched with path "/".
func (b *lbCompile) sniRoutes(f string, l *pb.Listener, lb *pb.LoadBalancer, pools poolSet, t *tenantInfo) *RouteTable {
	out := make([]Route, 0, len(l.GetSniRoutes()))
	api.CheckSNIRoutes(f, l, lb.GetPools(), t.src, func(i int, host string, errs []api.FieldError) {
		if errs != nil {
			b.report("", errs, "route skipped")
			return
		}
		r := l.GetSniRoutes()[i]
		out = append(out, Route{Host: host, Path: "/", Pool: pools.get(r.GetPool()), Index: i, Terminate: r.GetTerminate()})
	})
	return NewRouteTable(out)
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

// clientTLS compiles an https listener's client certificate validation.
// A bundle that does not parse (validation refuses it) trusts no CA, so
// that no client certificate passes as verified.
func clientTLS(cv *pb.ClientValidation) *ClientTLS {
	c := &ClientTLS{CAs: x509.NewCertPool(), Bundle: cv.GetCaBundle(), Required: cv.GetMode() != "optional"}
	if certs, why := api.ParseCABundle(cv.GetCaBundle()); why == "" {
		for _, ca := range certs {
			c.CAs.AddCert(ca)
		}
	}
	if h := cv.GetSubjectHeader(); h != "" {
		c.SubjectHeader = textproto.CanonicalMIMEHeaderKey(h)
	}
	return c
}
