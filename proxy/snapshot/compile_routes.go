package snapshot

import (
	"crypto/sha256"
	"net/textproto"
	"regexp"
	"strconv"
	"strings"

	"google.golang.org/protobuf/proto"

	"github.com/teapot-lb/teapot-lb/api"
	pb "github.com/teapot-lb/teapot-lb/api/proto/teapotv1"
)

// extended reports whether a model route needs more than host, path and
// pool: it compiles with extRoutes then.
func extended(r *pb.Route) bool {
	return len(r.GetMatches())+len(r.GetBackends())+len(r.GetFilters()) > 0 || r.GetTimeouts() != nil ||
		r.GetPathType() == "regex"
}

// extRoutes compiles a route with matches, backends, filters or timeouts
// into one Route per match. A broken part skips the whole route with a
// problem: half a route could send traffic where its writer did not want.
func (b *lbCompile) extRoutes(f string, index int, host string, r *pb.Route, pools poolSet) []Route {
	ext := RouteExt{
		RequestTimeout: r.GetTimeouts().GetRequest().AsDuration(),
		BackendTimeout: r.GetTimeouts().GetBackendRequest().AsDuration(),
	}
	if ext.RequestTimeout < 0 || ext.BackendTimeout < 0 || ext.RequestTimeout > api.MaxRouteTimeout || ext.BackendTimeout > api.MaxRouteTimeout {
		b.problem(f+".timeouts", "out of range; route skipped")
		return nil
	}
	var pool *Pool
	switch {
	case r.GetPool() != "":
		if pool = pools.get(r.GetPool()); pool == nil {
			b.problem(f+".pool", "backend pool %q is not defined in pools; route skipped", r.GetPool())
			return nil
		}
	case len(r.GetBackends()) > 0:
		for i, be := range r.GetBackends() {
			w := uint32(1)
			if be.Weight != nil {
				w = be.GetWeight()
			}
			wp := WeightedPool{Weight: min(w, api.MaxBackendWeight)}
			if !be.GetUnavailable() {
				if wp.Pool = pools.get(be.GetPool()); wp.Pool == nil {
					b.problem(f+".backends["+strconv.Itoa(i)+"].pool", "backend pool %q is not defined in pools; route skipped", be.GetPool())
					return nil
				}
			}
			ext.Backends = append(ext.Backends, wp)
		}
	}
	filters, ok := b.filters(f, r, pools)
	if !ok {
		return nil
	}
	ext.Filters = filters
	if pool == nil && len(ext.Backends) == 0 && (filters == nil || filters.Redirect == nil) {
		b.problem(f+".pool", "no pool, backends or requestRedirect; route skipped")
		return nil
	}
	enc, err := proto.MarshalOptions{Deterministic: true}.Marshal(r)
	if err != nil {
		b.problem(f, "cannot be encoded: %v; route skipped", err)
		return nil
	}
	// One digest for all the route's matches: the encoding grows with the
	// route (up to megabytes), and a copy per match would be kept as long
	// as the snapshot.
	sum := sha256.Sum256(enc)
	base := string(sum[:])

	type pathMatch struct {
		path string
		pt   string
		m    *pb.RouteMatch
	}
	var ms []pathMatch
	if len(r.GetMatches()) == 0 {
		ms = append(ms, pathMatch{r.GetPath(), r.GetPathType(), nil})
	}
	for _, m := range r.GetMatches() {
		ms = append(ms, pathMatch{m.GetPath(), m.GetPathType(), m})
	}
	out := make([]Route, 0, len(ms))
	for i, pm := range ms {
		mf := f
		if pm.m != nil {
			mf = f + ".matches[" + strconv.Itoa(i) + "]"
		}
		e := ext
		e.Match = i
		e.key = base
		path, pt, ok := b.routePath(mf, pm.path, pm.pt, pm.m.GetGrpc(), &e)
		if !ok {
			return nil
		}
		if pm.m != nil {
			cond, ok := b.conditions(mf, pm.m)
			if !ok {
				return nil
			}
			e.Cond = cond
		}
		out = append(out, Route{Host: host, Path: path, PathType: pt, Pool: pool, Index: index, Ext: &e})
	}
	return out
}

// routePath compiles one match's path, or a gRPC method match into one.
func (b *lbCompile) routePath(f, path, pt string, g *pb.GRPCMethodMatch, e *RouteExt) (string, PathType, bool) {
	if g != nil {
		svc, meth := g.GetService(), g.GetMethod()
		if g.GetType() != "regex" {
			switch {
			case svc != "" && meth != "":
				return "/" + svc + "/" + meth, PathExact, true
			case svc != "":
				return "/" + svc, PathPrefix, true
			}
			svc, meth = "[^/]+", regexp.QuoteMeta(meth)
		} else {
			if svc == "" {
				svc = "[^/]+"
			}
			if meth == "" {
				meth = "[^/]+"
			}
			svc, meth = "(?:"+svc+")", "(?:"+meth+")"
		}
		path, pt = "/"+svc+"/"+meth, "regex"
	}
	switch pt {
	case "", "prefix":
		return cleanRoutePath(path, PathPrefix), PathPrefix, plainPathOK(b, f, path)
	case "exact":
		return cleanRoutePath(path, PathExact), PathExact, plainPathOK(b, f, path)
	case "regex":
		re, err := compileRegex(path)
		if err != nil {
			b.problem(f+".path", "%v; route skipped", err)
			return "", 0, false
		}
		e.PathRegex = re
		return path, PathRegex, true
	}
	b.problem(f+".path_type", "%q is not one of prefix, exact, regex; route skipped", pt)
	return "", 0, false
}

func plainPathOK(b *lbCompile, f, path string) bool {
	if path != "" && (!strings.HasPrefix(path, "/") || strings.ContainsAny(path, " ?#\t\r\n")) {
		b.problem(f+".path", "%q must start with / and hold no spaces, '?' or '#'; route skipped", path)
		return false
	}
	return true
}

func (b *lbCompile) conditions(f string, m *pb.RouteMatch) (*Conditions, bool) {
	c := &Conditions{Method: m.GetMethod()}
	for i, h := range m.GetHeaders() {
		v, ok := b.valueCond(f+".headers["+strconv.Itoa(i)+"]", h)
		if !ok {
			return nil, false
		}
		v.Name = textproto.CanonicalMIMEHeaderKey(v.Name)
		c.Headers = append(c.Headers, v)
		if v.Regex != nil {
			c.regexInsts += v.Regex.insts
		}
	}
	for i, q := range m.GetQueryParams() {
		v, ok := b.valueCond(f+".query_params["+strconv.Itoa(i)+"]", q)
		if !ok {
			return nil, false
		}
		c.Query = append(c.Query, v)
		if v.Regex != nil {
			c.regexInsts += v.Regex.insts
		}
	}
	if c.Method == "" && len(c.Headers) == 0 && len(c.Query) == 0 {
		return nil, true
	}
	return c, true
}

func (b *lbCompile) valueCond(f string, v *pb.ValueMatch) (ValueCond, bool) {
	out := ValueCond{Name: v.GetName(), Value: v.GetValue()}
	if v.GetType() == "regex" {
		re, err := compileRegex(v.GetValue())
		if err != nil {
			b.problem(f+".value", "%v; route skipped", err)
			return out, false
		}
		out.Regex = re
	}
	return out, true
}

// filters compiles a route's filters; nil when it has none.
func (b *lbCompile) filters(f string, r *pb.Route, pools poolSet) (*Filters, bool) {
	if len(r.GetFilters()) == 0 {
		return nil, true
	}
	out := &Filters{}
	for i, fl := range r.GetFilters() {
		ff := f + ".filters[" + strconv.Itoa(i) + "]"
		switch {
		case fl.GetRequestHeaderModifier() != nil:
			out.RequestHeaders = headerEdit(fl.GetRequestHeaderModifier())
		case fl.GetResponseHeaderModifier() != nil:
			out.ResponseHeaders = headerEdit(fl.GetResponseHeaderModifier())
		case fl.GetRequestRedirect() != nil:
			rd := fl.GetRequestRedirect()
			status := int(rd.GetStatusCode())
			if status == 0 {
				status = 302
			}
			out.Redirect = &Redirect{Scheme: rd.GetScheme(), Hostname: rd.GetHostname(), Port: uint16(rd.GetPort()),
				Path: pathChange(rd.GetPath()), Status: status}
		case fl.GetUrlRewrite() != nil:
			rw := fl.GetUrlRewrite()
			out.Rewrite = &Rewrite{Hostname: rw.GetHostname(), Path: pathChange(rw.GetPath())}
		case fl.GetRequestMirror() != nil:
			m := fl.GetRequestMirror()
			p := pools.get(m.GetPool())
			if p == nil {
				b.problem(ff+".request_mirror.pool", "backend pool %q is not defined in pools; route skipped", m.GetPool())
				return nil, false
			}
			mi := Mirror{Pool: p, Numerator: 100, Denominator: 100}
			switch {
			case m.GetFraction() != nil:
				mi.Numerator, mi.Denominator = m.GetFraction().GetNumerator(), m.GetFraction().GetDenominator()
				if mi.Denominator == 0 {
					mi.Denominator = 100
				}
			case m.Percent != nil:
				mi.Numerator = m.GetPercent()
			}
			out.Mirrors = append(out.Mirrors, mi)
		default:
			b.problem(ff, "sets no filter; route skipped")
			return nil, false
		}
	}
	return out, true
}

func headerEdit(m *pb.HeaderModifier) *HeaderEdit {
	e := &HeaderEdit{}
	for _, h := range m.GetSet() {
		e.Set = append(e.Set, HeaderValue{textproto.CanonicalMIMEHeaderKey(h.GetName()), h.GetValue()})
	}
	for _, h := range m.GetAdd() {
		e.Add = append(e.Add, HeaderValue{textproto.CanonicalMIMEHeaderKey(h.GetName()), h.GetValue()})
	}
	for _, n := range m.GetRemove() {
		e.Remove = append(e.Remove, textproto.CanonicalMIMEHeaderKey(n))
	}
	return e
}

func pathChange(pm *pb.PathModifier) *PathChange {
	switch {
	case pm == nil:
		return nil
	case pm.ReplaceFullPath != nil:
		return &PathChange{Value: pm.GetReplaceFullPath()}
	case pm.ReplacePrefixMatch != nil:
		return &PathChange{Prefix: true, Value: pm.GetReplacePrefixMatch()}
	}
	return nil
}
