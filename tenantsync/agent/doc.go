// Package agent is teapot-lb agent: it runs inside a tenant's Kubernetes
// cluster, watches Services, Ingresses, EndpointSlices, Nodes and
// IngressClasses with client-go informers, streams the load balancers
// they translate to (package translate) to the LB cluster, and writes the
// VIPs it gets back into Service and Ingress status, with Kubernetes
// Events when an object is refused.
//
// Every replica keeps warm caches; one, elected through a Lease, streams
// and writes status. A reconnecting agent sends only what differs from the
// versions the cluster holds, and ends its first change with a resync
// marker after which the cluster removes what the agent no longer has. A
// disconnect alone removes nothing, and the cluster keeps serving the last
// known state while the tenant's API server is away.
package agent
