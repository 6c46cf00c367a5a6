package vip

import (
	"maps"
	"slices"
	"sync"
)

// poolIfaces are the interfaces arp pools name (VIPPool.interface) other
// than --vip-interface. Each name gets one entry, made when a pool first
// names it and kept for the life of the Manager, so that a target's
// interface keeps its identity (the actuator compares them). An entry
// exists whether or not the host has the interface: the loop asks the
// kernel (checkPoolIfaces) and a pool whose interface is missing or down
// is not ready on this host.
type poolIfaces struct {
	mu     sync.Mutex
	byName map[string]*poolIface
}

type poolIface struct {
	f *iface
	// frames sends the pool's announcements; the actuator uses it (and
	// Close once the actuator stopped).
	frames *sender
}

// get returns the entry of the interface named, making it once.
func (p *poolIfaces) get(name string) *poolIface {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.byName == nil {
		p.byName = map[string]*poolIface{}
	}
	e := p.byName[name]
	if e == nil {
		e = &poolIface{f: &iface{name: name}, frames: &sender{name: name}}
		p.byName[name] = e
	}
	return e
}

// has reports whether a pool named the interface.
func (p *poolIfaces) has(name string) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.byName[name] != nil
}

// all returns the entries, by name.
func (p *poolIfaces) all() []*poolIface {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make([]*poolIface, 0, len(p.byName))
	for _, name := range slices.Sorted(maps.Keys(p.byName)) {
		out = append(out, p.byName[name])
	}
	return out
}

// ifaceOf returns the interface a pool names ("" for none, or a pool not
// in the state).
func (d *desired) ifaceOf(pool string) string {
	if i, ok := d.byName[pool]; ok {
		return d.pools[i].pool.GetInterface()
	}
	return ""
}

// arpIface returns the interface the VIPs of an arp pool live on: the one
// the pool names, else --vip-interface.
func (m *Manager) arpIface(pool string) *iface {
	name := ""
	if m.loop.want != nil {
		name = m.loop.want.ifaceOf(pool)
	}
	if name == "" || (m.arp != nil && name == m.arp.name) {
		return m.arp
	}
	return m.pools.get(name).f
}

// senderOf returns what sends the announcements on f.
func (m *Manager) senderOf(f *iface) *sender {
	if f == m.arp || f == nil {
		return m.frames
	}
	return m.pools.get(f.name).frames
}

// poolIfaceProblems says, for each arp pool that names an interface of
// its own, why this host cannot carry its VIPs ("" entries left out): the
// interface does not exist here, or it is down. up reads the kernel.
func poolIfaceProblems(d *desired, vipIface string, up func(name string) (exists, isUp bool)) map[string]string {
	out := map[string]string{}
	if d == nil {
		return out
	}
	for _, p := range d.pools {
		name := p.pool.GetInterface()
		if p.pool.GetMode() != ModeARP || name == "" || name == vipIface {
			continue
		}
		switch exists, isUp := up(name); {
		case !exists:
			out[p.pool.GetName()] = "interface " + name + " of pool " + p.pool.GetName() + " does not exist on this host"
		case !isUp:
			out[p.pool.GetName()] = "interface " + name + " of pool " + p.pool.GetName() + " is down"
		}
	}
	return out
}

// checkPoolIfaces asks the kernel about the interfaces the pools name and,
// when what it finds changed, has the readiness of every VIP computed
// again: a VIP of a pool whose interface is missing or down is not ready
// here, and the heartbeats say so, so that another host holds it.
func (m *Manager) checkPoolIfaces() {
	st := &m.loop
	vipIface := ""
	if m.arp != nil {
		vipIface = m.arp.name
	}
	probs := poolIfaceProblems(st.want, vipIface, func(name string) (bool, bool) {
		f := m.pools.get(name).f
		if _, err := f.link(); err != nil {
			return false, false
		}
		up, err := f.up()
		return true, err == nil && up
	})
	rd := &st.ready
	if maps.Equal(probs, rd.ifProblems) {
		return
	}
	for pool, why := range probs {
		if rd.ifProblems[pool] != why {
			m.log.Warn("this host cannot carry the VIPs of a pool", "pool", pool, "reason", why)
		}
	}
	for pool := range rd.ifProblems {
		if probs[pool] == "" {
			m.log.Info("this host can carry the VIPs of a pool again", "pool", pool, "interface", st.want.ifaceOf(pool))
		}
	}
	rd.ifProblems, rd.ifChanged = probs, true
}

// why says why this host cannot serve vs ("" when it can): the interface
// of its pool, then the data plane's readiness.
func (rd *readiness) why(vs vipSpec) string {
	if vs.Mode == ModeARP {
		if p := rd.ifProblems[vs.Pool]; p != "" {
			return p
		}
	}
	return notReady(vs, rd.ready, rd.have)
}
