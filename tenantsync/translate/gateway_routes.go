package translate

import (
	"cmp"
	"fmt"
	"slices"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"

	pb "github.com/teapot-lb/teapot-lb/api/proto/teapotv1"
)

// Route condition reasons of the agent's own (the spec allows
// implementation-specific reasons).
const (
	// ReasonTooManyRoutes: the Gateway already has MaxGatewayRoutes routes.
	ReasonTooManyRoutes = "TooManyRoutes"
	// ReasonListenerTaken: every server name a TLSRoute would serve on a
	// tls-passthrough listener is already served by older routes.
	ReasonListenerTaken = "ListenerTaken"
)

// routeObj is one route of any kind, as the attachment needs it.
type routeObj struct {
	key       RouteKey
	meta      metav1.ObjectMeta
	parents   []gwv1.ParentReference
	hostnames []gwv1.Hostname
	http      *gwv1.HTTPRoute
	grpc      *gwv1.GRPCRoute
	l4        [][]gwv1.BackendRef // TLS, TCP, UDP rules' backends
}

// listRoutes returns every route of the cluster, oldest first, then by
// namespace/name (the spec's tie rule).
func (g *gwBuild) listRoutes() []*routeObj {
	gs := g.src.Gateway
	var out []*routeObj
	all := labels.Everything()
	if gs.HTTPRoutes != nil {
		if list, err := gs.HTTPRoutes.List(all); err == nil {
			for _, r := range list {
				out = append(out, &routeObj{key: RouteKey{KindHTTPRoute, r.Namespace, r.Name}, meta: r.ObjectMeta, parents: r.Spec.ParentRefs, hostnames: r.Spec.Hostnames, http: r})
			}
		}
	}
	if gs.GRPCRoutes != nil {
		if list, err := gs.GRPCRoutes.List(all); err == nil {
			for _, r := range list {
				out = append(out, &routeObj{key: RouteKey{KindGRPCRoute, r.Namespace, r.Name}, meta: r.ObjectMeta, parents: r.Spec.ParentRefs, hostnames: r.Spec.Hostnames, grpc: r})
			}
		}
	}
	if gs.TLSRoutes != nil {
		if list, err := gs.TLSRoutes.List(all); err == nil {
			for _, r := range list {
				ro := &routeObj{key: RouteKey{KindTLSRoute, r.Namespace, r.Name}, meta: r.ObjectMeta, parents: r.Spec.ParentRefs, hostnames: r.Spec.Hostnames}
				for _, rule := range r.Spec.Rules {
					ro.l4 = append(ro.l4, rule.BackendRefs)
				}
				out = append(out, ro)
			}
		}
	}
	if gs.TCPRoutes != nil {
		if list, err := gs.TCPRoutes.List(all); err == nil {
			for _, r := range list {
				ro := &routeObj{key: RouteKey{KindTCPRoute, r.Namespace, r.Name}, meta: r.ObjectMeta, parents: r.Spec.ParentRefs}
				for _, rule := range r.Spec.Rules {
					ro.l4 = append(ro.l4, rule.BackendRefs)
				}
				out = append(out, ro)
			}
		}
	}
	if gs.UDPRoutes != nil {
		if list, err := gs.UDPRoutes.List(all); err == nil {
			for _, r := range list {
				ro := &routeObj{key: RouteKey{KindUDPRoute, r.Namespace, r.Name}, meta: r.ObjectMeta, parents: r.Spec.ParentRefs}
				for _, rule := range r.Spec.Rules {
					ro.l4 = append(ro.l4, rule.BackendRefs)
				}
				out = append(out, ro)
			}
		}
	}
	slices.SortFunc(out, func(a, b *routeObj) int {
		if c := a.meta.CreationTimestamp.Compare(b.meta.CreationTimestamp.Time); c != 0 {
			return c
		}
		return cmp.Or(strings.Compare(a.key.Namespace, b.key.Namespace), strings.Compare(a.key.Name, b.key.Name), strings.Compare(a.key.Kind, b.key.Kind))
	})
	return out
}

// targets reports whether a parentRef of a route in routeNS names this
// Gateway.
func (g *gwBuild) targets(pr gwv1.ParentReference, routeNS string) bool {
	grp, kind, ns := gatewayGroup, KindGateway, routeNS
	if pr.Group != nil {
		grp = string(*pr.Group)
	}
	if pr.Kind != nil {
		kind = string(*pr.Kind)
	}
	if pr.Namespace != nil {
		ns = string(*pr.Namespace)
	}
	if grp == gatewayGroup && kind == KindListenerSet {
		return g.sets[RouteKey{KindListenerSet, ns, string(pr.Name)}] != nil
	}
	return grp == gatewayGroup && kind == KindGateway && ns == g.gw.Namespace && string(pr.Name) == g.gw.Name
}

// attachment is a route attached to one listener with the hostnames it
// serves there ("" for any).
type attachment struct {
	ls    *listenerState
	hosts []string
}

// routes attaches every route that names this Gateway and translates the
// attached ones.
func (g *gwBuild) routes() {
	if g.src.Gateway == nil {
		return
	}
	g.l4 = map[l4Key]*l4Attach{}
	g.sni, g.sniOwner = map[l4Key][]*pb.SNIRoute{}, map[l4Key]map[string]RouteKey{}
	attached := 0
	for _, r := range g.listRoutes() {
		if r.meta.DeletionTimestamp != nil {
			continue
		}
		var statuses []gwv1.RouteParentStatus
		var atts []attachment
		resolved := g.routeRefs(r)
		bad := unsupported(r)
		for _, pr := range r.parents {
			if !g.targets(pr, r.key.Namespace) {
				continue
			}
			st := gwv1.RouteParentStatus{ParentRef: pr, ControllerName: gwv1.GatewayController(g.o.GatewayControllerName())}
			var accepted metav1.Condition
			var as []attachment
			switch {
			case bad != "":
				accepted = cond(string(gwv1.RouteConditionAccepted), false, string(gwv1.RouteReasonUnsupportedValue), bad, r.meta.Generation)
			case attached >= MaxGatewayRoutes:
				accepted = cond(string(gwv1.RouteConditionAccepted), false, ReasonTooManyRoutes, fmt.Sprintf("the Gateway already has %d routes, the most it takes", MaxGatewayRoutes), r.meta.Generation)
			default:
				as, accepted = g.attach(r, pr)
			}
			atts = append(atts, as...)
			st.Conditions = []metav1.Condition{accepted, resolved}
			statuses = append(statuses, st)
		}
		if len(statuses) == 0 {
			continue
		}
		// Only the listeners that are served carry the route's rules.
		served := slices.DeleteFunc(slices.Clone(atts), func(a attachment) bool { return !a.ls.valid })
		if len(served) > 0 {
			if why := g.translateRoute(r, served); why != "" {
				// The LB cluster would refuse the Gateway's load balancer
				// whole; this route alone is not accepted.
				for _, a := range atts {
					a.ls.status.AttachedRoutes--
				}
				for i := range statuses {
					if c := &statuses[i].Conditions[0]; c.Status == metav1.ConditionTrue {
						*c = cond(string(gwv1.RouteConditionAccepted), false, string(gwv1.RouteReasonUnsupportedValue), why, r.meta.Generation)
					}
				}
			} else {
				attached++
			}
		}
		g.res.Routes[r.key] = statuses
	}
}

// attach finds the listeners a parentRef lets the route attach to and
// returns them with the route's Accepted condition.
func (g *gwBuild) attach(r *routeObj, pr gwv1.ParentReference) ([]attachment, metav1.Condition) {
	gen := r.meta.Generation
	var out []attachment
	matched, notAllowed, noHost, taken := 0, 0, 0, 0
	parent := g.parentSet(pr, r.key.Namespace)
	if parent != nil && !parent.attached {
		return nil, cond(string(gwv1.RouteConditionAccepted), false, string(gwv1.RouteReasonNotAllowedByListeners), "the ListenerSet is not attached to its Gateway; see its conditions", gen)
	}
	for _, ls := range g.ls {
		if ls.set != parent {
			continue // a parentRef names the Gateway or one ListenerSet: their listeners only
		}
		if pr.SectionName != nil && *pr.SectionName != ls.spec.Name {
			continue
		}
		if pr.Port != nil && *pr.Port != ls.spec.Port {
			continue
		}
		matched++
		if !ls.attachable || !slices.Contains(ls.kinds, r.key.Kind) || !g.namespaceAllowed(ls, r.key.Namespace) {
			notAllowed++
			continue
		}
		hosts, ok := intersectHosts(ls.hostname, r.hostnames)
		if ok && ls.terminate && slices.Contains(hosts, "") {
			// A terminated connection is routed by its server name: a
			// route for any name has none to terminate.
			ok = false
		}
		if !ok {
			noHost++
			continue
		}
		// Later TCP and UDP routes of a listener are accepted and counted
		// but get no traffic (the spec's rule: the oldest route wins). A
		// TLS passthrough listener routes by server name: a later route
		// whose every name an older one serves there is not accepted.
		if r.l4 != nil && ls.proto == "tls-passthrough" && g.sniTaken(l4Key{ls.spec.Port, ls.proto}, hosts, r.key) {
			taken++
			continue
		}
		ls.status.AttachedRoutes++
		out = append(out, attachment{ls: ls, hosts: hosts})
	}
	switch {
	case len(out) > 0:
		return out, cond(string(gwv1.RouteConditionAccepted), true, string(gwv1.RouteReasonAccepted), "", gen)
	case matched == 0:
		return nil, cond(string(gwv1.RouteConditionAccepted), false, string(gwv1.RouteReasonNoMatchingParent), "the Gateway has no listener of this sectionName and port", gen)
	case taken > 0 && notAllowed == 0 && noHost == 0:
		return nil, cond(string(gwv1.RouteConditionAccepted), false, ReasonListenerTaken, "older routes already serve every hostname of this route on the listener", gen)
	case noHost > 0 && notAllowed == 0:
		return nil, cond(string(gwv1.RouteConditionAccepted), false, string(gwv1.RouteReasonNoMatchingListenerHostname), "no hostname of the route matches a listener's hostname", gen)
	default:
		return nil, cond(string(gwv1.RouteConditionAccepted), false, string(gwv1.RouteReasonNotAllowedByListeners), "no listener allows this route (its kind, its namespace, or the listener is invalid)", gen)
	}
}

// namespaceAllowed applies a listener's allowedRoutes.namespaces.
func (g *gwBuild) namespaceAllowed(ls *listenerState, ns string) bool {
	from := gwv1.NamespacesFromSame
	var sel *metav1.LabelSelector
	if ar := ls.spec.AllowedRoutes; ar != nil && ar.Namespaces != nil {
		if ar.Namespaces.From != nil {
			from = *ar.Namespaces.From
		}
		sel = ar.Namespaces.Selector
	}
	switch from {
	case gwv1.NamespacesFromAll:
		return true
	case gwv1.NamespacesFromSame:
		own, _ := ls.owner(g)
		return ns == own
	case gwv1.NamespacesFromSelector:
		if sel == nil || g.src.Gateway.Namespaces == nil {
			return false
		}
		s, err := metav1.LabelSelectorAsSelector(sel)
		if err != nil {
			return false
		}
		n, err := g.src.Gateway.Namespaces.Get(ns)
		return err == nil && s.Matches(labels.Set(n.Labels))
	}
	return false
}

// intersectHosts returns the hostnames a route serves on a listener: the
// more specific of each matching pair. ok is false when both name
// hostnames and none match.
func intersectHosts(listener string, route []gwv1.Hostname) ([]string, bool) {
	if len(route) == 0 {
		return []string{listener}, true
	}
	var out []string
	for _, h := range route {
		rh := strings.ToLower(string(h))
		switch {
		case listener == "":
			out = append(out, rh)
		case hostCovers(listener, rh):
			out = append(out, rh)
		case hostCovers(rh, listener):
			out = append(out, listener)
		}
	}
	slices.Sort(out)
	out = slices.Compact(out)
	return out, len(out) > 0
}

// hostCovers reports whether pattern (exact or "*.suffix") matches host
// (exact or a narrower wildcard).
func hostCovers(pattern, host string) bool {
	if pattern == host {
		return true
	}
	if !strings.HasPrefix(pattern, "*.") {
		return false
	}
	suffix := pattern[1:] // ".example.com"
	return strings.HasSuffix(host, suffix) && len(host) > len(suffix) && (!strings.HasPrefix(host, "*.") || len(host) > len(pattern))
}
