package api

import (
	"fmt"
	"slices"
	"strings"

	pb "github.com/teapot-lb/teapot-lb/api/proto/teapotv1"
)

// maxNamed bounds how many users an in-use message lists by name.
const maxNamed = 5

// ValidateDelete checks that the object ref names exists and that nothing
// still refers to it: a VIP pool used by a tenant or a load balancer, a
// tenant with load balancers or listed by a pool, an uploaded certificate
// served by a listener. A missing object gives an error wrapping
// ErrNotFound ("LoadBalancer acme/shop not found"). Nodes, certificates and
// join tokens are looked up only when the Catalog implements NodeCatalog,
// CertificateCatalog or JoinTokenCatalog.
func ValidateDelete(ref *pb.ObjectRef, c Catalog) error {
	c = orEmpty(c)
	r := objRef(ref.GetKind(), ref.GetTenant(), ref.GetName())
	notFound := fmt.Errorf("%s %w", r, ErrNotFound)
	ck := &checker{}
	switch ref.GetKind() {
	case KindTenant:
		if c.Tenant(ref.GetName()) == nil {
			return notFound
		}
		var names []string
		for _, lb := range sortedLBs(c.LoadBalancers(ref.GetName())) {
			names = append(names, lb.GetTenant()+"/"+lb.GetName())
		}
		if len(names) > 0 {
			ck.conflictf("", "the tenant still has load balancers %s; delete them first", nameList(names))
		}
		var pools []string
		for _, p := range parsePools(c) {
			if slices.Contains(p.pool.GetTenants(), ref.GetName()) {
				pools = append(pools, p.pool.GetName())
			}
		}
		if len(pools) > 0 {
			ck.conflictf("", "VIP pools %s list the tenant in their tenants; remove it there first", nameList(pools))
		}
		if in := poolsInAttachment(c, ref.GetName()); len(in) > 0 {
			ck.conflictf("", "VIP pools %s live in the tenant's attachment; delete them first", nameList(in))
		}
	case KindVIPPool:
		if c.Pool(ref.GetName()) == nil {
			return notFound
		}
		var tenants []string
		for _, t := range sortedTenants(c) {
			if slices.Contains(t.GetPools(), ref.GetName()) {
				tenants = append(tenants, t.GetName())
			}
		}
		if len(tenants) > 0 {
			ck.conflictf("", "in use by tenants %s (their pools); remove it from them first", nameList(tenants))
		}
		pools := parsePools(c)
		var lbs []*pb.LoadBalancer
		for _, lb := range c.LoadBalancers("") {
			if poolNameOf(lb, pools) == ref.GetName() {
				lbs = append(lbs, lb)
			}
		}
		if len(lbs) > 0 {
			var names []string
			for _, lb := range sortedLBs(lbs) {
				names = append(names, lb.GetTenant()+"/"+lb.GetName())
			}
			ck.conflictf("", "in use by load balancers %s; delete or move them first", nameList(names))
		}
	case KindLoadBalancer:
		if c.LoadBalancer(ref.GetTenant(), ref.GetName()) == nil {
			return notFound
		}
	case KindNode:
		if nc, ok := c.(NodeCatalog); ok && nc.Node(ref.GetName()) == nil {
			return notFound
		}
	case KindJoinToken:
		if jc, ok := c.(JoinTokenCatalog); ok && jc.JoinToken(ref.GetName()) == nil {
			return notFound
		}
	case KindCertificate:
		if cc, ok := c.(CertificateCatalog); ok && cc.Certificate(ref.GetTenant(), ref.GetName()) == nil {
			return notFound
		}
		var users []string
		for _, lb := range sortedLBs(c.LoadBalancers(ref.GetTenant())) {
			for i, l := range lb.GetListeners() {
				if slices.Contains(l.GetTls().GetCertificates(), ref.GetName()) {
					users = append(users, fmt.Sprintf("%s/%s (listeners[%d])", lb.GetTenant(), lb.GetName(), i))
					break
				}
			}
			for _, pn := range sortedKeys(lb.GetPools()) {
				if lb.GetPools()[pn].GetTls().GetClientCertificate() == ref.GetName() {
					users = append(users, fmt.Sprintf("%s/%s (pools.%s.tls.clientCertificate)", lb.GetTenant(), lb.GetName(), pn))
				}
			}
		}
		if len(users) > 0 {
			ck.conflictf("", "served by load balancers %s; remove it from their tls.certificates (or the pools' tls.clientCertificate) first", nameList(users))
		}
	default:
		ck.invalidf("kind", "unknown kind %q (known: Tenant, VIPPool, LoadBalancer, Node, Certificate, JoinToken)", ref.GetKind())
	}
	return ck.err(r)
}

// nameList joins names, listing at most maxNamed of them.
func nameList(names []string) string {
	if len(names) <= maxNamed {
		return strings.Join(names, ", ")
	}
	return fmt.Sprintf("%s and %d more", strings.Join(names[:maxNamed], ", "), len(names)-maxNamed)
}
