package translate

import (
	"cmp"
	"fmt"
	"net/netip"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	corelisters "k8s.io/client-go/listers/core/v1"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"
	gwlisters "sigs.k8s.io/gateway-api/pkg/client/listers/apis/v1"

	"github.com/teapot-lb/teapot-lb/api"
	pb "github.com/teapot-lb/teapot-lb/api/proto/teapotv1"
	"github.com/teapot-lb/teapot-lb/tenantsync/syncspec"
)

// GatewayController is the controllerName of the GatewayClasses whose
// Gateways the agent takes.
const GatewayController = "teapot-lb.io/gateway-controller"

// Kinds of the Gateway API objects the agent reads.
const (
	KindGateway      = "Gateway"
	KindGatewayClass = "GatewayClass"
	KindHTTPRoute    = "HTTPRoute"
	KindGRPCRoute    = "GRPCRoute"
	KindTLSRoute     = "TLSRoute"
	KindTCPRoute     = "TCPRoute"
	KindUDPRoute     = "UDPRoute"
	KindListenerSet  = "ListenerSet"
)

// RouteKinds are the route kinds the agent serves, in the order the
// translation reads them.
var RouteKinds = []string{KindHTTPRoute, KindGRPCRoute, KindTLSRoute, KindTCPRoute, KindUDPRoute}

// gatewayGroup is the API group of the Gateway API.
const gatewayGroup = gwv1.GroupName

// Bounds of what one Gateway may ask for; the LB cluster's validation
// (quotas on listeners, routes, pools and members) bounds the rest.
const (
	// MaxGatewayRoutes is the most routes of all kinds one Gateway takes;
	// later ones (by creation) are not accepted.
	MaxGatewayRoutes = 512
	// MaxGatewayRouteBytes bounds the encoded size of all the LB routes
	// one Gateway's HTTPRoutes and GRPCRoutes become (one per rule and
	// hostname): half of api.MaxObjectBytes, leaving the rest to pools
	// and listeners. A route that would pass it is not accepted.
	MaxGatewayRouteBytes = api.MaxObjectBytes / 2
)

// GatewaySources are the Gateway API listers, nil when the Gateway API
// CRDs are not installed. A route lister is nil when its CRD is missing.
type GatewaySources struct {
	Classes    gwlisters.GatewayClassLister
	Gateways   gwlisters.GatewayLister
	HTTPRoutes gwlisters.HTTPRouteLister
	GRPCRoutes gwlisters.GRPCRouteLister
	TLSRoutes  gwlisters.TLSRouteLister
	TCPRoutes  gwlisters.TCPRouteLister
	UDPRoutes  gwlisters.UDPRouteLister
	// ListenerSets is nil when the ListenerSet CRD is missing: then no
	// ListenerSet attaches and spec.allowedListeners is warned about.
	ListenerSets    gwlisters.ListenerSetLister
	ReferenceGrants gwlisters.ReferenceGrantLister
	Namespaces      corelisters.NamespaceLister
	Secrets         corelisters.SecretLister
	// BackendTLSPolicies; nil when the CRD is missing or the agent may
	// not read them.
	BackendTLSPolicies gwlisters.BackendTLSPolicyLister
	// ConfigMaps hold the CA bundles of spec.tls.frontend and of
	// BackendTLSPolicies; nil when the agent may not read them.
	ConfigMaps corelisters.ConfigMapLister
	// EdgePolicies, nil when the EdgePolicy CRD is not installed.
	EdgePolicies EdgePolicyLister
}

// RouteKey names one route object.
type RouteKey struct{ Kind, Namespace, Name string }

func (k RouteKey) String() string { return k.Kind + " " + k.Namespace + "/" + k.Name }

// GatewayResult is what the translation of a Gateway found, for its status
// and its routes' status. Conditions carry no transition time; the agent
// keeps the time of a condition whose status did not change.
type GatewayResult struct {
	Generation int64
	// Accepted is the Gateway's Accepted condition.
	Accepted metav1.Condition
	// Listeners are the status of each listener, in spec order; their
	// Programmed condition assumes the LB cluster takes the load
	// balancer (the agent lowers it when it does not).
	Listeners []gwv1.ListenerStatus
	// Routes are the parent statuses this Gateway gives each route that
	// names it, in the order of the route's parentRefs.
	Routes map[RouteKey][]gwv1.RouteParentStatus
	// Certificates are the Secrets the https listeners serve, to upload
	// as the tenant's certificates.
	Certificates []CertificateSource
	// Conditions are the Gateway's conditions besides Accepted and
	// Programmed (InsecureFrontendValidationMode).
	Conditions []metav1.Condition
	// Policies are the ancestor statuses this Gateway gives the
	// BackendTLSPolicies of the Services its routes send to.
	Policies map[RouteKey]gwv1.PolicyAncestorStatus
	// ResolvedRefs is the Gateway's ResolvedRefs condition: set when
	// spec.tls.backend is (its client certificate reference).
	ResolvedRefs *metav1.Condition
	// Policies are the Accepted conditions of the EdgePolicies that
	// reach this Gateway (targeting it or a route attached to it).
	EdgePolicies []PolicyStatus
	// AddressNotUsable says why the Gateway's addresses, well formed, are
	// not served (several: a Gateway has one VIP); the Gateway is
	// accepted, not sent to the LB cluster, and not programmed.
	AddressNotUsable string
	// ListenerSets are the status of each ListenerSet whose parentRef
	// names this Gateway, and AttachedListenerSets how many are accepted.
	ListenerSets         map[RouteKey]*ListenerSetResult
	AttachedListenerSets int32
}

// CertificateSource is a kubernetes.io/tls Secret uploaded as a tenant
// certificate named Name.
type CertificateSource struct {
	Name, Namespace, Secret string
}

// WantsGateway reports whether the agent takes gw: its GatewayClass names
// the agent's controller.
func WantsGateway(gw *gwv1.Gateway, src Sources, o Options) bool {
	if gw.DeletionTimestamp != nil || src.Gateway == nil || src.Gateway.Classes == nil {
		return false
	}
	gc, err := src.Gateway.Classes.Get(string(gw.Spec.GatewayClassName))
	return err == nil && OwnsClass(gc, o)
}

// OwnsClass reports whether a GatewayClass is the agent's.
func OwnsClass(gc *gwv1.GatewayClass, o Options) bool {
	return string(gc.Spec.ControllerName) == o.GatewayControllerName()
}

// GatewayControllerName is the controllerName in force.
func (o Options) GatewayControllerName() string {
	return cmp.Or(o.GatewayController, GatewayController)
}

// UnroutedPool is the empty pool of a Gateway's tcp, udp and
// tls-passthrough listeners that no route has attached to. Backend pools
// are named after a Service and its port ("web-80"), so it takes no name
// of theirs.
const UnroutedPool = "unrouted"

// listenerState is one Gateway listener as the translation sees it.
type listenerState struct {
	spec   gwv1.Listener
	status *gwv1.ListenerStatus
	proto  string // the LB listener protocol
	valid  bool   // served: accepted, not conflicted, with certificates when https
	// attachable: accepted and not conflicted. Routes attach and count in
	// attachedRoutes even when the listener is not served (an https
	// listener whose certificates did not resolve), as the spec asks.
	attachable bool
	kinds      []string
	certs      []CertificateSource
	hostname   string
	// set is the ListenerSet the listener comes from; nil for the
	// Gateway's own.
	set *lsetState
	// client is the client certificate validation of an https listener
	// (spec.tls.frontend), nil without one.
	client *pb.ClientValidation
	// terminate: a TLS listener in Terminate mode; its routes' server
	// names are terminated on the tls-passthrough LB listener.
	terminate bool
}

// Gateway translates one Gateway the agent takes: one load balancer with
// one LB listener per port, the routes attached to its listeners, and the
// status of the Gateway, its listeners and their routes.
func Gateway(gw *gwv1.Gateway, src Sources, o Options) *Desired {
	d := &Desired{Source: Source{KindGateway, gw.Namespace, gw.Name}}
	res := &GatewayResult{Generation: gw.Generation, Routes: map[RouteKey][]gwv1.RouteParentStatus{}}
	d.Gateway = res
	lb := &pb.LoadBalancer{
		Name:  syncspec.GatewayName(gw.Namespace, gw.Name),
		Vip:   vipRequest(gw.Annotations, "", o, d),
		Pools: map[string]*pb.BackendPool{},
	}
	d.LB = lb
	d.ProxyMode = true
	accepted := cond(string(gwv1.GatewayConditionAccepted), true, string(gwv1.GatewayReasonAccepted), "the Gateway is served by teapot-lb", gw.Generation)
	if msg := gatewayAddress(gw, lb.Vip); msg != "" {
		accepted = cond(string(gwv1.GatewayConditionAccepted), false, string(gwv1.GatewayReasonUnsupportedAddress), msg, gw.Generation)
	} else if reason, msg := gatewayUnsupported(gw); msg != "" {
		accepted = cond(string(gwv1.GatewayConditionAccepted), false, reason, msg, gw.Generation)
	} else if n := len(gw.Spec.Addresses); n > 1 {
		res.AddressNotUsable = fmt.Sprintf("spec.addresses lists %d addresses; a teapot-lb Gateway has one VIP: keep one", n)
	}
	gatewayWarnings(gw, d, src.Gateway != nil && src.Gateway.ListenerSets != nil)
	svc, warnings := gatewayService(gw)
	d.Warnings = append(d.Warnings, warnings...)
	g := &gwBuild{gw: gw, src: src, o: o, d: d, lb: lb, res: res}
	g.podMode = podMode(gw.Annotations, o, d)
	notL4(gw.Annotations, "a Gateway", d)
	if !g.podMode {
		g.nodes = nodeAddrs(src.Nodes)
	}
	g.findListenerSets(accepted.Status == metav1.ConditionTrue)
	g.listeners()
	g.routes()
	g.isolationBarriers()
	g.lbListeners()
	g.sniScopes()
	g.clientSubjectHeader()
	g.frontendPortsUnused()
	if c := g.insecureFallback(); c != nil {
		res.Conditions = append(res.Conditions, *c)
	}
	g.backendClientCert()
	edgeRates(gw.Annotations, lb, d, edgeGateway)
	if !edgeSources(gw.Annotations, lb, d, false) && accepted.Status == metav1.ConditionTrue {
		accepted = cond(string(gwv1.GatewayConditionAccepted), false, "InvalidSourceRanges", d.Refused, gw.Generation)
	}
	if msg := g.edgeGatewayPolicy(); msg != "" && accepted.Status == metav1.ConditionTrue {
		accepted = cond(string(gwv1.GatewayConditionAccepted), false, "InvalidSourceRanges", msg, gw.Generation)
	}
	for _, ls := range g.ls {
		if ls.set == nil {
			res.Listeners = append(res.Listeners, *ls.status)
		}
	}
	if !slices.ContainsFunc(g.ls, func(l *listenerState) bool { return l.valid }) && accepted.Status == metav1.ConditionTrue {
		accepted = cond(string(gwv1.GatewayConditionAccepted), false, string(gwv1.GatewayReasonListenersNotValid), "no listener is valid; see the listeners' conditions", gw.Generation)
	} else if accepted.Status == metav1.ConditionTrue && slices.ContainsFunc(res.Listeners, func(l gwv1.ListenerStatus) bool {
		return meta.IsStatusConditionFalse(l.Conditions, string(gwv1.ListenerConditionAccepted))
	}) {
		// Served, without the listeners that are not accepted.
		accepted.Reason, accepted.Message = string(gwv1.GatewayReasonListenersNotValid), "some listeners are not accepted; see their conditions"
	}
	if accepted.Status == metav1.ConditionTrue && len(d.Warnings) > 0 {
		accepted.Message = boundText(accepted.Message+"; not as asked: "+strings.Join(d.Warnings, "; "), 1024)
	}
	res.Accepted = accepted
	g.listenerSetStatus()
	if accepted.Status != metav1.ConditionTrue {
		d.Refused = accepted.Message
	} else if res.AddressNotUsable != "" {
		d.Refused = res.AddressNotUsable
	} else {
		d.GatewayService = svc
	}
	return finish(d)
}

// gatewayAddress takes the first spec.addresses entry as the requested
// VIP; it returns why the addresses are not supported (a type other than
// IPAddress, a value that is no IP address), or "".
func gatewayAddress(gw *gwv1.Gateway, v *pb.VIPRequest) string {
	for i, a := range gw.Spec.Addresses {
		if a.Type != nil && *a.Type != gwv1.IPAddressType {
			return fmt.Sprintf("spec.addresses[%d].type %s is not supported; use IPAddress", i, *a.Type)
		}
		if a.Value == "" {
			continue // any address: the pool allocates one
		}
		ip, err := netip.ParseAddr(a.Value)
		if err != nil {
			return fmt.Sprintf("spec.addresses[%d].value %q is not an IP address", i, a.Value)
		}
		if i == 0 {
			v.Address = ip.String()
		}
	}
	return ""
}

// cond builds a condition without a transition time.
func cond(typ string, ok bool, reason, msg string, gen int64) metav1.Condition {
	st := metav1.ConditionFalse
	if ok {
		st = metav1.ConditionTrue
	}
	return metav1.Condition{Type: typ, Status: st, Reason: reason, Message: msg, ObservedGeneration: gen}
}

// gwBuild carries one Gateway's translation.
type gwBuild struct {
	gw      *gwv1.Gateway
	src     Sources
	o       Options
	d       *Desired
	lb      *pb.LoadBalancer
	res     *GatewayResult
	ls      []*listenerState
	podMode bool
	nodes   []string
	// l4 holds the backends of tcp, udp and tls-passthrough listeners by
	// port and protocol: the first route attached wins (for
	// tls-passthrough, the first route for any server name).
	l4 map[l4Key]*l4Attach
	// sni holds the server-name routes of each tls-passthrough port, and
	// sniOwner the route each host name went to: the oldest route that
	// attached with it.
	sni      map[l4Key][]*pb.SNIRoute
	sniOwner map[l4Key]map[string]RouteKey
	// newPools are the pools added since it was last cleared: those of
	// the route being translated, removed again if it is not accepted.
	newPools []string
	// regexInsts and routeBytes are the running totals of the LB routes
	// added (api.MaxRegexInstsPerLB, MaxGatewayRouteBytes).
	regexInsts, routeBytes int
	// sets are the ListenerSets whose parentRef names this Gateway.
	sets     map[RouteKey]*lsetState
	setOrder []*lsetState
}

type l4Key struct {
	port  int32
	proto string
}

type l4Attach struct {
	route RouteKey
	pool  string
}

// defaultKinds are the route kinds a listener protocol takes.
func defaultKinds(p gwv1.ProtocolType) []string {
	switch p {
	case gwv1.HTTPProtocolType, gwv1.HTTPSProtocolType:
		return []string{KindHTTPRoute, KindGRPCRoute}
	case gwv1.TLSProtocolType:
		return []string{KindTLSRoute}
	case gwv1.TCPProtocolType:
		return []string{KindTCPRoute}
	case gwv1.UDPProtocolType:
		return []string{KindUDPRoute}
	}
	return nil
}

// listeners checks each listener: protocol, TLS, allowed kinds, conflicts.
func (g *gwBuild) listeners() {
	for _, l := range g.gw.Spec.Listeners {
		g.checkListener(l, nil)
	}
	g.listenerSetListeners()
	g.conflicts()
	for _, ls := range g.ls {
		gen := ls.gen(g)
		resolved := ls.status.Conditions[1].Status == metav1.ConditionTrue
		ls.attachable = ls.valid
		if (ls.proto == "https" || ls.terminate) && len(ls.certs) == 0 {
			ls.valid = false
		}
		prog := cond(string(gwv1.ListenerConditionProgrammed), ls.valid, string(gwv1.ListenerReasonProgrammed), "", gen)
		if !ls.valid {
			prog.Reason, prog.Message = string(gwv1.ListenerReasonInvalid), "the listener is not served; see its other conditions"
		} else if !resolved {
			prog.Message = "served, without the references that did not resolve"
		}
		ls.status.Conditions = append(ls.status.Conditions, prog)
		if ls.set != nil {
			conflictedEntry(ls)
		}
	}
}

// checkListener checks one listener of the Gateway (set nil) or of a
// ListenerSet: protocol, TLS, allowed kinds.
func (g *gwBuild) checkListener(l gwv1.Listener, set *lsetState) {
	{
		st := &gwv1.ListenerStatus{Name: l.Name, SupportedKinds: []gwv1.RouteGroupKind{}}
		ls := &listenerState{spec: l, status: st, valid: true, set: set}
		gen := ls.gen(g)
		if l.Hostname != nil {
			ls.hostname = strings.ToLower(string(*l.Hostname))
		}
		accepted := cond(string(gwv1.ListenerConditionAccepted), true, string(gwv1.ListenerReasonAccepted), "", gen)
		resolved := cond(string(gwv1.ListenerConditionResolvedRefs), true, string(gwv1.ListenerReasonResolvedRefs), "", gen)
		switch l.Protocol {
		case gwv1.HTTPProtocolType:
			ls.proto = "http"
		case gwv1.HTTPSProtocolType:
			ls.proto = "https"
			if l.TLS != nil && l.TLS.Mode != nil && *l.TLS.Mode == gwv1.TLSModePassthrough {
				accepted = cond(string(gwv1.ListenerConditionAccepted), false, string(gwv1.ListenerReasonUnsupportedValue), "an HTTPS listener terminates TLS; use protocol TLS for passthrough", gen)
			} else {
				if r := g.listenerCerts(ls); r != nil {
					resolved = *r
				}
				if r, a := g.listenerClientCAs(ls); a != nil {
					accepted = *a
					if r != nil {
						resolved = *r
					}
				} else if r != nil && resolved.Status == metav1.ConditionTrue {
					resolved = *r
				}
			}
		case gwv1.TLSProtocolType:
			ls.proto = "tls-passthrough"
			if a, r := g.tlsListener(ls); a != nil {
				accepted = *a
			} else if r != nil {
				resolved = *r
			}
		case gwv1.TCPProtocolType:
			ls.proto = "tcp"
		case gwv1.UDPProtocolType:
			ls.proto = "udp"
		default:
			accepted = cond(string(gwv1.ListenerConditionAccepted), false, string(gwv1.ListenerReasonUnsupportedProtocol), fmt.Sprintf("protocol %s is not supported; use HTTP, HTTPS, TLS, TCP or UDP", l.Protocol), gen)
		}
		if r := g.listenerKinds(ls); r != nil && resolved.Status == metav1.ConditionTrue {
			resolved = *r
		}
		if accepted.Status != metav1.ConditionTrue {
			// A listener that is not accepted takes no route kind.
			ls.valid = false
			ls.kinds, st.SupportedKinds = nil, []gwv1.RouteGroupKind{}
		}
		st.Conditions = []metav1.Condition{accepted, resolved}
		g.ls = append(g.ls, ls)
	}
}

// listenerKinds fills supportedKinds from allowedRoutes.kinds (or the
// protocol's defaults) and returns a ResolvedRefs condition when a kind
// cannot be served.
func (g *gwBuild) listenerKinds(ls *listenerState) *metav1.Condition {
	def := defaultKinds(ls.spec.Protocol)
	var bad []string
	if ls.spec.AllowedRoutes == nil || len(ls.spec.AllowedRoutes.Kinds) == 0 {
		ls.kinds = def
	} else {
		for _, k := range ls.spec.AllowedRoutes.Kinds {
			grp := gatewayGroup
			if k.Group != nil {
				grp = string(*k.Group)
			}
			if grp != gatewayGroup || !slices.Contains(def, string(k.Kind)) {
				bad = append(bad, string(k.Kind))
				continue
			}
			if !slices.Contains(ls.kinds, string(k.Kind)) {
				ls.kinds = append(ls.kinds, string(k.Kind))
			}
		}
	}
	grp := gwv1.Group(gatewayGroup)
	for _, k := range ls.kinds {
		ls.status.SupportedKinds = append(ls.status.SupportedKinds, gwv1.RouteGroupKind{Group: &grp, Kind: gwv1.Kind(k)})
	}
	if len(bad) == 0 {
		return nil
	}
	c := cond(string(gwv1.ListenerConditionResolvedRefs), false, string(gwv1.ListenerReasonInvalidRouteKinds),
		fmt.Sprintf("allowedRoutes.kinds %s cannot attach to a %s listener", strings.Join(bad, ", "), ls.spec.Protocol), ls.gen(g))
	return &c
}

// conflicts marks listeners that cannot be served beside an earlier one
// of the same port: a different protocol on the same transport, or the
// same protocol with the same hostname.
func (g *gwBuild) conflicts() {
	transport := func(p string) string {
		if p == "udp" {
			return "udp"
		}
		return "tcp"
	}
	// A conflicted listener is not served, so it takes no port from the
	// listeners after it.
	lost := make([]bool, len(g.ls))
	for i, ls := range g.ls {
		reason := ""
		for j, prev := range g.ls[:i] {
			if lost[j] || prev.spec.Port != ls.spec.Port || transport(prev.proto) != transport(ls.proto) || prev.proto == "" || ls.proto == "" {
				continue
			}
			switch {
			case prev.proto != ls.proto:
				reason = string(gwv1.ListenerReasonProtocolConflict)
			case ls.proto == "tcp" || ls.proto == "udp" || prev.hostname == ls.hostname:
				reason = string(gwv1.ListenerReasonHostnameConflict)
			}
			if reason != "" {
				break
			}
		}
		gen := ls.gen(g)
		c := cond(string(gwv1.ListenerConditionConflicted), false, string(gwv1.ListenerReasonNoConflicts), "", gen)
		if reason != "" {
			c = cond(string(gwv1.ListenerConditionConflicted), true, reason, fmt.Sprintf("port %d is already taken by an earlier listener that cannot share it", ls.spec.Port), gen)
			ls.valid, lost[i] = false, true
		}
		ls.status.Conditions = append(ls.status.Conditions, c)
	}
}

// lbListeners builds one LB listener per port and protocol from the valid
// listeners: http and https listeners of a port share it (their hosts are
// in the routes; https certificates are all offered, chosen by SNI).
func (g *gwBuild) lbListeners() {
	type key struct {
		port  int32
		proto string
	}
	byKey := map[key]*pb.Listener{}
	for _, ls := range g.ls {
		if !ls.valid {
			continue
		}
		k := key{ls.spec.Port, ls.proto}
		l := byKey[k]
		if l == nil {
			l = &pb.Listener{Port: uint32(ls.spec.Port), Protocol: ls.proto}
			if ls.proto == "https" {
				l.Tls = &pb.TLSPolicy{ClientValidation: ls.client}
			}
			byKey[k] = l
			g.lb.Listeners = append(g.lb.Listeners, l)
		}
		if len(ls.certs) > 0 && l.Tls == nil {
			l.Tls = &pb.TLSPolicy{} // a tls-passthrough port with names to terminate
		}
		for _, c := range ls.certs {
			if !slices.Contains(l.Tls.Certificates, c.Name) {
				l.Tls.Certificates = append(l.Tls.Certificates, c.Name)
			}
			if !slices.Contains(g.res.Certificates, c) {
				g.res.Certificates = append(g.res.Certificates, c)
			}
		}
		switch ls.proto {
		case "tcp", "udp", "tls-passthrough":
			k := l4Key{ls.spec.Port, ls.proto}
			if a := g.l4[k]; a != nil {
				l.Pool = a.pool
			}
			l.SniRoutes = g.sni[k]
		}
	}
	// A tcp, udp or tls-passthrough port without an attached route has no
	// backends: it forwards to an empty pool (connections are reset,
	// datagrams dropped), so that the Gateway is programmed with all its
	// listeners, as the spec wants, even before a route attaches. So do
	// the server names of a tls-passthrough port that no route covers.
	for _, l := range g.lb.Listeners {
		if l.Protocol != "http" && l.Protocol != "https" && l.Pool == "" {
			if g.lb.Pools[UnroutedPool] == nil {
				g.lb.Pools[UnroutedPool] = backendPool(g.gw.Annotations, g.d)
			}
			l.Pool = UnroutedPool
		}
	}
	slices.SortStableFunc(g.lb.Listeners, func(a, b *pb.Listener) int {
		return cmp.Or(cmp.Compare(a.Port, b.Port), strings.Compare(a.Protocol, b.Protocol))
	})
	g.prunePools()
}

// prunePools drops the pools no listener, route or mirror uses (those a
// merged tcp, udp or tls-passthrough pool was built from).
func (g *gwBuild) prunePools() {
	used := map[string]bool{}
	for _, l := range g.lb.Listeners {
		used[l.GetPool()] = true
		for _, r := range l.GetSniRoutes() {
			used[r.GetPool()] = true
		}
	}
	for _, r := range g.lb.Routes {
		used[r.GetPool()] = true
		for _, b := range r.GetBackends() {
			used[b.GetPool()] = true
		}
		for _, f := range r.GetFilters() {
			used[f.GetRequestMirror().GetPool()] = true
		}
	}
	for k := range g.lb.Pools {
		if !used[k] {
			delete(g.lb.Pools, k)
		}
	}
}
