package tenantbgp

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net/netip"
	"strings"
	"sync/atomic"
	"testing"

	gobgpapi "github.com/osrg/gobgp/v4/api"

	"github.com/teapot-lb/teapot-lb/api/observe"
	"google.golang.org/protobuf/proto"

	pb "github.com/teapot-lb/teapot-lb/api/proto/teapotv1"
)

// gobgpHas reports whether the relay's speaker has a peer at a.
func gobgpHas(t *testing.T, r *Relay, a string) bool {
	t.Helper()
	found := false
	if err := r.srv.ListPeer(t.Context(), &gobgpapi.ListPeerRequest{Address: a}, func(*gobgpapi.Peer) { found = true }); err != nil {
		t.Fatal(err)
	}
	return found
}

// A session gobgp does not remove when the relay asks (the removal made
// to fail here) has its routes installed nowhere until it is gone: the
// tenant moved into an attachment, whose rules accept its old session's
// route, but that session is of the host's table. It shows as removing,
// with the error, and goes at the first pass that removes it. And a
// session gobgp no longer has when the relay removes it (gobgp answers
// "can't delete a peer configuration") is gone: the relay makes the new
// one, instead of keeping the old one under its old settings and asking
// gobgp to remove it at every pass.
func TestRelayPeerNotRemoved(t *testing.T) {
	if ownProcess(t) {
		return
	}
	port := freePort(t)
	routes, inside := &memRoutes{}, &memRoutes{}
	r, err := New(Config{ASN: 65001, RouterID: "127.0.0.1", Routes: routes, PeerPort: port, NodeID: "lb1",
		Attachments: pairs{}, SpaceRoutes: func(string) Installer { return inside },
		HostAddrs: func() []netip.Addr { return []netip.Addr{netip.MustParseAddr("127.0.0.1")} }})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	var refuse atomic.Bool
	remove := r.deletePeer
	r.deletePeer = func(ctx context.Context, a netip.Addr) error {
		if refuse.Load() {
			return errors.New("refused by the test")
		}
		return remove(ctx, a)
	}
	sp := startTenantSpeaker(t, "", port)
	sp.path(t, "10.244.1.0/24", false)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	go r.Run(ctx)
	r.Update(kubeState(0, true))
	pods := map[netip.Prefix]netip.Addr{netip.MustParsePrefix("10.244.1.0/24"): netip.MustParseAddr("127.0.0.2")}
	waitUntil(t, "the pod range installed in the host's table", func() error {
		if got := routes.get(); !maps.Equal(got, pods) {
			return fmt.Errorf("installed %v", got)
		}
		return nil
	})

	refuse.Store(true)
	attached := &pb.Tenant{Name: "kube", Networks: []string{"127.0.0.2/32", "10.244.0.0/16", "10.0.0.0/24"},
		Attachment: &pb.TenantAttachment{Vxlan: &pb.AttachmentVXLAN{Vni: 100, Remotes: []string{"203.0.113.2"}}, Hosts: map[string]string{"lb1": "10.0.0.2/24"}},
		Bgp:        &pb.TenantBGP{Asn: 64600, Peers: []string{"10.0.0.10"}}}
	r.Update([]*pb.Object{{Kind: &pb.Object_Tenant{Tenant: attached}}})
	waitUntil(t, "the old session removing, its route installed nowhere", func() error {
		if got := routes.get(); len(got) != 0 {
			return fmt.Errorf("the host's table has %v", got)
		}
		if got := inside.get(); len(got) != 0 {
			return fmt.Errorf("the namespace has %v", got)
		}
		o := observed(r)
		for _, s := range o.GetSessions() {
			if s.GetPeer() == "127.0.0.2" && s.GetState() == stateRemoving && strings.Contains(s.GetReason(), "refused by the test") &&
				s.GetSince() != nil && s.GetAttachment() == "" {
				return nil
			}
		}
		return fmt.Errorf("observed %v", o)
	})
	var held *gobgpapi.Peer
	if err := r.srv.ListPeer(t.Context(), &gobgpapi.ListPeerRequest{Address: "127.0.0.2"}, func(p *gobgpapi.Peer) { held = p }); err != nil || held == nil {
		t.Fatalf("gobgp lost the peer the relay could not remove (%v)", err)
	}
	if held.GetState().GetAdminState() != gobgpapi.PeerState_ADMIN_STATE_DOWN {
		t.Errorf("the peer the relay could not remove is not disabled: %v", held.GetState())
	}

	refuse.Store(false)
	waitUntil(t, "the old session removed", func() error {
		if gobgpHas(t, r, "127.0.0.2") {
			return errors.New("gobgp still has 127.0.0.2")
		}
		o := observed(r)
		if ss := o.GetSessions(); len(ss) != 1 || ss[0].GetPeer() != "10.0.0.10" || ss[0].GetAttachment() != "teapot-att-kube" {
			return fmt.Errorf("observed %v", o)
		}
		return nil
	})
	if got := routes.get(); len(got) != 0 {
		t.Errorf("the host's table has %v", got)
	}

	// gobgp loses the attached session's peer (its tunnel's loopback
	// address); the tenant's maxPrefixes changes, so the relay removes
	// the session and makes it again.
	var tunnel string
	if err := r.srv.ListPeer(t.Context(), &gobgpapi.ListPeerRequest{}, func(p *gobgpapi.Peer) { tunnel = p.GetConf().GetNeighborAddress() }); err != nil || tunnel == "" {
		t.Fatalf("gobgp's peers: %q, %v", tunnel, err)
	}
	if err := r.srv.DeletePeer(t.Context(), &gobgpapi.DeletePeerRequest{Address: tunnel}); err != nil {
		t.Fatal(err)
	}
	// A new object, as the store hands out: the relay still reads the
	// one it was given.
	attached = proto.Clone(attached).(*pb.Tenant)
	attached.Bgp.MaxPrefixes = 500
	r.Update([]*pb.Object{{Kind: &pb.Object_Tenant{Tenant: attached}}})
	waitUntil(t, "the attached session made again", func() error {
		if !gobgpHas(t, r, tunnel) {
			return fmt.Errorf("gobgp has no peer at %s", tunnel)
		}
		if o := observed(r); len(o.GetSessions()) != 1 || o.GetSessions()[0].GetState() == stateRemoving {
			return fmt.Errorf("observed %v", o)
		}
		return nil
	})
}

// A session of tenant kube to 127.0.0.2 that gobgp does not remove keeps
// tenant other's speaker at the same address from being dialled until
// it is gone: other's observation says so (a session waiting, naming the
// old session, its error and since when) and shows the old session
// removing, kube being gone. Once gobgp removes it, other's session is
// made.
func TestRelayRetiringSessionBlocksOtherTenant(t *testing.T) {
	// Not parallel: gobgp's StartBgp writes package variables.
	port := freePort(t)
	r, err := New(Config{ASN: 65001, RouterID: "127.0.0.1", Routes: &memRoutes{}, PeerPort: port, NodeID: "lb1",
		HostAddrs: func() []netip.Addr { return []netip.Addr{netip.MustParseAddr("127.0.0.1")} }})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	var refuse atomic.Bool
	remove := r.deletePeer
	r.deletePeer = func(ctx context.Context, a netip.Addr) error {
		if refuse.Load() {
			return errors.New("refused by the test")
		}
		return remove(ctx, a)
	}
	ctx := t.Context()
	r.Update(kubeState(0, true))
	r.pass(ctx)
	if o := observed(r); len(o.GetSessions()) != 1 {
		t.Fatalf("kube observed %v", o)
	}
	refuse.Store(true)
	other := &pb.Tenant{Name: "other", Networks: []string{"127.0.0.2/32", "10.245.0.0/16"},
		Bgp: &pb.TenantBGP{Asn: 64601, Peers: []string{"127.0.0.2"}}}
	r.Update([]*pb.Object{{Kind: &pb.Object_Tenant{Tenant: other}}})
	for range 2 {
		r.pass(ctx)
	}
	if len(r.retiring) != 1 || r.sessions[netip.MustParseAddr("127.0.0.2")] != nil {
		t.Fatalf("retiring %v, sessions %v", r.retiring, r.sessions)
	}
	obsOther := func() *pb.TenantBGPObservation {
		var h pb.HostObservation
		r.Observe(observe.Filter{Tenant: "other"}, &h)
		if len(h.TenantBgp) != 1 {
			t.Fatalf("observed %v", h.TenantBgp)
		}
		return h.TenantBgp[0]
	}
	states := map[string]*pb.TenantBGPSession{}
	for _, s := range obsOther().GetSessions() {
		states[s.GetState()] = s
	}
	w := states[stateWaiting]
	if w == nil || w.GetPeer() != "127.0.0.2" || w.GetSince() == nil ||
		!strings.Contains(w.GetReason(), "refused by the test") || !strings.Contains(w.GetReason(), "tenant kube") {
		t.Errorf("other's speaker not observed waiting for kube's old session: %v", obsOther())
	}
	if old := states[stateRemoving]; old == nil || old.GetPeer() != "127.0.0.2" || !strings.Contains(old.GetReason(), "tenant kube was removed") {
		t.Errorf("kube's old session not observed as removing under other: %v", obsOther())
	}

	refuse.Store(false)
	r.pass(ctx)
	ss := obsOther().GetSessions()
	if len(r.retiring) != 0 || len(ss) != 1 || ss[0].GetState() == stateWaiting || ss[0].GetState() == stateRemoving {
		t.Errorf("other's session not made once kube's was removed: retiring %v, observed %v", r.retiring, ss)
	}
	if !gobgpHas(t, r, "127.0.0.2") {
		t.Error("gobgp has no peer for other's speaker")
	}
}

// A session gobgp did not remove, and did not disable when the relay
// asked, is disabled at a later pass.
func TestRelayRetiringDisabledAgain(t *testing.T) {
	// Not parallel: gobgp's StartBgp writes package variables.
	port := freePort(t)
	r, err := New(Config{ASN: 65001, RouterID: "127.0.0.1", Routes: &memRoutes{}, PeerPort: port, NodeID: "lb1",
		HostAddrs: func() []netip.Addr { return []netip.Addr{netip.MustParseAddr("127.0.0.1")} }})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	var refuseDisable atomic.Bool
	r.deletePeer = func(context.Context, netip.Addr) error { return errors.New("refused by the test") }
	disable := r.disablePeer
	r.disablePeer = func(ctx context.Context, a netip.Addr) error {
		if refuseDisable.Load() {
			return errors.New("disable refused by the test")
		}
		return disable(ctx, a)
	}
	ctx := t.Context()
	r.Update(kubeState(0, true))
	r.pass(ctx)
	admin := func() gobgpapi.PeerState_AdminState {
		var held *gobgpapi.Peer
		if err := r.srv.ListPeer(ctx, &gobgpapi.ListPeerRequest{Address: "127.0.0.2"}, func(p *gobgpapi.Peer) { held = p }); err != nil || held == nil {
			t.Fatalf("gobgp has no peer 127.0.0.2 (%v)", err)
		}
		return held.GetState().GetAdminState()
	}
	refuseDisable.Store(true)
	r.Update(kubeState(0, true, "a new password"))
	r.pass(ctx)
	if len(r.retiring) != 1 {
		t.Fatalf("retiring %v", r.retiring)
	}
	if got := admin(); got == gobgpapi.PeerState_ADMIN_STATE_DOWN {
		t.Fatalf("disabled though the test refused it: %v", got)
	}
	refuseDisable.Store(false)
	r.pass(ctx)
	// gobgp's session goroutine applies a DisablePeer after the call
	// returns.
	waitUntil(t, "the session gobgp did not remove disabled at the next pass", func() error {
		if got := admin(); got != gobgpapi.PeerState_ADMIN_STATE_DOWN {
			return fmt.Errorf("admin state %v", got)
		}
		return nil
	})
}
