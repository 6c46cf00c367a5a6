package api

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"

	pb "github.com/teapot-lb/teapot-lb/api/proto/teapotv1"
	"google.golang.org/protobuf/types/known/durationpb"
)

// checkListeners checks ports, protocols, backend references, TLS and
// server-name routes.
func checkListeners(ck *checker, lb *pb.LoadBalancer, tenant *pb.Tenant, c Catalog) {
	ls := lb.GetListeners()
	if len(ls) == 0 {
		ck.invalidf("listeners", "at least one listener is required, like {port: 443, protocol: https}")
		return
	}
	seen := map[string]int{}
	var vxlan map[uint32]bool
	if slices.ContainsFunc(ls, func(l *pb.Listener) bool { return l.GetProtocol() == "udp" || l.GetHttp3() }) {
		vxlan = vxlanPorts(c)
	}
	for i, l := range ls {
		f := fmt.Sprintf("listeners[%d]", i)
		ck.add(CheckListener(f, l, lb.GetPools()))
		if vxlan[l.GetPort()] {
			switch {
			case l.GetProtocol() == "udp":
				ck.conflictf(f+".port", "UDP port %d is held on the LB hosts by a tenant network attachment's VXLAN tunnel, on every address; use another port", l.GetPort())
			case l.GetProtocol() == "https" && l.GetHttp3():
				ck.conflictf(f+".http3", "HTTP/3 serves UDP port %d, which a tenant network attachment's VXLAN tunnel holds on the LB hosts, on every address; use another port or remove http3", l.GetPort())
			}
		}
		if port, proto := l.GetPort(), l.GetProtocol(); port >= 1 && port <= 65535 && listenerProtocol(proto) {
			key := fmt.Sprintf("%d/%s", port, listenerKind(proto))
			if j, dup := seen[key]; dup {
				ck.invalidf(f+".port", "port %s is already used by listeners[%d]", key, j)
			} else {
				seen[key] = i
			}
			if l.GetHttp3() && proto == "https" {
				// HTTP/3 binds the same port over UDP.
				key := fmt.Sprintf("%d/udp", port)
				if j, dup := seen[key]; dup {
					ck.invalidf(f+".http3", "HTTP/3 serves UDP port %d, which listeners[%d] uses; move that udp listener or remove http3", port, j)
				} else {
					seen[key] = i
				}
			}
		}
		checkListenerCerts(ck, f, lb, l, c)
		if l.GetProtocol() == "tls-passthrough" && !tooMany(ck, f+".sniRoutes", len(l.GetSniRoutes()), MaxSNIRoutes) {
			CheckSNIRoutes(f, l, lb.GetPools(), tenant, func(_ int, _ string, errs []FieldError) { ck.add(errs) })
		}
	}
}

func listenerProtocol(p string) bool {
	switch p {
	case "tcp", "udp", "http", "https", "tls-passthrough":
		return true
	}
	return false
}

// CheckListener checks the listener at field ("listeners[1]") on its own:
// port, protocol, the pool it names among pools, TLS (but for the
// certificates it lists), redirectToHttps, idleTimeout, trustedProxies,
// allowedSources, deniedSources and rateLimit.
// Its server-name routes have CheckSNIRoutes. It returns the rules broken,
// with the field paths of the manifest.
func CheckListener(field string, l *pb.Listener, pools map[string]*pb.BackendPool) []FieldError {
	var ck checker
	f := field
	port, proto := l.GetPort(), l.GetProtocol()
	if port < 1 || port > 65535 {
		ck.invalidf(f+".port", "must be between 1 and 65535, got %d", port)
	}
	switch {
	case proto == "":
		ck.invalidf(f+".protocol", "required: tcp, udp, http, https or tls-passthrough")
	case !listenerProtocol(proto):
		ck.invalidf(f+".protocol", "%q is not one of tcp, udp, http, https, tls-passthrough", proto)
	}
	switch proto {
	case "tcp", "udp", "tls-passthrough":
		if l.GetPool() == "" {
			ck.invalidf(f+".pool", "required for %s listeners: name one of the load balancer's pools", proto)
		} else if _, ok := pools[l.GetPool()]; !ok {
			ck.invalidf(f+".pool", "backend pool %s is not defined in pools", l.GetPool())
		}
	case "http", "https":
		if l.GetPool() != "" {
			ck.invalidf(f+".pool", "%s listeners send traffic by routes; remove pool and add a route to %s", proto, l.GetPool())
		}
	}
	checkListenerTLS(&ck, f, l)
	if len(l.GetSniRoutes()) > 0 && proto != "tls-passthrough" {
		ck.invalidf(f+".sniRoutes", "only tls-passthrough listeners route by server name; remove sniRoutes (http and https listeners use the load balancer's routes)")
	}
	if l.GetHttp3() && proto != "https" {
		ck.invalidf(f+".http3", "only https listeners serve HTTP/3 (it needs TLS certificates); remove http3 or make the listener https")
	}
	switch {
	case l.GetHttp3ZeroRtt() && (!l.GetHttp3() || proto != "https"):
		ck.invalidf(f+".http3ZeroRtt", "0-RTT is part of HTTP/3: set http3 on this https listener, or remove http3ZeroRtt")
	case l.GetHttp3ZeroRtt() && len(l.GetAllowedSources())+len(l.GetDeniedSources()) > 0:
		// A QUIC client's address is validated by its handshake; early
		// data comes before it, from an address a blind sender may forge.
		ck.invalidf(f+".http3ZeroRtt", "early data is served before the client's address is validated (a sender that never completes the handshake may forge it), so allowedSources and deniedSources could not hold for it; remove http3ZeroRtt or the source ranges")
	}
	if l.GetRedirectToHttps() && proto != "http" {
		ck.invalidf(f+".redirectToHttps", "only http listeners can redirect to https")
	}
	checkPositive(&ck, f+".idleTimeout", l.GetIdleTimeout())
	if !tooMany(&ck, f+".trustedProxies", len(l.GetTrustedProxies()), MaxTrustedProxies) {
		for j, c := range l.GetTrustedProxies() {
			if _, err := netip.ParsePrefix(c); err != nil {
				ck.invalidf(fmt.Sprintf("%s.trustedProxies[%d]", f, j), "%s is not a CIDR (like 192.0.2.0/24)", Excerpt(c))
			}
		}
	}
	checkListenerEdge(&ck, f, l)
	return ck.errs
}

func checkListenerTLS(ck *checker, f string, l *pb.Listener) {
	tls := l.GetTls()
	empty := !tls.GetAcme() && len(tls.GetCertificates()) == 0 && tls.GetMinVersion() == "" && tls.GetClientValidation() == nil && len(tls.GetSniScopes()) == 0
	if l.GetProtocol() == "tls-passthrough" && terminates(l) {
		checkTerminateTLS(ck, f, l)
		return
	}
	if l.GetProtocol() != "https" {
		if !empty {
			ck.invalidf(f+".tls", "only https listeners terminate TLS (and tls-passthrough listeners whose sniRoutes terminate); remove tls (tls-passthrough forwards TLS untouched)")
		}
		return
	}
	if !tls.GetAcme() && len(tls.GetCertificates()) == 0 {
		ck.invalidf(f+".tls", "https listeners need tls.acme: true or tls.certificates")
	}
	switch tls.GetMinVersion() {
	case "", "tls1.2", "tls1.3":
	default:
		ck.invalidf(f+".tls.minVersion", "%q is not one of tls1.2, tls1.3", tls.GetMinVersion())
	}
	checkClientValidation(ck, f+".tls.clientValidation", tls.GetClientValidation())
	checkSNIScopes(ck, f, tls.GetSniScopes())
}

// checkListenerCerts checks the certificates an https listener lists.
func checkListenerCerts(ck *checker, f string, lb *pb.LoadBalancer, l *pb.Listener, c Catalog) {
	tls := l.GetTls()
	if !(l.GetProtocol() == "https" || l.GetProtocol() == "tls-passthrough" && terminates(l)) || tooMany(ck, f+".tls.certificates", len(tls.GetCertificates()), MaxListenerCertificates) {
		return
	}
	certs, _ := c.(CertificateCatalog)
	checkNameList(ck, f+".tls.certificates", "certificates", tls.GetCertificates(), func(name string) string {
		if certs != nil && certs.Certificate(lb.GetTenant(), name) == nil {
			return fmt.Sprintf("certificate %s/%s does not exist; upload it first", lb.GetTenant(), name)
		}
		return ""
	})
}

func checkPositive(ck *checker, field string, d *durationpb.Duration) {
	if d == nil {
		return
	}
	if err := d.CheckValid(); err != nil || d.AsDuration() <= 0 {
		ck.invalidf(field, "must be a positive duration, got %s", fmtDuration(d))
	}
}

func fmtDuration(d *durationpb.Duration) string {
	if d.CheckValid() != nil {
		return fmt.Sprintf("%ds%dns", d.GetSeconds(), d.GetNanos())
	}
	return d.AsDuration().String()
}

type routeKey struct{ host, path, pathType, ports string }

// checkRoutes checks hosts against the tenant's domains and the TLS that
// the https listeners need for them.
func checkRoutes(ck *checker, lb *pb.LoadBalancer, tenant *pb.Tenant) {
	routes := lb.GetRoutes()
	if len(routes) == 0 {
		return
	}
	httpListener, acmeOnly := false, -1
	for i, l := range lb.GetListeners() {
		switch l.GetProtocol() {
		case "http":
			httpListener = true
		case "https":
			httpListener = true
			if l.GetTls().GetAcme() && len(l.GetTls().GetCertificates()) == 0 && acmeOnly < 0 {
				acmeOnly = i
			}
		}
	}
	if !httpListener {
		ck.invalidf("routes", "routes need an http or https listener; add one or remove the routes")
	}
	seen := map[routeKey]int{}
	for i, r := range routes {
		f := fmt.Sprintf("routes[%d]", i)
		host := r.GetHost()
		hostOK := checkRouteHostIn(ck, f+".host", host, tenant)
		if len(host) > MaxHostLen || tooLong(ck, f+".path", r.GetPath(), MaxPathLen) {
			continue
		}
		// A wildcard is issued through DNS-01 when its zone is one the LB
		// hosts answer (--dns-zones, a setting of the hosts, not of the
		// state): else its Certificate is refused, saying why
		// (proxy/certs computeDesired).
		if hostOK && acmeOnly >= 0 && host == "" {
			ck.invalidf(f+".host", "required: listeners[%d] gets its certificate from ACME, which needs a host name", acmeOnly)
		}
		if len(r.GetMatches()) > 0 {
			if r.GetPath() != "" || r.GetPathType() != "" {
				ck.invalidf(f+".path", "leave path and pathType out when matches is set; give each match its path")
			}
		} else {
			path, pt := checkPathMatch(ck, f, r.GetPath(), r.GetPathType())
			key := routeKey{host, path, pt, fmt.Sprint(sortedPorts(r.GetPorts()))}
			if j, dup := seen[key]; dup {
				h := host
				if h == "" {
					h = "(any host)"
				}
				ck.invalidf(f, "duplicates routes[%d] (host %s, path %s, %s)", j, h, path, pt)
			} else {
				seen[key] = i
			}
		}
		checkRoutePorts(ck, lb, f, r)
		checkRouteRest(ck, lb, f, r)
	}
	checkRouteRegexBudget(ck, lb)
	checkWAFRuleSets(ck, routes)
}

// MaxRoutePorts bounds routes[].ports.
const MaxRoutePorts = 64

// checkRoutePorts checks that a route's ports name http or https
// listeners of the load balancer, each once.
func checkRoutePorts(ck *checker, lb *pb.LoadBalancer, f string, r *pb.Route) {
	if tooMany(ck, f+".ports", len(r.GetPorts()), MaxRoutePorts) {
		return
	}
	l7 := map[uint32]bool{}
	for _, l := range lb.GetListeners() {
		if p := l.GetProtocol(); p == "http" || p == "https" {
			l7[l.GetPort()] = true
		}
	}
	seen := map[uint32]int{}
	for i, p := range r.GetPorts() {
		pf := fmt.Sprintf("%s.ports[%d]", f, i)
		if j, dup := seen[p]; dup {
			ck.invalidf(pf, "port %d is already listed as ports[%d]", p, j)
			continue
		}
		seen[p] = i
		if !l7[p] {
			ck.invalidf(pf, "no http or https listener has port %d; name one of the load balancer's http or https listener ports, or leave ports out for all of them", p)
		}
	}
}

// sortedPorts returns a sorted copy of ports.
func sortedPorts(ports []uint32) []uint32 {
	out := slices.Clone(ports)
	slices.Sort(out)
	return out
}

// MaxHostLen bounds a host name.
const MaxHostLen = 253

// CheckRouteHost checks the host of a route at field ("routes[0].host"):
// empty, exact or "*.suffix", inside the tenant's domains (tenant nil: not
// checked). It returns the rules broken, with the field paths of the
// manifest.
func CheckRouteHost(field, host string, tenant *pb.Tenant) []FieldError {
	var ck checker
	checkRouteHostIn(&ck, field, host, tenant)
	return ck.errs
}

// checkRouteHostIn is CheckRouteHost; it reports whether the host is well
// formed (inside the domains or not).
func checkRouteHostIn(ck *checker, field, host string, tenant *pb.Tenant) bool {
	if tooLong(ck, field, host, MaxHostLen) || !checkRouteHost(ck, field, host) {
		return false
	}
	if host != "" && tenant != nil && !HostInDomains(host, tenant.GetDomains()) {
		ck.invalidf(field, "%s is not inside the tenant's domains (%s)", host, listOrNone(tenant.GetDomains(), "the tenant has none; the operator sets them"))
	}
	return true
}

// checkRouteHost checks the form of a route host: empty, exact, or
// "*.suffix".
func checkRouteHost(ck *checker, field, host string) bool {
	if host == "" {
		return true
	}
	name := host
	if rest, ok := strings.CutPrefix(host, "*."); ok {
		name = rest
	}
	if strings.Contains(name, "*") {
		ck.invalidf(field, "%q: a wildcard must be the whole first label, like *.acme.example", host)
		return false
	}
	if why := DNSNameProblem(name); why != "" {
		ck.invalidf(field, "%s", why)
		return false
	}
	return true
}
