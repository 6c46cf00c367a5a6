package snapshot

import (
	"crypto/sha256"
	"net/textproto"
	"regexp"
	"strconv"

	"google.golang.org/protobuf/proto"

	"github.com/teapot-lb/teapot-lb/api"
	pb "github.com/teapot-lb/teapot-lb/api/proto/teapotv1"
)

// extended reports whether a model route needs more than host, path and
// pool: it compiles with extRoutes then.
func extended(r *pb.Route) bool {
	return len(r.GetMatches())+len(r.GetBackends())+len(r.GetFilters()) > 0 || r.GetTimeouts() != nil ||
		r.GetPathType() == "regex" || r.GetRetry() != nil
}

// extRoutes compiles a route with matches, backends, filters or timeouts
// into one Route per match. The route has passed api.CheckRoute: every
// pool it names is one of pools, every regular expression compiles. It
// returns nil when the route is skipped, after a problem that says why.
func (b *lbCompile) extRoutes(f string, index int, host string, r *pb.Route, pools poolSet) []Route {
	ext := RouteExt{
		RequestTimeout: r.GetTimeouts().GetRequest().AsDuration(),
		BackendTimeout: r.GetTimeouts().GetBackendRequest().AsDuration(),
		Retry:          retryOf(r.GetRetry()),
		BackendHeaders: backendHeaders(r.GetBackends()),
	}
	pool := pools.get(r.GetPool())
	for _, be := range r.GetBackends() {
		w := uint32(1)
		if be.Weight != nil {
			w = be.GetWeight()
		}
		wp := WeightedPool{Weight: w}
		if !be.GetUnavailable() {
			wp.Pool = pools.get(be.GetPool())
		}
		ext.Backends = append(ext.Backends, wp)
	}
	ext.Filters = b.filters(r, pools)
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
	case "exact":
		return cleanRoutePath(path, PathExact), PathExact, true
	case "regex":
		re, err := compileRegex(path)
		if err != nil {
			b.problem(f+".path", "%v; route skipped", err)
			return "", 0, false
		}
		e.PathRegex = re
		return path, PathRegex, true
	}
	return cleanRoutePath(path, PathPrefix), PathPrefix, true
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
		v, ok := b.valueCond(f+".queryParams["+strconv.Itoa(i)+"]", q)
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
func (b *lbCompile) filters(r *pb.Route, pools poolSet) *Filters {
	if len(r.GetFilters()) == 0 {
		return nil
	}
	out := &Filters{}
	for _, fl := range r.GetFilters() {
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
			mi := Mirror{Pool: pools.get(m.GetPool()), Numerator: 100, Denominator: 100}
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
		case fl.GetCors() != nil:
			c := fl.GetCors()
			out.CORS = &CORS{AllowOrigins: c.GetAllowOrigins(), AllowMethods: c.GetAllowMethods(), AllowHeaders: c.GetAllowHeaders(),
				ExposeHeaders: c.GetExposeHeaders(), MaxAge: c.GetMaxAge(), AllowCredentials: c.GetAllowCredentials()}
			if out.CORS.MaxAge == 0 {
				out.CORS.MaxAge = api.DefaultCORSMaxAge
			}
		}
	}
	return out
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
