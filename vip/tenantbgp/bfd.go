package tenantbgp

import (
	"fmt"
	"net"
	"net/netip"
	"sync"
	"time"

	gobgpapi "github.com/osrg/gobgp/v4/api"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/teapot-lb/teapot-lb/api"
	pb "github.com/teapot-lb/teapot-lb/api/proto/teapotv1"
	"github.com/teapot-lb/teapot-lb/vip/bfd"
)

// An attached tenant with bgp.bfd has a BFD endpoint (vip/bfd) inside its
// namespace on each host: its sockets are opened there, where port 3784
// is the tenant's own, and its sessions are the tenant's speakers, by
// their addresses in the tenant's network. gobgp's BFD cannot serve them:
// it listens in the process's namespace, on port 3784 of every address,
// which the VIP speaker's BFD already holds for the fabric sessions, and
// it would send to the session's loopback tunnel address.
//
// When a speaker's BFD session goes from Up to Down, the relay resets
// its BGP session (gobgp sends a Cease and drops the session's routes),
// and the pass that follows withdraws them from the namespace's table.
// gobgp dials the speaker again as for any closed session. A speaker
// whose BFD flaps (three packets make an Up and a Down) costs a map
// look-up per change: whether its BGP session is established is what the
// last pass read, a reset holds further resets off for ResetHold, and
// the loop is woken only by changes into or out of Up, once per
// ResetHold after an Up->Down.

// bfdState is the relay's BFD, shared between the loop and the
// endpoints' goroutines (under mu).
type bfdState struct {
	mu sync.Mutex
	// keys maps each tenant's speaker to its session's gobgp address.
	keys map[string]map[netip.Addr]netip.Addr
	// downs counts, per tenant, the BGP sessions reset for their BFD.
	downs map[string]uint64
	// errs is why a tenant's endpoint could not open its sockets.
	errs map[string]error
	// established holds the sessions (by gobgp address) the last pass
	// read established; held, per speaker, until when an Up->Down resets
	// nothing (after a reset) and wakes no pass (after any Up->Down).
	established map[netip.Addr]bool
	held        map[bfdPeer]bfdHold
	// eps are the tenants' endpoints (as r.bfd, for the metrics), and
	// closed the counts of the endpoints each tenant had before.
	eps    map[string]*bfd.Endpoint
	closed map[string]bfd.Stats
}

// closeEndpoint closes tenant's endpoint e, keeping its counts.
func (r *Relay) closeEndpoint(tenant string, e *bfd.Endpoint) {
	e.Close()
	delete(r.bfd, tenant)
	st := e.Stats()
	r.bfdSt.mu.Lock()
	defer r.bfdSt.mu.Unlock()
	delete(r.bfdSt.eps, tenant)
	r.bfdSt.closed[tenant] = addStats(r.bfdSt.closed[tenant], st)
}

// stats are tenant's BFD counts, of its endpoints past and present
// (under mu).
func (b *bfdState) stats(tenant string) bfd.Stats {
	st := b.closed[tenant]
	if e := b.eps[tenant]; e != nil {
		st = addStats(st, e.Stats())
	}
	return st
}

func addStats(a, b bfd.Stats) bfd.Stats {
	return bfd.Stats{Invalid: a.Invalid + b.Invalid, UnknownPeer: a.UnknownPeer + b.UnknownPeer, BadTTL: a.BadTTL + b.BadTTL,
		BadDisc: a.BadDisc + b.BadDisc, Overflow: a.Overflow + b.Overflow, Throttled: a.Throttled + b.Throttled, Late: a.Late + b.Late,
		Received: a.Received + b.Received, Sent: a.Sent + b.Sent}
}

type bfdPeer struct {
	tenant string
	peer   netip.Addr
}

type bfdHold struct{ reset, poke time.Time }

// bfdDecision is what a change of a speaker's BFD session calls for.
type bfdDecision struct {
	reset bool
	addr  netip.Addr // the session's gobgp address, to reset
	poke  bool
}

// change decides on a change of peer's BFD session at now (under mu).
// A session reset is counted here, once.
func (b *bfdState) change(tenant string, peer netip.Addr, st bfd.Status, now time.Time, hold time.Duration) bfdDecision {
	k := bfdPeer{tenant, peer}
	h := b.held[k]
	d := bfdDecision{poke: (st.State == bfd.Up || st.Prev == bfd.Up) && !now.Before(h.poke)}
	if st.State != bfd.Down || st.Prev != bfd.Up {
		return d
	}
	h.poke = now.Add(hold)
	a, ok := b.keys[tenant][peer]
	// A speaker that says AdminDown is being taken out of service on
	// purpose: its BGP session is not its BFD's to end (RFC 5882
	// section 3.2).
	if ok && st.Remote != bfd.AdminDown && b.established[a] && !now.Before(h.reset) {
		d.reset, d.addr = true, a
		h.reset = now.Add(hold)
		b.established[a] = false
		b.downs[tenant]++
	}
	b.held[k] = h
	return d
}

// bfdRebuild is how long a tenant's BFD sessions may all be down while
// one of its BGP sessions is established before its endpoint is made
// again: its namespace may have been made again (the attachment
// re-applied), leaving the sockets in the old one.
const bfdRebuild = fullResync

// syncBFD makes each attached tenant's endpoint run a session per
// speaker whose BGP session the relay has, with the tenant's timers.
func (r *Relay) syncBFD(w *world, now time.Time) {
	want := map[string]map[netip.Addr]bfd.Params{}
	keys := map[string]map[netip.Addr]netip.Addr{}
	established := map[string]bool{}
	for a, s := range r.sessions {
		t := w.tenants[s.tenant]
		if t == nil || s.key.space == "" || r.cfg.Attachments == nil {
			continue
		}
		tx, rx, mult, ok := api.TenantBFD(t.bgp)
		if !ok {
			continue
		}
		if want[s.tenant] == nil {
			want[s.tenant], keys[s.tenant] = map[netip.Addr]bfd.Params{}, map[netip.Addr]netip.Addr{}
		}
		want[s.tenant][s.key.addr] = bfd.Params{MinTx: tx, MinRx: rx, Multiplier: mult}
		keys[s.tenant][s.key.addr] = a
		if r.states[a].state == "established" {
			established[s.tenant] = true
		}
	}
	est := map[netip.Addr]bool{}
	for _, byPeer := range keys {
		for _, a := range byPeer {
			if r.states[a].state == "established" {
				est[a] = true
			}
		}
	}
	r.bfdSt.mu.Lock()
	r.bfdSt.keys, r.bfdSt.established = keys, est
	for k, h := range r.bfdSt.held {
		if _, ok := keys[k.tenant][k.peer]; !ok && now.After(h.reset) && now.After(h.poke) {
			delete(r.bfdSt.held, k)
		}
	}
	r.bfdSt.mu.Unlock()
	for tenant, e := range r.bfd {
		if _, ok := want[tenant]; !ok {
			r.closeEndpoint(tenant, e)
			delete(r.bfdAllDown, tenant)
			continue
		}
		if established[tenant] && !anyUp(e, want[tenant]) {
			if since, ok := r.bfdAllDown[tenant]; !ok {
				r.bfdAllDown[tenant] = now
			} else if now.Sub(since) >= bfdRebuild {
				r.closeEndpoint(tenant, e)
				delete(r.bfdAllDown, tenant)
			}
		} else {
			delete(r.bfdAllDown, tenant)
		}
	}
	for tenant, peers := range want {
		e := r.bfd[tenant]
		if e == nil {
			e = r.newBFD(tenant)
			r.bfd[tenant] = e
			r.bfdSt.mu.Lock()
			r.bfdSt.eps[tenant] = e
			r.bfdSt.mu.Unlock()
		}
		err := e.Set(peers)
		r.bfdSt.mu.Lock()
		if err != nil {
			r.bfdSt.errs[tenant] = err
		} else {
			delete(r.bfdSt.errs, tenant)
		}
		r.bfdSt.mu.Unlock()
		if err != nil {
			r.log.Warn("cannot run BFD for a tenant's BGP sessions", "tenant", tenant, "err", err)
		}
	}
}

func anyUp(e *bfd.Endpoint, peers map[netip.Addr]bfd.Params) bool {
	for p := range peers {
		if st, ok := e.Status(p); ok && st.State == bfd.Up {
			return true
		}
	}
	return false
}

// newBFD makes tenant's endpoint: its sockets open inside the tenant's
// namespace.
func (r *Relay) newBFD(tenant string) *bfd.Endpoint {
	att := r.cfg.Attachments
	return bfd.New(bfd.Config{
		Port: r.cfg.BFDPort, PeerPort: r.cfg.BFDPort, Logger: r.log,
		ListenPacket: func(network, address string) (net.PacketConn, error) {
			var c net.PacketConn
			err := att.InNamespace(tenant, func() (err error) {
				c, err = net.ListenPacket(network, address)
				return err
			})
			if err != nil {
				return nil, fmt.Errorf("inside %s: %w", api.AttachmentNamespace(tenant), err)
			}
			return c, nil
		},
		OnChange: func(peer netip.Addr, st bfd.Status) { r.onBFD(tenant, peer, st) },
	})
}

// onBFD is told of a change of a speaker's BFD session (on the session's
// goroutine): a session that goes Down from Up has its BGP session reset
// if the last pass read it established, unless the speaker said
// AdminDown or its last reset was less than ResetHold ago. One that is
// not established is left alone: a speaker such as BIRD makes its BFD
// session anew when its BGP session starts again (its new session says
// Down to the old one), and resetting the BGP session then would close
// it while it opens, each time gobgp dials it.
func (r *Relay) onBFD(tenant string, peer netip.Addr, st bfd.Status) {
	r.log.Debug("tenant BFD session", "tenant", tenant, "peer", peer, "state", st.State, "diag", st.Diag, "remote", st.Remote)
	r.bfdSt.mu.Lock()
	d := r.bfdSt.change(tenant, peer, st, time.Now(), r.cfg.ResetHold)
	r.bfdSt.mu.Unlock()
	if d.reset {
		go r.resetForBFD(tenant, peer, d.addr, st.Diag)
	}
	if d.poke {
		r.poke()
	}
}

// resetForBFD resets the BGP session gobgp knows as a after its BFD
// session went down for diag.
func (r *Relay) resetForBFD(tenant string, peer, a netip.Addr, diag bfd.Diag) {
	r.log.Warn("tenant BGP session reset: its BFD session went down", "tenant", tenant, "peer", peer, "diag", diag)
	r.event(tenant, fmt.Sprintf("BFD with %s went down (%s): its BGP session was reset and its routes withdrawn", peer, diag))
	if err := r.srv.ResetPeer(r.ctx, &gobgpapi.ResetPeerRequest{Address: a.String(), Communication: "BFD is down"}); err != nil && r.ctx.Err() == nil {
		r.log.Warn("cannot reset a tenant BGP session whose BFD went down", "tenant", tenant, "peer", peer, "err", err)
	}
	r.poke()
}

// observeBFD adds the BFD state of the session gobgp knows as a to sess.
func (r *Relay) observeBFD(s *session, sess *pb.TenantBGPSession) {
	e := r.bfd[s.tenant]
	if e == nil {
		return
	}
	st, ok := e.Status(s.key.addr)
	if !ok {
		r.bfdSt.mu.Lock()
		err := r.bfdSt.errs[s.tenant]
		r.bfdSt.mu.Unlock()
		if err != nil {
			sess.Bfd, sess.BfdReason = bfd.Down.String(), err.Error()
		}
		return
	}
	sess.Bfd, sess.BfdSince = st.State.String(), timestamppb.New(st.Since)
	switch {
	case st.State != bfd.Up && st.Diag != bfd.DiagNone:
		sess.BfdReason = st.Diag.String()
	case st.State == bfd.Down && st.Prev == bfd.Down:
		// Never up: no packet came that the host takes. Packets from
		// off the hosts' segment (TTL under 255) are dropped in the
		// kernel, so the host cannot tell them from none.
		sess.BfdReason = "no BFD packet taken from the speaker: BFD must run at the speaker (BIRD: bfd on) towards this host's address, and only packets that arrive with TTL 255, from the hosts' own segment, are taken"
	}
}

// closeBFD closes every endpoint.
func (r *Relay) closeBFD() {
	for tenant, e := range r.bfd {
		r.closeEndpoint(tenant, e)
	}
}
