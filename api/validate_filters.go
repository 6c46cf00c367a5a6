package api

import (
	"fmt"
	"strings"

	pb "github.com/teapot-lb/teapot-lb/api/proto/teapotv1"
)

// RouteFilterKind names the one field set in a filter, as written in
// manifests, or "" when none or several are set.
func RouteFilterKind(fl *pb.RouteFilter) string {
	kind, n := "", 0
	for _, k := range []struct {
		set  bool
		name string
	}{
		{fl.GetRequestHeaderModifier() != nil, "requestHeaderModifier"},
		{fl.GetResponseHeaderModifier() != nil, "responseHeaderModifier"},
		{fl.GetRequestRedirect() != nil, "requestRedirect"},
		{fl.GetUrlRewrite() != nil, "urlRewrite"},
		{fl.GetRequestMirror() != nil, "requestMirror"},
		{fl.GetCors() != nil, "cors"},
	} {
		if k.set {
			kind, n = k.name, n+1
		}
	}
	if n != 1 {
		return ""
	}
	return kind
}

func checkRouteFilters(ck *checker, lb *pb.LoadBalancer, f string, r *pb.Route) {
	fs := r.GetFilters()
	if tooMany(ck, f+".filters", len(fs), MaxRouteFilters) {
		return
	}
	seen := map[string]int{}
	mirrors := 0
	for i, fl := range fs {
		ff := fmt.Sprintf("%s.filters[%d]", f, i)
		kind := RouteFilterKind(fl)
		if kind == "" {
			ck.invalidf(ff, "set exactly one of requestHeaderModifier, responseHeaderModifier, requestRedirect, urlRewrite, requestMirror, cors")
			continue
		}
		if kind == "requestMirror" {
			mirrors++
			if mirrors > MaxRouteMirrors {
				ck.invalidf(ff, "at most %d requestMirror filters per route", MaxRouteMirrors)
			}
		} else if j, dup := seen[kind]; dup {
			ck.invalidf(ff, "a second %s (filters[%d] is one); merge them", kind, j)
		} else {
			seen[kind] = i
		}
		switch kind {
		case "requestHeaderModifier":
			checkHeaderModifier(ck, ff+".requestHeaderModifier", fl.GetRequestHeaderModifier(), true)
		case "responseHeaderModifier":
			checkHeaderModifier(ck, ff+".responseHeaderModifier", fl.GetResponseHeaderModifier(), false)
		case "requestRedirect":
			checkRedirect(ck, ff+".requestRedirect", fl.GetRequestRedirect(), r)
		case "urlRewrite":
			checkRewrite(ck, ff+".urlRewrite", fl.GetUrlRewrite(), r)
		case "requestMirror":
			checkMirror(ck, lb, ff+".requestMirror", fl.GetRequestMirror())
		case "cors":
			checkCORS(ck, ff+".cors", fl.GetCors())
		}
	}
	_, redirect := seen["requestRedirect"]
	_, rewrite := seen["urlRewrite"]
	if redirect && rewrite {
		ck.invalidf(f+".filters", "requestRedirect and urlRewrite cannot be used together; keep one")
	}
}

// checkHeaderModifier checks a header modifier; request says it changes
// the request sent to a member.
func checkHeaderModifier(ck *checker, f string, m *pb.HeaderModifier, request bool) {
	for _, list := range []struct {
		name string
		hs   []*pb.HeaderValue
	}{{"set", m.GetSet()}, {"add", m.GetAdd()}} {
		lf := f + "." + list.name
		if tooMany(ck, lf, len(list.hs), MaxHeaderEdits) {
			continue
		}
		seen := map[string]bool{}
		for i, h := range list.hs {
			hf := fmt.Sprintf("%s[%d]", lf, i)
			if checkModifiedName(ck, hf+".name", h.GetName(), request) {
				if k := strings.ToLower(h.GetName()); seen[k] {
					ck.invalidf(hf+".name", "header %s is listed twice; keep one", h.GetName())
				} else {
					seen[k] = true
				}
			}
			if !tooLong(ck, hf+".value", h.GetValue(), MaxHeaderValueLen) && strings.ContainsAny(h.GetValue(), "\r\n\x00") {
				ck.invalidf(hf+".value", "must not contain CR, LF or NUL")
			}
		}
	}
	if tooMany(ck, f+".remove", len(m.GetRemove()), MaxHeaderEdits) {
		return
	}
	seen := map[string]bool{}
	for i, name := range m.GetRemove() {
		rf := fmt.Sprintf("%s.remove[%d]", f, i)
		if checkModifiedName(ck, rf, name, request) {
			if k := strings.ToLower(name); seen[k] {
				ck.invalidf(rf, "header %s is listed twice; keep one", name)
			} else {
				seen[k] = true
			}
		}
	}
}

// checkModifiedName checks the name of a header a filter changes; request
// says the filter changes the request sent to a member.
func checkModifiedName(ck *checker, f, name string, request bool) bool {
	switch {
	case name == "":
		ck.invalidf(f, "required: a header name")
	case tooLong(ck, f, name, MaxHeaderNameLen):
	case !IsToken(name):
		ck.invalidf(f, "%q is not a header name (letters, digits and !#$%%&'*+-.^_`|~)", name)
	case reservedHeaders[strings.ToLower(name)]:
		ck.invalidf(f, "%s frames the message or connection and cannot be changed by a filter (use urlRewrite.hostname for Host)", name)
	case request && IsRequestID(name):
		ck.invalidf(f, "%s is the request id the proxy fixes before a route is chosen and writes to the access log: the member receives a trusted proxy's id or one the proxy makes, and a route cannot change it; remove this edit", name)
	default:
		return true
	}
	return false
}

func checkRedirect(ck *checker, f string, rd *pb.RequestRedirect, r *pb.Route) {
	switch rd.GetScheme() {
	case "", "http", "https":
	default:
		ck.invalidf(f+".scheme", "%q is not one of http, https", rd.GetScheme())
	}
	if h := rd.GetHostname(); h != "" {
		if why := DNSNameProblem(h); why != "" {
			ck.invalidf(f+".hostname", "%s", why)
		}
	}
	if rd.Port != nil && (rd.GetPort() < 1 || rd.GetPort() > 65535) {
		ck.invalidf(f+".port", "must be 1 to 65535, got %d", rd.GetPort())
	}
	if c := rd.GetStatusCode(); c != 0 && !contains(RedirectStatuses, c) {
		ck.invalidf(f+".statusCode", "%d is not one of 301, 302, 303, 307, 308", c)
	}
	checkPathModifier(ck, f+".path", rd.GetPath(), r)
}

func checkRewrite(ck *checker, f string, rw *pb.URLRewrite, r *pb.Route) {
	if h := rw.GetHostname(); h != "" {
		if why := DNSNameProblem(h); why != "" {
			ck.invalidf(f+".hostname", "%s", why)
		}
	}
	if rw.GetHostname() == "" && rw.GetPath() == nil {
		ck.invalidf(f, "set hostname, path or both")
	}
	checkPathModifier(ck, f+".path", rw.GetPath(), r)
}

func checkPathModifier(ck *checker, f string, pm *pb.PathModifier, r *pb.Route) {
	if pm == nil {
		return
	}
	switch {
	case pm.ReplaceFullPath != nil && pm.ReplacePrefixMatch != nil:
		ck.invalidf(f, "set replaceFullPath or replacePrefixMatch, not both")
	case pm.ReplaceFullPath != nil:
		p := pm.GetReplaceFullPath()
		if !tooLong(ck, f+".replaceFullPath", p, MaxPathLen) {
			if p == "" {
				ck.invalidf(f+".replaceFullPath", "required: a path starting with /")
			}
			checkPlainPath(ck, f+".replaceFullPath", p)
		}
	case pm.ReplacePrefixMatch != nil:
		p := pm.GetReplacePrefixMatch()
		if !tooLong(ck, f+".replacePrefixMatch", p, MaxPathLen) {
			checkPlainPath(ck, f+".replacePrefixMatch", p)
		}
		if !prefixMatchesOnly(r) {
			ck.invalidf(f+".replacePrefixMatch", "needs every match of the route to have a prefix path (pathType prefix); use replaceFullPath")
		}
	default:
		ck.invalidf(f, "set replaceFullPath or replacePrefixMatch")
	}
}

// prefixMatchesOnly reports whether every path match of r is a prefix.
func prefixMatchesOnly(r *pb.Route) bool {
	if len(r.GetMatches()) == 0 {
		return r.GetPathType() == "" || r.GetPathType() == "prefix"
	}
	for _, m := range r.GetMatches() {
		if m.GetGrpc() != nil || (m.GetPathType() != "" && m.GetPathType() != "prefix") {
			return false
		}
	}
	return true
}

func checkMirror(ck *checker, lb *pb.LoadBalancer, f string, m *pb.RequestMirror) {
	checkPoolRef(ck, lb.GetPools(), f+".pool", m.GetPool())
	if m.Percent != nil && m.GetFraction() != nil {
		ck.invalidf(f, "set percent or fraction, not both")
	}
	if m.GetPercent() > 100 {
		ck.invalidf(f+".percent", "must be 0 to 100, got %d", m.GetPercent())
	}
	if fr := m.GetFraction(); fr != nil {
		d := fr.GetDenominator()
		if d == 0 {
			d = 100
		}
		if fr.GetNumerator() > d {
			ck.invalidf(f+".fraction", "numerator %d is larger than denominator %d", fr.GetNumerator(), d)
		}
	}
}
