package translate

import (
	"cmp"
	"fmt"
	"net/netip"
	"slices"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/labels"
	corelisters "k8s.io/client-go/listers/core/v1"
	discoverylisters "k8s.io/client-go/listers/discovery/v1"
	networkinglisters "k8s.io/client-go/listers/networking/v1"

	"github.com/teapot-lb/teapot-lb/api"
	pb "github.com/teapot-lb/teapot-lb/api/proto/teapotv1"
	"github.com/teapot-lb/teapot-lb/tenantsync/syncspec"
)

// Classes and the annotations the agent reads.
const (
	LoadBalancerClass = "teapot-lb.io/lb"
	IngressController = "teapot-lb.io/ingress"

	AnnotationPool            = "teapot-lb.io/pool"
	AnnotationIPs             = "teapot-lb.io/load-balancer-ips"
	AnnotationSharingKey      = "teapot-lb.io/sharing-key"
	AnnotationProxyProtocol   = "teapot-lb.io/proxy-protocol"
	AnnotationHealthCheckPath = "teapot-lb.io/health-check-path"
	AnnotationAlgorithm       = "teapot-lb.io/algorithm"
	AnnotationMembers         = "teapot-lb.io/members"
	AnnotationSSLRedirect     = "teapot-lb.io/ssl-redirect"
	// AnnotationClientSource "true": a Service's pods see the client's
	// own address (the LB hosts dial them from it); pod mode only.
	AnnotationClientSource    = "teapot-lb.io/client-source"
	AnnotationTLSCertificates = "teapot-lb.io/tls-certificates"
	// AnnotationHostname and external-dns's spelling: DNS names (comma-
	// separated) the LB hosts' DNS answers with the Service's VIP.
	AnnotationHostname            = "teapot-lb.io/hostname"
	AnnotationExternalDNSHostname = "external-dns.alpha.kubernetes.io/hostname"

	// Well-known Kubernetes names.
	labelServiceName    = "kubernetes.io/service-name"
	labelExcludeFromLBs = "node.kubernetes.io/exclude-from-external-load-balancers"
	annotationIngClass  = "kubernetes.io/ingress.class"
	annotationDefaultIC = "ingressclass.kubernetes.io/is-default-class"
)

// Options say which objects the agent takes and how it builds members.
type Options struct {
	// LoadBalancerClass and IngressController select the objects (default
	// LoadBalancerClass and IngressController above).
	LoadBalancerClass string
	IngressController string
	// DefaultClass also takes LoadBalancer Services without a class.
	DefaultClass bool
	// PodsRoutable is the tenant's pods_routable: members are pod
	// addresses unless a Service asks for nodeport.
	PodsRoutable bool
	// DefaultPool is used when an object names no pool.
	DefaultPool string
	// GatewayController selects the GatewayClasses (default
	// GatewayController).
	GatewayController string
	// DualStack: every host of the LB cluster serves dual-stack load
	// balancers (feature level 4), so a dual-stack Service asks for a VIP
	// of each family.
	DualStack bool
	// NotFoundRoutes: every host of the LB cluster serves routes that
	// answer 404 (routes[].notFound, feature level 5), which isolate a
	// Gateway's http listeners of one port from each other.
	NotFoundRoutes bool
	// TLSTerminate: every host of the LB cluster terminates TLS for
	// server-name routes of tls-passthrough listeners
	// (listeners[].sniRoutes[].terminate, feature level 5): a Gateway's
	// TLS listeners in Terminate mode are served.
	TLSTerminate bool
	// MisdirectedRequests: every host of the LB cluster answers 421 to a
	// request for another site than its connection's server name
	// (listeners[].tls.sniScopes, feature level 5): a Gateway's https
	// listeners of one port are kept apart on coalesced connections.
	MisdirectedRequests bool
	// ClientSource: every host of the LB cluster dials members from the
	// client's own address (pools.*.clientSource, feature level 7), so a
	// Service's teapot-lb.io/client-source is served.
	ClientSource bool
	// Domains are the tenant's domains, comma-separated ("" when it has
	// none: any host); the LB cluster refuses a route host outside them.
	Domains string
}

func (o Options) lbClass() string { return cmp.Or(o.LoadBalancerClass, LoadBalancerClass) }
func (o Options) controller() string {
	return cmp.Or(o.IngressController, IngressController)
}

// Sources are the informers' listers.
type Sources struct {
	Services       corelisters.ServiceLister
	EndpointSlices discoverylisters.EndpointSliceLister
	Nodes          corelisters.NodeLister
	Ingresses      networkinglisters.IngressLister
	IngressClasses networkinglisters.IngressClassLister
	// Gateway is nil when the Gateway API is not installed.
	Gateway *GatewaySources
}

// Kinds of Source.
const (
	KindService = "Service"
	KindIngress = "Ingress"
)

// Source names the Kubernetes object a load balancer comes from.
type Source struct {
	Kind, Namespace, Name string
}

func (s Source) String() string { return s.Kind + " " + s.Namespace + "/" + s.Name }

// Desired is one load balancer the agent wants.
type Desired struct {
	LB      *pb.LoadBalancer
	Version string
	Source  Source
	// ProxyMode: the LB adds PROXY protocol or terminates connections, so
	// the Service's status says ipMode: Proxy.
	ProxyMode bool
	// Warnings are parts of the object that could not be translated.
	Warnings []string
	// NodePorts names the ClusterIP Services of Source's namespace whose
	// NodePort Service (NodePortService) this load balancer needs.
	NodePorts []string
	// Refused, when set, says why the agent does not ask the LB cluster
	// for this load balancer at all (the object cannot be served as it
	// is); the agent reports it as a Warning Event and writes no address.
	Refused string
	// Gateway is set for a Gateway: its status and its routes'.
	Gateway *GatewayResult
	// GatewayService is the Service the agent makes for a Gateway it
	// serves (gatewaysvc.go); nil for other objects and refused Gateways.
	GatewayService *corev1.Service
}

func finish(d *Desired) *Desired {
	d.Version = syncspec.Version(d.LB)
	return d
}

// WantsService reports whether the agent takes svc.
func WantsService(svc *corev1.Service, o Options) bool {
	if svc.Spec.Type != corev1.ServiceTypeLoadBalancer || svc.DeletionTimestamp != nil {
		return false
	}
	if c := svc.Spec.LoadBalancerClass; c != nil {
		return *c == o.lbClass()
	}
	return o.DefaultClass
}

// Service translates one Service the agent takes.
func Service(svc *corev1.Service, src Sources, o Options) *Desired {
	d := &Desired{Source: Source{KindService, svc.Namespace, svc.Name}}
	lb := &pb.LoadBalancer{
		Name:  syncspec.ServiceName(svc.Namespace, svc.Name),
		Vip:   vipRequest(svc.Annotations, svc.Spec.LoadBalancerIP, o, d),
		Pools: map[string]*pb.BackendPool{},
	}
	d.LB = lb
	lb.Hostnames = serviceHostnames(svc.Annotations)
	serviceFamily(svc, lb.Vip, o, d)
	podMode := podMode(svc.Annotations, o, d)
	pp := proxyProtocol(svc.Annotations, d)
	cs := clientSource(svc.Annotations, podMode, pp, o, d)
	var nodes []string
	if !podMode {
		nodes = nodeAddrs(src.Nodes)
	}
	local := svc.Spec.ExternalTrafficPolicy == corev1.ServiceExternalTrafficPolicyLocal && svc.Spec.HealthCheckNodePort != 0
	for _, p := range svc.Spec.Ports {
		var proto string
		switch p.Protocol {
		case corev1.ProtocolTCP, "":
			proto = "tcp"
		case corev1.ProtocolUDP:
			proto = "udp"
		default:
			d.Warnings = append(d.Warnings, fmt.Sprintf("port %d/%s: %s is not supported; only TCP and UDP", p.Port, p.Protocol, p.Protocol))
			continue
		}
		key := portKey(p.Name, p.Port, proto)
		lb.Listeners = append(lb.Listeners, &pb.Listener{Port: uint32(p.Port), Protocol: proto, Pool: key})
		bp := backendPool(svc.Annotations, d)
		affinity(svc, bp)
		if proto == "tcp" {
			bp.ProxyProtocol = pp
		}
		bp.ClientSource = cs
		switch {
		case podMode:
			bp.Members = podMembers(src.EndpointSlices, svc.Namespace, svc.Name, p)
		case p.NodePort == 0 && svc.Spec.AllocateLoadBalancerNodePorts != nil && !*svc.Spec.AllocateLoadBalancerNodePorts:
			d.Refused = fmt.Sprintf("port %d/%s has no nodePort because allocateLoadBalancerNodePorts is false, and the tenant's pods are not routable from the LB hosts (pod mode), so the LB has nothing to send to: "+
				"remove allocateLoadBalancerNodePorts: false (or give the port a nodePort), or ask the operator to make the pods routable", p.Port, cmp.Or(p.Protocol, corev1.ProtocolTCP))
		case p.NodePort == 0:
			d.Warnings = append(d.Warnings, fmt.Sprintf("port %d/%s has no nodePort; set one, or use pod mode when pods are routable", p.Port, p.Protocol))
		default:
			bp.Members = nodeMembers(nodes, p.NodePort)
			if local {
				// kube-proxy answers on healthCheckNodePort: 200 where the
				// Service has a local endpoint, 503 elsewhere.
				bp.HealthCheck = &pb.HealthCheck{Http: &pb.HTTPCheck{Path: "/healthz"}, Port: uint32(svc.Spec.HealthCheckNodePort)}
			}
		}
		lb.Pools[key] = bp
	}
	affinityWarnings(svc, d)
	sourceRanges(svc, lb, d) // last: of several refusals, the tenant reads this one
	d.ProxyMode = pp != ""
	return finish(d)
}

// portKey names the backend pool of a Service port.
func portKey(name string, port int32, proto string) string {
	if name != "" && api.IsLabel(name) {
		return name
	}
	return fmt.Sprintf("%s-%d", proto, port)
}

func vipRequest(ann map[string]string, legacyIP string, o Options, d *Desired) *pb.VIPRequest {
	v := &pb.VIPRequest{Pool: cmp.Or(ann[AnnotationPool], o.DefaultPool), SharingKey: ann[AnnotationSharingKey]}
	ips := ann[AnnotationIPs]
	if ips == "" {
		ips = legacyIP
	}
	var addrs []string
	for _, s := range strings.Split(ips, ",") {
		if s = strings.TrimSpace(s); s != "" {
			addrs = append(addrs, s)
		}
	}
	if len(addrs) > 0 {
		v.Address = addrs[0]
		if len(addrs) > 1 {
			d.Warnings = append(d.Warnings, fmt.Sprintf("%s lists %d addresses; one address is requested, %s (a dual-stack Service's VIP of the other family comes from the pool)", AnnotationIPs, len(addrs), addrs[0]))
		}
	}
	return v
}

func podMode(ann map[string]string, o Options, d *Desired) bool {
	switch m := ann[AnnotationMembers]; m {
	case "":
		return o.PodsRoutable
	case "nodeport":
		return false
	case "pod":
		if !o.PodsRoutable {
			d.Warnings = append(d.Warnings, fmt.Sprintf("%s: pod asked, but the tenant's pods are not routable from the LB hosts; using nodeport", AnnotationMembers))
			return false
		}
		return true
	default:
		d.Warnings = append(d.Warnings, fmt.Sprintf("%s: %q is not nodeport or pod; using the default", AnnotationMembers, m))
		return o.PodsRoutable
	}
}

// clientSource reads AnnotationClientSource: the pods see the client's own
// address. It needs pod mode (behind a node port kube-proxy rewrites the
// source of connections it sends to another node's pod, and the node,
// not the LB host, would get the replies), no PROXY protocol (which
// carries the client already), and an LB cluster that serves it.
func clientSource(ann map[string]string, podMode bool, pp string, o Options, d *Desired) bool {
	switch v := ann[AnnotationClientSource]; v {
	case "", "false":
		return false
	case "true":
	default:
		d.Warnings = append(d.Warnings, fmt.Sprintf("%s: %q is not true or false; the pods see the LB hosts' addresses", AnnotationClientSource, v))
		return false
	}
	switch {
	case !podMode:
		d.Warnings = append(d.Warnings, fmt.Sprintf("%s: the members are node ports, where kube-proxy rewrites the client's address and the node gets the replies; "+
			"not applied (the pods see the nodes' addresses): use pod mode (%s: pod, with the tenant's pods routable), or %s", AnnotationClientSource, AnnotationMembers, AnnotationProxyProtocol))
		return false
	case pp != "":
		d.Warnings = append(d.Warnings, fmt.Sprintf("%s: not applied with %s, which already passes the client's address on; remove one of them", AnnotationClientSource, AnnotationProxyProtocol))
		return false
	case !o.ClientSource:
		d.Warnings = append(d.Warnings, fmt.Sprintf("%s: not applied: the LB cluster does not dial from clients' addresses yet (feature level %d on every host); the pods see the LB hosts' addresses", AnnotationClientSource, api.LevelOf(api.FeatureClientSource)))
		return false
	}
	return true
}

// notL4 refuses AnnotationClientSource on an object other than a Service
// (what names it).
func notL4(ann map[string]string, what string, d *Desired) {
	if v, ok := ann[AnnotationClientSource]; ok {
		d.Warnings = append(d.Warnings, fmt.Sprintf("%s: %q not applied: it is read on Services of type LoadBalancer only, not on %s", AnnotationClientSource, v, what))
	}
}

func proxyProtocol(ann map[string]string, d *Desired) string {
	switch v := ann[AnnotationProxyProtocol]; v {
	case "", "v1", "v2":
		return v
	default:
		d.Warnings = append(d.Warnings, fmt.Sprintf("%s: %q is not v1 or v2; no PROXY protocol is sent", AnnotationProxyProtocol, v))
		return ""
	}
}

// backendPool starts a pool with the annotated algorithm and health check.
func backendPool(ann map[string]string, d *Desired) *pb.BackendPool {
	bp := &pb.BackendPool{Algorithm: ann[AnnotationAlgorithm]}
	if p := ann[AnnotationHealthCheckPath]; p != "" {
		bp.HealthCheck = &pb.HealthCheck{Http: &pb.HTTPCheck{Path: p}}
	}
	return bp
}

// nodeAddrs returns one address per node that may carry load-balancer
// traffic: ready and not excluded, InternalIP first, IPv4 before IPv6.
func nodeAddrs(nodes corelisters.NodeLister) []string {
	if nodes == nil {
		return nil
	}
	list, err := nodes.List(labels.Everything())
	if err != nil {
		return nil
	}
	var out []string
	for _, n := range list {
		if _, excluded := n.Labels[labelExcludeFromLBs]; excluded || !nodeReady(n) {
			continue
		}
		if a := nodeAddr(n); a.IsValid() {
			out = append(out, a.String())
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}

func nodeReady(n *corev1.Node) bool {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

func nodeAddr(n *corev1.Node) netip.Addr {
	var best netip.Addr
	rank := func(t corev1.NodeAddressType, a netip.Addr) int {
		r := 0
		if t == corev1.NodeExternalIP {
			r += 2
		}
		if a.Is6() {
			r++
		}
		return r
	}
	bestRank := 99
	for _, a := range n.Status.Addresses {
		if a.Type != corev1.NodeInternalIP && a.Type != corev1.NodeExternalIP {
			continue
		}
		ip, err := netip.ParseAddr(a.Address)
		if err != nil {
			continue
		}
		ip = ip.Unmap()
		if r := rank(a.Type, ip); r < bestRank {
			best, bestRank = ip, r
		}
	}
	return best
}

func nodeMembers(nodes []string, port int32) []*pb.Member {
	out := make([]*pb.Member, 0, len(nodes))
	for _, n := range nodes {
		a, _ := netip.ParseAddr(n)
		out = append(out, &pb.Member{Address: netip.AddrPortFrom(a, uint16(port)).String()})
	}
	return out
}

// podMembers returns the ready endpoints of a Service port, sorted.
func podMembers(slices_ discoverylisters.EndpointSliceLister, namespace, service string, p corev1.ServicePort) []*pb.Member {
	if slices_ == nil {
		return nil
	}
	sel := labels.SelectorFromSet(labels.Set{labelServiceName: service})
	list, err := slices_.EndpointSlices(namespace).List(sel)
	if err != nil {
		return nil
	}
	seen := map[netip.AddrPort]bool{}
	for _, es := range list {
		if es.AddressType != discoveryv1.AddressTypeIPv4 && es.AddressType != discoveryv1.AddressTypeIPv6 {
			continue
		}
		port, ok := slicePort(es, p)
		if !ok {
			continue
		}
		for _, ep := range es.Endpoints {
			if ep.Conditions.Ready != nil && !*ep.Conditions.Ready {
				continue
			}
			for _, s := range ep.Addresses {
				if a, err := netip.ParseAddr(s); err == nil {
					seen[netip.AddrPortFrom(a.Unmap(), port)] = true
				}
			}
		}
	}
	return sortedMembers(seen)
}

// slicePort finds the port of a slice that serves Service port p: the one
// of the same name (and protocol).
func slicePort(es *discoveryv1.EndpointSlice, p corev1.ServicePort) (uint16, bool) {
	proto := cmp.Or(p.Protocol, corev1.ProtocolTCP)
	for _, sp := range es.Ports {
		name := ""
		if sp.Name != nil {
			name = *sp.Name
		}
		spProto := corev1.ProtocolTCP
		if sp.Protocol != nil {
			spProto = *sp.Protocol
		}
		if name == p.Name && spProto == proto && sp.Port != nil && *sp.Port > 0 && *sp.Port < 65536 {
			return uint16(*sp.Port), true
		}
	}
	return 0, false
}

func sortedMembers(set map[netip.AddrPort]bool) []*pb.Member {
	aps := make([]netip.AddrPort, 0, len(set))
	for ap := range set {
		aps = append(aps, ap)
	}
	slices.SortFunc(aps, func(a, b netip.AddrPort) int { return a.Compare(b) })
	out := make([]*pb.Member, len(aps))
	for i, ap := range aps {
		out[i] = &pb.Member{Address: ap.String()}
	}
	return out
}

// parseBool reads an annotation's boolean; anything unreadable is false.
func parseBool(s string) bool {
	b, err := strconv.ParseBool(s)
	return err == nil && b
}
