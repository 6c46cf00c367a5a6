package consensus

import (
	"github.com/teapot-lb/teapot-lb/api"
	pb "github.com/teapot-lb/teapot-lb/api/proto/teapotv1"
)

// Each tenant's usage of its quotas (api.TenantUsage) is kept with the
// state as load balancers are put and removed, and an overlay derives its
// own from its parent's and its changes: a quota check costs what the
// write changes, whatever the number of load balancers the tenant has.

// usageAdd adds (sign 1) or takes (sign -1) load balancer o from its
// tenant's usage. It runs before o enters the address
// index on a put and after it left it on a removal.
func (s *state) usageAdd(o *pb.Object, sign int) {
	lb := o.GetLoadBalancer()
	if lb == nil {
		return
	}
	u := s.usage[lb.GetTenant()]
	d := api.LoadBalancerUsage(lb)
	if a, ok := lbAddress(o); ok && !tenantAt(s.byAddr[a], lb.GetTenant(), o) {
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

// tenantAt reports whether users (load balancers at one address) hold
// one of tenant's other than o.
func tenantAt(users []*pb.Object, tenant string, o *pb.Object) bool {
	for _, u := range users {
		if u != o && u.GetLoadBalancer().GetTenant() == tenant {
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
