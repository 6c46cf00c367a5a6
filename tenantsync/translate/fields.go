package translate

import (
	"fmt"

	"github.com/teapot-lb/teapot-lb/api"
)

// Handling says what the agent does with a field of a Kubernetes object.
type Handling string

// Handlings.
const (
	// Honoured: the field changes what the load balancer does.
	Honoured Handling = "honoured"
	// HonouredInPart: some values are served; the others are refused (a
	// Warning Event, and a condition: the Service's teapot-lb.io/Accepted,
	// the Gateway API's own conditions) as What says.
	HonouredInPart Handling = "honoured in part"
	// Refused: the field is not applied, and a Warning Event and a
	// condition say so and what the load balancer does instead.
	Refused Handling = "refused"
	// NotApplicable: the field means nothing to an external load
	// balancer (What says why); Kubernetes itself acts on it.
	NotApplicable Handling = "not applicable"
)

// Field is one field of an object's spec and what the agent does with it.
type Field struct {
	// Path is the field's JSON path from the object ("spec.ports[].port";
	// [] stands for the items of a list).
	Path     string
	Handling Handling
	What     string
	// Subtree: the decision covers every field below Path.
	Subtree bool
}

// Fields lists, per kind the agent reads, every field of its spec and what
// happens to it. A test walks the Kubernetes Go types, so that a field a
// Kubernetes or Gateway API upgrade adds fails the build until it is
// decided here; FIELDS.md is generated from this table.
var Fields = map[string][]Field{
	KindService:   serviceFields,
	KindIngress:   ingressFields,
	KindGateway:   gatewayFields,
	KindHTTPRoute: httpRouteFields,
	KindGRPCRoute: grpcRouteFields,
	KindTLSRoute:  l4RouteFields(true),
	KindTCPRoute:  l4RouteFields(false),
	KindUDPRoute:  l4RouteFields(false),

	KindBackendTLSPolicy: backendTLSPolicyFields,
}

// FieldKinds is the order of the kinds in FIELDS.md.
var FieldKinds = []string{KindService, KindIngress, KindGateway, KindHTTPRoute, KindGRPCRoute, KindTLSRoute, KindTCPRoute, KindUDPRoute, KindBackendTLSPolicy}

const kubeProxy = "kube-proxy and the EndpointSlice controller act on it inside the cluster; "

var serviceFields = []Field{
	{"spec.type", Honoured, "only type LoadBalancer is taken (with the agent's loadBalancerClass)", false},
	{"spec.loadBalancerClass", Honoured, "selects the Services the agent takes (teapot-lb.io/lb; none with --default-class)", false},
	{"spec.ports", Honoured, "one listener per port", false},
	{"spec.ports[].name", Honoured, "names the port's pool; pod mode finds the EndpointSlice port of the same name", false},
	{"spec.ports[].protocol", HonouredInPart, "TCP and UDP are served; SCTP is refused: the port is left out, with a warning", false},
	{"spec.ports[].appProtocol", NotApplicable, "a Service's listeners carry bytes whatever the protocol (Gateway backends read kubernetes.io/h2c)", false},
	{"spec.ports[].port", Honoured, "the listener's port on the VIP", false},
	{"spec.ports[].targetPort", NotApplicable, kubeProxy + "pod mode reads the endpoints' ports, which are the target ports", true},
	{"spec.ports[].nodePort", Honoured, "the members' port in nodeport mode", false},
	{"spec.selector", NotApplicable, kubeProxy + "the agent reads the EndpointSlices built from it", false},
	{"spec.clusterIP", NotApplicable, "an address inside the cluster", false},
	{"spec.clusterIPs", NotApplicable, "addresses inside the cluster", false},
	{"spec.externalIPs", NotApplicable, kubeProxy + "the LB neither announces nor serves them", false},
	{"spec.externalName", NotApplicable, "type ExternalName is not taken", false},
	{"spec.loadBalancerIP", Honoured, "the requested VIP (teapot-lb.io/load-balancer-ips wins)", false},
	{"spec.loadBalancerSourceRanges", Honoured, "every listener's allowedSources: clients outside the ranges are refused at accept on every LB host; the annotation service.beta.kubernetes.io/load-balancer-source-ranges when the field is empty. A list the LB cannot enforce (an entry that is not a CIDR, more than " + fmt.Sprint(api.MaxListenerSources) + ") refuses the Service: no load balancer rather than one open to every address", false},
	{"spec.sessionAffinity", Honoured, "ClientIP: every pool hashes the client address (Maglev; every LB host sends one address to one member)", false},
	{"spec.sessionAffinityConfig", Refused, "clientIP.timeoutSeconds is not applied: a client stays on its member with no expiry while the members stay the same, and some clients move at once when a member is added or removed (a warning says so)", true},
	{"spec.externalTrafficPolicy", Honoured, "Local in nodeport mode: members are health checked on healthCheckNodePort, so only nodes with a local endpoint get traffic", false},
	{"spec.healthCheckNodePort", Honoured, "the port of the members' health check with externalTrafficPolicy Local", false},
	{"spec.publishNotReadyAddresses", Honoured, "the EndpointSlice controller marks every endpoint ready, and pod mode sends to the ready ones", false},
	{"spec.ipFamilies", Honoured, "the first family's VIP is status.loadBalancer.ingress[0] (IPv6 first: an IPv6 VIP; otherwise the pool's default family, IPv4 when the pool has IPv4 addresses)", false},
	{"spec.ipFamilyPolicy", Honoured, "SingleStack: one VIP. RequireDualStack: an IPv4 and an IPv6 VIP from the pool, or the LB cluster refuses the Service (Warning Event, Accepted False) when the pool has no free address of a family. PreferDualStack: both when the pool has them, else one, with a Warning Event and Accepted True saying which family is missing and why. On an LB cluster below feature level 4, RequireDualStack is refused and PreferDualStack gets one VIP, with a warning", false},
	{"spec.allocateLoadBalancerNodePorts", Honoured, "false: served in pod mode, refused without it (no port to send to)", false},
	{"spec.internalTrafficPolicy", NotApplicable, kubeProxy + "it is about traffic from inside the cluster", false},
	{"spec.trafficDistribution", NotApplicable, kubeProxy + "it steers traffic from inside the cluster", false},
}

var ingressFields = []Field{
	{"spec.ingressClassName", Honoured, "selects the Ingresses of a class whose controller is teapot-lb.io/ingress (or the default class)", false},
	{"spec.defaultBackend", Honoured, "a route for / after the rules' routes", false},
	{"spec.defaultBackend.service", Honoured, "the pool of the Service's port", true},
	{"spec.defaultBackend.resource", Refused, "resource backends are not supported: left out, with a warning", true},
	{"spec.tls", Honoured, "any entry adds an https listener on 443", false},
	{"spec.tls[].hosts", HonouredInPart, "any entry turns on https for the rules' hosts (ACME certificates for them); a host listed here that no rule has gets no certificate, and a warning says so", false},
	{"spec.tls[].secretName", Refused, "the Secret is not read: the https listener serves ACME certificates, or the uploaded ones teapot-lb.io/tls-certificates names (a warning says so)", false},
	{"spec.rules", Honoured, "one route per path", false},
	{"spec.rules[].host", Honoured, "the routes' host", false},
	{"spec.rules[].http", Honoured, "the rule's paths", false},
	{"spec.rules[].http.paths", Honoured, "one route each", false},
	{"spec.rules[].http.paths[].path", Honoured, "the route's path", false},
	{"spec.rules[].http.paths[].pathType", Honoured, "Exact: exact; Prefix and ImplementationSpecific: prefix", false},
	{"spec.rules[].http.paths[].backend", Honoured, "the route's pool", false},
	{"spec.rules[].http.paths[].backend.service", Honoured, "the pool of the Service's port (nodeport members through a NodePort Service the agent makes for a ClusterIP Service outside pod mode)", true},
	{"spec.rules[].http.paths[].backend.resource", Refused, "resource backends are not supported: the path is left out, with a warning", true},
}

var gatewayFields = []Field{
	{"spec.gatewayClassName", Honoured, "selects the Gateways of a class whose controllerName is teapot-lb.io/gateway-controller", false},
	{"spec.listeners", Honoured, "one LB listener per port and protocol", false},
	{"spec.listeners[].name", Honoured, "parentRefs' sectionName", false},
	{"spec.listeners[].hostname", Honoured, "the hostnames the listener's routes serve; a request belongs to the most specific listener of its port whose hostname matches, and only that listener's routes serve it (listener isolation); on an https port, a request whose Host belongs to another listener than its connection's server name is answered 421 Misdirected Request (on an LB cluster below feature level 5, neither, with a warning)", false},
	{"spec.listeners[].port", Honoured, "the LB listener's port", false},
	{"spec.listeners[].protocol", HonouredInPart, "HTTP, HTTPS, TLS (Passthrough and Terminate), TCP and UDP; others: listener not accepted (UnsupportedProtocol)", false},
	{"spec.listeners[].tls", Honoured, "HTTPS terminates; TLS passes through", false},
	{"spec.listeners[].tls.mode", HonouredInPart, "Terminate on HTTPS; Passthrough and Terminate (the default) on TLS, both modes on one port (each serves its own names); HTTPS with Passthrough, or TLS Terminate on an LB cluster below feature level 5: listener not accepted (UnsupportedValue)", false},
	{"spec.listeners[].tls.certificateRefs", Honoured, "core Secrets, uploaded as tenant certificates; other namespaces need a ReferenceGrant (RefNotPermitted)", true},
	{"spec.listeners[].tls.options", Refused, "no option is read: a warning names the listener", false},
	{"spec.listeners[].allowedRoutes", Honoured, "which routes attach", true},
	{"spec.addresses", HonouredInPart, "the first IPAddress is the requested VIP; another type is refused (UnsupportedAddress); more than one address: AddressNotUsable, not served", true},
	{"spec.infrastructure", Honoured, "labels and annotations go on the Service the agent makes for a served Gateway (headless, no selector: `<gateway>-teapot-gw`, labelled `gateway.networking.k8s.io/gateway-name`)", false},
	{"spec.infrastructure.labels", Honoured, "on the Gateway's Service; `app.kubernetes.io/managed-by`, `teapot-lb.io/gateway-for` and `gateway.networking.k8s.io/gateway-name` are the agent's own (a warning)", false},
	{"spec.infrastructure.annotations", Honoured, "on the Gateway's Service", false},
	{"spec.infrastructure.parametersRef", Refused, "no parameters are read: the Gateway is not accepted (InvalidParameters)", true},
	{"spec.allowedListeners", Honoured, "ListenerSets of the namespaces it admits (None by default, Same, Selector, All) attach: their listeners join the Gateway's load balancer after its own, and a conflicted one (the Gateway first, then older ListenerSets, then by namespace/name) is not accepted; without the ListenerSet CRD none attach and a warning says so", true},
	{"spec.tls", Honoured, "frontend and backend (below)", false},
	{"spec.tls.frontend", Honoured, "client certificate validation of the HTTPS listeners (the perPort entry of a listener's port, else default): CA bundles from ConfigMaps (key ca.crt; other namespaces need a ReferenceGrant), AllowValidOnly fails the handshake of a client without a valid certificate, AllowInsecureFallback serves it and sets the Gateway's InsecureFrontendValidationMode; a reference that does not resolve: ResolvedRefs False, and when none does the listener is not accepted (NoValidCACertificate) nor served; a perPort entry of a port without an HTTPS listener: a warning", true},
	{"spec.tls.backend", Honoured, "the client certificate the Gateway's pools that speak TLS (BackendTLSPolicy) present to their members", false},
	{"spec.tls.backend.clientCertificateRef", Honoured, "a kubernetes.io/tls Secret (another namespace needs a ReferenceGrant), uploaded as a tenant certificate; the Gateway's ResolvedRefs condition says InvalidClientCertificateRef or RefNotPermitted when it does not resolve, and the pools then present none; when no pool speaks TLS: a warning", true},
	{"spec.defaultScope", Refused, "All: a teapot-lb Gateway is never a default Gateway, routes attach by parentRefs only, and a warning says so; None is served as asked", false},
}

// parentRefFields and backendRefFields are common to every route kind.
func parentRefFields() []Field {
	return []Field{
		{"spec.parentRefs", Honoured, "the Gateways the route attaches to", false},
		{"spec.parentRefs[].group", HonouredInPart, "gateway.networking.k8s.io only; others are not this agent's parents", false},
		{"spec.parentRefs[].kind", HonouredInPart, "Gateway only; others are not this agent's parents", false},
		{"spec.parentRefs[].namespace", Honoured, "the Gateway's namespace", false},
		{"spec.parentRefs[].name", Honoured, "the Gateway", false},
		{"spec.parentRefs[].sectionName", Honoured, "one listener (NoMatchingParent when none)", false},
		{"spec.parentRefs[].port", Honoured, "the listeners of one port", false},
		{"spec.useDefaultGateways", NotApplicable, "no teapot-lb Gateway is a default Gateway (spec.defaultScope is refused), so only parentRefs attach", false},
	}
}

func backendRefFields(weighted string) []Field {
	return []Field{
		{"spec.rules[].backendRefs", Honoured, "the rule's backends", false},
		{"spec.rules[].backendRefs[].group", HonouredInPart, "core Services only; others: ResolvedRefs False (InvalidKind)", false},
		{"spec.rules[].backendRefs[].kind", HonouredInPart, "Service only; others: ResolvedRefs False (InvalidKind)", false},
		{"spec.rules[].backendRefs[].name", Honoured, "the Service (BackendNotFound when it does not exist)", false},
		{"spec.rules[].backendRefs[].namespace", Honoured, "another namespace needs a ReferenceGrant (RefNotPermitted)", false},
		{"spec.rules[].backendRefs[].port", Honoured, "the Service's port", false},
		{"spec.rules[].backendRefs[].weight", Honoured, weighted, false},
	}
}

var httpRouteFields = append(append(parentRefFields(), []Field{
	{"spec.hostnames", Honoured, "intersected with the listeners' hostnames", false},
	{"spec.rules", Honoured, "LB routes, in the spec's precedence", false},
	{"spec.rules[].name", NotApplicable, "names a rule for policies and status; the agent attaches no policies", false},
	{"spec.rules[].matches", Honoured, "path (Exact, PathPrefix, RegularExpression), headers, query parameters and method; a header match on X-Forwarded-For, X-Real-IP, Forwarded, X-Request-Id or another forwarding header sees the values the backend receives (as Envoy appends X-Forwarded-For before routing): a client outside the listener's trusted proxies cannot set them", true},
	{"spec.rules[].filters", HonouredInPart, "RequestHeaderModifier, ResponseHeaderModifier, RequestRedirect, URLRewrite, RequestMirror and CORS (maxAge at most a day; exposeHeaders \"*\" not with allowCredentials); any other type, or a RequestHeaderModifier that sets, adds or removes X-Request-Id (the LB's request id, fixed before routing and logged): the route is not accepted (UnsupportedValue)", true},
	{"spec.rules[].backendRefs[].filters", HonouredInPart, "RequestHeaderModifier (one per backendRef, not of X-Request-Id), applied to the requests sent to that backend after the rule's; any other type: the route is not accepted (UnsupportedValue)", true},
	{"spec.rules[].timeouts", Honoured, "request and backendRequest, each up to the response headers (a streaming body is not cut off)", true},
	{"spec.rules[].retry", HonouredInPart, "codes (400-599), attempts (1-5; default 1) and backoff (up to 10s; default 25ms); connection errors and backendRequest timeouts are retried too; a body of unknown length or over 64 KiB, or past the 4 MiB of bodies the tenant's requests may keep on an LB host, is not retried; retries are bounded by the tenant's retry budget; past the bounds the route is not accepted (UnsupportedValue); on a rule with a RequestRedirect it is not applied, with a warning", true},
	{"spec.rules[].sessionPersistence", Refused, "the route is not accepted (UnsupportedValue)", true},
}...), backendRefFields("weighted choice between the rule's pools")...)

var grpcRouteFields = append(append(parentRefFields(), []Field{
	{"spec.hostnames", Honoured, "intersected with the listeners' hostnames", false},
	{"spec.rules", Honoured, "LB routes over HTTP/2 to the members", false},
	{"spec.rules[].name", NotApplicable, "names a rule for policies and status; the agent attaches no policies", false},
	{"spec.rules[].matches", Honoured, "service and method, headers", true},
	{"spec.rules[].filters", HonouredInPart, "RequestHeaderModifier, ResponseHeaderModifier and RequestMirror; any other type, or a RequestHeaderModifier of X-Request-Id: the route is not accepted (UnsupportedValue)", true},
	{"spec.rules[].backendRefs[].filters", Refused, "filters on a backendRef: the route is not accepted (UnsupportedValue); put them on the rule", true},
	{"spec.rules[].sessionPersistence", Refused, "the route is not accepted (UnsupportedValue)", true},
}...), backendRefFields("weighted choice between the rule's pools")...)

func l4RouteFields(tls bool) []Field {
	out := parentRefFields()
	if tls {
		out = append(out, Field{"spec.hostnames", Honoured, "the server names (SNI) the route's backends get on a passthrough listener", false})
	}
	out = append(out,
		Field{"spec.rules", Honoured, "the port's backends (the first route attached to a port keeps it)", false},
		Field{"spec.rules[].name", NotApplicable, "names a rule for policies and status; the agent attaches no policies", false},
	)
	return append(out, backendRefFields("one pool of every backend's members, each weighted by its backendRef's weight")...)
}
