package vip

import (
	"errors"
	"maps"
	"net/netip"
	"slices"
	"sync"
	"time"

	"github.com/teapot-lb/teapot-lb/api"
)

// carriers are what carries this host's VIPs: the interfaces, the raw
// frames of gratuitous ARP and unsolicited NA, the BGP speaker, and the
// actuator that converges them to the loop's decisions on a goroutine of
// its own.
type carriers struct {
	arp    *iface  // nil: no arp pools here
	bgpIf  *iface  // nil: no BGP
	frames *sender // raw frames on the arp interface
	// pools: the interfaces arp pools name instead (poolif.go).
	pools poolIfaces
	spk   *speaker
	act   *actuator
}

// target is one VIP the loop wants in place on this host.
type target struct {
	mode  string
	iface *iface
	// more are the other interfaces that carry the address: the
	// attachments of the other tenants with a private VIP of the same
	// address (vipSpec.Spaces), in the order of the tenants.
	more  []*iface
	route route // bgp only
	// announce changes when the decision loop wants an arp VIP announced
	// again although it is held (record.takes).
	announce uint64
}

// places returns every interface that carries the address.
func (t target) places() []*iface {
	if len(t.more) == 0 {
		return []*iface{t.iface}
	}
	return append([]*iface{t.iface}, t.more...)
}

// samePlaces reports whether t and o put the address on the same
// interfaces.
func (t target) samePlaces(o target) bool {
	return t.iface == o.iface && slices.Equal(t.more, o.more)
}

// carries reports whether t puts the address on f (by name and
// namespace).
func (t target) carries(f *iface) bool {
	return slices.ContainsFunc(t.places(), func(g *iface) bool { return g.name == f.name && g.ns == f.ns })
}

// add puts addr on every place of t; on a failure it takes it off those
// it was put on.
func (t target) add(addr netip.Addr) error {
	ps := t.places()
	for i, f := range ps {
		if err := f.add(addr); err != nil {
			for _, g := range ps[:i] {
				_ = g.remove(addr)
			}
			return err
		}
	}
	return nil
}

// remove takes addr off every place of t.
func (t target) remove(addr netip.Addr) error {
	var errs []error
	for _, f := range t.places() {
		if err := f.remove(addr); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

type pendingAnnouncement struct {
	at    time.Time
	addr  netip.Addr
	iface *iface
}

// actuator makes the interfaces and the BGP speaker match the set of
// VIPs the decision loop wants held. It takes the whole set (set) or the
// changes of some VIPs (change) and converges on what it was given: every
// address after set, the addresses changed since it last converged after
// change. It runs on a goroutine of its own so that a slow netlink call or
// a busy speaker never delays a heartbeat.
type actuator struct {
	m    *Manager
	kick chan struct{}

	mu sync.Mutex
	// want is changed in place by change; all: converge looks at every
	// address, else at those in dirty.
	want     map[netip.Addr]target
	all      bool
	dirty    map[netip.Addr]bool
	ranges   []api.Range
	newRange bool                  // ranges changed: sweep at once
	errs     map[netip.Addr]string // why a wanted VIP is not in place

	// Owned by run (and by Close once run has returned).
	held    map[netip.Addr]target
	pending []pendingAnnouncement
}

func newActuator(m *Manager) *actuator {
	return &actuator{
		m: m, kick: make(chan struct{}, 1),
		want: map[netip.Addr]target{}, errs: map[netip.Addr]string{}, held: map[netip.Addr]target{},
		dirty: map[netip.Addr]bool{},
	}
}

// set replaces the wanted set; the actuator owns want from then on.
// ranges are the pool ranges whose stray addresses are removed from the
// interfaces.
func (a *actuator) set(want map[netip.Addr]target, ranges []api.Range) {
	a.mu.Lock()
	if !slices.Equal(a.ranges, ranges) {
		a.ranges, a.newRange = ranges, true
	}
	a.want, a.all = want, true
	clear(a.dirty)
	a.mu.Unlock()
	a.wake()
}

// change changes the wanted set at some addresses: changes maps each to
// its target, or to nil when it is not wanted.
func (a *actuator) change(changes map[netip.Addr]*target, ranges []api.Range) {
	a.mu.Lock()
	if !slices.Equal(a.ranges, ranges) {
		a.ranges, a.newRange = ranges, true
	}
	for addr, t := range changes {
		if t == nil {
			delete(a.want, addr)
		} else {
			a.want[addr] = *t
		}
		a.dirty[addr] = true
	}
	a.mu.Unlock()
	a.wake()
}

func (a *actuator) wake() {
	select {
	case a.kick <- struct{}{}:
	default:
	}
}

// errors returns why wanted VIPs are not in place.
func (a *actuator) errors() map[netip.Addr]string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return maps.Clone(a.errs)
}

// run converges on every change, sends the announcement bursts, and
// renews the address leases, until stop is closed.
func (a *actuator) run(stop <-chan struct{}) {
	lease := time.NewTicker(leaseRenew)
	defer lease.Stop()
	announce := time.NewTimer(time.Hour)
	defer announce.Stop()
	for {
		select {
		case <-stop:
			return
		case <-a.kick:
			a.converge(time.Now())
		case <-lease.C:
			a.renew()
			a.sweep()
		case <-announce.C:
		}
		next := a.announceDue(time.Now())
		d := time.Hour
		if !next.IsZero() {
			d = max(time.Until(next), 0)
		}
		announce.Reset(d)
	}
}

// converge releases what is no longer wanted, then takes what is: at
// every address after set, at those changed since after change.
func (a *actuator) converge(now time.Time) {
	a.mu.Lock()
	sweep, all := a.newRange, a.all
	a.newRange, a.all = false, false
	var look []netip.Addr // the addresses looked at, sorted
	want := map[netip.Addr]target{}
	if all {
		want = maps.Clone(a.want)
		look = slices.SortedFunc(maps.Keys(a.held), netip.Addr.Compare)
	} else {
		// And those that failed: they are tried again.
		for addr := range a.errs {
			a.dirty[addr] = true
		}
		look = slices.SortedFunc(maps.Keys(a.dirty), netip.Addr.Compare)
		for _, addr := range look {
			if t, ok := a.want[addr]; ok {
				want[addr] = t
			}
		}
	}
	clear(a.dirty)
	a.mu.Unlock()
	errs := map[netip.Addr]string{}
	for _, addr := range look {
		h, ok := a.held[addr]
		if !ok {
			continue
		}
		w, wanted := want[addr]
		if wanted && w.mode == h.mode && w.samePlaces(h) {
			continue
		}
		if wanted && w.mode == h.mode && inAttachments(w) && inAttachments(h) && sharesAPlace(w, h) {
			// An address several tenants' attachments carry gains or
			// loses one: the others keep it, with no gap and no new
			// announcement (arp: no burst; bgp: no withdrawal).
			if err := a.movePlaces(addr, h, w, now); err != nil {
				errs[addr] = err.Error()
			}
			continue
		}
		if err := a.release(addr, h); err != nil {
			errs[addr] = err.Error()
		}
	}
	if sweep {
		a.sweep()
	}
	for _, addr := range slices.SortedFunc(maps.Keys(want), netip.Addr.Compare) {
		if err := a.take(addr, want[addr], now); err != nil {
			errs[addr] = err.Error()
			a.m.log.Error("cannot hold VIP", "addr", addr, "err", err)
		}
	}
	a.mu.Lock()
	a.errs = errs
	a.mu.Unlock()
}

// take puts addr in place (a no-op when it is, except for a changed
// route, which is announced again). An address held on other places than
// t's is left as it is: converge moves or releases it first, and when
// that failed (reported there) it is held as before and tried again at
// the next converge, so that t is never recorded as held on places that
// do not have the address.
func (a *actuator) take(addr netip.Addr, t target, now time.Time) error {
	if h, ok := a.held[addr]; ok {
		if !t.samePlaces(h) {
			return nil
		}
		if t.mode == ModeBGP && h.route.key() != t.route.key() {
			if err := a.m.announce(t.route); err != nil {
				return err
			}
			a.held[addr] = t
		}
		if t.mode == ModeARP && h.announce != t.announce {
			// Released and taken again between two converges, or a peer
			// that may have announced it came back: announce again, or
			// the segment keeps sending to the host that announced last.
			a.queueBurst(addr, t.places(), now)
			a.held[addr] = t
		}
		return nil
	}
	if err := t.add(addr); err != nil {
		return err
	}
	switch t.mode {
	case ModeARP:
		a.queueBurst(addr, t.places(), now)
	case ModeBGP:
		if err := a.m.announce(t.route); err != nil {
			_ = t.remove(addr)
			return err
		}
	}
	a.held[addr] = t
	return nil
}

// queueBurst schedules the announcements of addr (replacing any pending)
// and sends the first at once.
func (a *actuator) queueBurst(addr netip.Addr, places []*iface, now time.Time) {
	a.pending = slices.DeleteFunc(a.pending, func(p pendingAnnouncement) bool { return p.addr == addr })
	for _, d := range burst {
		for _, f := range places {
			a.pending = append(a.pending, pendingAnnouncement{at: now.Add(d), addr: addr, iface: f})
		}
	}
	a.announceDue(now)
}

// sharesAPlace reports whether t and o put the address on one interface
// in common.
func sharesAPlace(t, o target) bool {
	return slices.ContainsFunc(t.places(), func(f *iface) bool { return slices.Contains(o.places(), f) })
}

// inAttachments reports whether t is a VIP of pools in tenants'
// attachments: an arp one (its places are the tenants' devices), or a bgp
// one announced to the tenants' speakers (route.Spaces).
func inAttachments(t target) bool {
	switch t.mode {
	case ModeARP:
		return true
	case ModeBGP:
		return len(t.route.Spaces) > 0
	}
	return false
}

// movePlaces takes addr off the places of h that w leaves and puts it on
// those w adds, leaving the common ones alone. An arp VIP is announced on
// the places added only; a bgp VIP's route is handed to the relay with
// the tenants of w (AnnounceVIP replaces those of h, so that the relay
// withdraws it from the tenants w leaves and sends it to those it adds,
// and the others' sessions are not touched), after the address is on the
// places added and before it leaves the others.
func (a *actuator) movePlaces(addr netip.Addr, h, w target, now time.Time) error {
	var added []*iface
	for _, f := range w.places() {
		if slices.Contains(h.places(), f) {
			continue
		}
		if err := f.add(addr); err != nil {
			for _, g := range added {
				_ = g.remove(addr)
			}
			return err
		}
		added = append(added, f)
	}
	if w.mode == ModeBGP && h.route.key() != w.route.key() {
		if err := a.m.announce(w.route); err != nil {
			for _, g := range added {
				_ = g.remove(addr)
			}
			return err
		}
		// The places w leaves lose the address below: h is held with
		// w's route from here on, so that a failure there is retried
		// without announcing again.
		h.route = w.route
		a.held[addr] = h
	}
	for _, f := range h.places() {
		if slices.Contains(w.places(), f) {
			continue
		}
		if err := f.remove(addr); err != nil {
			return err
		}
		a.pending = slices.DeleteFunc(a.pending, func(p pendingAnnouncement) bool { return p.addr == addr && p.iface == f })
	}
	if w.mode == ModeARP {
		for _, d := range burst {
			for _, f := range added {
				a.pending = append(a.pending, pendingAnnouncement{at: now.Add(d), addr: addr, iface: f})
			}
		}
		if len(added) > 0 {
			a.announceDue(now)
		}
	}
	w.announce = h.announce // take announces them all again only for a new take
	a.held[addr] = w
	return nil
}

// release withdraws and removes one held VIP.
func (a *actuator) release(addr netip.Addr, h target) error {
	if h.mode == ModeBGP {
		if err := a.m.withdraw(h.route); err != nil {
			return err
		}
	}
	if err := h.remove(addr); err != nil {
		return err
	}
	delete(a.held, addr)
	a.pending = slices.DeleteFunc(a.pending, func(p pendingAnnouncement) bool { return p.addr == addr })
	return nil
}

// announceDue sends the announcements that are due and returns when the
// next one is.
func (a *actuator) announceDue(now time.Time) time.Time {
	var next time.Time
	keep := a.pending[:0]
	for _, p := range a.pending {
		if p.at.After(now) {
			keep = append(keep, p)
			if next.IsZero() || p.at.Before(next) {
				next = p.at
			}
			continue
		}
		if err := a.m.senderOf(p.iface).send(p.addr); err != nil {
			a.m.log.Warn("announce VIP", "addr", p.addr, "err", err)
		}
	}
	a.pending = keep
	return next
}

// renew extends the lease of every held address and puts back any that
// went missing.
func (a *actuator) renew() {
	for addr, h := range a.held {
		if err := h.add(addr); err != nil {
			a.m.log.Warn("renew VIP address", "addr", addr, "err", err)
		}
	}
}

// sweep removes host addresses from this host's interfaces that lie in
// an arp or bgp pool, or carry this package's marks, but are not held.
func (a *actuator) sweep() {
	a.mu.Lock()
	ranges := a.ranges
	a.mu.Unlock()
	for _, f := range a.m.sweptIfaces() {
		addrs, err := f.hostAddrs()
		if err != nil {
			a.m.log.Warn("list VIP addresses", "interface", f.String(), "err", err)
			continue
		}
		for addr, ours := range addrs {
			if h, ok := a.held[addr]; ok && h.carries(f) {
				continue
			}
			if !ours && !inRanges(ranges, addr) {
				continue
			}
			if err := f.remove(addr); err != nil {
				a.m.log.Warn("remove a stray VIP address", "addr", addr, "interface", f.String(), "err", err)
				continue
			}
			a.m.log.Info("removed a VIP address this host does not hold", "addr", addr, "interface", f.String())
		}
	}
}

// errNoTenantVIPs: a VIP of a bgp pool in a tenant's attachment on a
// host that was given no way to announce it.
var errNoTenantVIPs = errors.New("this host announces no VIPs to tenants' speakers")

// announce announces r: to the fabric routers through the speaker, or,
// for a VIP of a bgp pool in tenants' attachments, to those tenants'
// speakers alone.
func (m *Manager) announce(r route) error {
	if len(r.Spaces) > 0 {
		if m.cfg.TenantVIPs == nil {
			return errNoTenantVIPs
		}
		return m.cfg.TenantVIPs.AnnounceVIP(r.Addr, r.Spaces, r.Communities)
	}
	return m.spk.announce(r)
}

// withdraw withdraws r from wherever announce sent it.
func (m *Manager) withdraw(r route) error {
	if len(r.Spaces) > 0 {
		if m.cfg.TenantVIPs == nil {
			return nil
		}
		return m.cfg.TenantVIPs.WithdrawVIP(r.Addr)
	}
	return m.spk.withdraw(r.Addr)
}
