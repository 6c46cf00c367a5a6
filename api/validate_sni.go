package api

import (
	"fmt"
	"strings"

	pb "github.com/teapot-lb/teapot-lb/api/proto/teapotv1"
)

// MaxSNIRoutes bounds listeners[].sniRoutes; the routes quotas count them
// too.
const MaxSNIRoutes = 1024

// checkSNIRoutes checks the server-name routes of a tls-passthrough
// listener: exact or wildcard hosts inside the tenant's domains, each
// once, to pools of the load balancer.
func checkSNIRoutes(ck *checker, f string, lb *pb.LoadBalancer, l *pb.Listener, tenant *pb.Tenant) {
	rs := l.GetSniRoutes()
	if len(rs) == 0 {
		return
	}
	if l.GetProtocol() != "tls-passthrough" {
		ck.invalidf(f+".sniRoutes", "only tls-passthrough listeners route by server name; remove sniRoutes (http and https listeners use the load balancer's routes)")
		return
	}
	if tooMany(ck, f+".sniRoutes", len(rs), MaxSNIRoutes) {
		return
	}
	seen := map[string]int{}
	for i, r := range rs {
		rf := fmt.Sprintf("%s.sniRoutes[%d]", f, i)
		host := strings.ToLower(r.GetHost())
		switch {
		case tooLong(ck, rf+".host", host, 253):
		case host == "":
			ck.invalidf(rf+".host", "required: a server name like db.acme.example or *.acme.example (connections without one go to the listener's pool)")
		case !checkRouteHost(ck, rf+".host", host):
		case tenant != nil && !hostInDomains(host, tenant.GetDomains()):
			ck.invalidf(rf+".host", "%s is not inside the tenant's domains (%s)", host, listOrNone(tenant.GetDomains(), "the tenant has none; the operator sets them"))
		default:
			if j, dup := seen[host]; dup {
				ck.invalidf(rf+".host", "%s is already routed by sniRoutes[%d]", host, j)
			}
			seen[host] = i
		}
		if r.GetPool() == "" {
			ck.invalidf(rf+".pool", "required: name one of the load balancer's pools")
		} else if _, ok := lb.GetPools()[r.GetPool()]; !ok {
			ck.invalidf(rf+".pool", "backend pool %s is not defined in pools", r.GetPool())
		}
	}
}
