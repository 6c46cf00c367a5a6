package vip

import (
	"maps"
	"os"
	"path/filepath"
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
	return p.getIn(name, "")
}

// getIn returns the entry of the interface named in the namespace at ns
// ("" the host's), making it once. Entries in a namespace are keyed by
// the namespace's path and the name.
func (p *poolIfaces) getIn(name, ns string) *poolIface {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.byName == nil {
		p.byName = map[string]*poolIface{}
	}
	key := name
	if ns != "" {
		key = ns + "/" + name
	}
	e := p.byName[key]
	if e == nil {
		e = &poolIface{f: &iface{name: name, ns: ns}, frames: &sender{name: name, ns: ns}}
		p.byName[key] = e
	}
	return e
}

// of returns the entry of f (nil for an interface no pool names).
func (p *poolIfaces) of(f *iface) *poolIface {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, e := range p.byName {
		if e.f == f {
			return e
		}
	}
	return nil
}

// has reports whether a pool named the interface (of the host's
// namespace).
func (p *poolIfaces) has(name string) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.byName[name] != nil
}

// hasIn reports whether a pool lives on the interface named in the
// namespace at ns (a tenant's attachment).
func (p *poolIfaces) hasIn(name, ns string) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.byName[ns+"/"+name] != nil
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

// attachmentOf returns the tenant whose attachment a pool lives in (""
// for none, or a pool not in the state).
func (d *desired) attachmentOf(pool string) string {
	if i, ok := d.byName[pool]; ok {
		return d.pools[i].pool.GetAttachment()
	}
	return ""
}

// arpIface returns the interface the VIPs of an arp pool live on: the
// device of the tenant's attachment the pool lives in, else the one the
// pool names, else --vip-interface.
func (m *Manager) arpIface(pool string) *iface {
	name, tenant := "", ""
	if m.loop.want != nil {
		name, tenant = m.loop.want.ifaceOf(pool), m.loop.want.attachmentOf(pool)
	}
	if tenant != "" {
		return m.pools.getIn(AttachmentDevice, m.attachmentNS(tenant)).f
	}
	if name == "" || (m.arp != nil && name == m.arp.name) {
		return m.arp
	}
	return m.pools.get(name).f
}

// arpTarget is where an arp VIP lives: the interface of its pool, or for
// a VIP of pools in tenants' attachments the device in each of those
// tenants' namespaces (vs.Spaces) but those of the tenants in unserved
// (their attachment is not up here).
func (m *Manager) arpTarget(vs vipSpec, unserved map[string]string) target {
	if len(vs.Spaces) == 0 {
		return target{mode: ModeARP, iface: m.arpIface(vs.Pool)}
	}
	t := target{mode: ModeARP}
	for _, tenant := range servedSpaces(vs.Spaces, unserved) {
		f := m.pools.getIn(AttachmentDevice, m.attachmentNS(tenant)).f
		if t.iface == nil {
			t.iface = f
		} else {
			t.more = append(t.more, f)
		}
	}
	return t
}

// servedSpaces returns the tenants of spaces not in unserved.
func servedSpaces(spaces []string, unserved map[string]string) []string {
	if len(unserved) == 0 {
		return spaces
	}
	var out []string
	for _, t := range spaces {
		if _, ok := unserved[t]; !ok {
			out = append(out, t)
		}
	}
	return out
}

// senderOf returns what sends the announcements on f.
func (m *Manager) senderOf(f *iface) *sender {
	if f == m.arp || f == nil {
		return m.frames
	}
	if e := m.pools.of(f); e != nil {
		return e.frames
	}
	return m.pools.get(f.name).frames
}

// poolIfaceProblems says, for each arp pool that names an interface of
// its own, why this host cannot carry its VIPs ("" entries left out): the
// interface does not exist here, or it is down. up reads the kernel.
func poolIfaceProblems(d *desired, vipIface string, up func(name string) (exists, isUp bool), attached func(tenant string) string) map[string]string {
	out := map[string]string{}
	if d == nil {
		return out
	}
	for _, p := range d.pools {
		if t := p.pool.GetAttachment(); t != "" {
			if m := p.pool.GetMode(); m != ModeARP && m != ModeBGP {
				continue
			}
			if why := attached(t); why != "" {
				out[p.pool.GetName()] = "pool " + p.pool.GetName() + " lives in tenant " + t + "'s attachment, which " + why
			}
			continue
		}
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
	// Subscribe first: a change after the reads below wakes the loop.
	paths := m.attachmentPaths()
	paths[hostLinks] = true
	st.nsLinks.sync(paths)
	att := map[string]string{} // by tenant, for VIPs of several tenants' pools
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
	}, func(tenant string) string {
		why := m.attachmentProblem(tenant)
		if why != "" {
			att[tenant] = "tenant " + tenant + "'s attachment, which carries this VIP, " + why
		}
		return why
	})
	rd := &st.ready
	if maps.Equal(probs, rd.ifProblems) && maps.Equal(att, rd.attProblems) {
		return
	}
	rd.attProblems = att
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

// attachmentPaths returns the paths of the namespaces of the tenants'
// attachments that arp and bgp pools live in (those checkPoolIfaces
// reads).
func (m *Manager) attachmentPaths() map[string]bool {
	out := map[string]bool{}
	if m.loop.want == nil {
		return out
	}
	for _, p := range m.loop.want.pools {
		if t, mode := p.pool.GetAttachment(), p.pool.GetMode(); t != "" && (mode == ModeARP || mode == ModeBGP) {
			out[m.attachmentNS(t)] = true
		}
	}
	return out
}

// attachmentProblem says why the device of tenant's attachment cannot
// carry VIPs here ("" when it can).
func (m *Manager) attachmentProblem(tenant string) string {
	f := m.pools.getIn(AttachmentDevice, m.attachmentNS(tenant)).f
	if _, err := os.Stat(f.ns); err != nil {
		return "is not up on this host (no namespace " + filepath.Base(f.ns) + ")"
	}
	if _, err := f.link(); err != nil {
		return "is not up on this host (namespace " + filepath.Base(f.ns) + " has no " + f.name + ")"
	}
	if up, err := f.up(); err != nil || !up {
		return "is not up on this host (" + f.name + " in namespace " + filepath.Base(f.ns) + " is down)"
	}
	return ""
}

// why says why this host cannot serve vs ("" when it can): the interface
// of its pool, or for a VIP that several tenants' attachments carry, all
// of them (attachmentsStanding), then the data plane's readiness. When it
// can, unserved says, by tenant, why it does not carry the address for
// the tenants whose attachment is not up here (nil: it carries it for
// all).
func (rd *readiness) why(vs vipSpec) (why string, unserved map[string]string) {
	if vs.Mode == ModeARP || vs.Mode == ModeBGP {
		if len(vs.Spaces) > 1 {
			if why, unserved = attachmentsStanding(vs.Spaces, rd.attProblems); why != "" {
				return why, nil
			}
		} else if p := rd.ifProblems[vs.Pool]; p != "" {
			return p, nil
		}
	}
	if why := notReady(vs, rd.ready, rd.have); why != "" {
		return why, nil
	}
	return "", unserved
}
