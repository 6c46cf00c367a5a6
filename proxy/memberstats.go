package proxy

import "net/netip"

// MemberStat is one member of one pool as this host sees it, for metrics.
type MemberStat struct {
	LB, Pool string
	Addr     netip.AddrPort
	Healthy  bool
	// Ejections counts the member's passive ejections on this host.
	Ejections int64
}

// EachMember calls each for every member of every pool in service,
// unordered.
func (p *Proxy) EachMember(each func(MemberStat)) {
	cur := p.current.Load()
	if cur == nil {
		return
	}
	for spec, pool := range cur.pools.All() {
		for _, m := range pool.members {
			each(MemberStat{LB: spec.LB, Pool: spec.Name, Addr: m.Addr, Healthy: m.Usable(), Ejections: Target(m).Ejections()})
		}
	}
}

// LoadBalancers returns the load balancers with a listener in the
// configuration in service.
func (p *Proxy) LoadBalancers() map[string]bool {
	out := map[string]bool{}
	cur := p.current.Load()
	if cur == nil || cur.snap == nil {
		return out
	}
	for _, l := range cur.snap.Listeners.All() {
		out[l.LB] = true
	}
	return out
}
