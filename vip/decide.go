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
	NotReadyAll bool
	NotReady    map[netip.Addr]bool
	Sightings   []sighting
	// Version counts changes of Eligible, NotReadyAll and NotReady.
	Version uint64
}

// sighting is a peer's report of a third host: it heard from it Age
// before sending its heartbeat.
type sighting struct {
	ID       string
	Age      time.Duration
	Eligible bool
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
	Peers  map[string]*peerState
}

// hostView is a live peer as this host sees it.
type hostView struct {
	Eligible    bool
	NotReadyAll bool
	NotReady    map[netip.Addr]bool
	// Direct: its own heartbeat is fresh (else it is known through a
	// peer that heard it).
	Direct bool
}

// view is this host's picture of the cluster at one instant.
type view struct {
	// Alive holds the live peers (never self).
	Alive map[string]hostView
	// Mutual counts the counted hosts, self included, in two-way contact
	// with this host; Need is a majority of the counted hosts.
	Mutual, Need int
	Quorum       bool
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
	lastSeen := map[string]time.Time{}
	for id, p := range in.Peers {
		if id == in.Self || p.Left || p.Heard.IsZero() || in.Now.Sub(p.Heard) >= in.Dead {
			continue
		}
		lastSeen[id] = p.Heard
		v.Alive[id] = hostView{Eligible: p.Eligible, NotReadyAll: p.NotReadyAll, NotReady: p.NotReady, Direct: true}
		next(p.Heard.Add(in.Dead))
		if !counted[id] {
			continue
		}
		for _, s := range p.Sightings {
			// When the peer last heard this host, on this host's clock.
			if at := p.Heard.Add(-s.Age); s.ID == in.Self && in.Now.Sub(at) < in.Quorum {
				v.Mutual++
				next(at.Add(in.Quorum))
				break
			}
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
				hv.NotReadyAll, hv.NotReady = q.NotReadyAll, q.NotReady
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
	return v
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
}

// holderOf returns the host that should hold an arp VIP in this host's
// view: the first host in the ranking that is alive, eligible and ready
// for the address ("" when there is none). This host holds the VIP only
// when that is itself. Two hosts whose views differ (one heard a
// heartbeat the other missed) can briefly both pick themselves; each
// resolves it on its own as soon as its view changes, and a host that
// loses its majority holds nothing, so two sides of a partition never do.
func holderOf(a netip.Addr, ranked []string, me self, v view) string {
	for _, h := range ranked {
		if h == me.ID {
			if me.Problem == "" && me.NotReady[a] == "" {
				return h
			}
			continue
		}
		if usable(v, h, a) {
			return h
		}
	}
	return ""
}

func usable(v view, h string, a netip.Addr) bool {
	hv, ok := v.Alive[h]
	return ok && hv.Eligible && !hv.NotReadyAll && !hv.NotReady[a]
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
	case !hv.Eligible:
		return h + " lost its majority or its interface"
	case hv.NotReadyAll || hv.NotReady[a]:
		return h + " is not ready to serve it"
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
		return decision{Hold: true, Reason: "ready, in session, and the state is current"}
	}
	h := holderOf(vs.Addr, ranked, me, v)
	d := decision{Holder: h, Hold: h == me.ID}
	switch {
	case d.Hold && prevHolder != "" && prevHolder != me.ID && usable(v, prevHolder, vs.Addr):
		d.Reason = "ranks first again (" + prevHolder + " held it)"
	case d.Hold && prevHolder != "" && prevHolder != me.ID:
		d.Reason = "took over: " + whyNot(v, prevHolder, vs.Addr, peers, dead)
	case d.Hold:
		d.Reason = "ranks first among the live hosts"
	case me.Problem != "":
		d.Reason, d.Local = me.Problem, true
	case notReady != "":
		d.Reason, d.Local = "not ready: "+notReady, true
	case h == "":
		d.Reason = "no host can hold it"
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
