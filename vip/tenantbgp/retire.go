package tenantbgp

import (
	"context"
	"fmt"
	"net/netip"
	"time"

	gobgpapi "github.com/osrg/gobgp/v4/api"
	"google.golang.org/protobuf/types/known/timestamppb"

	pb "github.com/teapot-lb/teapot-lb/api/proto/teapotv1"
)

// stateRemoving is the state of a session the speaker did not remove
// when the relay asked it to.
const stateRemoving = "removing"

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
	if err := r.srv.DisablePeer(r.ctx, &gobgpapi.DisablePeerRequest{Address: a.String(), Communication: "session deconfigured"}); err != nil && r.ctx.Err() == nil {
		r.log.Warn("cannot disable a tenant BGP peer it could not remove", "peer", s.key, "err", err)
	}
	r.retiring[a] = &retiring{s: s, err: err.Error(), since: time.Now()}
}

// retryRetiring asks the speaker again to remove each retiring session.
func (r *Relay) retryRetiring(ctx context.Context) {
	for _, a := range sortedAddrs(r.retiring) {
		old := r.retiring[a]
		err := r.deletePeer(ctx, a)
		if err == nil || ctx.Err() != nil || !r.speakerHas(ctx, a) {
			delete(r.retiring, a)
			r.log.Info("tenant BGP peer removed", "peer", old.s.key)
			continue
		}
		old.err = err.Error()
	}
}

// speakerHas reports whether gobgp has a peer at a (true when it cannot
// say).
func (r *Relay) speakerHas(ctx context.Context, a netip.Addr) bool {
	found := false
	err := r.srv.ListPeer(ctx, &gobgpapi.ListPeerRequest{Address: a.String()}, func(*gobgpapi.Peer) { found = true })
	return found || err != nil
}

// observeRetiring adds each retiring session to its tenant's
// observation.
func (r *Relay) observeRetiring(obs map[string]*pb.TenantBGPObservation) {
	for _, a := range sortedAddrs(r.retiring) {
		old := r.retiring[a]
		o := obs[old.s.tenant]
		if o == nil {
			continue
		}
		o.Sessions = append(o.Sessions, &pb.TenantBGPSession{Peer: old.s.key.addr.String(), State: stateRemoving,
			Attachment: namespaceOf(old.s.key.space), Since: timestamppb.New(old.since),
			Reason: fmt.Sprintf("the session as it was before the tenant's last change could not be removed (%s): none of its routes is installed, and its removal is tried again at every pass", old.err)})
	}
}
