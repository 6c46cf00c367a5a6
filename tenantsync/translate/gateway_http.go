package translate

import (
	"fmt"
	"maps"
	"slices"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/teapot-lb/teapot-lb/api"
	pb "github.com/teapot-lb/teapot-lb/api/proto/teapotv1"
	"github.com/teapot-lb/teapot-lb/tenantsync/syncspec"
)

// unsupported says which part of a route the LB cannot serve ("" when it
// can serve all of it); such a route is not accepted (UnsupportedValue).
func unsupported(r *routeObj) string {
	switch {
	case r.http != nil:
		for i, rule := range r.http.Spec.Rules {
			for j, f := range rule.Filters {
				switch f.Type {
				case gwv1.HTTPRouteFilterRequestHeaderModifier, gwv1.HTTPRouteFilterResponseHeaderModifier,
					gwv1.HTTPRouteFilterRequestRedirect, gwv1.HTTPRouteFilterURLRewrite, gwv1.HTTPRouteFilterRequestMirror:
				case gwv1.HTTPRouteFilterCORS:
					if why := corsUnsupported(f.CORS); why != "" {
						return fmt.Sprintf("rules[%d].filters[%d]: %s", i, j, why)
					}
				default:
					return fmt.Sprintf("rules[%d].filters[%d]: filter type %s is not supported", i, j, f.Type)
				}
			}
			if why := unsupportedBackendFilters(i, rule.BackendRefs); why != "" {
				return why
			}
			if why := unsupportedRetry(i, rule.Retry); why != "" {
				return why
			}
			if rule.SessionPersistence != nil {
				return fmt.Sprintf("rules[%d].sessionPersistence is not supported", i)
			}
		}
	case r.grpc != nil:
		for i, rule := range r.grpc.Spec.Rules {
			for j, f := range rule.Filters {
				switch f.Type {
				case gwv1.GRPCRouteFilterRequestHeaderModifier, gwv1.GRPCRouteFilterResponseHeaderModifier, gwv1.GRPCRouteFilterRequestMirror:
				default:
					return fmt.Sprintf("rules[%d].filters[%d]: filter type %s is not supported", i, j, f.Type)
				}
			}
			for j, b := range rule.BackendRefs {
				if len(b.Filters) > 0 {
					return fmt.Sprintf("rules[%d].backendRefs[%d].filters: filters on a backendRef are not supported; put them on the rule", i, j)
				}
			}
			if rule.SessionPersistence != nil {
				return fmt.Sprintf("rules[%d].sessionPersistence is not supported", i)
			}
		}
	}
	return ""
}

// translateRoute adds what an attached route asks for to the load
// balancer: LB routes for HTTPRoutes and GRPCRoutes (on every hostname it
// serves), the backends of a tcp, udp or tls-passthrough port otherwise.
// It returns why the route cannot be served ("" when it is): a rule
// beyond the API's bounds, or past what the Gateway's routes may hold
// together; such a route adds nothing.
func (g *gwBuild) translateRoute(r *routeObj, atts []attachment) string {
	if r.http == nil && r.grpc == nil {
		return g.translateL4(r, atts)
	}
	atts = g.isolatedAttachments(atts)
	// Each hostname on the ports of the listeners that attached it; on
	// all of the Gateway's http and https ports, no ports (every
	// listener).
	hostPorts := map[string][]uint32{}
	for _, a := range atts {
		for _, h := range a.hosts {
			hostPorts[h] = append(hostPorts[h], uint32(a.ls.spec.Port))
		}
	}
	hosts := slices.Sorted(maps.Keys(hostPorts))
	all := g.l7Ports()
	g.newPools = g.newPools[:0]
	var rules []*pb.Route
	if r.http != nil {
		for _, rule := range r.http.Spec.Rules {
			rules = append(rules, g.httpRule(r, rule))
		}
	} else {
		for _, rule := range r.grpc.Spec.Rules {
			rules = append(rules, g.grpcRule(r, rule))
		}
	}
	g.edgeRoutePolicy(r, rules)
	if bad := g.checkRules(rules, len(hosts)); bad != "" {
		for _, k := range g.newPools {
			delete(g.lb.Pools, k)
		}
		return bad
	}
	for _, h := range hosts {
		ports := hostPorts[h]
		slices.Sort(ports)
		if ports = slices.Compact(ports); slices.Equal(ports, all) {
			ports = nil
		}
		for _, rule := range rules {
			rt := proto.Clone(rule).(*pb.Route)
			rt.Host, rt.Ports = h, ports
			g.addRoute(rt)
		}
	}
	return ""
}

// l7Ports returns the sorted ports of the Gateway's served http and https
// listeners.
func (g *gwBuild) l7Ports() []uint32 {
	var out []uint32
	for _, ls := range g.ls {
		if ls.valid && (ls.proto == "http" || ls.proto == "https") {
			out = append(out, uint32(ls.spec.Port))
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// checkRules runs the API's checks of a route on each rule, as the LB
// cluster will, and keeps the Gateway's running totals of regular
// expressions and route bytes; each rule becomes one LB route per
// hostname. It returns why the rules cannot be served, "" when they can
// (and are counted).
func (g *gwBuild) checkRules(rules []*pb.Route, hosts int) string {
	insts, size := 0, 0
	for i, rt := range rules {
		n, err := api.CheckRoute(g.lb, fmt.Sprintf("rules[%d]", i), rt)
		if err != nil {
			return err.Error()
		}
		insts += n * hosts
		size += (proto.Size(rt) + 256) * hosts // 256: the hostname and framing
	}
	if g.regexInsts+insts > api.MaxRegexInstsPerLB {
		return fmt.Sprintf("its regular expressions compile to %d instructions on %d hostnames; with the Gateway's other routes (%d) that passes %d, the most one Gateway serves: use prefix or exact matches where they do",
			insts, hosts, g.regexInsts, api.MaxRegexInstsPerLB)
	}
	if g.routeBytes+size > MaxGatewayRouteBytes {
		return fmt.Sprintf("its rules take about %d bytes on %d hostnames; with the Gateway's other routes (%d) that passes %d, the most one Gateway serves: split the Gateway or use fewer matches and hostnames",
			size, hosts, g.routeBytes, MaxGatewayRouteBytes)
	}
	g.regexInsts += insts
	g.routeBytes += size
	return ""
}

// addRoute appends an LB route unless an earlier route has the same host
// and matches on every port of it: that one (an older route, or an
// earlier rule) wins, as the spec orders ties.
func (g *gwBuild) addRoute(rt *pb.Route) {
	if slices.ContainsFunc(g.lb.Routes, func(o *pb.Route) bool {
		return o.GetHost() == rt.GetHost() && o.GetPath() == rt.GetPath() && o.GetPathType() == rt.GetPathType() &&
			slices.EqualFunc(o.GetMatches(), rt.GetMatches(), func(a, b *pb.RouteMatch) bool { return proto.Equal(a, b) }) &&
			(len(o.GetPorts()) == 0 || len(rt.GetPorts()) > 0 && !slices.ContainsFunc(rt.GetPorts(), func(p uint32) bool { return !slices.Contains(o.GetPorts(), p) }))
	}) {
		return
	}
	g.lb.Routes = append(g.lb.Routes, rt)
}

// httpRule translates one HTTPRoute rule (without its host).
func (g *gwBuild) httpRule(r *routeObj, rule gwv1.HTTPRouteRule) *pb.Route {
	rt := &pb.Route{}
	for _, m := range rule.Matches {
		rm := &pb.RouteMatch{Path: "/", PathType: "prefix"}
		if m.Path != nil {
			if m.Path.Value != nil {
				rm.Path = *m.Path.Value
			}
			if m.Path.Type != nil {
				switch *m.Path.Type {
				case gwv1.PathMatchExact:
					rm.PathType = "exact"
				case gwv1.PathMatchRegularExpression:
					rm.PathType = "regex"
				}
			}
		}
		for _, h := range m.Headers {
			typ := "exact"
			if h.Type != nil && *h.Type == gwv1.HeaderMatchRegularExpression {
				typ = "regex"
			}
			rm.Headers = append(rm.Headers, &pb.ValueMatch{Name: string(h.Name), Value: h.Value, Type: typ})
		}
		for _, q := range m.QueryParams {
			typ := "exact"
			if q.Type != nil && *q.Type == gwv1.QueryParamMatchRegularExpression {
				typ = "regex"
			}
			rm.QueryParams = append(rm.QueryParams, &pb.ValueMatch{Name: string(q.Name), Value: q.Value, Type: typ})
		}
		if m.Method != nil {
			rm.Method = string(*m.Method)
		}
		rt.Matches = append(rt.Matches, rm)
	}
	if len(rt.Matches) == 0 {
		rt.Matches = []*pb.RouteMatch{{Path: "/", PathType: "prefix"}}
	}
	redirect := false
	for _, f := range rule.Filters {
		switch f.Type {
		case gwv1.HTTPRouteFilterRequestHeaderModifier:
			rt.Filters = append(rt.Filters, &pb.RouteFilter{RequestHeaderModifier: headerModifier(f.RequestHeaderModifier)})
		case gwv1.HTTPRouteFilterResponseHeaderModifier:
			rt.Filters = append(rt.Filters, &pb.RouteFilter{ResponseHeaderModifier: headerModifier(f.ResponseHeaderModifier)})
		case gwv1.HTTPRouteFilterRequestRedirect:
			redirect = true
			rt.Filters = append(rt.Filters, &pb.RouteFilter{RequestRedirect: requestRedirect(f.RequestRedirect)})
		case gwv1.HTTPRouteFilterURLRewrite:
			rt.Filters = append(rt.Filters, &pb.RouteFilter{UrlRewrite: urlRewrite(f.URLRewrite)})
		case gwv1.HTTPRouteFilterRequestMirror:
			if m := g.mirror(r, f.RequestMirror); m != nil {
				rt.Filters = append(rt.Filters, &pb.RouteFilter{RequestMirror: m})
			}
		case gwv1.HTTPRouteFilterCORS:
			rt.Filters = append(rt.Filters, corsFilter(f.CORS))
		}
	}
	if !redirect {
		var refs []gwv1.BackendRef
		for _, b := range rule.BackendRefs {
			refs = append(refs, b.BackendRef)
		}
		rt.Backends = g.backends(r, refs, false)
		backendHeaderFilters(rt.Backends, rule.BackendRefs)
		rt.Retry = httpRetry(rule.Retry)
	} else if rule.Retry != nil {
		g.d.Warnings = append(g.d.Warnings, fmt.Sprintf("%s %s/%s: a rule with a RequestRedirect sends nothing to a backend, so its retry is not applied", r.key.Kind, r.key.Namespace, r.key.Name))
	}
	if t := rule.Timeouts; t != nil {
		rt.Timeouts = &pb.RouteTimeouts{Request: duration(t.Request), BackendRequest: duration(t.BackendRequest)}
		if rt.Timeouts.Request == nil && rt.Timeouts.BackendRequest == nil {
			rt.Timeouts = nil
		}
	}
	return rt
}

// grpcRule translates one GRPCRoute rule (without its host).
func (g *gwBuild) grpcRule(r *routeObj, rule gwv1.GRPCRouteRule) *pb.Route {
	rt := &pb.Route{}
	for _, m := range rule.Matches {
		rm := &pb.RouteMatch{}
		if mm := m.Method; mm != nil {
			gm := &pb.GRPCMethodMatch{Type: "exact"}
			if mm.Type != nil && *mm.Type == gwv1.GRPCMethodMatchRegularExpression {
				gm.Type = "regex"
			}
			if mm.Service != nil {
				gm.Service = *mm.Service
			}
			if mm.Method != nil {
				gm.Method = *mm.Method
			}
			rm.Grpc = gm
		} else {
			rm.Path, rm.PathType = "/", "prefix"
		}
		for _, h := range m.Headers {
			typ := "exact"
			if h.Type != nil && *h.Type == gwv1.GRPCHeaderMatchRegularExpression {
				typ = "regex"
			}
			rm.Headers = append(rm.Headers, &pb.ValueMatch{Name: string(h.Name), Value: h.Value, Type: typ})
		}
		rt.Matches = append(rt.Matches, rm)
	}
	if len(rt.Matches) == 0 {
		rt.Matches = []*pb.RouteMatch{{Path: "/", PathType: "prefix"}}
	}
	for _, f := range rule.Filters {
		switch f.Type {
		case gwv1.GRPCRouteFilterRequestHeaderModifier:
			rt.Filters = append(rt.Filters, &pb.RouteFilter{RequestHeaderModifier: headerModifier(f.RequestHeaderModifier)})
		case gwv1.GRPCRouteFilterResponseHeaderModifier:
			rt.Filters = append(rt.Filters, &pb.RouteFilter{ResponseHeaderModifier: headerModifier(f.ResponseHeaderModifier)})
		case gwv1.GRPCRouteFilterRequestMirror:
			if m := g.mirror(r, f.RequestMirror); m != nil {
				rt.Filters = append(rt.Filters, &pb.RouteFilter{RequestMirror: m})
			}
		}
	}
	var refs []gwv1.BackendRef
	for _, b := range rule.BackendRefs {
		refs = append(refs, b.BackendRef)
	}
	rt.Backends = g.backends(r, refs, true)
	return rt
}

// backends translates a rule's backendRefs. A ref that cannot be used
// keeps its share of requests, answered with 500 (unavailable); a rule
// without backends answers every request with 500.
func (g *gwBuild) backends(r *routeObj, refs []gwv1.BackendRef, h2c bool) []*pb.RouteBackend {
	var out []*pb.RouteBackend
	for _, b := range refs {
		w := uint32(1)
		if b.Weight != nil {
			w = uint32(max(*b.Weight, 0))
		}
		if key := g.backendPool(r, b.BackendObjectReference, h2c); key != "" {
			out = append(out, &pb.RouteBackend{Pool: key, Weight: proto.Uint32(w)})
		} else {
			out = append(out, &pb.RouteBackend{Unavailable: true, Weight: proto.Uint32(w)})
		}
	}
	if len(out) == 0 {
		out = []*pb.RouteBackend{{Unavailable: true}}
	}
	return out
}

func headerModifier(f *gwv1.HTTPHeaderFilter) *pb.HeaderModifier {
	if f == nil {
		return &pb.HeaderModifier{}
	}
	m := &pb.HeaderModifier{Remove: slices.Clone(f.Remove)}
	for _, h := range f.Set {
		m.Set = append(m.Set, &pb.HeaderValue{Name: string(h.Name), Value: h.Value})
	}
	for _, h := range f.Add {
		m.Add = append(m.Add, &pb.HeaderValue{Name: string(h.Name), Value: h.Value})
	}
	return m
}

func pathModifier(p *gwv1.HTTPPathModifier) *pb.PathModifier {
	if p == nil {
		return nil
	}
	switch p.Type {
	case gwv1.FullPathHTTPPathModifier:
		return &pb.PathModifier{ReplaceFullPath: proto.String(ptrOr(p.ReplaceFullPath))}
	case gwv1.PrefixMatchHTTPPathModifier:
		return &pb.PathModifier{ReplacePrefixMatch: proto.String(ptrOr(p.ReplacePrefixMatch))}
	}
	return nil
}

func requestRedirect(f *gwv1.HTTPRequestRedirectFilter) *pb.RequestRedirect {
	rr := &pb.RequestRedirect{}
	if f == nil {
		return rr
	}
	if f.Scheme != nil {
		rr.Scheme = *f.Scheme
	}
	if f.Hostname != nil {
		rr.Hostname = string(*f.Hostname)
	}
	if f.Port != nil {
		rr.Port = proto.Uint32(uint32(*f.Port))
	}
	rr.Path = pathModifier(f.Path)
	if f.StatusCode != nil {
		rr.StatusCode = uint32(*f.StatusCode)
	}
	return rr
}

func urlRewrite(f *gwv1.HTTPURLRewriteFilter) *pb.URLRewrite {
	u := &pb.URLRewrite{}
	if f == nil {
		return u
	}
	if f.Hostname != nil {
		u.Hostname = string(*f.Hostname)
	}
	u.Path = pathModifier(f.Path)
	return u
}

// mirror translates a requestMirror filter; a backend that cannot be
// used is dropped (the route's ResolvedRefs says why).
func (g *gwBuild) mirror(r *routeObj, f *gwv1.HTTPRequestMirrorFilter) *pb.RequestMirror {
	if f == nil {
		return nil
	}
	key := g.backendPool(r, f.BackendRef, r.grpc != nil)
	if key == "" {
		return nil
	}
	m := &pb.RequestMirror{Pool: key}
	switch {
	case f.Fraction != nil:
		den := int32(100)
		if f.Fraction.Denominator != nil {
			den = *f.Fraction.Denominator
		}
		m.Fraction = &pb.Fraction{Numerator: uint32(max(f.Fraction.Numerator, 0)), Denominator: uint32(max(den, 0))}
	case f.Percent != nil:
		m.Percent = proto.Uint32(uint32(max(*f.Percent, 0)))
	}
	return m
}

// duration reads a Gateway API duration; zero or unreadable is none.
func duration(d *gwv1.Duration) *durationpb.Duration {
	if d == nil {
		return nil
	}
	v, err := time.ParseDuration(string(*d))
	if err != nil || v <= 0 {
		return nil
	}
	return durationpb.New(v)
}

func ptrOr(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

// translateL4 gives a tcp, udp or tls-passthrough port the backends of
// its route: the first route attached to a tcp or udp port keeps it; on a
// tls-passthrough port each server name goes to the first route attached
// with it, and the first route for any name (no hostname on either side)
// takes the names no route covers. With several backendRefs, one pool
// holds the members of all of them, each member weighted by its
// backendRef's weight. It returns why the route cannot be served, or "".
func (g *gwBuild) translateL4(r *routeObj, atts []attachment) string {
	if why := g.sniBudget(r, atts); why != "" {
		return why
	}
	var refs []gwv1.BackendRef
	for _, rule := range r.l4 {
		refs = append(refs, rule...)
	}
	var key string
	if len(refs) == 1 {
		key = g.backendPool(r, refs[0].BackendObjectReference, false)
	}
	tlsNotApplied := false
	if key != "" && g.lb.Pools[key].GetTls() != nil {
		// A BackendTLSPolicy made the pool speak TLS to its members; an
		// L4 listener forwards bytes, so the route gets a pool of the
		// same members without it.
		key, tlsNotApplied = "", true
	}
	if key == "" {
		key = syncspec.Key(r.key.Namespace+"-"+r.key.Name, r.key.Kind, r.key.Namespace, r.key.Name)
		bp := backendPool(g.gw.Annotations, g.d)
		for _, b := range refs {
			w := int32(1)
			if b.Weight != nil {
				w = *b.Weight
			}
			if w <= 0 {
				continue
			}
			if k := g.backendPool(r, b.BackendObjectReference, false); k != "" {
				tlsNotApplied = tlsNotApplied || g.lb.Pools[k].GetTls() != nil
				for _, m := range g.lb.Pools[k].GetMembers() {
					mm := proto.Clone(m).(*pb.Member)
					if w != 1 {
						mm.Weight = proto.Uint32(uint32(min(w, 1000)))
					}
					bp.Members = append(bp.Members, mm)
				}
			}
		}
		g.lb.Pools[key] = bp
	}
	if tlsNotApplied {
		g.d.Warnings = append(g.d.Warnings, fmt.Sprintf("%s %s/%s: the BackendTLSPolicy of its backend is not applied to it: the LB forwards the route's bytes to the members as they come, with no TLS of its own", r.key.Kind, r.key.Namespace, r.key.Name))
	}
	for _, a := range atts {
		k := l4Key{a.ls.spec.Port, a.ls.proto}
		if a.ls.proto != "tls-passthrough" {
			if g.l4[k] == nil {
				g.l4[k] = &l4Attach{route: r.key, pool: key}
			}
			continue
		}
		for _, h := range a.hosts {
			if h == "" {
				if g.l4[k] == nil {
					g.l4[k] = &l4Attach{route: r.key, pool: key}
				}
				continue
			}
			if _, ok := g.sniOwner[k][h]; ok {
				continue
			}
			if g.sniOwner[k] == nil {
				g.sniOwner[k] = map[string]RouteKey{}
			}
			g.sniOwner[k][h] = r.key
			g.sni[k] = append(g.sni[k], &pb.SNIRoute{Host: h, Pool: key, Terminate: a.ls.terminate})
		}
	}
	return ""
}

// sniTaken reports whether older routes serve every one of hosts on the
// tls-passthrough port k already.
func (g *gwBuild) sniTaken(k l4Key, hosts []string, route RouteKey) bool {
	for _, h := range hosts {
		if h == "" {
			if a := g.l4[k]; a == nil || a.route == route {
				return false
			}
			continue
		}
		if owner, ok := g.sniOwner[k][h]; !ok || owner == route {
			return false
		}
	}
	return true
}

// sniBudget says why the server names r would add to a tls-passthrough
// port would take it past api.MaxSNIRoutes, or "".
func (g *gwBuild) sniBudget(r *routeObj, atts []attachment) string {
	added := map[l4Key]map[string]bool{}
	for _, a := range atts {
		if a.ls.proto != "tls-passthrough" {
			continue
		}
		k := l4Key{a.ls.spec.Port, a.ls.proto}
		for _, h := range a.hosts {
			if _, ok := g.sniOwner[k][h]; h == "" || ok {
				continue
			}
			if added[k] == nil {
				added[k] = map[string]bool{}
			}
			added[k][h] = true
			if len(g.sni[k])+len(added[k]) > api.MaxSNIRoutes {
				return fmt.Sprintf("port %d would route more than %d hostnames; serve some of them on another listener", k.port, api.MaxSNIRoutes)
			}
		}
	}
	return ""
}
