package tenantbgp

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"time"

	gobgpapi "github.com/osrg/gobgp/v4/api"
	"google.golang.org/protobuf/types/known/timestamppb"

	pb "github.com/teapot-lb/teapot-lb/api/proto/teapotv1"
)

// stateRemoving is the state of a session the speaker did not remove
// when the relay asked it to, and stateWaiting that of a tenant's
// speaker whose session waits for such a session to the same address to
// be gone.
const (
	stateRemoving = "removing"
	stateWaiting  = "waiting"
)

// retiring is a session the speaker did not remove: the relay disables
// it, asks again at every pass, and until it is gone its routes are
// installed nowhere
// (they would be judged by the tenant's rules of now but belong to the
// session of before: another space, password or tenant), its address is
// not given to another session, and a new session to the same speaker
// in the host's table waits for it.
type retiring struct {
	s     *session
	err   string
	since time.Time
}

// forget drops the relay's session a (gobgp no longer has it): its
// tunnel, its mirror (whose routes leave the tenant's total) and its
// state. The next pass's judging drops its routes (judgeSessions).
func (r *Relay) forget(a netip.Addr, s *session) {
	if s.tun != nil {
		s.tun.close()
	}
	delete(r.peers, a)
	delete(r.sessions, a)
	r.dmu.Lock()
	if rb := r.ribs[a]; rb != nil {
		rb.reset()
	}
	delete(r.ribs, a)
	r.dmu.Unlock()
	delete(r.states, a)
	delete(r.limitSince, a)
	delete(r.buckets, a)
	delete(r.rateLimited, a)
}

// retire forgets session a as a session but keeps it as retiring, after
// the speaker failed to remove it with err. It asks the speaker to
// disable it meanwhile (gobgp then sends a Cease, drops the routes it
// holds and dials it no more): the relay no longer counts its routes
// against the tenant's bounds.
func (r *Relay) retire(a netip.Addr, s *session, err error) {
	r.log.Warn("cannot remove a tenant BGP peer; its routes are installed nowhere until it is removed, tried again at every pass", "peer", s.key, "err", err)
	r.forget(a, s)
	r.disable(r.ctx, a, s)
	r.retiring[a] = &retiring{s: s, err: err.Error(), since: time.Now()}
}

// disable asks the speaker to disable session a, and logs why it did not.
func (r *Relay) disable(ctx context.Context, a netip.Addr, s *session) {
	if err := r.disablePeer(ctx, a); err != nil && ctx.Err() == nil {
		r.log.Warn("cannot disable a tenant BGP peer it could not remove; tried again at every pass", "peer", s.key, "err", err)
	}
}

// retryRetiring asks the speaker again to remove each retiring session,
// and to disable one it has not disabled (gobgp reports a peer's admin
// state: an earlier DisablePeer may have failed).
func (r *Relay) retryRetiring(ctx context.Context) {
	for _, a := range sortedAddrs(r.retiring) {
		old := r.retiring[a]
		err := r.deletePeer(ctx, a)
		if err == nil || ctx.Err() != nil {
			delete(r.retiring, a)
			r.log.Info("tenant BGP peer removed", "peer", old.s.key)
			continue
		}
		has, down := r.speakerPeer(ctx, a)
		if !has {
			delete(r.retiring, a)
			r.log.Info("tenant BGP peer removed", "peer", old.s.key)
			continue
		}
		old.err = err.Error()
		if !down {
			r.disable(ctx, a, old.s)
		}
	}
}

// speakerHas reports whether gobgp has a peer at a (true when it cannot
// say).
func (r *Relay) speakerHas(ctx context.Context, a netip.Addr) bool {
	has, _ := r.speakerPeer(ctx, a)
	return has
}

// speakerPeer reports whether gobgp has a peer at a and whether it is
// disabled (true and true when it cannot say).
func (r *Relay) speakerPeer(ctx context.Context, a netip.Addr) (has, down bool) {
	found, disabled := false, false
	err := r.srv.ListPeer(ctx, &gobgpapi.ListPeerRequest{Address: a.String()}, func(p *gobgpapi.Peer) {
		found = true
		disabled = p.GetState().GetAdminState() == gobgpapi.PeerState_ADMIN_STATE_DOWN
	})
	if err != nil {
		return true, true
	}
	return found, disabled
}

// observeRetiring adds each retiring session to its tenant's
// observation, or, when that tenant is gone, to that of the tenant whose
// speaker it now is; and to the observation of each tenant whose speaker
// of the host's table waits for a retiring session to its address, a
// session waiting, which says for which.
func (r *Relay) observeRetiring(w *world, obs map[string]*pb.TenantBGPObservation) {
	for _, a := range sortedAddrs(r.retiring) {
		old := r.retiring[a]
		whose := "the tenant's last change"
		o := obs[old.s.tenant]
		if o == nil {
			o = obs[w.peers[old.s.key]]
			whose = fmt.Sprintf("tenant %s was removed", old.s.tenant)
		}
		if o == nil {
			continue
		}
		o.Sessions = append(o.Sessions, &pb.TenantBGPSession{Peer: old.s.key.addr.String(), State: stateRemoving,
			Attachment: namespaceOf(old.s.key.space), Since: timestamppb.New(old.since),
			Reason: fmt.Sprintf("the session as it was before %s could not be removed (%s): none of its routes is installed, and its removal is tried again at every pass", whose, old.err)})
	}
	for _, k := range sortedPeerKeys(w.peers) {
		old := r.retiring[k.addr]
		if k.space != "" || old == nil || r.sessions[k.addr] != nil {
			continue
		}
		o := obs[w.peers[k]]
		if o == nil {
			continue
		}
		o.Sessions = append(o.Sessions, &pb.TenantBGPSession{Peer: k.addr.String(), State: stateWaiting, Since: timestamppb.New(old.since),
			Reason: fmt.Sprintf("not dialled until the session to %s of tenant %s as it was before is removed: the BGP speaker did not remove it (%s), and it is asked again at every pass", old.s.key, old.s.tenant, old.err)})
	}
}

// sortedPeerKeys are the keys of m in order.
func sortedPeerKeys[V any](m map[peerKey]V) []peerKey {
	out := make([]peerKey, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.SortFunc(out, cmpKeys)
	return out
}
