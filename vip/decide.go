package vip

import (
	"cmp"
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"time"
)

// This file holds the pure rules of the VIP layer: who is alive, whether
// this host sees a majority, and who holds each VIP. They take the clock
// as an argument and do no I/O, so that the table tests pin them down.

// peerState is what this host knows about one peer from its heartbeats.
type peerState struct {
	// Heard is when its last heartbeat arrived (zero: never).
	Heard time.Time
	// Left: it said it is shutting down and has not been heard since.
	Left bool
	// From its last heartbeat.
	Eligible    bool
	Handover    bool
	NotReadyAll bool
	NotReady    map[netip.Addr]bool
	// Partly holds the addresses of NotReady it can carry for some of
	// the tenants that share them (their attachments up there, not every
	// one's); ReadsPartly: its heartbeats are sent the same.
	Partly      map[netip.Addr]bool
	ReadsPartly bool
	// Tenants holds its tenant sets by address, when its last heartbeat
	// carried them (TenantsKnown): for each address several tenants
	// share that it can carry for some of them only, which. ReadsTenants:
	// its heartbeats are sent the same. ServingVersion counts their
	// changes, and those of NotReady in bgp VIPs of this host's state
	// alone: they decide what the serving watch reports, not who holds a
	// VIP, so Version does not count them.
	Tenants        map[netip.Addr]tenantSet
	TenantsKnown   bool
	ReadsTenants   bool
	ServingVersion uint64
	Sightings      []sighting
	// AliveSince is when it was first heard after an absence of at least
	// the gap (or ever): it counts towards a majority only once settled,
	// Settle after that.
	AliveSince time.Time
	// Holdings: it reports settled sightings and reads held addresses (a
	// host of an earlier version does neither). HoldingKnown: its last
	// heartbeat listed the arp VIPs it holds (Holding).
	Holdings     bool
	HoldingKnown bool
	Holding      map[netip.Addr]bool
	// Version counts changes of Eligible, Handover, NotReadyAll,
	// NotReady, Partly and Holding, but for a change of NotReady in bgp
	// VIPs of this host's state alone, which decides no holder:
	// ServingVersion counts those.
	Version uint64
	// LostMe: its last heartbeat did not report hearing this host, so it
	// may have taken this host's VIPs.
	LostMe bool
	// Revision is the state revision its last heartbeat said it acts on.
	Revision uint64
	// Gone: this host counted it dead after it had been alive, and has
	// not seen it alive since; Back: when it last saw it alive again
	// after that (zero: never). The loop sets both (noteLiveness); for a
	// detection time after Back it is returning (hostView.Returning).
	Gone bool
	Back time.Time
}

// sighting is a peer's report of a third host: it heard from it Age
// before sending its heartbeat.
type sighting struct {
	ID       string
	Age      time.Duration
	Eligible bool
	// Settled: the reporter has heard it for at least the settling time.
	Settled bool
	// AliveFor is how long the reporter had heard it without a gap (sent
	// only to hosts of this version).
	AliveFor time.Duration
}

// viewInput is everything computeView reads.
type viewInput struct {
	Self string
	// Counted are the hosts whose votes make up the majority (self is
	// always counted).
	Counted []string
	Now     time.Time
	// Dead: a host not heard of for this long is dead.
	Dead time.Duration
	// Quorum: a peer counts towards this host's majority only while
	// both have heard each other within this window (shorter than Dead).
	Quorum time.Duration
	// Settle: a peer counts towards a majority only once both have heard
	// each other for this long since it was last dead. Interval is the
	// heartbeat interval, the margin for a datagram's time in flight.
	Settle, Interval time.Duration
	// HoldDown: a majority lost less than this long ago is kept for the
	// arp VIPs this host holds (view.Keep), so that a blip (heartbeats
	// late for a moment on a loaded machine) does not move them. Quorum
	// plus HoldDown must not exceed Dead: the host then lets go no later
	// than the peers that stopped hearing it take it for dead.
	HoldDown time.Duration
	Peers    map[string]*peerState
}

// hostView is a live peer as this host sees it.
type hostView struct {
	Eligible bool
	// Handover: it keeps what it holds while its clients are handed
	// over, and takes nothing else; not eligible, it has handed them
	// over and lets its VIPs go.
	Handover    bool
	NotReadyAll bool
	NotReady    map[netip.Addr]bool
	// Partly: the addresses of NotReady it can carry for some of the
	// tenants that share them (peerState.Partly).
	Partly map[netip.Addr]bool
	// Direct: its own heartbeat is fresh (else it is known through a
	// peer that heard it).
	Direct bool
	// Holdings: its heartbeat lists the arp VIPs it holds (Holding).
	Holdings bool
	Holding  map[netip.Addr]bool
	// Returning: a host of this version that this host counted dead came
	// back less than a detection time ago (a stall, a cut, a restart). It
	// takes nothing for that long itself (self.Rejoining), and its
	// heartbeat may not have arrived yet (it is known from a peer's
	// report, with the eligibility that peer last heard of): it is no
	// candidate for a VIP it does not say it holds (returns).
	Returning bool
}

// view is this host's picture of the cluster at one instant.
type view struct {
	// Alive holds the live peers (never self).
	Alive map[string]hostView
	// Mutual counts the counted hosts, self included, in two-way contact
	// with this host; Need is a majority of the counted hosts.
	Mutual, Need int
	Quorum       bool
	// Keep: without a majority in two-way contact, it keeps the arp VIPs
	// it holds until Until and takes none: the majority was lost less
	// than the hold-down ago (HoldDown), or the hosts this host does not
	// hear cannot make a majority of their own before Until (they need
	// the settling time with each other first).
	Keep     bool
	Until    time.Time
	HoldDown bool
	// Next is when the view changes by itself if no heartbeat arrives
	// (zero: never).
	Next time.Time
}

// computeView decides who is alive and whether this host sees a majority.
//
// A peer is alive while its own heartbeat, or a fresh peer's report of
// it, is younger than Dead: a host that only one side of an asymmetric
// cut can hear is still alive for both sides, so they agree on the
// ranking. A peer counts towards the majority only while the contact goes
// both ways within Quorum (it lists this host in its heartbeat). Quorum is
// shorter than Dead, so a host cut off from the others releases its VIPs
// before the others consider it dead and take them.
func computeView(in viewInput) view {
	v := view{Alive: map[string]hostView{}}
	counted := map[string]bool{in.Self: true}
	for _, id := range in.Counted {
		counted[id] = true
	}
	v.Need = len(counted)/2 + 1
	v.Mutual = 1
	next := func(t time.Time) {
		if t.After(in.Now) && (v.Next.IsZero() || t.Before(v.Next)) {
			v.Next = t
		}
	}
	// returning: p, alive now, is a host of this version back from the
	// dead less than Dead ago (Gone: back as of now).
	returning := func(p *peerState) bool {
		back := p.Back
		if p.Gone {
			back = in.Now
		}
		if !p.Holdings || back.IsZero() || !in.Now.Before(back.Add(in.Dead)) {
			return false
		}
		next(back.Add(in.Dead))
		return true
	}
	lastSeen := map[string]time.Time{}
	mutual := map[string]bool{}
	// lapsed: when the two-way contact with each counted peer that left
	// the quorum window less than HoldDown ago ends the hold-down.
	var lapsed []time.Time
	for id, p := range in.Peers {
		if id == in.Self || p.Left || p.Heard.IsZero() || in.Now.Sub(p.Heard) >= in.Dead {
			continue
		}
		lastSeen[id] = p.Heard
		v.Alive[id] = hostView{Eligible: p.Eligible, Handover: p.Handover, NotReadyAll: p.NotReadyAll, NotReady: p.NotReady, Partly: p.Partly, Direct: true,
			Holdings: p.HoldingKnown, Holding: p.Holding, Returning: returning(p)}
		next(p.Heard.Add(in.Dead))
		if !counted[id] {
			continue
		}
		if settled := p.AliveSince.Add(in.Settle); settled.After(in.Now) {
			next(settled)
			continue
		}
		for _, s := range p.Sightings {
			if s.ID != in.Self || !s.Settled && p.Holdings {
				continue
			}
			// When the peer last heard this host, on this host's clock.
			at := p.Heard.Add(-s.Age)
			switch age := in.Now.Sub(at); {
			case age < in.Quorum:
				v.Mutual++
				mutual[id] = true
				next(at.Add(in.Quorum))
			case age < in.Quorum+in.HoldDown:
				lapsed = append(lapsed, at.Add(in.Quorum+in.HoldDown))
				next(at.Add(in.Quorum + in.HoldDown))
			}
			break
		}
	}
	// Reports of hosts this host does not hear itself.
	for id, p := range in.Peers {
		if h, ok := v.Alive[id]; !ok || !h.Direct {
			continue
		}
		for _, s := range p.Sightings {
			q := in.Peers[s.ID]
			if s.ID == in.Self || (q != nil && q.Left) {
				continue
			}
			at := p.Heard.Add(-s.Age)
			if in.Now.Sub(at) >= in.Dead || !at.After(lastSeen[s.ID]) {
				continue
			}
			if h, ok := v.Alive[s.ID]; ok && h.Direct {
				continue
			}
			lastSeen[s.ID] = at
			hv := hostView{Eligible: s.Eligible}
			if q != nil {
				hv.NotReadyAll, hv.NotReady, hv.Partly, hv.Returning = q.NotReadyAll, q.NotReady, q.Partly, returning(q)
			}
			v.Alive[s.ID] = hv
		}
	}
	for id, h := range v.Alive {
		if !h.Direct {
			next(lastSeen[id].Add(in.Dead))
		}
	}
	v.Quorum = v.Mutual >= v.Need
	if !v.Quorum {
		if short := v.Need - v.Mutual; len(lapsed) >= short {
			// The majority held until the contact with the short-th
			// latest of them left the quorum window.
			slices.SortFunc(lapsed, func(a, b time.Time) int { return b.Compare(a) })
			v.Keep, v.HoldDown, v.Until = true, true, lapsed[short-1]
		}
		if until, keep := takeoverAt(in, counted, mutual, v.Need); keep && until.After(v.Until) {
			v.Keep, v.HoldDown, v.Until = true, false, until
		}
		if v.Keep {
			next(v.Until)
		}
	}
	return v
}

// takeoverAt returns the earliest time at which the counted hosts that
// are not in two-way contact with this host could have a majority of
// their own and take its VIPs, and whether that is still to come.
//
// A host T takes over only with a majority: Need-1 partners, each in
// settled two-way contact with it, and none of them hearing this host
// (else T would see it alive). Partners in two-way contact with this host
// hear it, so T and its partners all come from those that are not. T
// must also take this host for dead: not before it last heard it (its
// report) plus Dead. And a pair of hosts counts each other only once
// settled: the last report of either says how long it had heard the
// other, so not before that report plus what is left of Settle (all of
// it when the report did not list the other). The bound is that of T's
// best Need-1 partners, and of the best T.
//
// So with one host of three dead, the survivor holding VIPs keeps them
// through a stall of the other survivor of up to about Settle: the other
// one and the dead host cannot make a majority without settling first.
func takeoverAt(in viewInput, counted, mutual map[string]bool, need int) (time.Time, bool) {
	var cand []string
	for id := range counted {
		if p := in.Peers[id]; id != in.Self && !mutual[id] && (p == nil || !p.Left) {
			cand = append(cand, id)
		}
	}
	slices.Sort(cand)
	// settleBound: the last report of z says when z settles with y at
	// the earliest: Settle after that report when it did not list y at
	// all (a host lists every peer heard within the gap, so y starts
	// settling afresh), the rest of the settling time when it did but y
	// had not settled (zero: no bound known, or settled already).
	settleBound := func(z, y string) time.Time {
		p := in.Peers[z]
		if p == nil || p.Heard.IsZero() || !p.HoldingKnown {
			return time.Time{}
		}
		sent := p.Heard.Add(-in.Interval)
		for _, s := range p.Sightings {
			if s.ID == y {
				if s.Settled || s.AliveFor >= in.Settle {
					return time.Time{}
				}
				return sent.Add(in.Settle - s.AliveFor)
			}
		}
		return sent.Add(in.Settle)
	}
	var earliest time.Time
	found := false
	bounds := make([]time.Time, 0, len(cand))
	for _, t := range cand {
		var at time.Time // zero: now already
		if p := in.Peers[t]; p != nil && !p.Heard.IsZero() {
			for _, s := range p.Sightings {
				if s.ID == in.Self {
					at = p.Heard.Add(-s.Age).Add(in.Dead - in.Interval)
				}
			}
		}
		bounds = bounds[:0]
		for _, y := range cand {
			if y == t {
				continue
			}
			b := settleBound(t, y)
			if b2 := settleBound(y, t); b2.After(b) {
				b = b2
			}
			bounds = append(bounds, b)
		}
		if len(bounds) < need-1 {
			continue // too few partners
		}
		slices.SortFunc(bounds, time.Time.Compare)
		if need >= 2 && bounds[need-2].After(at) {
			at = bounds[need-2]
		}
		if !found || at.Before(earliest) {
			earliest, found = at, true
		}
	}
	if !found {
		// No set of hosts can make a majority without this one.
		return in.Now.Add(in.Dead), true
	}
	return earliest, earliest.After(in.Now)
}

// score is the rendezvous hash of a host for an address: the host with
// the highest score ranks first. It is stable across versions and hosts.
func score(id string, a netip.Addr) uint64 {
	h := sha256.New()
	h.Write([]byte(id))
	h.Write([]byte{0})
	b := a.As16()
	h.Write(b[:])
	var sum [sha256.Size]byte
	return binary.BigEndian.Uint64(h.Sum(sum[:0]))
}

// rank orders hosts for an address, first choice first (ties, which a
// 64-bit hash all but rules out, go to the smaller id).
func rank(a netip.Addr, hosts []string) []string {
	type scored struct {
		id string
		s  uint64
	}
	ss := make([]scored, len(hosts))
	for i, h := range hosts {
		ss[i] = scored{h, score(h, a)}
	}
	slices.SortFunc(ss, func(x, y scored) int {
		if c := cmp.Compare(y.s, x.s); c != 0 {
			return c
		}
		return cmp.Compare(x.id, y.id)
	})
	out := make([]string, len(ss))
	for i, s := range ss {
		out[i] = s.id
	}
	return out
}

// self is this host's own standing, worked out by the manager.
type self struct {
	ID string
	// Problem, when set, keeps this host from holding any VIP ("sees 1
	// of 3 hosts, needs 2", "interface eth0 is down", ...).
	Problem string
	// NotReady says why the data plane cannot serve an address.
	NotReady map[netip.Addr]string
	// Partly holds the addresses it can carry for some of the tenants
	// that share them only, and why not for each of the others, by tenant
	// (their attachments are not up here: attachmentsStanding). It is a
	// candidate for such an arp VIP only when no host can carry it for
	// every one of them.
	Partly map[netip.Addr]map[string]string
	// PartlyUnsent: its heartbeats leave out the addresses of Partly (the
	// list did not fit), so its peers take it for not ready for them; it
	// is no candidate for them either.
	PartlyUnsent bool
	// NotReadyAll: its heartbeats say that it is not ready for any address
	// (its not-ready list does not fit in them), so its peers count it
	// for no arp VIP; it is no candidate for any either.
	NotReadyAll bool
	// HoldingUnsent: its heartbeats leave out the arp VIPs it holds (the
	// list does not fit), so its peers take it for a host that does not
	// say what it holds: it ranks alone (the holder of an address when it
	// comes first among the candidates), and those that count it as back
	// from the dead count it for none (returns). In its own view it ranks
	// alone too, and while Rejoining it keeps nothing.
	HoldingUnsent bool
	// KeepOnly: it has no majority in two-way contact but lost it less
	// than the hold-down ago (HoldDown), or the others cannot make one
	// without it yet (view.Keep): it keeps the arp VIPs it holds and
	// takes none.
	KeepOnly, HoldDown bool
	// Rejoining: it regained its majority less than a detection time ago
	// after losing it (a stall, a cut). Its peers may have taken its VIPs
	// meanwhile, and the heartbeats that say so may still be on the way:
	// it keeps what it holds and takes none until they have arrived, so
	// that a VIP it lost moves once and not back.
	Rejoining bool
	// Handover: it keeps the arp VIPs it holds, and takes none, while
	// its clients are handed over (drained or stopping; with KeepOnly).
	Handover bool
	// HandOff: drained, its clients handed over, it lets its arp VIPs
	// go; it keeps each one until the host that takes it over says it
	// holds it (the loop bounds how long), so that the address is never
	// without a holder in between.
	HandOff bool
	// Holding: the arp VIPs it holds now.
	Holding map[netip.Addr]bool
	// Rebalance holds the arp VIPs it takes back from the hosts that
	// stood in for it, when it ranks first: it started a moment ago (in
	// the first 3s in which it could hold the VIP).
	Rebalance map[netip.Addr]bool
}

// withMajority applies the majority rule of arp VIPs to this host's
// standing: without a majority in two-way contact it has a problem,
// unless the view lets it keep what it holds (view.Keep).
func (me self) withMajority(v view) self {
	switch {
	case me.Problem != "":
	case !v.Quorum && !v.Keep:
		me.Problem = quorumProblem(v)
	default:
		me.KeepOnly, me.HoldDown = !v.Quorum, !v.Quorum && v.HoldDown
	}
	return me
}

// holderOf returns the host that should hold an arp VIP in this host's
// view ("" when there is none). The candidates are, in the order of the
// ranking, the hosts that are alive, eligible and ready for the address
// (this host when it has no problem, and in KeepOnly only for an address
// it holds). A VIP stays with the first candidate that holds it: a host
// that comes back, from a stall or a cut, takes nothing back, so a VIP
// moves once and never back and forth; for a detection time after it
// regains its majority (Rejoining) it takes nothing at all, until the
// heartbeats that say what its peers took meanwhile have arrived, and for
// a detection time after its peers see it back (hostView.Returning) they
// count it as a candidate only for the VIPs it says it holds: a holder
// that stood in for it keeps the VIP rather than letting it go to a host
// that will not take it. A VIP no candidate holds goes to
// the first candidate. The candidates are the hosts that can carry the
// address for every tenant that shares it (a VIP of pools in several
// tenants' attachments: each one's attachment up there); only when there
// are none, those that can carry it for some of them (self.Partly,
// hostView.Partly), so that a tenant whose attachment is down on every
// host does not take the address from the others, and a host with all of
// them up is preferred to one without. A host that just started takes back the VIPs it
// ranks first for (Rebalance) from holders that hold more than their fair
// share plus one (overloaded): a restart brings VIPs back only where they
// are unbalanced, so that one VIP moves once in a rolling upgrade. A
// candidate that does not say what it holds (an earlier version) ranks
// alone: when it comes first it gets the VIP, as it takes it itself;
// ranked lower it takes nothing and the VIP stays where it is.
//
// Two hosts whose views differ (one heard a heartbeat the other missed)
// can briefly both pick themselves; the lower-ranked one lets go as soon
// as it sees the other's holding, and a host that loses its majority
// takes nothing, so two sides of a partition never both take a VIP.
func holderOf(a netip.Addr, ranked []string, me self, v view) string {
	cands := candidates(a, ranked, me, v, false)
	if len(cands) == 0 {
		cands = candidates(a, ranked, me, v, true)
	}
	if len(cands) == 0 {
		return ""
	}
	if c := cands[0]; c != me.ID && !v.Alive[c].Holdings || c == me.ID && me.HoldingUnsent {
		// An earlier version ranks alone: it takes what it ranks first
		// for, and nothing else. So does this host when its heartbeats
		// leave out what it holds, as its peers see it that way.
		return c
	}
	for _, h := range cands {
		if holds(v, me, h, a) {
			if me.Rebalance[a] && cands[0] == me.ID && h != me.ID && overloaded(v, me, h) {
				return me.ID
			}
			return h
		}
	}
	return cands[0]
}

// candidates returns, in the order of the ranking, the hosts that can
// hold the arp VIP a: for every tenant that shares it, or with partly for
// some of them only.
func candidates(a netip.Addr, ranked []string, me self, v view, partly bool) []string {
	var cands []string
	for _, h := range ranked {
		if h == me.ID {
			if me.Problem == "" && !me.NotReadyAll && me.NotReady[a] == "" && (len(me.Partly[a]) > 0) == partly && !(partly && me.PartlyUnsent) &&
				(!me.KeepOnly && !me.Rejoining || me.Holding[a] && !(me.Rejoining && me.HoldingUnsent)) {
				cands = append(cands, h)
			}
			continue
		}
		ok := usable(v, h, a)
		if partly {
			ok = usablePartly(v, h, a)
		}
		if ok && !handsOver(v, h, a) && !returns(v, h, a) {
			cands = append(cands, h)
		}
	}
	return cands
}

// overloaded reports whether host h holds more than its fair share of the
// arp VIPs held (as far as this host knows) plus one, the share being
// those VIPs spread over this host and the eligible live peers. A host
// that just started takes a VIP back from such a holder only: from one
// that holds its share, the VIP stays where it moved.
func overloaded(v view, me self, h string) bool {
	total, hosts := len(me.Holding), 1
	for _, hv := range v.Alive {
		if hv.Eligible {
			total += len(hv.Holding)
			hosts++
		}
	}
	fair := (total + hosts - 1) / hosts
	return len(v.Alive[h].Holding) > fair+1
}

// holds reports whether h holds a (as far as this host knows; for this
// host, as far as its peers know).
func holds(v view, me self, h string, a netip.Addr) bool {
	if h == me.ID {
		return me.Holding[a] && !me.HoldingUnsent
	}
	return v.Alive[h].Holding[a]
}

// handsOver reports whether peer h hands its clients over and, as its
// heartbeat lists what it holds, does not hold a: it takes nothing while
// it hands over, so it is no candidate for a VIP it does not hold (a
// VIP whose holder dies meanwhile goes to the next host at once).
func handsOver(v view, h string, a netip.Addr) bool {
	hv := v.Alive[h]
	return hv.Handover && hv.Holdings && !hv.Holding[a]
}

// returns reports whether peer h came back from the dead less than a
// detection time ago (hostView.Returning) and does not say that it holds
// a: it takes nothing for that long (self.Rejoining), so it is no
// candidate for a VIP it does not hold, and the VIP stays with its holder
// or goes to the next host. Its own heartbeat may not have arrived yet
// (a peer's report says it is back, with the eligibility that peer last
// heard of, and nothing of its holdings): without this rule it would
// rank alone, like a host of an earlier version, and a holder would let
// the VIP go to a host that does not take it.
func returns(v view, h string, a netip.Addr) bool {
	hv := v.Alive[h]
	return hv.Returning && !hv.Holding[a]
}

// usable reports whether peer h can hold a for every tenant that shares
// it.
func usable(v view, h string, a netip.Addr) bool {
	hv, ok := v.Alive[h]
	return ok && hv.Eligible && !hv.NotReadyAll && !hv.NotReady[a]
}

// usablePartly reports whether peer h can hold a for some of the tenants
// that share it only (hostView.Partly).
func usablePartly(v view, h string, a netip.Addr) bool {
	hv, ok := v.Alive[h]
	return ok && hv.Eligible && !hv.NotReadyAll && hv.NotReady[a] && hv.Partly[a]
}

// whyNot says why host h cannot hold a (in this host's view).
func whyNot(v view, h string, a netip.Addr, peers map[string]*peerState, dead time.Duration) string {
	hv, ok := v.Alive[h]
	switch {
	case !ok && peers[h] != nil && peers[h].Left:
		return h + " shut down"
	case !ok && (peers[h] == nil || peers[h].Heard.IsZero()):
		return h + " was never heard from"
	case !ok:
		return fmt.Sprintf("no heartbeat from %s for %s", h, dead)
	case !hv.Eligible && hv.Handover:
		return h + " handed its clients over (drained or stopping)"
	case !hv.Eligible:
		return h + " lost its majority or its interface"
	case !hv.NotReadyAll && hv.NotReady[a] && hv.Partly[a]:
		return h + " can carry it for some of the tenants that share it only (their attachments are not all up there)"
	case hv.NotReadyAll || hv.NotReady[a]:
		return h + " is not ready to serve it"
	case returns(v, h, a):
		return fmt.Sprintf("%s came back less than %s ago and does not hold it", h, dead)
	}
	return h + " can hold it"
}

// decision is what this host does with one VIP.
type decision struct {
	Hold bool
	// Holder is the host that should hold an arp VIP ("" for other modes
	// or when none can).
	Holder string
	Reason string
	// Local: the reason lies with this host (not ready, no majority, ...).
	Local bool
}

// decide works out one VIP. prevHolder is the holder this host computed
// last time, for the reason given when the VIP moves.
func decide(vs vipSpec, ranked []string, me self, v view, peers map[string]*peerState, dead time.Duration, prevHolder string) decision {
	notReady := me.NotReady[vs.Addr]
	switch vs.Mode {
	case ModeStatic:
		if notReady != "" {
			return decision{Reason: "not ready: " + notReady, Local: true}
		}
		return decision{Hold: true, Reason: "static pool: bound here; the network routes it"}
	case ModeBGP:
		switch {
		case me.Problem != "":
			return decision{Reason: me.Problem, Local: true}
		case notReady != "":
			return decision{Reason: "not ready: " + notReady, Local: true}
		}
		return decision{Hold: true, Reason: "ready, and the state is current"}
	}
	h := holderOf(vs.Addr, ranked, me, v)
	d := decision{Holder: h, Hold: h == me.ID}
	if !d.Hold && me.HandOff && me.Holding[vs.Addr] && h != "" && !holds(v, me, h, vs.Addr) {
		d.Hold, d.Reason = true, "hands it to "+h+": keeps it until "+h+" holds it"
		return d
	}
	switch {
	case d.Hold && prevHolder != "" && prevHolder != me.ID && usable(v, prevHolder, vs.Addr) && !returns(v, prevHolder, vs.Addr):
		d.Reason = "ranks first again (" + prevHolder + " held it)"
	case d.Hold && prevHolder != "" && prevHolder != me.ID:
		d.Reason = "took over: " + whyNot(v, prevHolder, vs.Addr, peers, dead)
	case d.Hold && me.Handover:
		d.Reason = "keeps it while its clients are handed over (drained or stopping)"
	case d.Hold && me.KeepOnly && me.HoldDown:
		d.Reason = "keeps it: lost its majority in two-way contact less than the hold-down ago"
	case d.Hold && me.KeepOnly:
		d.Reason = "keeps it: without this host the others cannot make a majority yet"
	case d.Hold && me.Holding[vs.Addr]:
		d.Reason = "holds it among the live hosts"
	case d.Hold:
		d.Reason = "ranks first among the live hosts"
	case me.Problem != "":
		d.Reason, d.Local = me.Problem, true
	case notReady != "":
		d.Reason, d.Local = "not ready: "+notReady, true
	case me.NotReadyAll:
		d.Reason, d.Local = "its heartbeats say it is not ready for any address: the list of those it is not ready for does not fit in them", true
	case h == "" && me.KeepOnly:
		d.Reason, d.Local = "takes nothing without a majority in two-way contact", true
	case h == "" && me.Rejoining:
		d.Reason, d.Local = "takes nothing for a detection time after regaining its majority", true
	case h == "":
		d.Reason = "no host can hold it"
	case holds(v, me, h, vs.Addr):
		d.Reason = h + " holds it"
	default:
		d.Reason = h + " ranks first"
	}
	return d
}

// quorumProblem describes a missing majority ("" when there is one).
func quorumProblem(v view) string {
	if v.Quorum {
		return ""
	}
	return fmt.Sprintf("sees %d of the cluster's hosts, needs %d", v.Mutual, v.Need)
}

// hostList renders ids for logs.
func hostList(ids []string) string {
	return "[" + strings.Join(ids, " ") + "]"
}
