package api

import (
	"net/netip"

	pb "github.com/teapot-lb/teapot-lb/api/proto/teapotv1"
)

// Catalog is the read-only view of the stored objects that validation and
// allocation need. The store implements it over its committed state (with
// an overlay for writes not yet committed). Returned objects must not be
// modified.
type Catalog interface {
	Tenant(name string) *pb.Tenant
	Tenants() []*pb.Tenant
	Pool(name string) *pb.VIPPool
	Pools() []*pb.VIPPool
	LoadBalancer(tenant, name string) *pb.LoadBalancer
	// LoadBalancers returns the tenant's load balancers, or all with "".
	LoadBalancers(tenant string) []*pb.LoadBalancer
	// AddressUsers returns the load balancers whose status.address is addr.
	AddressUsers(addr netip.Addr) []*pb.LoadBalancer
}
