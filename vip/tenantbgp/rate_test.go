package tenantbgp

import (
	"context"
	"fmt"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/osrg/gobgp/v4/pkg/apiutil"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	pb "github.com/teapot-lb/teapot-lb/api/proto/teapotv1"
)

func TestUpdateBucket(t *testing.T) {
	t.Parallel()
	t0 := time.Unix(1000, 0)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	// 10 per second, bursts of 30.
	tests := []struct {
		name  string
		reads []struct {
			count uint64
			ms    int
		}
		over bool // at the last read
	}{
		{"a whole table at once", []struct {
			count uint64
			ms    int
		}{{130, 0}}, false},
		{"one over the burst", []struct {
			count uint64
			ms    int
		}{{131, 0}}, true},
		{"the rate, for long", []struct {
			count uint64
			ms    int
		}{{130, 0}, {150, 2000}, {170, 4000}, {190, 6000}, {210, 8000}}, false},
		{"twice the rate", []struct {
			count uint64
			ms    int
		}{{120, 0}, {140, 1000}, {160, 2000}, {180, 3000}, {200, 4000}}, true},
		{"refilled no further than the burst", []struct {
			count uint64
			ms    int
		}{{100, 0}, {100, 60000}, {131, 60001}}, true},
		{"a new session starts again", []struct {
			count uint64
			ms    int
		}{{130, 0}, {5, 10}, {35, 20}}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			b := newBucket(100, t0, 30)
			var over bool
			for _, rd := range tt.reads {
				over = b.take(rd.count, at(rd.ms), 10, 30)
			}
			if over != tt.over {
				t.Fatalf("over %v, want %v (tokens %.1f)", over, tt.over, b.tokens)
			}
		})
	}
}

// A speaker that flaps a route faster than its tenant's
// maxUpdatesPerSecond has its session closed (its routes go), counted and
// reported, and dialled again after the hold; one that keeps to its rate
// keeps its session.
func TestRelayUpdateRate(t *testing.T) {
	// Not parallel: gobgp's StartBgp writes package variables, which
	// two servers starting at once race on.
	port := freePort(t)
	routes := &memRoutes{}
	var evMu sync.Mutex
	var events []string
	r, err := New(Config{ASN: 65001, RouterID: "127.0.0.1", Routes: routes, PeerPort: port, LimitHold: time.Second,
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
	state := kubeState(4, true)
	state[0].GetTenant().Bgp.MaxUpdatesPerSecond = 10 // bursts of 14
	r.Update(state)
	session := func() *pb.TenantBGPSession {
		if o := observed(r); len(o.GetSessions()) == 1 {
			return o.GetSessions()[0]
		}
		return nil
	}
	waitUntil(t, "the pod range installed", func() error {
		if got := routes.get(); len(got) != 1 || session().GetState() != "established" {
			return fmt.Errorf("installed %v, session %v", got, session())
		}
		return nil
	})

	// Within the rate: an UPDATE every 250 ms for 3 s.
	for i := range 12 {
		sp.path(t, "10.244.2.0/24", i%2 == 1)
		time.Sleep(250 * time.Millisecond)
		if s := session(); s.GetState() != "established" {
			t.Fatalf("a session within its rate: %v", s)
		}
	}

	// A flap: far over 10 per second.
	stop := make(chan struct{})
	flapped := make(chan int)
	go func() {
		n := 0
		defer func() { flapped <- n }()
		for {
			select {
			case <-stop:
				return
			default:
			}
			sp.path(t, "10.244.3.0/24", n%2 == 1)
			n++
			time.Sleep(2 * time.Millisecond)
		}
	}()
	waitUntil(t, "the flapping session closed and its routes gone", func() error {
		s := session()
		if s.GetState() != stateUpdateLimit || !strings.Contains(s.GetReason(), "maxUpdatesPerSecond (10 per second, bursts of 14)") {
			return fmt.Errorf("session %v", s)
		}
		if got := routes.get(); len(got) != 0 {
			return fmt.Errorf("installed %v", got)
		}
		return nil
	})
	close(stop)
	t.Logf("the speaker sent %d flapping updates", <-flapped)
	r.mu.Lock()
	if got := r.rateLimits["kube"]; got != 1 {
		t.Errorf("sessions closed for their update rate: %d, want 1", got)
	}
	r.mu.Unlock()
	if n, err := testutil.GatherAndCount(registry(r), "teapot_lb_tenant_bgp_update_limit_total"); err != nil || n != 1 {
		t.Errorf("update limit metric: %d series, %v", n, err)
	}
	evMu.Lock()
	if !containsAny(events, "closed: sent UPDATE messages faster than maxUpdatesPerSecond") {
		t.Errorf("events %q", events)
	}
	evMu.Unlock()
	sp.path(t, "10.244.3.0/24", true)
	waitUntil(t, "the session back after the hold", func() error {
		if got := routes.get(); len(got) != 1 || session().GetState() != "established" {
			return fmt.Errorf("installed %v, session %v", got, session())
		}
		return nil
	})
}

func registry(r *Relay) *prometheus.Registry {
	reg := prometheus.NewRegistry()
	reg.MustRegister(r.Collector())
	return reg
}

func containsAny(ss []string, sub string) bool {
	for _, s := range ss {
		if strings.Contains(s, sub) {
			return true
		}
	}
	return false
}

// A table sent one route a message at line rate is cut at the burst
// (maxPrefixes, at most 1,000 more than the rate), not taken in whole:
// with maxPrefixes 20,000 the session of a speaker that sends 3,000 at
// once is closed for its update rate, and nothing of it stays installed.
func TestRelayBurstBounded(t *testing.T) {
	// Not parallel: gobgp's StartBgp writes package variables, which
	// two servers starting at once race on.
	const n = 3000
	port := freePort(t)
	routes := &memRoutes{}
	r, err := New(Config{ASN: 65001, RouterID: "127.0.0.1", Routes: routes, PeerPort: port, LimitHold: time.Minute,
		HostAddrs: func() []netip.Addr { return []netip.Addr{netip.MustParseAddr("127.0.0.1")} }})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	sp := startTenantSpeaker(t, "", port)
	if _, err := sp.srv.AddPath(apiutil.AddPathRequest{Paths: oneRouteAMessage(n)}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	go r.Run(ctx)
	tn := &pb.Tenant{Name: "kube", Networks: []string{"127.0.0.2/32", "10.0.0.0/8"},
		Bgp: &pb.TenantBGP{Asn: 64600, Peers: []string{"127.0.0.2"}, MaxPrefixes: 20000}}
	r.Update([]*pb.Object{{Kind: &pb.Object_Tenant{Tenant: tn}}})
	waitUntil(t, "the session closed for its update rate", func() error {
		o := observed(r)
		if len(o.GetSessions()) != 1 || o.GetSessions()[0].GetState() != stateUpdateLimit ||
			!strings.Contains(o.GetSessions()[0].GetReason(), "(100 per second, bursts of 1100)") {
			return fmt.Errorf("sessions %v, %d routes accepted", o.GetSessions(), o.GetAcceptedCount())
		}
		if got := len(routes.get()); got != 0 {
			return fmt.Errorf("%d routes installed", got)
		}
		return nil
	})
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.rateLimits["kube"] != 1 || r.limits["kube"] != 0 {
		t.Errorf("closed %d times for the rate and %d for the prefix count, want 1 and 0", r.rateLimits["kube"], r.limits["kube"])
	}
}
