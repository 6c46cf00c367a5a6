// Package catalogtest is an in-memory api.Catalog for tests: put model
// objects in, hand it to validation or allocation. It also implements the
// optional node, certificate and join-token look-ups.
package catalogtest

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"sync"

	pb "github.com/teapot-lb/teapot-lb/api/proto/teapotv1"
)

type lbKey struct{ tenant, name string }

// Catalog holds objects in maps. It is safe for concurrent use. Objects
// are stored as given; callers must not modify them afterwards.
type Catalog struct {
	mu      sync.Mutex
	tenants map[string]*pb.Tenant
	pools   map[string]*pb.VIPPool
	lbs     map[lbKey]*pb.LoadBalancer
	nodes   map[string]*pb.Node
	certs   map[lbKey]*pb.Certificate
	tokens  map[string]*pb.JoinToken
	byAddr  map[netip.Addr][]*pb.LoadBalancer
	// sorted views, rebuilt after a change
	allLBs   []*pb.LoadBalancer
	byTenant map[string][]*pb.LoadBalancer
	addrs    []netip.Addr
}

// New returns a catalog holding objs (see Put).
func New(objs ...any) *Catalog {
	c := &Catalog{
		tenants: map[string]*pb.Tenant{},
		pools:   map[string]*pb.VIPPool{},
		lbs:     map[lbKey]*pb.LoadBalancer{},
		nodes:   map[string]*pb.Node{},
		certs:   map[lbKey]*pb.Certificate{},
		tokens:  map[string]*pb.JoinToken{},
		byAddr:  map[netip.Addr][]*pb.LoadBalancer{},
	}
	c.Put(objs...)
	return c
}

// Put stores or replaces objects: *pb.Tenant, *pb.VIPPool,
// *pb.LoadBalancer, *pb.Node, *pb.Certificate, *pb.JoinToken or *pb.Object.
// Any other type panics.
func (c *Catalog) Put(objs ...any) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, o := range objs {
		c.put(o)
	}
	c.allLBs, c.byTenant, c.addrs = nil, nil, nil
}

func (c *Catalog) put(o any) {
	switch v := o.(type) {
	case *pb.Object:
		switch k := v.GetKind().(type) {
		case *pb.Object_Tenant:
			c.put(k.Tenant)
		case *pb.Object_VipPool:
			c.put(k.VipPool)
		case *pb.Object_LoadBalancer:
			c.put(k.LoadBalancer)
		case *pb.Object_Node:
			c.put(k.Node)
		case *pb.Object_Certificate:
			c.put(k.Certificate)
		case *pb.Object_JoinToken:
			c.put(k.JoinToken)
		default:
			panic("catalogtest: empty Object")
		}
	case *pb.Tenant:
		c.tenants[v.GetName()] = v
	case *pb.VIPPool:
		c.pools[v.GetName()] = v
	case *pb.LoadBalancer:
		k := lbKey{v.GetTenant(), v.GetName()}
		c.unindex(c.lbs[k])
		c.lbs[k] = v
		for _, a := range addrsOf(v) {
			c.byAddr[a] = append(c.byAddr[a], v)
		}
	case *pb.Node:
		c.nodes[v.GetId()] = v
	case *pb.Certificate:
		c.certs[lbKey{v.GetTenant(), v.GetName()}] = v
	case *pb.JoinToken:
		c.tokens[v.GetId()] = v
	default:
		panic(fmt.Sprintf("catalogtest: %T is not a model object", o))
	}
}

func (c *Catalog) unindex(old *pb.LoadBalancer) {
	if old == nil {
		return
	}
	for _, a := range addrsOf(old) {
		users := slices.DeleteFunc(slices.Clone(c.byAddr[a]), func(u *pb.LoadBalancer) bool { return u == old })
		if len(users) == 0 {
			delete(c.byAddr, a)
		} else {
			c.byAddr[a] = users
		}
	}
}

// addrsOf returns every address lb holds: status.addresses when set, else
// status.address (api.StatusAddrs, which this package may not import).
func addrsOf(lb *pb.LoadBalancer) []netip.Addr {
	ss := lb.GetStatus().GetAddresses()
	if len(ss) == 0 {
		ss = []string{lb.GetStatus().GetAddress()}
	}
	var out []netip.Addr
	for _, s := range ss {
		if a, err := netip.ParseAddr(s); err == nil {
			out = append(out, a)
		}
	}
	return out
}

// Delete removes the object ref names, if present.
func (c *Catalog) Delete(ref *pb.ObjectRef) {
	c.mu.Lock()
	defer c.mu.Unlock()
	switch ref.GetKind() {
	case "Tenant":
		delete(c.tenants, ref.GetName())
	case "VIPPool":
		delete(c.pools, ref.GetName())
	case "LoadBalancer":
		k := lbKey{ref.GetTenant(), ref.GetName()}
		c.unindex(c.lbs[k])
		delete(c.lbs, k)
	case "Node":
		delete(c.nodes, ref.GetName())
	case "Certificate":
		delete(c.certs, lbKey{ref.GetTenant(), ref.GetName()})
	case "JoinToken":
		delete(c.tokens, ref.GetName())
	}
	c.allLBs, c.byTenant, c.addrs = nil, nil, nil
}

// Tenant returns the named tenant or nil.
func (c *Catalog) Tenant(name string) *pb.Tenant {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.tenants[name]
}

// Tenants returns all tenants sorted by name.
func (c *Catalog) Tenants() []*pb.Tenant {
	c.mu.Lock()
	defer c.mu.Unlock()
	return sortedValues(c.tenants, func(t *pb.Tenant) string { return t.GetName() })
}

// Pool returns the named VIP pool or nil.
func (c *Catalog) Pool(name string) *pb.VIPPool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.pools[name]
}

// Pools returns all VIP pools sorted by name.
func (c *Catalog) Pools() []*pb.VIPPool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return sortedValues(c.pools, func(p *pb.VIPPool) string { return p.GetName() })
}

// LoadBalancer returns the named load balancer or nil.
func (c *Catalog) LoadBalancer(tenant, name string) *pb.LoadBalancer {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.lbs[lbKey{tenant, name}]
}

// LoadBalancers returns the tenant's load balancers (all with ""), sorted
// by tenant and name. The slice is shared: do not modify it.
func (c *Catalog) LoadBalancers(tenant string) []*pb.LoadBalancer {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.allLBs == nil {
		c.allLBs = make([]*pb.LoadBalancer, 0, len(c.lbs))
		for _, lb := range c.lbs {
			c.allLBs = append(c.allLBs, lb)
		}
		slices.SortFunc(c.allLBs, func(a, b *pb.LoadBalancer) int {
			if x := strings.Compare(a.GetTenant(), b.GetTenant()); x != 0 {
				return x
			}
			return strings.Compare(a.GetName(), b.GetName())
		})
		c.byTenant = map[string][]*pb.LoadBalancer{}
		for _, lb := range c.allLBs {
			c.byTenant[lb.GetTenant()] = append(c.byTenant[lb.GetTenant()], lb)
		}
	}
	if tenant == "" {
		return c.allLBs
	}
	return c.byTenant[tenant]
}

// AddressUsers returns the load balancers whose status.address is addr.
func (c *Catalog) AddressUsers(addr netip.Addr) []*pb.LoadBalancer {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.byAddr[addr]
}

// UsedAddresses returns the distinct status addresses inside [from, to]
// in ascending order (api.AddressIndex). The slice is shared.
func (c *Catalog) UsedAddresses(from, to netip.Addr) []netip.Addr {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.addrs == nil {
		c.addrs = make([]netip.Addr, 0, len(c.byAddr))
		for a := range c.byAddr {
			c.addrs = append(c.addrs, a)
		}
		slices.SortFunc(c.addrs, netip.Addr.Compare)
	}
	lo, _ := slices.BinarySearchFunc(c.addrs, from, netip.Addr.Compare)
	hi, found := slices.BinarySearchFunc(c.addrs, to, netip.Addr.Compare)
	if found {
		hi++
	}
	return c.addrs[lo:hi]
}

// Node returns the LB host with id, or nil.
func (c *Catalog) Node(id string) *pb.Node {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.nodes[id]
}

// Nodes returns the LB hosts, by id: the catalog is an api.NodeLister.
func (c *Catalog) Nodes() []*pb.Node {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make([]*pb.Node, 0, len(c.nodes))
	for _, n := range c.nodes {
		out = append(out, n)
	}
	slices.SortFunc(out, func(a, b *pb.Node) int { return strings.Compare(a.GetId(), b.GetId()) })
	return out
}

// Certificate returns the tenant's named certificate, or nil.
func (c *Catalog) Certificate(tenant, name string) *pb.Certificate {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.certs[lbKey{tenant, name}]
}

// JoinToken returns the join token with id, or nil.
func (c *Catalog) JoinToken(id string) *pb.JoinToken {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.tokens[id]
}

func sortedValues[V any](m map[string]V, name func(V) string) []V {
	out := make([]V, 0, len(m))
	for _, v := range m {
		out = append(out, v)
	}
	slices.SortFunc(out, func(a, b V) int { return strings.Compare(name(a), name(b)) })
	return out
}
