package tenantbgp

import (
	"context"
	"fmt"
	"maps"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	gobgpapi "github.com/osrg/gobgp/v4/api"
	"github.com/osrg/gobgp/v4/pkg/apiutil"
	"github.com/osrg/gobgp/v4/pkg/packet/bgp"
	"github.com/osrg/gobgp/v4/pkg/server"

	"github.com/teapot-lb/teapot-lb/api/observe"
	"github.com/teapot-lb/teapot-lb/api/porttest"
	pb "github.com/teapot-lb/teapot-lb/api/proto/teapotv1"
)

// memRoutes is an Installer that keeps the last set.
type memRoutes struct {
	mu  sync.Mutex
	set map[netip.Prefix]netip.Addr
}

func (m *memRoutes) Set(rs map[netip.Prefix]netip.Addr) map[netip.Prefix]error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.set = maps.Clone(rs)
	return nil
}

func (m *memRoutes) Close() error { return nil }

func (m *memRoutes) get() map[netip.Prefix]netip.Addr {
	m.mu.Lock()
	defer m.mu.Unlock()
	return maps.Clone(m.set)
}

// tenantSpeaker is a real BGP speaker standing in for a tenant's BIRD: it
// listens on 127.0.0.2 and announces what it is given, next hop itself.
type tenantSpeaker struct {
	srv  *server.BgpServer
	port uint16
}

// freePort is a port free on 127.0.0.2.
func freePort(t testing.TB) uint16 {
	t.Helper()
	return uint16(porttest.Pick(t, "127.0.0.2"))
}

// startTenantSpeaker starts the speaker; the relay must exist already:
// gobgp's StartBgp writes package variables that a running server reads,
// so two servers of one process start one after the other and before
// either has work (which is also why each such test runs in a process of
// its own: ownProcess).
func startTenantSpeaker(t testing.TB, password string, port uint16) *tenantSpeaker {
	t.Helper()
	return startTenantSpeakerAt(t, "127.0.0.2", password, port)
}

// startTenantSpeakerAt is startTenantSpeaker listening on self.
func startTenantSpeakerAt(t testing.TB, self, password string, port uint16) *tenantSpeaker {
	t.Helper()
	srv := server.NewBgpServer()
	go srv.Serve()
	t.Cleanup(srv.Stop)
	ctx := t.Context()
	if err := srv.StartBgp(ctx, &gobgpapi.StartBgpRequest{Global: &gobgpapi.Global{Asn: 64600, RouterId: self,
		ListenPort: int32(port), ListenAddresses: []string{self}}}); err != nil {
		t.Fatal(err)
	}
	if err := srv.AddPeer(ctx, &gobgpapi.AddPeerRequest{Peer: &gobgpapi.Peer{
		Conf:      &gobgpapi.PeerConf{NeighborAddress: "127.0.0.1", PeerAsn: 65001, AuthPassword: password},
		Transport: &gobgpapi.Transport{PassiveMode: true},
	}}); err != nil {
		t.Fatal(err)
	}
	return &tenantSpeaker{srv: srv, port: port}
}

func (s *tenantSpeaker) path(t testing.TB, prefix string, withdraw bool) {
	t.Helper()
	nlri, err := bgp.NewIPAddrPrefix(netip.MustParsePrefix(prefix))
	if err != nil {
		t.Fatal(err)
	}
	nh, err := bgp.NewPathAttributeNextHop(netip.MustParseAddr("127.0.0.2"))
	if err != nil {
		t.Fatal(err)
	}
	p := &apiutil.Path{Family: bgp.RF_IPv4_UC, Nlri: nlri, Withdrawal: withdraw,
		Attrs: []bgp.PathAttributeInterface{bgp.NewPathAttributeOrigin(bgp.BGP_ORIGIN_ATTR_TYPE_IGP), nh}}
	if withdraw {
		err = s.srv.DeletePath(apiutil.DeletePathRequest{Paths: []*apiutil.Path{p}})
	} else {
		_, err = s.srv.AddPath(apiutil.AddPathRequest{Paths: []*apiutil.Path{p}})
	}
	if err != nil {
		t.Fatal(err)
	}
}

func kubeState(maxPrefixes uint32, withBGP bool, password ...string) []*pb.Object {
	t := &pb.Tenant{Name: "kube", Networks: []string{"127.0.0.2/32", "10.244.0.0/16"}}
	if withBGP {
		t.Bgp = &pb.TenantBGP{Asn: 64600, Peers: []string{"127.0.0.2"}, MaxPrefixes: maxPrefixes}
		if len(password) > 0 {
			t.Bgp.Password = password[0]
		}
	}
	return []*pb.Object{{Kind: &pb.Object_Tenant{Tenant: t}}}
}

func observed(r *Relay) *pb.TenantBGPObservation {
	var h pb.HostObservation
	r.Observe(observe.Filter{Tenant: "kube"}, &h)
	if len(h.TenantBgp) == 0 {
		return nil
	}
	return h.TenantBgp[0]
}

func waitUntil(t *testing.T, what string, cond func() error) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		err := cond()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("waiting for %s: %v", what, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// A real session: the relay installs what the tenant may have, drops the
// rest with the reason, closes a session over its prefix bound and dials
// it again after the hold, and forgets the tenant's routes and session
// when its bgp goes.
func TestRelaySession(t *testing.T) {
	if ownProcess(t) {
		return
	}
	port := freePort(t)
	routes := &memRoutes{}
	var evMu sync.Mutex
	var events []string
	r, err := New(Config{ASN: 65001, RouterID: "127.0.0.1", Routes: routes, PeerPort: port, LimitHold: 500 * time.Millisecond,
		HostAddrs: func() []netip.Addr { return []netip.Addr{netip.MustParseAddr("127.0.0.1")} },
		Events: func(e *pb.Event) {
			evMu.Lock()
			defer evMu.Unlock()
			events = append(events, e.GetMessage())
		}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	sp := startTenantSpeaker(t, "", port)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	go r.Run(ctx)
	sp.path(t, "10.244.1.0/24", false)
	sp.path(t, "10.99.0.0/16", false)
	r.Update(kubeState(4, true))

	pods := map[netip.Prefix]netip.Addr{netip.MustParsePrefix("10.244.1.0/24"): netip.MustParseAddr("127.0.0.2")}
	installed := func(want map[netip.Prefix]netip.Addr) func() error {
		return func() error {
			if got := routes.get(); !maps.Equal(got, want) {
				return fmt.Errorf("installed %v", got)
			}
			return nil
		}
	}
	waitUntil(t, "the pod range installed", installed(pods))
	waitUntil(t, "the foreign range dropped", func() error {
		o := observed(r)
		if o == nil || len(o.GetDropped()) != 1 || o.GetDropped()[0].GetPrefix() != "10.99.0.0/16" || o.GetDropped()[0].GetReason() != ReasonOutside {
			return fmt.Errorf("observed %v", o)
		}
		if len(o.GetSessions()) != 1 || o.GetSessions()[0].GetState() != "established" || o.GetAcceptedCount() != 1 {
			return fmt.Errorf("observed %v", o)
		}
		return nil
	})
	evMu.Lock()
	if len(events) != 1 || !strings.Contains(events[0], "10.99.0.0/16") || !strings.Contains(events[0], ReasonOutside) {
		t.Errorf("events %q", events)
	}
	evMu.Unlock()

	// Three more: five in all, over the bound of four.
	for i := range 3 {
		sp.path(t, fmt.Sprintf("10.244.%d.0/24", 10+i), false)
	}
	waitUntil(t, "the session closed and its routes gone", func() error {
		o := observed(r)
		if len(o.GetSessions()) != 1 || o.GetSessions()[0].GetState() != "prefix-limit" {
			return fmt.Errorf("observed %v", o)
		}
		if !strings.Contains(o.GetSessions()[0].GetReason(), "maxPrefixes (4)") {
			return fmt.Errorf("reason %q", o.GetSessions()[0].GetReason())
		}
		return installed(map[netip.Prefix]netip.Addr{})()
	})
	for i := range 3 {
		sp.path(t, fmt.Sprintf("10.244.%d.0/24", 10+i), true)
	}
	waitUntil(t, "the session back after the hold", installed(pods))

	r.Update(kubeState(4, false))
	waitUntil(t, "the routes gone with the tenant's bgp", installed(map[netip.Prefix]netip.Addr{}))
	if o := observed(r); o != nil {
		t.Errorf("a tenant without bgp observed: %v", o)
	}
}

// A host without a bgp: section says so for each tenant with BGP.
func TestRelayWithoutSpeaker(t *testing.T) {
	t.Parallel()
	r, err := New(Config{})
	if err != nil {
		t.Fatal(err)
	}
	r.Update(kubeState(0, true))
	if o := observed(r); o.GetProblem() != NoSpeaker {
		t.Errorf("observed %v", o)
	}
	r.Run(context.Background()) // returns at once
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
}

// The tenant's password signs the sessions (TCP MD5): a speaker with
// another password gets no session and no route in; with the same one,
// it does.
func TestRelayPassword(t *testing.T) {
	if ownProcess(t) {
		return
	}
	port := freePort(t)
	routes := &memRoutes{}
	r, err := New(Config{ASN: 65001, RouterID: "127.0.0.1", Routes: routes, PeerPort: port,
		HostAddrs: func() []netip.Addr { return []netip.Addr{netip.MustParseAddr("127.0.0.1")} }})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	sp := startTenantSpeaker(t, "s3cret", port)
	sp.path(t, "10.244.1.0/24", false)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	go r.Run(ctx)
	r.Update(kubeState(0, true, "wrong"))
	// Long enough for the first dials (the first within 2s, then every 3s).
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		if o := observed(r); len(o.GetSessions()) == 1 && o.GetSessions()[0].GetState() == "established" {
			t.Fatal("a session was established with the wrong password")
		}
		if len(routes.get()) > 0 {
			t.Fatalf("routes installed with the wrong password: %v", routes.get())
		}
		time.Sleep(50 * time.Millisecond)
	}
	r.Update(kubeState(0, true, "s3cret"))
	waitUntil(t, "the route over a signed session", func() error {
		if got := routes.get(); len(got) != 1 {
			return fmt.Errorf("installed %v", got)
		}
		return nil
	})
}
