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
	// Not parallel: gobgp's StartBgp writes package variables.
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
