package proxy

import (
	"github.com/teapot-lb/teapot-lb/proxy/l7"
	"github.com/teapot-lb/teapot-lb/proxy/snapshot"
)

// routeExt translates a compiled route's extensions into the engine's;
// nil for a route of host, path and pool only (the engine's fast paths).
func routeExt(ls *ListenerSnapshot, sr *snapshot.Route) *l7.RouteExt {
	se := sr.Ext
	if se == nil || (len(se.Backends) == 0 && se.Filters == nil && se.RequestTimeout == 0 && se.BackendTimeout == 0 && se.Retry == nil) {
		return nil
	}
	backend := func(p *snapshot.Pool) l7.Backend {
		if lp := ls.Pool(p); lp != nil {
			return lp.httpBackend(ls.budget, ls.tenant)
		}
		return nil
	}
	e := &l7.RouteExt{RequestTimeout: se.RequestTimeout, BackendTimeout: se.BackendTimeout}
	if sr.PathType == snapshot.PathPrefix && sr.Path != "/" {
		e.Prefix = sr.Path
	}
	if rt := se.Retry; rt != nil {
		e.Retry = &l7.Retry{Codes: rt.Codes, Attempts: rt.Attempts, Backoff: rt.Backoff}
	}
	for i, b := range se.Backends {
		wb := l7.WeightedBackend{Weight: b.Weight}
		if b.Pool != nil {
			wb.Backend = backend(b.Pool)
		}
		if i < len(se.BackendHeaders) {
			wb.RequestHeaders = headerEdit(se.BackendHeaders[i])
		}
		e.Backends = append(e.Backends, wb)
	}
	if f := se.Filters; f != nil {
		e.RequestHeaders = headerEdit(f.RequestHeaders)
		e.ResponseHeaders = headerEdit(f.ResponseHeaders)
		if rd := f.Redirect; rd != nil {
			e.Redirect = &l7.Redirect{Scheme: rd.Scheme, Hostname: rd.Hostname, Port: rd.Port, Path: pathChange(rd.Path), Status: rd.Status}
		}
		if rw := f.Rewrite; rw != nil {
			e.RewriteHost, e.RewritePath = rw.Hostname, pathChange(rw.Path)
		}
		if c := f.CORS; c != nil {
			e.CORS = l7.NewCORS(l7.CORSConfig{AllowOrigins: c.AllowOrigins, AllowMethods: c.AllowMethods, AllowHeaders: c.AllowHeaders,
				ExposeHeaders: c.ExposeHeaders, MaxAge: c.MaxAge, AllowCredentials: c.AllowCredentials})
		}
		for _, m := range f.Mirrors {
			if be := backend(m.Pool); be != nil {
				e.Mirrors = append(e.Mirrors, l7.Mirror{Backend: be, Numerator: m.Numerator, Denominator: m.Denominator})
			}
		}
	}
	return e
}

func headerEdit(h *snapshot.HeaderEdit) *l7.HeaderEdit {
	if h == nil {
		return nil
	}
	e := &l7.HeaderEdit{Remove: h.Remove}
	for _, f := range h.Set {
		e.Set = append(e.Set, l7.HeaderField{Name: f.Name, Value: f.Value})
	}
	for _, f := range h.Add {
		e.Add = append(e.Add, l7.HeaderField{Name: f.Name, Value: f.Value})
	}
	return e
}

func pathChange(p *snapshot.PathChange) *l7.PathChange {
	if p == nil {
		return nil
	}
	return &l7.PathChange{Prefix: p.Prefix, Value: p.Value}
}
