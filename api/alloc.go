package api

import (
	"net/netip"
	"slices"
	"sort"

	pb "github.com/teapot-lb/teapot-lb/api/proto/teapotv1"
)

// AllocateAddress chooses the VIP of a load balancer, deterministically:
//
//   - vip.address, when given, if it lies in the pool and is free for lb;
//   - else status.address, when it is still in the pool, of the requested
//     family and free for lb, so updates keep their address;
//   - else, when the pool allows sharing and lb has a vip.sharingKey, the
//     lowest address already held by a load balancer of the same tenant and
//     key whose listeners do not clash with lb's;
//   - else the lowest free address of the requested family (IPv4 by
//     default when the pool has any), taking the pool's entries in order.
//     IPv4 network and broadcast addresses of CIDRs shorter than /31 and the
//     IPv6 subnet-router anycast address of CIDRs shorter than /127 are
//     never handed out.
//
// The cost never depends on the pool's size: with a Catalog that
// implements AddressIndex it binary-searches the sorted used addresses
// for the first gap; otherwise it reads every load balancer's address once. Errors are *ValidationError; an exhausted pool, a taken
// address or a reached quota match ErrConflict. With vip.families it
// returns the address of the first family AllocateAddresses gives.
func AllocateAddress(lb *pb.LoadBalancer, c Catalog) (netip.Addr, error) {
	as, err := AllocateAddresses(lb, c)
	if err != nil {
		return netip.Addr{}, err
	}
	return as[0], nil
}

// AllocateAddresses chooses every VIP of a load balancer: one address as
// AllocateAddress says, or with vip.families one per family in the order
// given, each chosen by the same rules within the family. Under
// familyPolicy require (the default) every family must get an address;
// under prefer the families the pool has no (free) address of are left
// out, and the answer is refused only when none gets one. The answer is
// never empty when the error is nil.
func AllocateAddresses(lb *pb.LoadBalancer, c Catalog) ([]netip.Addr, error) {
	c = orEmpty(c)
	ck := &checker{}
	if lb == nil {
		ck.invalidf("", "no load balancer given")
		return nil, ck.err(KindLoadBalancer)
	}
	ref := lbRef(lb)
	tenant := lookupTenant(ck, lb.GetTenant(), c)
	v := resolveVIP(ck, lb, tenant, c)
	if !ck.ok() || v.pool == nil {
		return nil, ck.err(ref)
	}
	if len(v.families) == 0 {
		a, err := allocateFamily(ck, lb, tenant, v, v.family, v.want, nil, c)
		if err != nil {
			return nil, err
		}
		return []netip.Addr{a}, nil
	}
	var out []netip.Addr
	var firstErr error
	for _, f := range v.families {
		if !v.hasFamily(f == "ipv4") {
			continue // prefer only: resolveVIP refused it under require
		}
		want := netip.Addr{}
		if v.want.IsValid() && familyOK(f, v.want) {
			want = v.want
		}
		a, err := allocateFamily(&checker{}, lb, tenant, v, f, want, out, c)
		if err != nil {
			if !v.prefer || want.IsValid() {
				return nil, err
			}
			if firstErr == nil {
				firstErr = err
			}
			continue
		}
		out = append(out, a)
	}
	if len(out) == 0 {
		return nil, firstErr
	}
	return out, nil
}

// allocateFamily chooses lb's address of family ("" for the pool's
// default) by the rules of AllocateAddress; want is the requested address
// of the family, and taken the addresses of lb's other families chosen
// already (they count against the tenant's quota).
func allocateFamily(ck *checker, lb *pb.LoadBalancer, tenant *pb.Tenant, v *vipTarget, family string, want netip.Addr, taken []netip.Addr, c Catalog) (netip.Addr, error) {
	ref := lbRef(lb)
	take := func(field string, a netip.Addr) (netip.Addr, error) {
		if why := addressQuotaProblem(lb, tenant, a, taken, c); why != "" {
			ck.conflictf(field, "%s", why)
			return netip.Addr{}, ck.err(ref)
		}
		return a, nil
	}
	if want.IsValid() {
		if why := addressBlocker(lb, want, v.pool, c); why != "" {
			ck.conflictf("vip.address", "%s", why)
			return netip.Addr{}, ck.err(ref)
		}
		return take("vip.address", want)
	}
	if cur, ok := statusAddrOf(lb, family); ok &&
		v.placeProblem(cur) == "" && addressBlocker(lb, cur, v.pool, c) == "" &&
		addressQuotaProblem(lb, tenant, cur, taken, c) == "" {
		return cur, nil
	}
	is4 := family == "ipv4" || family == "" && v.hasFamily(true)
	var ranges []Range
	for _, r := range v.ranges {
		if r.From.Is4() == is4 {
			ranges = append(ranges, r.usable)
		}
	}
	if a, ok := sharedAddress(lb, v, ranges, c); ok {
		return a, nil
	}
	inUse, total := 0, uint64(0)
	if idx, ok := c.(AddressIndex); ok && v.pool.GetAttachment() == "" {
		for _, r := range ranges {
			used := idx.UsedAddresses(r.From, r.To)
			if a, ok := lowestFreeSorted(r, used); ok {
				return take("vip.pool", a)
			}
			inUse += len(used)
			total += toU128(r.To).sub(toU128(r.From)).lo + 1
		}
	} else {
		used := usedAddresses(lb, v.pool.GetName(), ranges, c)
		for i, r := range ranges {
			if a, ok := lowestFree(r, used[i]); ok {
				return take("vip.pool", a)
			}
		}
		distinct := map[netip.Addr]bool{}
		for i, r := range ranges {
			total += toU128(r.To).sub(toU128(r.From)).lo + 1
			for _, a := range used[i] {
				distinct[a] = true
			}
		}
		inUse = len(distinct)
	}
	ck.conflictf("vip.pool", "pool %s has no free %s address (%d of %d in use)", v.pool.GetName(), familyName(is4), inUse, total)
	return netip.Addr{}, ck.err(ref)
}

// sharedAddress finds the lowest address (in pool order) that a load
// balancer of the same tenant and sharing key holds and lb may share.
func sharedAddress(lb *pb.LoadBalancer, v *vipTarget, ranges []Range, c Catalog) (netip.Addr, bool) {
	key := lb.GetVip().GetSharingKey()
	if !v.pool.GetAllowShared() || key == "" {
		return netip.Addr{}, false
	}
	type candidate struct {
		rank int
		addr netip.Addr
	}
	var cands []candidate
	seen := map[netip.Addr]bool{}
	for _, o := range c.LoadBalancers(lb.GetTenant()) {
		if sameLB(o, lb) || o.GetVip().GetSharingKey() != key {
			continue
		}
		for _, a := range StatusAddrs(o) {
			if seen[a] {
				continue
			}
			seen[a] = true
			for i, r := range ranges {
				if r.Contains(a) {
					cands = append(cands, candidate{i, a})
					break
				}
			}
		}
	}
	slices.SortFunc(cands, func(x, y candidate) int {
		if x.rank != y.rank {
			return x.rank - y.rank
		}
		return x.addr.Compare(y.addr)
	})
	for _, cd := range cands {
		if addressBlocker(lb, cd.addr, v.pool, c) == "" {
			return cd.addr, true
		}
	}
	return netip.Addr{}, false
}

// usedAddresses returns, for each range, the addresses in it held by load
// balancers other than lb (unsorted, possibly repeated). Load balancers
// that name another pool are skipped without parsing their address.
func usedAddresses(lb *pb.LoadBalancer, pool string, ranges []Range, c Catalog) [][]netip.Addr {
	out := make([][]netip.Addr, len(ranges))
	lbs := c.LoadBalancers("")
	for _, o := range lbs {
		if o.GetStatus().GetAddress() == "" || sameLB(o, lb) {
			continue
		}
		if p := o.GetVip().GetPool(); p != "" && p != pool {
			continue
		}
		if o.GetTenant() != lb.GetTenant() && c.Pool(pool).GetAttachment() != "" {
			continue // another tenant's address, in its own attachment
		}
		for _, a := range StatusAddrs(o) {
			for i, r := range ranges {
				if r.Contains(a) {
					if out[i] == nil {
						out[i] = make([]netip.Addr, 0, len(lbs))
					}
					out[i] = append(out[i], a)
					break
				}
			}
		}
	}
	return out
}

// lowestFree returns the lowest address of r not in used, which holds only
// addresses inside r. With n entries in used, the answer is within the
// first n+1 addresses of r, so a bitmap of n+1 bits finds it without
// sorting and without walking the range.
func lowestFree(r Range, used []netip.Addr) (netip.Addr, bool) {
	n := uint64(len(used))
	base := toU128(r.From)
	taken := make([]bool, n+1)
	for _, a := range used {
		if off := toU128(a).sub(base); off.hi == 0 && off.lo <= n {
			taken[off.lo] = true
		}
	}
	size := toU128(r.To).sub(base) // size - 1
	for k := uint64(0); k <= n; k++ {
		if size.hi == 0 && k > size.lo {
			return netip.Addr{}, false
		}
		if !taken[k] {
			return fromU128(base.add(k), r.From.Is4()), true
		}
	}
	return netip.Addr{}, false
}

// lowestFreeSorted returns the lowest address of r not in used, which
// holds the distinct addresses inside r in ascending order. Before the
// first gap used[i] is r.From+i, and after it used[i] is greater, so a
// binary search finds the gap in O(log n).
func lowestFreeSorted(r Range, used []netip.Addr) (netip.Addr, bool) {
	base := toU128(r.From)
	k := sort.Search(len(used), func(i int) bool {
		off := toU128(used[i]).sub(base)
		return off.hi != 0 || off.lo != uint64(i)
	})
	if size := toU128(r.To).sub(base); size.hi == 0 && uint64(k) > size.lo {
		return netip.Addr{}, false
	}
	return fromU128(base.add(uint64(k)), r.From.Is4()), true
}
