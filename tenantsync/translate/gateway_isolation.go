package translate

import (
	"fmt"
	"slices"
	"strings"

	"github.com/teapot-lb/teapot-lb/api"
	pb "github.com/teapot-lb/teapot-lb/api/proto/teapotv1"
)

// HTTP listener isolation (the Gateway API's GatewayHTTPListenerIsolation):
// a request whose Host matches several http or https listeners of one
// port belongs to the most specific of them (an exact hostname, then the
// longest wildcard, then no hostname), and only the routes attached to
// that listener serve it. The LB's route table tries less specific hosts
// when the most specific has no route for a request, so the translation
// does two things:
//
//   - a route attached to a listener does not serve, on that port, the
//     hostnames that a more specific listener of the port covers
//     (isolatedAttachments);
//   - each listener hostname of a port that a less specific listener of
//     the port also covers gets a notFound route, path "/", after every
//     other route (isolationBarriers): a request for that host that none
//     of its listener's routes match is answered 404 there instead of
//     falling through to the less specific listener's routes.
//
// Both need the LB cluster's notFound routes (feature level 5,
// Options.NotFoundRoutes); on a cluster below it the Gateway is served
// without isolation and says so in its Accepted condition.

// moreSpecific reports whether listener hostname a is more specific than
// b and within it: b is empty (any host), or b covers a.
func moreSpecific(a, b string) bool {
	if a == b || a == "" {
		return false
	}
	return b == "" || hostCovers(b, a)
}

// isolating returns the hostnames, by port, of the served http and https
// listeners that a less specific served listener of the same port also
// covers; nil when no port has such a pair.
func (g *gwBuild) isolating() map[int32][]string {
	var out map[int32][]string
	for _, ls := range g.ls {
		if !ls.valid || (ls.proto != "http" && ls.proto != "https") {
			continue
		}
		for _, o := range g.ls {
			if o != ls && o.valid && o.spec.Port == ls.spec.Port && (o.proto == "http" || o.proto == "https") && moreSpecific(ls.hostname, o.hostname) {
				if out == nil {
					out = map[int32][]string{}
				}
				if !slices.Contains(out[ls.spec.Port], ls.hostname) {
					out[ls.spec.Port] = append(out[ls.spec.Port], ls.hostname)
				}
				break
			}
		}
	}
	return out
}

// isolatedAttachments drops from each attachment of an HTTPRoute or
// GRPCRoute the hostnames that a more specific served listener of the same
// port covers: requests for them belong to that listener. An attachment
// left without hostnames is dropped (the route stays accepted and counted
// on the listener, as the spec asks).
func (g *gwBuild) isolatedAttachments(atts []attachment) []attachment {
	if !g.o.NotFoundRoutes {
		return atts
	}
	out := make([]attachment, 0, len(atts))
	for _, a := range atts {
		var hosts []string
		for _, h := range a.hosts {
			if !g.claimedElsewhere(a.ls, h) {
				hosts = append(hosts, h)
			}
		}
		if len(hosts) > 0 {
			a.hosts = hosts
			out = append(out, a)
		}
	}
	return out
}

// claimedElsewhere reports whether a more specific served listener than ls
// on its port covers every name of host h.
func (g *gwBuild) claimedElsewhere(ls *listenerState, h string) bool {
	for _, o := range g.ls {
		if o != ls && o.valid && o.spec.Port == ls.spec.Port && (o.proto == "http" || o.proto == "https") &&
			moreSpecific(o.hostname, ls.hostname) && hostCovers(o.hostname, h) {
			return true
		}
	}
	return false
}

// isolationBarriers appends the notFound routes that keep the requests
// for a listener's hostname from falling through to a less specific
// listener of its port. On an LB cluster without notFound routes it
// warns instead: the listeners are served without isolation.
func (g *gwBuild) isolationBarriers() {
	iso := g.isolating()
	if len(iso) == 0 {
		return
	}
	ports := make([]int32, 0, len(iso))
	for p := range iso {
		ports = append(ports, p)
	}
	slices.Sort(ports)
	if !g.o.NotFoundRoutes {
		g.d.Warnings = append(g.d.Warnings, fmt.Sprintf("listeners of port %d have overlapping hostnames, and a host of the LB cluster runs a release without notFound routes (below feature level 5): a request a more specific listener's routes do not match may be served by a less specific listener's routes until every host is upgraded", ports[0]))
		return
	}
	var domains []string
	if g.o.Domains != "" {
		domains = strings.Split(g.o.Domains, ",")
	}
	for _, p := range ports {
		hosts := iso[p]
		slices.Sort(hosts)
		for _, h := range hosts {
			if domains != nil && !api.HostInDomains(h, domains) {
				// The LB cluster would refuse the whole load balancer for
				// a route host outside the tenant's domains.
				g.d.Warnings = append(g.d.Warnings, fmt.Sprintf("listener hostname %s is outside the tenant's domains, so requests for it that its listener's routes do not match are not kept from the less specific listeners of port %d", h, p))
				continue
			}
			g.addRoute(&pb.Route{Host: h, Path: "/", NotFound: true, Ports: []uint32{uint32(p)}})
		}
	}
}

// sniScopes gives each https port that several served https listeners of
// distinct hostnames share their hostnames as the LB listener's
// tls.sniScopes (GatewayHTTPSListenerDetectMisdirectedRequests): a
// request whose Host belongs to another listener than its connection's
// server name is answered 421. On an LB cluster without them it warns
// instead: such requests are served.
func (g *gwBuild) sniScopes() {
	for _, l := range g.lb.Listeners {
		if l.GetProtocol() != "https" || l.GetTls() == nil {
			continue
		}
		var hosts []string
		for _, ls := range g.ls {
			if ls.valid && ls.proto == "https" && uint32(ls.spec.Port) == l.GetPort() && !slices.Contains(hosts, ls.hostname) {
				hosts = append(hosts, ls.hostname)
			}
		}
		if len(hosts) < 2 {
			continue
		}
		if !g.o.MisdirectedRequests {
			g.d.Warnings = append(g.d.Warnings, fmt.Sprintf("https listeners of port %d serve several hostnames, and a host of the LB cluster runs a release without misdirected-request detection (below feature level 5): a client that reuses a connection for another listener's hostname is served instead of answered 421 until every host is upgraded", l.GetPort()))
			continue
		}
		slices.Sort(hosts)
		l.Tls.SniScopes = hosts
	}
}
