package api

import (
	"strconv"
	"strings"

	pb "github.com/teapot-lb/teapot-lb/api/proto/teapotv1"
)

// MaxSNIRoutes bounds listeners[].sniRoutes; the routes quotas count them
// too.
const MaxSNIRoutes = 1024

// CheckSNIRoutes checks the server-name routes of the tls-passthrough
// listener l at field ("listeners[2]"): exact or wildcard hosts inside
// the tenant's domains (tenant nil: not checked), each once, to pools of
// the load balancer. It calls each with every route's index, its host
// (lowercased) and the rules it breaks (nil when none), in order.
func CheckSNIRoutes(field string, l *pb.Listener, pools map[string]*pb.BackendPool, tenant *pb.Tenant, each func(i int, host string, errs []FieldError)) {
	var seen map[string]int
	for i, r := range l.GetSniRoutes() {
		var ck checker
		rf := field + ".sniRoutes[" + strconv.Itoa(i) + "]"
		host := strings.ToLower(r.GetHost())
		switch {
		case host == "":
			ck.invalidf(rf+".host", "required: a server name like db.acme.example or *.acme.example (connections without one go to the listener's pool)")
		case !checkRouteHostIn(&ck, rf+".host", host, tenant) || len(ck.errs) > 0:
		default:
			if j, dup := seen[host]; dup {
				ck.invalidf(rf+".host", "%s is already routed by sniRoutes[%d]", host, j)
			}
			if seen == nil {
				seen = make(map[string]int, len(l.GetSniRoutes()))
			}
			seen[host] = i
		}
		checkPoolRef(&ck, pools, rf+".pool", r.GetPool())
		each(i, host, ck.errs)
	}
}
