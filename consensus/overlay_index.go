package consensus

import (
	"net/netip"
	"slices"

	"github.com/teapot-lb/teapot-lb/api"
	pb "github.com/teapot-lb/teapot-lb/api/proto/teapotv1"
)

// An overlay answers the address and quota questions of validation
// (addressUsers, usedAddresses, tenantUsage) from its parent's answers and
// an index of its own changed load balancers by address. The answers it
// has given are kept and corrected by every set, so a batch of k new load
// balancers in a state of n costs O(n + k log n) to allocate and check,
// not O(k·n): the first questions read the parent, the later ones the
// cache.

// addrRange is a closed range of addresses, the key of a cached
// usedAddresses answer.
type addrRange struct{ from, to netip.Addr }

func (r addrRange) contains(a netip.Addr) bool { return a.Compare(r.from) >= 0 && a.Compare(r.to) <= 0 }

// fresh drops the cached answers when the parent changed since they were
// made (the index of the overlay's own changes stays right).
func (o *overlay) fresh() {
	if g := o.parent.generation(); g != o.parentGen {
		o.usage, o.used, o.parentGen = nil, nil, g
	}
}

// setLoadBalancer records obj (nil: a deletion) at key and corrects the
// address index and the cached answers for the addresses it leaves and
// takes.
func (o *overlay) setLoadBalancer(key string, obj *pb.Object) {
	o.fresh()
	m := o.changes[api.KindLoadBalancer]
	prev, changedBefore := m[key]
	if !changedBefore {
		prev = o.parent.get(api.KindLoadBalancer, key)
	}
	olds, news := lbAddrs(prev), lbAddrs(obj)
	addrs := slices.Clone(olds)
	for _, a := range news {
		if !slices.Contains(addrs, a) {
			addrs = append(addrs, a)
		}
	}
	// The tenants whose cached usage this set moves, and what each held
	// at the addresses before.
	type held struct {
		tenant string
		before []bool
	}
	var tenants []held
	for _, lb := range []*pb.LoadBalancer{prev.GetLoadBalancer(), obj.GetLoadBalancer()} {
		t := lb.GetTenant()
		if _, cached := o.usage[t]; lb == nil || !cached || (len(tenants) > 0 && tenants[0].tenant == t) {
			continue
		}
		h := held{tenant: t}
		for _, a := range addrs {
			h.before = append(h.before, o.tenantHolds(t, a))
		}
		tenants = append(tenants, h)
	}

	if changedBefore {
		for _, oa := range olds {
			if users := o.at[oa]; users != nil {
				delete(users, key)
				if len(users) == 0 {
					delete(o.at, oa)
				}
			}
		}
	}
	m[key] = obj
	for _, na := range news {
		if o.at == nil {
			o.at = make(map[netip.Addr]map[string]*pb.Object)
		}
		users := o.at[na]
		if users == nil {
			users = make(map[string]*pb.Object)
			o.at[na] = users
		}
		users[key] = obj
	}

	for _, h := range tenants {
		u := o.usage[h.tenant]
		if lb := prev.GetLoadBalancer(); lb != nil && lb.GetTenant() == h.tenant {
			u.Sub(objUsage(prev))
		}
		if lb := obj.GetLoadBalancer(); lb != nil && lb.GetTenant() == h.tenant {
			u.Add(objUsage(obj))
		}
		for i, a := range addrs {
			switch after := o.tenantHolds(h.tenant, a); {
			case h.before[i] && !after:
				u.Addresses--
			case !h.before[i] && after:
				u.Addresses++
			}
		}
		o.usage[h.tenant] = u
	}
	if len(o.used) == 0 {
		return
	}
	for _, a := range addrs {
		in := o.inUse(a)
		for r, list := range o.used {
			if r.contains(a) {
				o.used[r] = setMember(list, a, in)
			}
		}
	}
}

// setMember adds a to or removes it from the ascending list.
func setMember(list []netip.Addr, a netip.Addr, in bool) []netip.Addr {
	i, found := slices.BinarySearchFunc(list, a, netip.Addr.Compare)
	switch {
	case in && !found:
		return slices.Insert(list, i, a)
	case !in && found:
		return slices.Delete(list, i, i+1)
	}
	return list
}

// inUse reports whether some load balancer of the overlay's view holds a.
func (o *overlay) inUse(a netip.Addr) bool {
	if len(o.at[a]) > 0 {
		return true
	}
	ch := o.changes[api.KindLoadBalancer]
	for _, p := range o.parent.addressUsers(a) {
		if _, changed := ch[keyOf(api.RefOf(p))]; !changed {
			return true
		}
	}
	return false
}

// tenantHolds reports whether a load balancer of tenant holds a in the
// overlay's view.
func (o *overlay) tenantHolds(tenant string, a netip.Addr) bool {
	for _, c := range o.at[a] {
		if c.GetLoadBalancer().GetTenant() == tenant {
			return true
		}
	}
	ch := o.changes[api.KindLoadBalancer]
	for _, p := range o.parent.addressUsers(a) {
		if p.GetLoadBalancer().GetTenant() != tenant {
			continue
		}
		if _, changed := ch[keyOf(api.RefOf(p))]; !changed {
			return true
		}
	}
	return false
}

func (o *overlay) addressUsers(addr netip.Addr) []*pb.Object {
	base := o.parent.addressUsers(addr)
	ch := o.changes[api.KindLoadBalancer]
	if len(ch) == 0 {
		return base
	}
	var out []*pb.Object
	for _, b := range base {
		if _, changed := ch[keyOf(api.RefOf(b))]; !changed {
			out = append(out, b)
		}
	}
	for _, c := range o.at[addr] {
		out = append(out, c)
	}
	sortObjects(out)
	return out
}

// usedAddresses answers from the cache for the range, which it fills from
// the parent's answer and the overlay's changes on the first question.
// The slice is shared: it holds until the overlay next changes.
func (o *overlay) usedAddresses(from, to netip.Addr) []netip.Addr {
	o.fresh()
	ch := o.changes[api.KindLoadBalancer]
	if len(ch) == 0 {
		return o.parent.usedAddresses(from, to)
	}
	r := addrRange{from, to}
	if list, ok := o.used[r]; ok {
		return list[:len(list):len(list)]
	}
	out := slices.Clone(o.parent.usedAddresses(from, to))
	seen := map[netip.Addr]bool{}
	note := func(a netip.Addr) {
		if seen[a] || !r.contains(a) {
			return
		}
		seen[a] = true
		out = setMember(out, a, o.inUse(a))
	}
	for key, c := range ch {
		for _, a := range lbAddrs(o.parent.get(api.KindLoadBalancer, key)) {
			note(a)
		}
		for _, a := range lbAddrs(c) {
			note(a)
		}
	}
	if o.used == nil {
		o.used = make(map[addrRange][]netip.Addr)
	}
	o.used[r] = out
	return out[:len(out):len(out)]
}

// tenantUsage answers from the cache, which it fills from the parent's
// usage and the overlay's changes of the tenant's load balancers on the
// first question.
func (o *overlay) tenantUsage(tenant string) api.TenantUsage {
	o.fresh()
	if u, ok := o.usage[tenant]; ok {
		return u
	}
	u := o.parent.tenantUsage(tenant)
	ch := o.changes[api.KindLoadBalancer]
	touched := map[netip.Addr]bool{}
	for key, c := range ch {
		if old := o.parent.get(api.KindLoadBalancer, key); old.GetLoadBalancer().GetTenant() == tenant {
			u.Sub(objUsage(old))
			for _, a := range lbAddrs(old) {
				touched[a] = true
			}
		}
		if c.GetLoadBalancer().GetTenant() == tenant {
			u.Add(objUsage(c))
			for _, a := range lbAddrs(c) {
				touched[a] = true
			}
		}
	}
	o.storedChanges(tenant, &u)
	for a := range touched {
		before := false
		for _, p := range o.parent.addressUsers(a) {
			if p.GetLoadBalancer().GetTenant() == tenant {
				before = true
				break
			}
		}
		switch after := o.tenantHolds(tenant, a); {
		case before && !after:
			u.Addresses--
		case !before && after:
			u.Addresses++
		}
	}
	if o.usage == nil {
		o.usage = make(map[string]api.TenantUsage)
	}
	o.usage[tenant] = u
	return u
}
