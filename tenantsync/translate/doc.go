// Package translate turns a tenant cluster's Services, Ingresses,
// EndpointSlices and Nodes into teapot-lb LoadBalancers. It is pure: it
// reads the informers' listers and returns the desired load balancers,
// with the Kubernetes object each came from and what it had to leave out.
//
// Services of type LoadBalancer with spec.loadBalancerClass
// teapot-lb.io/lb (and, with Options.DefaultClass, those without a class)
// become one load balancer each, one listener per port. Ingresses of an
// IngressClass whose controller is teapot-lb.io/ingress become one
// load balancer each with an http listener on port 80 (and https on 443
// with ACME when the Ingress lists TLS hosts), one route per path.
//
// Gateways of a GatewayClass whose controllerName is
// teapot-lb.io/gateway-controller become one load balancer each (named
// gw-NAMESPACE-NAME, or gw--READABLE-HASH when another object holds that)
// on one VIP (spec.addresses: one IPAddress, inside the
// tenant's pools). Its listeners become one LB listener per port and
// protocol: HTTP and HTTPS listeners of a port share one (their hostnames
// go into the routes; HTTPS listeners offer all their certificates, chosen
// by SNI), TLS listeners become tls-passthrough (in Terminate mode their
// routes' names are sniRoutes with terminate, served with the listeners'
// certificates; both modes may share a port: gateway_tlsterm.go), TCP
// and UDP stay themselves. HTTPRoutes and GRPCRoutes attach by parentRefs
// (sectionName, port), the listeners' allowedRoutes (namespaces From
// Same, All or Selector; kinds) and hostnames, and become LB routes with
// their matches, weighted backends, filters and timeouts; routes keep
// creation order, so that ties go to the oldest route as the spec asks.
// A TLSRoute, TCPRoute or UDPRoute gives its port its backends; the first
// route attached to a port keeps it. The routes of a Gateway are served on
// every HTTP and HTTPS listener whose hostname they match: a route that
// names one listener of two sharing a hostname is served on both. HTTP
// and HTTPS listeners of one port are isolated: a request belongs to the
// most specific listener whose hostname matches its Host, and a
// notFound route per such hostname keeps it from the routes of less
// specific listeners (gateway_isolation.go; Options.NotFoundRoutes).
// ReferenceGrants govern backendRefs to Services and certificateRefs to
// Secrets of other namespaces. The translation also returns the status of
// the Gateway, its listeners and its routes (GatewayResult), with the
// standard reasons.
//
// Members are node addresses with the Service's nodePort (NodePort mode),
// or, when the tenant's pods are routable from the LB hosts, the ready pod
// addresses from the EndpointSlices (pod mode). With
// externalTrafficPolicy: Local in NodePort mode, members are health
// checked on the Service's healthCheckNodePort, where kube-proxy answers
// 200 only on nodes with a local endpoint. An Ingress backend that is a
// ClusterIP Service has no nodePort: outside pod mode its members are the
// node ports of the NodePort Service the agent creates for it
// (NodePortService: named <service>-teapot-np, labelled
// app.kubernetes.io/managed-by=teapot-lb-agent and
// teapot-lb.io/nodeport-for=<service>, owned by the ClusterIP Service so
// that the garbage collector removes it with it), listed in
// Desired.NodePorts. A Service of type LoadBalancer with
// allocateLoadBalancerNodePorts: false has no nodePort either: it is
// served in pod mode, and refused with a warning (an Event) otherwise.
//
// Every field of the specs the agent reads is decided in Fields
// (FIELDS.md): honoured, refused with a warning (a Warning Event, and a
// condition), or not applicable. Services: sessionAffinity ClientIP hashes
// the client address; loadBalancerSourceRanges (or its annotation) become
// every listener's allowedSources, and a list the LB cannot enforce
// refuses the Service (Desired.Refused: no load balancer); RequireDualStack
// and PreferDualStack ask for a VIP of each family (vip.families,
// familyPolicy require or prefer), which the LB cluster gives or refuses
// (Options.DualStack false, on a cluster below feature level 4:
// RequireDualStack refused, PreferDualStack one VIP). Names joined from a
// namespace and a name never collide (syncspec.UniqueName, syncspec.Key).
//
// Annotations under teapot-lb.io/ set the rest:
//
//	teapot-lb.io/pool               VIP pool (default: the tenant's first pool)
//	teapot-lb.io/load-balancer-ips  requested VIP (the first address is used)
//	teapot-lb.io/sharing-key        share the VIP with load balancers of the same key
//	teapot-lb.io/proxy-protocol     v1 | v2: send PROXY protocol to members
//	teapot-lb.io/health-check-path  HTTP health check on this path
//	teapot-lb.io/algorithm          round-robin | least-request | hash
//	teapot-lb.io/members            nodeport | pod (default: pod when pods are routable)
//	teapot-lb.io/ssl-redirect       "true": Ingress http listener redirects to https
//	teapot-lb.io/tls-certificates   Ingress: uploaded certificates instead of ACME
//	teapot-lb.io/allowed-sources    CIDRs allowed to connect, on every listener
//	                                (Services: spec.loadBalancerSourceRanges wins)
//	teapot-lb.io/denied-sources     CIDRs refused on every listener
//	teapot-lb.io/rate-limit-rps     requests per second per client: each Ingress
//	                                route, each Gateway http/https listener
//	teapot-lb.io/rate-limit-connections  new connections per second per client,
//	                                every listener
//	teapot-lb.io/rate-limit-burst   the burst of both (default: one second's worth)
//	teapot-lb.io/rate-limit-key     client (default) | total | header
//	teapot-lb.io/rate-limit-header  with key header: the request header whose
//	                                values are limited apart (an API key);
//	                                requests without it by client address
//	teapot-lb.io/waf                Ingress: block | detect, every route inspected
//	teapot-lb.io/waf-paranoia-level CRS paranoia level 1 (default) to 4
//	teapot-lb.io/client-subject-header  Gateway: the request header that carries
//	                                a verified client certificate's subject to the
//	                                members (HTTPS listeners of spec.tls.frontend)
//	teapot-lb.io/waf-exclude-rules  CRS rule ids not run (comma-separated)
//
// Ingresses also take ingress-nginx's nginx.ingress.kubernetes.io/
// allowlist-source-range, whitelist-source-range and denylist-source-range
// (teapot-lb.io/ wins, with a warning). A source list that is not all
// CIDRs refuses the object: no load balancer, never one open to everyone.
// They also take limit-rps (with limit-burst-multiplier, default 5) as
// teapot-lb.io/rate-limit-rps; limit-rpm and limit-connections are
// warned as not applied; enable-modsecurity with enable-owasp-core-rules
// is teapot-lb.io/waf detect, and a modsecurity-snippet is warned as not
// read.
package translate
