package translate

import (
	"cmp"
	"fmt"
	"slices"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"
)

// Bounds of the ListenerSets one Gateway takes.
const (
	// MaxGatewayListenerSets is the most ListenerSets one Gateway takes;
	// later ones (by the spec's precedence) are not accepted.
	MaxGatewayListenerSets = 64
	// MaxGatewayListenerSetEntries is the most listeners all the
	// ListenerSets of one Gateway add; later ones are not accepted
	// (reason TooManyListeners).
	MaxGatewayListenerSetEntries = 256
)

// ReasonTooManyListenerSets is a ListenerSet's Accepted reason when its
// Gateway already has MaxGatewayListenerSets.
const ReasonTooManyListenerSets = "TooManyListenerSets"

// ListenerSetResult is the status the translation of its parent Gateway
// gives one ListenerSet. Programmed assumes the LB cluster takes the
// Gateway's load balancer (the agent lowers it when it does not).
type ListenerSetResult struct {
	Generation           int64
	Accepted, Programmed metav1.Condition
	Listeners            []gwv1.ListenerEntryStatus
}

// lsetState is one ListenerSet whose parentRef names the Gateway.
type lsetState struct {
	key     RouteKey
	obj     *gwv1.ListenerSet
	allowed bool // admitted by the Gateway's spec.allowedListeners
	// attached: allowed, within the bound, and the Gateway accepted when
	// the listeners were merged; its listeners are the Gateway's.
	attached bool
	tooMany  bool
}

// gen is the generation of the object a listener comes from.
func (ls *listenerState) gen(g *gwBuild) int64 {
	if ls.set != nil {
		return ls.set.obj.Generation
	}
	return g.gw.Generation
}

// owner is the namespace and kind of the object a listener comes from:
// its certificateRefs and allowedRoutes "Same" are relative to it.
func (ls *listenerState) owner(g *gwBuild) (ns, kind string) {
	if ls.set != nil {
		return ls.set.obj.Namespace, KindListenerSet
	}
	return g.gw.Namespace, KindGateway
}

// parentSet is the ListenerSet a route's parentRef names, nil when it
// names the Gateway.
func (g *gwBuild) parentSet(pr gwv1.ParentReference, routeNS string) *lsetState {
	if pr.Kind == nil || string(*pr.Kind) != KindListenerSet {
		return nil
	}
	ns := routeNS
	if pr.Namespace != nil {
		ns = string(*pr.Namespace)
	}
	return g.sets[RouteKey{KindListenerSet, ns, string(pr.Name)}]
}

// setParentIs reports whether a ListenerSet's parentRef names gw.
func setParentIs(s *gwv1.ListenerSet, gw *gwv1.Gateway) bool {
	p := s.Spec.ParentRef
	grp, kind, ns := gatewayGroup, KindGateway, s.Namespace
	if p.Group != nil {
		grp = string(*p.Group)
	}
	if p.Kind != nil {
		kind = string(*p.Kind)
	}
	if p.Namespace != nil {
		ns = string(*p.Namespace)
	}
	return grp == gatewayGroup && kind == KindGateway && ns == gw.Namespace && string(p.Name) == gw.Name
}

// findListenerSets collects the ListenerSets whose parentRef names the
// Gateway, in the spec's precedence (oldest first, then
// namespace/name), and which of them attach: those spec.allowedListeners
// admits, when the Gateway is accepted (parentOK), up to
// MaxGatewayListenerSets.
func (g *gwBuild) findListenerSets(parentOK bool) {
	g.sets = map[RouteKey]*lsetState{}
	if g.src.Gateway == nil || g.src.Gateway.ListenerSets == nil {
		return
	}
	list, err := g.src.Gateway.ListenerSets.List(labels.Everything())
	if err != nil {
		return
	}
	var mine []*gwv1.ListenerSet
	for _, s := range list {
		if s.DeletionTimestamp == nil && setParentIs(s, g.gw) {
			mine = append(mine, s)
		}
	}
	slices.SortFunc(mine, func(a, b *gwv1.ListenerSet) int {
		if c := a.CreationTimestamp.Compare(b.CreationTimestamp.Time); c != 0 {
			return c
		}
		return cmp.Or(strings.Compare(a.Namespace, b.Namespace), strings.Compare(a.Name, b.Name))
	})
	n := 0
	for _, s := range mine {
		st := &lsetState{key: RouteKey{KindListenerSet, s.Namespace, s.Name}, obj: s}
		st.allowed = g.listenerSetAllowed(s.Namespace)
		if st.allowed && parentOK {
			if n < MaxGatewayListenerSets {
				st.attached = true
				n++
			} else {
				st.tooMany = true
			}
		}
		g.sets[st.key] = st
		g.setOrder = append(g.setOrder, st)
	}
}

// listenerSetAllowed applies the Gateway's spec.allowedListeners (from
// None by default) to a ListenerSet of namespace ns.
func (g *gwBuild) listenerSetAllowed(ns string) bool {
	al := g.gw.Spec.AllowedListeners
	if al == nil || al.Namespaces == nil || al.Namespaces.From == nil {
		return false
	}
	switch *al.Namespaces.From {
	case gwv1.NamespacesFromAll:
		return true
	case gwv1.NamespacesFromSame:
		return ns == g.gw.Namespace
	case gwv1.NamespacesFromSelector:
		if al.Namespaces.Selector == nil || g.src.Gateway.Namespaces == nil {
			return false
		}
		s, err := metav1.LabelSelectorAsSelector(al.Namespaces.Selector)
		if err != nil {
			return false
		}
		nsObj, err := g.src.Gateway.Namespaces.Get(ns)
		return err == nil && s.Matches(labels.Set(nsObj.Labels))
	}
	return false
}

// listenerSetListeners appends the listeners of the attached ListenerSets
// after the Gateway's own, in precedence order, so that conflicts give
// way to the Gateway and then to older ListenerSets.
func (g *gwBuild) listenerSetListeners() {
	n := 0
	for _, st := range g.setOrder {
		if !st.attached {
			continue
		}
		for _, e := range st.obj.Spec.Listeners {
			g.checkListener(gwv1.Listener{Name: e.Name, Hostname: e.Hostname, Port: e.Port, Protocol: e.Protocol, TLS: e.TLS, AllowedRoutes: e.AllowedRoutes}, st)
			n++
			if n > MaxGatewayListenerSetEntries {
				ls := g.ls[len(g.ls)-1]
				ls.valid, ls.proto, ls.kinds, ls.certs = false, "", nil, nil
				ls.status.SupportedKinds = []gwv1.RouteGroupKind{}
				ls.status.Conditions[0] = cond(string(gwv1.ListenerEntryConditionAccepted), false, string(gwv1.ListenerEntryReasonTooManyListeners),
					fmt.Sprintf("the Gateway's ListenerSets already add %d listeners, the most it takes", MaxGatewayListenerSetEntries), st.obj.Generation)
			}
		}
	}
}

// conflictedEntry lowers Accepted and Programmed of a ListenerSet
// listener that conflicts with an earlier one, with the conflict's reason.
func conflictedEntry(ls *listenerState) {
	c := ls.status.Conditions
	if len(c) < 4 || c[2].Status != metav1.ConditionTrue {
		return
	}
	c[0] = cond(c[0].Type, false, c[2].Reason, c[2].Message, c[2].ObservedGeneration)
	c[3] = cond(c[3].Type, false, c[2].Reason, c[2].Message, c[2].ObservedGeneration)
}

// listenerSetStatus gives each ListenerSet naming the Gateway its status,
// and the Gateway its attachedListenerSets.
func (g *gwBuild) listenerSetStatus() {
	if len(g.setOrder) == 0 {
		return
	}
	g.res.ListenerSets = map[RouteKey]*ListenerSetResult{}
	parentOK := g.res.Accepted.Status == metav1.ConditionTrue
	for _, st := range g.setOrder {
		gen := st.obj.Generation
		r := &ListenerSetResult{Generation: gen}
		both := func(ok bool, reason, msg string) {
			r.Accepted = cond(string(gwv1.ListenerSetConditionAccepted), ok, reason, msg, gen)
			r.Programmed = cond(string(gwv1.ListenerSetConditionProgrammed), ok, reason, msg, gen)
		}
		switch {
		case !st.allowed:
			both(false, string(gwv1.ListenerSetReasonNotAllowed), fmt.Sprintf("the Gateway's spec.allowedListeners does not admit ListenerSets of namespace %s", st.obj.Namespace))
		case st.tooMany:
			both(false, ReasonTooManyListenerSets, fmt.Sprintf("the Gateway already has %d ListenerSets, the most it takes", MaxGatewayListenerSets))
		case !st.attached || !parentOK:
			both(false, string(gwv1.ListenerSetReasonParentNotAccepted), "the parent Gateway is not accepted")
		}
		if st.attached {
			valid := false
			for _, ls := range g.ls {
				if ls.set != st {
					continue
				}
				valid = valid || ls.valid // served: accepted, not conflicted, certificates resolved
				r.Listeners = append(r.Listeners, gwv1.ListenerEntryStatus{
					Name: ls.status.Name, SupportedKinds: ls.status.SupportedKinds,
					AttachedRoutes: ls.status.AttachedRoutes, Conditions: ls.status.Conditions,
				})
			}
			if parentOK {
				if valid {
					r.Accepted = cond(string(gwv1.ListenerSetConditionAccepted), true, string(gwv1.ListenerSetReasonAccepted), "", gen)
					r.Programmed = cond(string(gwv1.ListenerSetConditionProgrammed), true, string(gwv1.ListenerSetReasonProgrammed), "", gen)
					g.res.AttachedListenerSets++
				} else {
					both(false, string(gwv1.ListenerSetReasonListenersNotValid), "no listener is valid; see the listeners' conditions")
				}
			}
		}
		g.res.ListenerSets[st.key] = r
	}
}
