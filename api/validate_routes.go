package api

import (
	"errors"
	"fmt"
	"regexp/syntax"
	"strings"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	pb "github.com/teapot-lb/teapot-lb/api/proto/teapotv1"
)

// Bounds on what one route may hold. Tenants write routes, so every list
// and every pattern is bounded; the numbers follow the Gateway API's own
// limits where it has them.
const (
	// MaxRouteMatches bounds routes[].matches.
	MaxRouteMatches = 64
	// MaxMatchConditions bounds matches[].headers and matches[].queryParams.
	MaxMatchConditions = 16
	// MaxRouteBackends bounds routes[].backends.
	MaxRouteBackends = 16
	// MaxRouteFilters bounds routes[].filters.
	MaxRouteFilters = 16
	// MaxRouteMirrors bounds the requestMirror filters of one route.
	MaxRouteMirrors = 4
	// MaxHeaderEdits bounds each of set, add and remove of a header modifier.
	MaxHeaderEdits = 16
	// MaxHeaderValueLen bounds a header or query value in a match or filter.
	MaxHeaderValueLen = 4096
	// MaxBackendWeight is the highest routes[].backends[].weight.
	MaxBackendWeight = 1000000
	// MaxRegexLen bounds a regular expression as written.
	MaxRegexLen = 1024
	// MaxRegexRepeat bounds a repetition count ({n}, {n,m}): a count
	// copies what it repeats that many times into the program.
	MaxRegexRepeat = 256
	// MaxRegexInsts bounds one compiled regular expression (RE2 program
	// instructions, after simplification); matching costs time linear in
	// the input times this. Route regexes seen in practice compile to
	// 10-150 (a UUID 36, a SHA-256 hex digest 66).
	MaxRegexInsts = 1000
	// MaxRegexInstsPerLB bounds all the compiled regular expressions of
	// one load balancer together. With MaxRegexSubjectLen it bounds what
	// one request can cost in matching: at most 2,000 x 1,024 program
	// steps, 8-9 ms of a core for the worst patterns (measured by
	// proxy/snapshot's BenchmarkRegexMatch); the data plane charges that
	// time to the tenant's regex CPU budget (proxy/DESIGN.md).
	MaxRegexInstsPerLB = 2000
	// MaxRegexSubjectLen bounds what a regular expression is matched
	// against: a request path, header value or query value longer than
	// this never matches a regex condition (exact ones still apply).
	MaxRegexSubjectLen = 1024
	// DefaultRegexCPUMillicores is quotas.regexCpuMillicores unset: the
	// CPU an LB host spends matching one tenant's regular expressions, in
	// thousandths of a core.
	DefaultRegexCPUMillicores = 100
	// MaxRouteTimeout bounds routes[].timeouts.
	MaxRouteTimeout = time.Hour
)

// RouteMethods are the methods matches[].method accepts.
var RouteMethods = []string{"GET", "HEAD", "POST", "PUT", "DELETE", "CONNECT", "OPTIONS", "TRACE", "PATCH"}

// RedirectStatuses are the codes requestRedirect.statusCode accepts.
var RedirectStatuses = []uint32{301, 302, 303, 307, 308}

// reservedHeaders may not be changed by a header modifier: they frame the
// message or the connection (changing them would let a request smuggle
// another), or they have a field of their own (urlRewrite.hostname).
var reservedHeaders = map[string]bool{
	"host": true, "content-length": true, "transfer-encoding": true, "connection": true,
	"keep-alive": true, "proxy-connection": true, "upgrade": true, "te": true, "trailer": true,
}

// Refusals of a regular expression (errors.Is), wrapped with the
// measured size and the bound.
var (
	ErrRegexSyntax = errors.New("is not a regular expression (RE2 syntax)")
	ErrRegexSize   = errors.New("is too big a regular expression")
)

// CompileRouteRegex parses and compiles a route's regular expression
// (RE2 syntax, matching the whole value) within MaxRegexLen,
// MaxRegexRepeat and MaxRegexInsts, and returns the size of its program.
// It is the one check of a regular expression: validation, the Gateway
// translation and the data plane's compile all call it.
func CompileRouteRegex(expr string) (int, error) {
	regexCompiles.Add(1)
	if len(expr) > MaxRegexLen {
		return 0, fmt.Errorf("%w: %d bytes long; at most %d (a fixed bound)", ErrRegexSize, len(expr), MaxRegexLen)
	}
	re, err := syntax.Parse(expr, syntax.Perl)
	if err != nil {
		return 0, fmt.Errorf("%w: %v", ErrRegexSyntax, shortSyntaxError(err))
	}
	if n := maxRepeat(re); n > MaxRegexRepeat {
		return 0, fmt.Errorf("%w: repeats something %d times; a repetition count ({n} or {n,m}) is at most %d (a fixed bound): use + or * where any count will do", ErrRegexSize, n, MaxRegexRepeat)
	}
	prog, err := syntax.Compile(re.Simplify())
	if err != nil {
		return 0, fmt.Errorf("%w: %v", ErrRegexSyntax, shortSyntaxError(err))
	}
	if n := len(prog.Inst); n > MaxRegexInsts {
		return n, fmt.Errorf("%w: compiles to %d instructions; at most %d (a fixed bound): use fewer or smaller repetitions and alternatives", ErrRegexSize, n, MaxRegexInsts)
	}
	return len(prog.Inst), nil
}

// maxRepeat returns the largest repetition count in re.
func maxRepeat(re *syntax.Regexp) int {
	n := 0
	if re.Op == syntax.OpRepeat {
		n = max(re.Min, re.Max)
	}
	for _, s := range re.Sub {
		n = max(n, maxRepeat(s))
	}
	return n
}

// shortSyntaxError quotes at most a short prefix of the expression a
// syntax error names.
func shortSyntaxError(err error) string {
	var se *syntax.Error
	if errors.As(err, &se) {
		return fmt.Sprintf("%s: %s", se.Code, Excerpt(se.Expr))
	}
	return err.Error()
}

// RegexUsage is what the regular expressions of some routes cost: the
// instructions they compile to and how many there are (each is one regex
// match of the quotas). Expressions that do not compile count nothing:
// they are refused on their own.
type RegexUsage struct {
	Insts, Matches int
}

// regexCount counts the regular expressions of lb's routes as the quotas
// do (RouteRegexes), without compiling them.
func regexCount(lb *pb.LoadBalancer) int {
	n := 0
	for _, r := range lb.GetRoutes() {
		if r.GetPathType() == "regex" {
			n++
		}
		for _, m := range r.GetMatches() {
			if m.GetPathType() == "regex" {
				n++
			}
			for _, h := range m.GetHeaders() {
				if h.GetType() == "regex" {
					n++
				}
			}
			for _, q := range m.GetQueryParams() {
				if q.GetType() == "regex" {
					n++
				}
			}
			if g := m.GetGrpc(); g.GetType() == "regex" {
				n += boolInt(g.GetService() != "") + boolInt(g.GetMethod() != "")
			}
		}
	}
	return n
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

// CheckLB reports whether u, the regular expressions of one load
// balancer, is within MaxRegexInstsPerLB, and why not. Validation, the
// data plane's compile call it (so does the Gateway translation, by its own sum). How many
// regular expressions a load balancer and a tenant may have is a quota
// (quotas.regexMatchesPerLb, quotas.regexMatches: see quotas.go).
func (u RegexUsage) CheckLB() error {
	if u.Insts > MaxRegexInstsPerLB {
		return fmt.Errorf("%w: the regular expressions compile to %d instructions together; at most %d per load balancer (a fixed bound): use prefix or exact matches where they do", ErrRegexSize, u.Insts, MaxRegexInstsPerLB)
	}
	return nil
}

// RouteRegexes calls fn with every regular expression of r.
func RouteRegexes(r *pb.Route, fn func(field, expr string)) {
	if r.GetPathType() == "regex" {
		fn("path", r.GetPath())
	}
	for i, m := range r.GetMatches() {
		mf := fmt.Sprintf("matches[%d]", i)
		if m.GetPathType() == "regex" {
			fn(mf+".path", m.GetPath())
		}
		for j, h := range m.GetHeaders() {
			if h.GetType() == "regex" {
				fn(fmt.Sprintf("%s.headers[%d].value", mf, j), h.GetValue())
			}
		}
		for j, q := range m.GetQueryParams() {
			if q.GetType() == "regex" {
				fn(fmt.Sprintf("%s.queryParams[%d].value", mf, j), q.GetValue())
			}
		}
		if g := m.GetGrpc(); g.GetType() == "regex" {
			if g.GetService() != "" {
				fn(mf+".grpc.service", g.GetService())
			}
			if g.GetMethod() != "" {
				fn(mf+".grpc.method", g.GetMethod())
			}
		}
	}
}

// CheckRoute checks one route of lb as Validate does, apart from what
// depends on the other routes and the listeners (host, duplicates): its
// path or matches, backends (which must name lb's pools), filters and
// timeouts, every bound of this file included. field names the route in
// the errors ("routes[3]"). It returns nil or a *ValidationError, and the
// instructions its regular expressions compile to, which count towards
// MaxRegexInstsPerLB.
func CheckRoute(lb *pb.LoadBalancer, field string, r *pb.Route) (regexInsts int, err error) {
	ck := &checker{}
	if len(r.GetMatches()) > 0 {
		if r.GetPath() != "" || r.GetPathType() != "" {
			ck.invalidf(field+".path", "leave path and pathType out when matches is set; give each match its path")
		}
	} else {
		checkPathMatch(ck, field, r.GetPath(), r.GetPathType())
	}
	checkRouteRest(ck, lb, field, r)
	RouteRegexes(r, func(_, expr string) {
		if n, err := CompileRouteRegex(expr); err == nil {
			regexInsts += n
		}
	})
	return regexInsts, ck.err("")
}

// checkPathMatch checks a path and its type, and returns them with
// defaults filled in.
func checkPathMatch(ck *checker, f, path, pt string) (string, string) {
	switch pt {
	case "", "prefix":
		pt = "prefix"
	case "exact", "regex":
	default:
		ck.invalidf(f+".pathType", "%q is not one of prefix, exact, regex", pt)
		return path, pt
	}
	if tooLong(ck, f+".path", path, MaxPathLen) {
		return path, pt
	}
	if pt == "regex" {
		if path == "" {
			ck.invalidf(f+".path", "required with pathType regex: a regular expression the whole path must match")
		} else if _, err := ck.compileRegex(path); err != nil {
			ck.invalidf(f+".path", "%v", err)
		}
		return path, pt
	}
	checkPlainPath(ck, f+".path", path)
	if path == "" {
		path = "/"
	}
	return path, pt
}

func checkPlainPath(ck *checker, f, path string) {
	switch {
	case path != "" && !strings.HasPrefix(path, "/"):
		ck.invalidf(f, "%q must start with /", path)
	case strings.ContainsAny(path, " ?#\t\r\n\x00"):
		ck.invalidf(f, "%q must not contain spaces, '?' or '#'", path)
	}
}

// checkRouteRest checks a route's matches, backends, filters and timeouts.
func checkRouteRest(ck *checker, lb *pb.LoadBalancer, f string, r *pb.Route) {
	if r.GetNotFound() {
		checkNotFoundRoute(ck, f, r)
		return
	}
	if !tooMany(ck, f+".matches", len(r.GetMatches()), MaxRouteMatches) {
		for i, m := range r.GetMatches() {
			checkRouteMatch(ck, fmt.Sprintf("%s.matches[%d]", f, i), m)
		}
	}
	redirect := false
	for _, fl := range r.GetFilters() {
		redirect = redirect || fl.GetRequestRedirect() != nil
	}
	checkRouteBackends(ck, lb, f, r, redirect)
	checkRouteFilters(ck, lb, f, r)
	checkRouteTimeouts(ck, f+".timeouts", r.GetTimeouts())
	checkRouteRetry(ck, f+".retry", r.GetRetry(), redirect)
	ck.add(CheckRouteRateLimit(f, r))
}

func checkRouteMatch(ck *checker, f string, m *pb.RouteMatch) {
	if g := m.GetGrpc(); g != nil {
		if m.GetPath() != "" || m.GetPathType() != "" {
			ck.invalidf(f+".path", "leave path and pathType out with grpc, which sets the path")
		}
		checkGRPCMatch(ck, f+".grpc", g)
	} else {
		checkPathMatch(ck, f, m.GetPath(), m.GetPathType())
	}
	if !tooMany(ck, f+".headers", len(m.GetHeaders()), MaxMatchConditions) {
		seen := map[string]bool{}
		for i, h := range m.GetHeaders() {
			hf := fmt.Sprintf("%s.headers[%d]", f, i)
			checkValueMatch(ck, hf, h, true)
			if k := strings.ToLower(h.GetName()); seen[k] {
				ck.invalidf(hf+".name", "header %s is matched twice in this match; keep one", h.GetName())
			} else {
				seen[k] = true
			}
		}
	}
	if !tooMany(ck, f+".queryParams", len(m.GetQueryParams()), MaxMatchConditions) {
		seen := map[string]bool{}
		for i, q := range m.GetQueryParams() {
			qf := fmt.Sprintf("%s.queryParams[%d]", f, i)
			checkValueMatch(ck, qf, q, false)
			if seen[q.GetName()] {
				ck.invalidf(qf+".name", "query parameter %s is matched twice in this match; keep one", q.GetName())
			} else {
				seen[q.GetName()] = true
			}
		}
	}
	if meth := m.GetMethod(); meth != "" && !contains(RouteMethods, meth) {
		ck.invalidf(f+".method", "%q is not one of %s", meth, strings.Join(RouteMethods, ", "))
	}
}

func contains[T comparable](list []T, v T) bool {
	for _, x := range list {
		if x == v {
			return true
		}
	}
	return false
}

func checkValueMatch(ck *checker, f string, v *pb.ValueMatch, header bool) {
	name := v.GetName()
	switch {
	case name == "":
		ck.invalidf(f+".name", "required")
	case tooLong(ck, f+".name", name, MaxHeaderNameLen):
	case header && !IsToken(name):
		ck.invalidf(f+".name", "%q is not a header name (letters, digits and !#$%%&'*+-.^_`|~)", name)
	case !header && strings.ContainsAny(name, "&=#? \t\r\n\x00"):
		ck.invalidf(f+".name", "%q must not contain '&', '=', '#', '?' or spaces", name)
	}
	val := v.GetValue()
	if tooLong(ck, f+".value", val, MaxHeaderValueLen) {
		return
	}
	switch v.GetType() {
	case "", "exact":
		if strings.ContainsAny(val, "\r\n\x00") {
			ck.invalidf(f+".value", "must not contain CR, LF or NUL")
		}
	case "regex":
		if _, err := ck.compileRegex(val); err != nil {
			ck.invalidf(f+".value", "%v", err)
		}
	default:
		ck.invalidf(f+".type", "%q is not one of exact, regex", v.GetType())
	}
}

func checkGRPCMatch(ck *checker, f string, g *pb.GRPCMethodMatch) {
	svc, meth := g.GetService(), g.GetMethod()
	if svc == "" && meth == "" {
		ck.invalidf(f, "set service, method or both")
		return
	}
	switch g.GetType() {
	case "", "exact":
		if svc != "" && !grpcName(svc, true) {
			ck.invalidf(f+".service", "%q is not a gRPC service name (letters, digits, '_' and '.', like shop.v1.Cart)", svc)
		}
		if meth != "" && !grpcName(meth, false) {
			ck.invalidf(f+".method", "%q is not a gRPC method name (letters, digits and '_')", meth)
		}
	case "regex":
		for _, x := range []struct{ field, v string }{{"service", svc}, {"method", meth}} {
			if x.v == "" {
				continue
			}
			if _, err := ck.compileRegex(x.v); err != nil {
				ck.invalidf(f+"."+x.field, "%v", err)
			}
		}
	default:
		ck.invalidf(f+".type", "%q is not one of exact, regex", g.GetType())
	}
}

func grpcName(s string, dots bool) bool {
	if len(s) > MaxPathLen/2 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || dots && c == '.') {
			return false
		}
	}
	return s != ""
}

func checkRouteBackends(ck *checker, lb *pb.LoadBalancer, f string, r *pb.Route, redirect bool) {
	bs := r.GetBackends()
	switch {
	case r.GetPool() != "" && len(bs) > 0:
		ck.invalidf(f+".pool", "set pool or backends, not both")
		return
	case r.GetPool() != "":
		checkPoolRef(ck, lb.GetPools(), f+".pool", r.GetPool())
		return
	case len(bs) == 0:
		if !redirect {
			ck.invalidf(f+".pool", "required: name one of the load balancer's pools (or give backends, or a requestRedirect filter)")
		}
		return
	}
	if tooMany(ck, f+".backends", len(bs), MaxRouteBackends) {
		return
	}
	for i, b := range bs {
		bf := fmt.Sprintf("%s.backends[%d]", f, i)
		if b.GetUnavailable() {
			if b.GetPool() != "" {
				ck.invalidf(bf+".pool", "leave it out when unavailable is set")
			}
		} else {
			checkPoolRef(ck, lb.GetPools(), bf+".pool", b.GetPool())
		}
		if b.Weight != nil && b.GetWeight() > MaxBackendWeight {
			ck.invalidf(bf+".weight", "must be at most %d, got %d", MaxBackendWeight, b.GetWeight())
		}
		checkBackendHeaders(ck, bf, b)
	}
}

func checkPoolRef(ck *checker, pools map[string]*pb.BackendPool, f, pool string) {
	if pool == "" {
		ck.invalidf(f, "required: name one of the load balancer's pools")
	} else if _, ok := pools[pool]; !ok {
		ck.invalidf(f, "backend pool %s is not defined in pools", pool)
	}
}

func checkRouteTimeouts(ck *checker, f string, t *pb.RouteTimeouts) {
	if t == nil {
		return
	}
	req := checkRouteTimeout(ck, f+".request", t.GetRequest())
	be := checkRouteTimeout(ck, f+".backendRequest", t.GetBackendRequest())
	if req > 0 && be > req {
		ck.invalidf(f+".backendRequest", "%s is longer than request %s; make it at most that", be, req)
	}
}

func checkRouteTimeout(ck *checker, f string, d *durationpb.Duration) time.Duration {
	if d == nil {
		return 0
	}
	if err := d.CheckValid(); err != nil || d.AsDuration() < 0 || d.AsDuration() > MaxRouteTimeout {
		ck.invalidf(f, "must be a duration from 0 (none) to %s, got %s", MaxRouteTimeout, fmtDuration(d))
		return 0
	}
	return d.AsDuration()
}
