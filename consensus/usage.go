package consensus

import (
	"github.com/teapot-lb/teapot-lb/api"
	pb "github.com/teapot-lb/teapot-lb/api/proto/teapotv1"
)

// Each tenant's usage of its quotas (api.TenantUsage) is kept with the
// state as load balancers are put and removed, and an overlay derives its
// own from its parent's and its changes: a quota check costs what the
// write changes, whatever the number of load balancers the tenant has.

// usageAdd adds (sign 1) or takes (sign -1) load balancer o, stored at
// key, from its tenant's usage. It runs before o enters the address
// index on a put and after it left it on a removal.
func (s *state) usageAdd(o *pb.Object, key string, sign int) {
	lb := o.GetLoadBalancer()
	if lb == nil {
		return
	}
	u := s.usage[lb.GetTenant()]
	d := api.LoadBalancerUsage(lb)
	if a, ok := lbAddress(o); ok && !tenantAt(s.byAddr[a], lb.GetTenant(), key) {
		d.Addresses = 1
	}
	if sign > 0 {
		u.Add(d)
	} else {
		u.Sub(d)
	}
	if u == (api.TenantUsage{}) {
		delete(s.usage, lb.GetTenant())
		return
	}
	s.usage[lb.GetTenant()] = u
}

// tenantAt reports whether users (load balancers at one address, by key)
// hold one of tenant's other than the one at key.
func tenantAt(users map[string]*pb.Object, tenant, key string) bool {
	for k, o := range users {
		if k != key && o.GetLoadBalancer().GetTenant() == tenant {
			return true
		}
	}
	return false
}

func (s *state) tenantUsage(tenant string) api.TenantUsage { return s.usage[tenant] }

func (s *state) generation() uint64 { return s.gen }

func (o *overlay) generation() uint64 { return o.sets + o.parent.generation() }

// TenantUsage makes the catalog an api.UsageIndex.
func (c catalog) TenantUsage(tenant string) api.TenantUsage { return c.r.tenantUsage(tenant) }

var _ api.UsageIndex = catalog{}
