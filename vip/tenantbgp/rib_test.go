package tenantbgp

import (
	"context"
	"fmt"
	"net/netip"
	"strings"
	"testing"
	"time"

	gobgpapi "github.com/osrg/gobgp/v4/api"
)

// Routes gobgp keeps without telling the relay (an AS path through this
// host's ASN more than 255 times: gobgp rejects it as a loop but holds it)
// still count against maxPrefixes: the pass reads gobgp's own count and
// closes the session, and its routes go.
func TestRelayHiddenRoutesCount(t *testing.T) {
	if ownProcess(t) {
		return
	}
	port := freePort(t)
	routes := &memRoutes{}
	r, err := New(Config{ASN: 65001, RouterID: "127.0.0.1", Routes: routes, PeerPort: port, LimitHold: time.Hour,
		HostAddrs: func() []netip.Addr { return []netip.Addr{netip.MustParseAddr("127.0.0.1")} }})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	sp := startTenantSpeaker(t, "", port)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	go r.Run(ctx)
	sp.path(t, "10.244.1.0/24", false)
	r.Update(kubeState(4, true))
	waitUntil(t, "the pod range installed", func() error {
		if got := routes.get(); len(got) != 1 {
			return fmt.Errorf("installed %v", got)
		}
		return nil
	})

	// gobgp counts 10 routes in the session that the events did not
	// bring (a speaker cannot be made to send such routes here: gobgp
	// and BIRD do not send a path through the receiver's ASN; so the
	// count a pass reads is given).
	r.overHeld(netip.MustParseAddr("127.0.0.2"), &gobgpapi.Peer{AfiSafis: []*gobgpapi.AfiSafi{{State: &gobgpapi.AfiSafiState{Received: 10}}}})
	waitUntil(t, "the session closed for the routes gobgp holds", func() error {
		o := observed(r)
		if len(o.GetSessions()) != 1 || o.GetSessions()[0].GetState() != "prefix-limit" {
			var held uint64
			r.srv.ListPeer(ctx, &gobgpapi.ListPeerRequest{}, func(p *gobgpapi.Peer) {
				for _, af := range p.GetAfiSafis() {
					held += af.GetState().GetReceived()
				}
			})
			return fmt.Errorf("gobgp holds %d; observed %v", held, o)
		}
		if !strings.Contains(o.GetSessions()[0].GetReason(), "maxPrefixes (4)") {
			return fmt.Errorf("reason %q", o.GetSessions()[0].GetReason())
		}
		if got := routes.get(); len(got) != 0 {
			return fmt.Errorf("installed %v", got)
		}
		return nil
	})
}
