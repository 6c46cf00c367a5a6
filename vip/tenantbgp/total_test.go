package tenantbgp

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"strings"
	"testing"
	"time"

	gobgpapi "github.com/osrg/gobgp/v4/api"
	"github.com/osrg/gobgp/v4/pkg/server"

	pb "github.com/teapot-lb/teapot-lb/api/proto/teapotv1"
)

// startSpeakerAt starts a tenant speaker on addr (startTenantSpeaker's,
// elsewhere on the loopback network).
func startSpeakerAt(t *testing.T, addr string, port uint16) *tenantSpeaker {
	t.Helper()
	ln, err := net.Listen("tcp", net.JoinHostPort(addr, fmt.Sprint(port)))
	if err != nil {
		// The relay dials every speaker on one port (freePort's, on
		// 127.0.0.1): one taken here is a failure of the run, not a
		// reason to pass without the test.
		t.Fatalf("port %d not free on %s: %v", port, addr, err)
	}
	ln.Close()
	srv := server.NewBgpServer()
	go srv.Serve()
	t.Cleanup(srv.Stop)
	if err := srv.StartBgp(t.Context(), &gobgpapi.StartBgpRequest{Global: &gobgpapi.Global{Asn: 64600, RouterId: addr,
		ListenPort: int32(port), ListenAddresses: []string{addr}}}); err != nil {
		t.Fatal(err)
	}
	if err := srv.AddPeer(t.Context(), &gobgpapi.AddPeerRequest{Peer: &gobgpapi.Peer{
		Conf:      &gobgpapi.PeerConf{NeighborAddress: "127.0.0.1", PeerAsn: 65001},
		Transport: &gobgpapi.Transport{PassiveMode: true},
	}}); err != nil {
		t.Fatal(err)
	}
	return &tenantSpeaker{srv: srv, port: port}
}

// The tenant's sessions together hold at most maxPrefixesTotal routes on
// a host: the session whose route goes over it is closed, with the
// reason, and its routes go; the tenant's other session, within the
// bound, keeps its own.
func TestRelayPrefixTotal(t *testing.T) {
	if ownProcess(t) {
		return
	}
	port := freePort(t)
	routes := &memRoutes{}
	r, err := New(Config{ASN: 65001, RouterID: "127.0.0.1", Routes: routes, PeerPort: port, LimitHold: time.Minute,
		HostAddrs: func() []netip.Addr { return []netip.Addr{netip.MustParseAddr("127.0.0.1")} }})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	a := startTenantSpeaker(t, "", port)
	b := startSpeakerAt(t, "127.0.0.3", port)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	go r.Run(ctx)
	// Each session at most 4, both together at most 6: a holds 4, b 2.
	for i := range 4 {
		a.path(t, fmt.Sprintf("10.244.%d.0/24", i), false)
	}
	for i := range 2 {
		b.path(t, fmt.Sprintf("10.244.%d.0/24", 10+i), false)
	}
	r.Update([]*pb.Object{{Kind: &pb.Object_Tenant{Tenant: &pb.Tenant{Name: "kube", Networks: []string{"127.0.0.2/32", "127.0.0.3/32", "10.244.0.0/16"},
		Bgp: &pb.TenantBGP{Asn: 64600, Peers: []string{"127.0.0.2", "127.0.0.3"}, MaxPrefixes: 4, MaxPrefixesTotal: 6}}}}})
	sessions := func() map[string]*pb.TenantBGPSession {
		out := map[string]*pb.TenantBGPSession{}
		for _, s := range observed(r).GetSessions() {
			out[s.GetPeer()] = s
		}
		return out
	}
	waitUntil(t, "both sessions established with their 6 routes", func() error {
		s := sessions()
		if got := len(routes.get()); got != 6 || s["127.0.0.2"].GetState() != "established" || s["127.0.0.3"].GetState() != "established" {
			return fmt.Errorf("%d installed, sessions %v", got, s)
		}
		return nil
	})
	// One more from b: within its own bound of 4, over the tenant's 6.
	b.path(t, "10.244.12.0/24", false)
	waitUntil(t, "b closed for the tenant's total, a's routes kept", func() error {
		s := sessions()
		if st := s["127.0.0.3"]; st.GetState() != "prefix-limit" || !strings.Contains(st.GetReason(), "maxPrefixesTotal (6 routes together)") {
			return fmt.Errorf("b: %v", st)
		}
		if st := s["127.0.0.2"]; st.GetState() != "established" {
			return fmt.Errorf("a: %v", st)
		}
		if got := routes.get(); len(got) != 4 {
			return fmt.Errorf("installed %v, want a's 4", got)
		}
		return nil
	})
	r.mu.Lock()
	if got := r.limits["kube"]; got != 1 {
		t.Errorf("sessions closed for their prefix count: %d, want 1", got)
	}
	r.mu.Unlock()
	r.dmu.Lock()
	if got := r.totals["kube"].n; got != 4 {
		t.Errorf("the tenant's total holds %d routes, want a's 4", got)
	}
	r.dmu.Unlock()
}
