package translate

import (
	"cmp"
	"fmt"
	"slices"
	"strings"

	pb "github.com/teapot-lb/teapot-lb/api/proto/teapotv1"
)

// edgeGatewayPolicy applies the policies targeting the Gateway to its LB
// listeners and routes: the Gateway's own to every listener, and the one
// targeting a listener by name (sectionName) to the LB listener that
// listener became, replacing the fields it sets. It returns why the
// Gateway is refused ("" when it is not): a policy whose source ranges
// cannot be enforced as written, so that the Gateway is not open to every
// address.
func (g *gwBuild) edgeGatewayPolicy() string {
	for _, p := range g.policiesFor(KindGateway, g.gw.Name) {
		if len(p.Spec.AllowedSources) == 0 {
			continue
		}
		var d Desired
		if p.Invalid != "" || !checkSources("EdgePolicy "+p.Name+" spec.allowedSources", p.Spec.AllowedSources, &d) {
			return cmp.Or(d.Refused, "EdgePolicy "+p.Name+" cannot be read ("+p.Invalid+"); so that the Gateway is not open to every address, it gets no load balancer and no VIP")
		}
	}
	whole := g.pickPolicy(KindGateway, g.gw.Name, "", nil)
	bySection := map[*pb.Listener]*EdgePolicy{}
	var sectionWAF []*EdgePolicy
	var sectionPorts []uint32
	for _, s := range g.sections(KindGateway, g.gw.Name) {
		i := slices.IndexFunc(g.ls, func(ls *listenerState) bool { return ls.set == nil && string(ls.spec.Name) == s })
		if i < 0 {
			g.sectionNotFound(KindGateway, g.gw.Name, s, "listener")
			continue
		}
		ls := g.ls[i]
		p := g.pickPolicy(KindGateway, g.gw.Name, s, func(p *EdgePolicy) string { return g.sectionFits(p, ls) })
		if p == nil || !ls.valid {
			continue
		}
		if l := g.lbListenerOf(ls); l != nil {
			bySection[l] = p
			if p.Spec.WAF != nil {
				sectionWAF = append(sectionWAF, p)
				sectionPorts = append(sectionPorts, l.Port)
			}
		}
	}
	applied := []*EdgePolicy{whole} // in listener order, for stable messages
	for _, l := range g.lb.Listeners {
		if p := bySection[l]; p != nil && !slices.Contains(applied, p) {
			applied = append(applied, p)
		}
	}
	for _, p := range applied {
		if p == nil || len(p.Spec.DeniedSources) == 0 {
			continue
		}
		var d Desired
		if !checkSources("EdgePolicy "+p.Name+" spec.deniedSources", p.Spec.DeniedSources, &d) {
			return d.Refused
		}
	}
	var replaced []string
	for _, l := range g.lb.Listeners {
		sec := bySection[l]
		pick := func(set func(*EdgePolicy) bool) *EdgePolicy {
			if sec != nil && set(sec) {
				return sec
			}
			if whole != nil && set(whole) {
				return whole
			}
			return nil
		}
		if p := pick(func(p *EdgePolicy) bool { return len(p.Spec.AllowedSources) > 0 }); p != nil {
			if len(l.AllowedSources) > 0 {
				replaced = append(replaced, AnnotationAllowedSources)
			}
			l.AllowedSources = slices.Clone(p.Spec.AllowedSources)
		}
		if p := pick(func(p *EdgePolicy) bool { return len(p.Spec.DeniedSources) > 0 }); p != nil {
			if len(l.DeniedSources) > 0 {
				replaced = append(replaced, AnnotationDeniedSources)
			}
			l.DeniedSources = slices.Clone(p.Spec.DeniedSources)
		}
		if p := pick(func(p *EdgePolicy) bool { return p.Spec.RateLimit != nil }); p != nil {
			rl := p.Spec.RateLimit
			rps := uint32(0)
			if l.Protocol == "http" || l.Protocol == "https" {
				rps = rl.RequestsPerSecond
			}
			if l.RateLimit != nil {
				replaced = append(replaced, "teapot-lb.io/rate-limit-*")
			}
			l.RateLimit = rateOf(rl, rps, rl.ConnectionsPerSecond)
		}
	}
	// A listener's WAF goes to the routes served on its port (only there:
	// sectionFits checked), before the Gateway's fills the others; a
	// route's own policy was applied already and wins.
	for i, p := range sectionWAF {
		for _, rt := range g.lb.Routes {
			if rt.Waf == nil && slices.Contains(g.routePorts(rt), sectionPorts[i]) {
				rt.Waf = wafOf(p.Spec.WAF)
			}
		}
	}
	if whole != nil && whole.Spec.WAF != nil {
		for _, rt := range g.lb.Routes {
			if rt.Waf == nil {
				rt.Waf = wafOf(whole.Spec.WAF)
			}
		}
	}
	if len(replaced) > 0 {
		slices.Sort(replaced)
		names := []string{}
		for _, p := range applied {
			if p != nil && !slices.Contains(names, p.Name) {
				names = append(names, p.Name)
			}
		}
		slices.Sort(names)
		g.d.Warnings = append(g.d.Warnings, fmt.Sprintf("annotations %s are not read: EdgePolicy %s targets the Gateway and wins", strings.Join(slices.Compact(replaced), ", "), strings.Join(names, ", ")))
	}
	return ""
}

// sectionFits says why policy p cannot apply to the Gateway listener ls
// alone ("" when it can). Source ranges and rate limits are a port's (its
// LB listener's), so the listener must be the only one on its port; a WAF
// is a route's, so every route on the port must be served there alone;
// requests and a WAF need an http or https listener.
func (g *gwBuild) sectionFits(p *EdgePolicy, ls *listenerState) string {
	name := string(ls.spec.Name)
	if !ls.valid {
		return "" // not served: nothing to apply until it is
	}
	for _, o := range g.ls {
		if o != ls && o.valid && o.spec.Port == ls.spec.Port && o.proto == ls.proto {
			return fmt.Sprintf("spec.targetRefs sectionName %s: listener %s shares port %d with listener %s, and one port has one set of source ranges, rate limits and WAF: give listener %s a port of its own, or target the whole Gateway",
				boundText(name, 64), boundText(name, 64), ls.spec.Port, boundText(string(o.spec.Name), 64), boundText(name, 64))
		}
	}
	l7 := ls.proto == "http" || ls.proto == "https"
	if rl := p.Spec.RateLimit; rl != nil && !l7 && rl.RequestsPerSecond > 0 {
		return fmt.Sprintf("spec.rateLimit.requestsPerSecond: listener %s is %s and carries no requests; use connectionsPerSecond", boundText(name, 64), ls.proto)
	}
	if p.Spec.WAF == nil {
		return ""
	}
	if !l7 {
		return fmt.Sprintf("spec.waf: listener %s is %s; a WAF inspects HTTP requests: target an http or https listener", boundText(name, 64), ls.proto)
	}
	port := uint32(ls.spec.Port)
	for _, rt := range g.lb.Routes {
		if ports := g.routePorts(rt); slices.Contains(ports, port) && len(ports) > 1 {
			return fmt.Sprintf("spec.waf: the route for host %q is served on ports %v, and a route has one WAF: attach its HTTPRoute to listener %s alone (parentRefs sectionName), or target the route or the whole Gateway",
				boundText(rt.GetHost(), 64), ports, boundText(name, 64))
		}
	}
	return ""
}

// routePorts returns the ports an LB route is served on.
func (g *gwBuild) routePorts(rt *pb.Route) []uint32 {
	if len(rt.GetPorts()) > 0 {
		return rt.GetPorts()
	}
	return g.l7Ports()
}

// lbListenerOf returns the LB listener a Gateway listener became.
func (g *gwBuild) lbListenerOf(ls *listenerState) *pb.Listener {
	for _, l := range g.lb.Listeners {
		if l.Port == uint32(ls.spec.Port) && l.Protocol == ls.proto {
			return l
		}
	}
	return nil
}
