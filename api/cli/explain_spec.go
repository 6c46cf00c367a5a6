package cli

import (
	"fmt"
	"io"
	"strconv"
	"strings"

	pb "github.com/teapot-lb/teapot-lb/api/proto/teapotv1"
)

// explainRoutesShown bounds the routes explain lists one by one.
const explainRoutesShown = 20

// listenerText is a listener as explain's spec shows it: port and
// protocol, then what it does beyond forwarding; pool is the backend
// pool it sends to (nil for none).
func listenerText(l *pb.Listener, pool *pb.BackendPool) string {
	s := fmt.Sprintf("%d/%s", l.GetPort(), l.GetProtocol())
	var what []string
	tls := l.GetTls()
	switch {
	case tls.GetAcme():
		what = append(what, "ACME certificates")
	case len(tls.GetCertificates()) > 0:
		what = append(what, "certificates "+strings.Join(tls.GetCertificates(), ", "))
	}
	if cv := tls.GetClientValidation(); cv != nil {
		mode := "required"
		if cv.GetMode() == "optional" {
			mode = "optional"
		}
		what = append(what, "client certificates "+mode)
	}
	if n := len(tls.GetSniScopes()); n > 0 {
		what = append(what, fmt.Sprintf("421 for a Host of another of %d sites than the server name", n))
	}
	if n := len(l.GetSniRoutes()); n > 0 {
		what = append(what, fmt.Sprintf("%d server-name routes", n))
	}
	switch {
	case l.GetHttp3ZeroRtt():
		what = append(what, "HTTP/3 with 0-RTT (early GET, HEAD and OPTIONS served, others answered 425)")
	case l.GetHttp3():
		what = append(what, "HTTP/3")
	}
	if l.GetRedirectToHttps() {
		what = append(what, "redirects to https")
	}
	if n := len(l.GetAllowedSources()) + len(l.GetDeniedSources()); n > 0 {
		what = append(what, fmt.Sprintf("%d source ranges", n))
	}
	if rl := l.GetRateLimit(); rl != nil {
		what = append(what, "rate limit "+rateText(rl))
	}
	if pool.GetClientSource() {
		what = append(what, "members dialled from the client's own address")
	}
	if len(what) == 0 {
		return s
	}
	return s + " (" + strings.Join(what, "; ") + ")"
}

// rateText is a rate limit in a few words.
func rateText(rl *pb.RateLimit) string {
	var parts []string
	if n := rl.GetRequestsPerSecond(); n > 0 {
		parts = append(parts, strconv.Itoa(int(n))+" req/s")
	}
	if n := rl.GetConnectionsPerSecond(); n > 0 {
		parts = append(parts, strconv.Itoa(int(n))+" conn/s")
	}
	if n := rl.GetBurst(); n > 0 {
		parts = append(parts, "burst "+strconv.Itoa(int(n)))
	}
	key := rl.GetKey()
	if key == "" {
		key = "client"
	}
	return strings.Join(parts, ", ") + " per " + key
}

// routeText is a route as explain's spec shows it: host and path, where
// it sends requests, and what it does to them on the way.
func routeText(r *pb.Route) string {
	host := r.GetHost()
	if host == "" {
		host = "any host"
	}
	path := r.GetPath()
	if len(r.GetMatches()) > 0 {
		path = fmt.Sprintf("%d matches", len(r.GetMatches()))
	} else if r.GetPathType() != "" && r.GetPathType() != "prefix" {
		path += " (" + r.GetPathType() + ")"
	}
	to := r.GetPool()
	switch {
	case r.GetNotFound():
		to = "404"
	case len(r.GetBackends()) > 0:
		var pools []string
		for _, b := range r.GetBackends() {
			pools = append(pools, b.GetPool())
		}
		to = strings.Join(pools, ", ")
	}
	var what []string
	for _, f := range r.GetFilters() {
		switch {
		case f.GetCors() != nil:
			what = append(what, "CORS for "+strings.Join(f.GetCors().GetAllowOrigins(), ", "))
		case f.GetRequestRedirect() != nil:
			what = append(what, "redirect")
		case f.GetUrlRewrite() != nil:
			what = append(what, "rewrite")
		case f.GetRequestMirror() != nil:
			what = append(what, "mirror to "+f.GetRequestMirror().GetPool())
		case f.GetRequestHeaderModifier() != nil:
			what = append(what, "request headers changed")
		case f.GetResponseHeaderModifier() != nil:
			what = append(what, "response headers changed")
		}
	}
	if rt := r.GetRetry(); rt != nil {
		attempts := "the default attempts"
		if rt.Attempts != nil {
			attempts = strconv.Itoa(int(rt.GetAttempts())) + " attempts"
		}
		codes := make([]string, 0, len(rt.GetCodes()))
		for _, c := range rt.GetCodes() {
			codes = append(codes, strconv.Itoa(int(c)))
		}
		on := "connection errors"
		if len(codes) > 0 {
			on += " and " + strings.Join(codes, ", ")
		}
		what = append(what, "retry "+attempts+" on "+on)
	}
	if rl := r.GetRateLimit(); rl != nil {
		what = append(what, "rate limit "+rateText(rl))
	}
	if waf := r.GetWaf(); waf != nil {
		s := fmt.Sprintf("WAF %s, paranoia %d", waf.GetMode(), max(waf.GetParanoiaLevel(), 1))
		if n := len(waf.GetExcludeRules()); n > 0 {
			s += fmt.Sprintf(", %d rules excluded", n)
		}
		what = append(what, s)
	}
	if len(r.GetPorts()) > 0 {
		ports := make([]string, 0, len(r.GetPorts()))
		for _, p := range r.GetPorts() {
			ports = append(ports, strconv.Itoa(int(p)))
		}
		what = append(what, "ports "+strings.Join(ports, ", "))
	}
	s := host + path + " -> " + to
	if len(what) > 0 {
		s += " (" + strings.Join(what, "; ") + ")"
	}
	return s
}

// writeSpecListeners lists the load balancer's listeners, one a line.
func writeSpecListeners(w io.Writer, lb *pb.LoadBalancer) {
	if len(lb.GetListeners()) == 0 {
		fmt.Fprintln(w, "  listeners: -")
	}
	for i, l := range lb.GetListeners() {
		label := ""
		if i == 0 {
			label = "listeners:"
		}
		fmt.Fprintf(w, "  %-10s %s\n", label, listenerText(l, lb.GetPools()[l.GetPool()]))
		writeNotAsWritten(w, lb, fmt.Sprintf("listeners[%d]", i))
	}
}

// writeNotAsWritten lists, under a listener or route of the spec, the
// load balancer's problems that name a field of it (path "listeners[0]",
// "routes[2]"): what the hosts do differs from what the line above says
// (a part left out, a default used instead).
func writeNotAsWritten(w io.Writer, lb *pb.LoadBalancer, path string) {
	for _, p := range lb.GetStatus().GetProblems() {
		f := p.GetField()
		if f == path || strings.HasPrefix(f, path+".") {
			fmt.Fprintf(w, "  %-10s   not as written: %s: %s\n", "", f, p.GetReason())
		}
	}
}

// writeSpecRoutes lists the load balancer's routes, the first
// explainRoutesShown of them.
func writeSpecRoutes(w io.Writer, lb *pb.LoadBalancer) {
	for i, r := range lb.GetRoutes() {
		if i == explainRoutesShown {
			fmt.Fprintf(w, "             ... and %d more (teapot-lb get lb %s/%s -o yaml)\n", len(lb.GetRoutes())-i, lb.GetTenant(), lb.GetName())
			return
		}
		label := ""
		if i == 0 {
			label = "routes:"
		}
		fmt.Fprintf(w, "  %-10s %s\n", label, routeText(r))
		writeNotAsWritten(w, lb, fmt.Sprintf("routes[%d]", i))
	}
}
