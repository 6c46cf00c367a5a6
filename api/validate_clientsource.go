package api

import (
	"fmt"

	pb "github.com/teapot-lb/teapot-lb/api/proto/teapotv1"
)

// ClientSourceProblem says why the backend pool named key of lb cannot
// have its member connections made from the clients' own addresses
// (pools.*.clientSource), or "" when it can or does not ask. tenant is the
// load balancer's tenant (nil when unknown). The rules: an L4 pool only
// (its listeners tcp, tls-passthrough or udp; an HTTP member gets the
// client in X-Forwarded-For, and its connections are shared between
// clients), without PROXY protocol (the member sees the client already),
// and not for a tenant whose members are dialled from an attachment's
// namespace.
func ClientSourceProblem(lb *pb.LoadBalancer, key string, tenant *pb.Tenant) string {
	bp := lb.GetPools()[key]
	if !bp.GetClientSource() {
		return ""
	}
	if pp := bp.GetProxyProtocol(); pp != "" {
		return fmt.Sprintf("with clientSource the member sees the client's own address; PROXY protocol (proxyProtocol %s) would announce it twice: remove one of them", pp)
	}
	for i, l := range lb.GetListeners() {
		if p := l.GetProtocol(); (p == "http" || p == "https") && l.GetPool() == key {
			return fmt.Sprintf("%s listeners[%d] uses this pool: clientSource is for tcp, tls-passthrough and udp listeners (HTTP members get the client in X-Forwarded-For); use a separate pool", p, i)
		}
	}
	for i, r := range lb.GetRoutes() {
		used := r.GetPool() == key
		for _, b := range r.GetBackends() {
			used = used || b.GetPool() == key
		}
		for _, f := range r.GetFilters() {
			used = used || f.GetRequestMirror().GetPool() == key
		}
		if used {
			return fmt.Sprintf("routes[%d] sends HTTP requests to this pool: clientSource is for tcp, tls-passthrough and udp listeners (HTTP members get the client in X-Forwarded-For); use a separate pool", i)
		}
	}
	if tenant.GetAttachment() != nil {
		return fmt.Sprintf("tenant %s is attached through a namespace of its own, where the LB hosts do not dial from clients' addresses: remove clientSource (or use PROXY protocol)", tenant.GetName())
	}
	return ""
}

// checkClientSource checks clientSource of the pool at f.
func checkClientSource(ck *checker, f string, lb *pb.LoadBalancer, key string, tenant *pb.Tenant) {
	if why := ClientSourceProblem(lb, key, tenant); why != "" {
		ck.invalidf(f+".clientSource", "%s", why)
	}
}
