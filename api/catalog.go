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
	// AddressUsers returns the load balancers holding addr (status.address
	// or one of status.addresses).
	AddressUsers(addr netip.Addr) []*pb.LoadBalancer
}

// TenantUsage sums what a tenant's load balancers use of its quotas:
// load balancers, distinct VIP addresses (status.address), listeners,
// routes (a route with matches once per match), members and
// health-checked members, and regular expressions.
type TenantUsage struct {
	LoadBalancers, Addresses, Listeners, Routes, Members, HealthChecks int
	RegexMatches                                                       int
	// StoredBytes are the encoded bytes of everything the tenant stores:
	// its load balancers, certificates and uploaded certificates' keys
	// (kept by the UsageIndex of the store; LoadBalancerUsage leaves it 0).
	StoredBytes int64
}

// UsageIndex is implemented by a Catalog that keeps each tenant's usage up
// to date as objects are written, so that the quota checks of a write cost
// what it changes, not what the tenant has. Without it they count the
// tenant's load balancers.
type UsageIndex interface {
	TenantUsage(tenant string) TenantUsage
}

// LoadBalancerUsage is what one load balancer adds to its tenant's usage,
// its address aside (Addresses counts distinct addresses: see
// TenantUsage).
func LoadBalancerUsage(lb *pb.LoadBalancer) TenantUsage {
	u := usageOf(lb)
	return TenantUsage{LoadBalancers: 1, Listeners: u.listeners, Routes: u.routes, Members: u.members, HealthChecks: u.healthChecks, RegexMatches: u.regexMatches}
}

// Add adds o to u.
func (u *TenantUsage) Add(o TenantUsage) {
	u.LoadBalancers += o.LoadBalancers
	u.Addresses += o.Addresses
	u.Listeners += o.Listeners
	u.Routes += o.Routes
	u.Members += o.Members
	u.HealthChecks += o.HealthChecks
	u.RegexMatches += o.RegexMatches
	u.StoredBytes += o.StoredBytes
}

// Sub takes o from u.
func (u *TenantUsage) Sub(o TenantUsage) {
	u.LoadBalancers -= o.LoadBalancers
	u.Addresses -= o.Addresses
	u.Listeners -= o.Listeners
	u.Routes -= o.Routes
	u.Members -= o.Members
	u.HealthChecks -= o.HealthChecks
	u.RegexMatches -= o.RegexMatches
	u.StoredBytes -= o.StoredBytes
}
