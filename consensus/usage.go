package consensus

import (
	"strings"

	"google.golang.org/protobuf/proto"

	"github.com/teapot-lb/teapot-lb/api"
	pb "github.com/teapot-lb/teapot-lb/api/proto/teapotv1"
)

// Each tenant's usage of its quotas (api.TenantUsage) is kept with the
// state as load balancers are put and removed, and an overlay derives its
// own from its parent's and its changes: a quota check costs what the
// write changes, whatever the number of load balancers the tenant has.
// StoredBytes counts everything a tenant owns: its load balancers, its
// certificates and the keys of the certificates it uploaded.

// uploadedPrefix is where the certificate store keeps uploaded
// certificates and keys ("uploaded/TENANT/NAME", proxy/certs.UploadKey).
const uploadedPrefix = "uploaded/"

// storedBy names the tenant that o's bytes are charged to, or "".
func storedBy(o *pb.Object) string {
	switch v := o.GetKind().(type) {
	case *pb.Object_LoadBalancer:
		return v.LoadBalancer.GetTenant()
	case *pb.Object_Certificate:
		return v.Certificate.GetTenant()
	case *pb.Object_StorageItem:
		if rest, ok := strings.CutPrefix(v.StorageItem.GetKey(), uploadedPrefix); ok {
			if tenant, _, ok := strings.Cut(rest, "/"); ok {
				return tenant
			}
		}
	}
	return ""
}

// objUsage is what o adds to its tenant's usage, its address aside.
func objUsage(o *pb.Object) api.TenantUsage {
	var u api.TenantUsage
	if lb := o.GetLoadBalancer(); lb != nil {
		u = api.LoadBalancerUsage(lb)
	}
	u.StoredBytes = int64(proto.Size(o))
	return u
}

// usageAdd adds (sign 1) or takes (sign -1) object o from its tenant's
// usage. It runs before a load balancer enters the address index on a
// put and after it left it on a removal.
func (s *state) usageAdd(o *pb.Object, sign int) {
	tenant := storedBy(o)
	if tenant == "" {
		return
	}
	u := s.usage[tenant]
	d := objUsage(o)
	for _, a := range lbAddrs(o) {
		if !tenantAt(s.byAddr[a], tenant, o) {
			d.Addresses++
		}
	}
	if sign > 0 {
		u.Add(d)
	} else {
		u.Sub(d)
	}
	if u == (api.TenantUsage{}) {
		delete(s.usage, tenant)
		return
	}
	s.usage[tenant] = u
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

// setStored corrects the overlay's cached usage for a write of an object
// of another kind than a load balancer (prev replaced by obj).
func (o *overlay) setStored(prev, obj *pb.Object) {
	o.fresh()
	for _, x := range []struct {
		o    *pb.Object
		sign int
	}{{prev, -1}, {obj, 1}} {
		t := storedBy(x.o)
		if t == "" {
			continue
		}
		u, cached := o.usage[t]
		if !cached {
			continue
		}
		if x.sign < 0 {
			u.Sub(objUsage(x.o))
		} else {
			u.Add(objUsage(x.o))
		}
		o.usage[t] = u
	}
}

// storedChanges corrects u, tenant's usage in the parent, for the
// overlay's changes of other kinds than load balancers.
func (o *overlay) storedChanges(tenant string, u *api.TenantUsage) {
	for _, kind := range []string{api.KindCertificate, api.KindStorageItem} {
		for key, c := range o.changes[kind] {
			if old := o.parent.get(kind, key); storedBy(old) == tenant {
				u.Sub(objUsage(old))
			}
			if storedBy(c) == tenant {
				u.Add(objUsage(c))
			}
		}
	}
}

func (s *state) tenantUsage(tenant string) api.TenantUsage { return s.usage[tenant] }

func (s *state) generation() uint64 { return s.gen }

func (o *overlay) generation() uint64 { return o.sets + o.parent.generation() }

// TenantUsage makes the catalog an api.UsageIndex.
func (c catalog) TenantUsage(tenant string) api.TenantUsage { return c.r.tenantUsage(tenant) }

var _ api.UsageIndex = catalog{}
