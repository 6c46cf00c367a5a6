package tenantbgp

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/osrg/gobgp/v4/pkg/apiutil"
	"github.com/osrg/gobgp/v4/pkg/packet/bgp"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/teapot-lb/teapot-lb/api/observe"
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
	if ownProcess(t) {
		return
	}
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
	if !containsAny(events, "closed: sent route changes faster than maxUpdatesPerSecond") {
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
	if ownProcess(t) {
		return
	}
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
			!strings.Contains(o.GetSessions()[0].GetReason(), "(100 per second, bursts of 20100 route changes or 1100 UPDATE messages)") {
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

// rawSpeaker is a tenant's speaker written by hand, as a hostile tenant
// would: it listens on self, takes the relay's sessions (OPEN and
// KEEPALIVE, then announces steady) and sends the UPDATE messages it is
// given, as packed as the test makes them.
type rawSpeaker struct {
	ln   net.Listener
	mu   sync.Mutex
	conn net.Conn // the established session, nil before
}

func startRawSpeaker(t *testing.T, self string, port uint16, steady netip.Prefix) *rawSpeaker {
	t.Helper()
	ln, err := net.Listen("tcp", net.JoinHostPort(self, fmt.Sprint(port)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	s := &rawSpeaker{ln: ln}
	id := netip.MustParseAddr(self)
	open, _ := bgp.NewBGPOpenMessage(64600, 90, id, nil)
	hello := wire(t, open)
	keep := wire(t, bgp.NewBGPKeepAliveMessage())
	first := wire(t, packedUpdate(id, nil, []netip.Prefix{steady}))
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				if _, err := readBGP(c); err != nil { // the relay's OPEN
					return
				}
				if _, err := c.Write(append(append(hello, keep...), first...)); err != nil {
					return
				}
				s.mu.Lock()
				s.conn = c
				s.mu.Unlock()
				for {
					if _, err := readBGP(c); err != nil {
						return
					}
				}
			}()
		}
	}()
	return s
}

// send writes b to the established session; it reports whether there
// was one to write to.
func (s *rawSpeaker) send(b []byte) bool {
	s.mu.Lock()
	c := s.conn
	s.mu.Unlock()
	if c == nil {
		return false
	}
	_, err := c.Write(b)
	return err == nil
}

func wire(t *testing.T, m *bgp.BGPMessage) []byte {
	t.Helper()
	b, err := m.Serialize()
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// readBGP reads one BGP message from c.
func readBGP(c net.Conn) ([]byte, error) {
	h := make([]byte, bgp.BGP_HEADER_LENGTH)
	if _, err := io.ReadFull(c, h); err != nil {
		return nil, err
	}
	b := make([]byte, int(h[16])<<8|int(h[17]))
	copy(b, h)
	_, err := io.ReadFull(c, b[len(h):])
	return b, err
}

// packedUpdate is one UPDATE that withdraws gone and announces add, next
// hop nh.
func packedUpdate(nh netip.Addr, gone, add []netip.Prefix) *bgp.BGPMessage {
	nlris := func(ps []netip.Prefix) []bgp.PathNLRI {
		out := make([]bgp.PathNLRI, 0, len(ps))
		for _, p := range ps {
			n, _ := bgp.NewIPAddrPrefix(p)
			out = append(out, bgp.PathNLRI{NLRI: n})
		}
		return out
	}
	var attrs []bgp.PathAttributeInterface
	if len(add) > 0 {
		a, _ := bgp.NewPathAttributeNextHop(nh)
		attrs = []bgp.PathAttributeInterface{bgp.NewPathAttributeOrigin(bgp.BGP_ORIGIN_ATTR_TYPE_IGP),
			bgp.NewPathAttributeAsPath([]bgp.AsPathParamInterface{bgp.NewAsPathParam(bgp.BGP_ASPATH_ATTR_TYPE_SEQ, []uint16{64600})}), a}
	}
	return bgp.NewBGPUpdateMessage(nlris(gone), attrs, nlris(add))
}

// A speaker that keeps to its tenant's maxUpdatesPerSecond in messages
// but packs hundreds of prefixes into each, announced and withdrawn in
// turn, makes the host take in route changes far faster than the bound:
// its session is closed for its route changes within the burst, counted
// and dialled again after the hold, while another tenant's session on
// the same relay stays established with its route installed.
func TestRelayRouteChangesPacked(t *testing.T) {
	if ownProcess(t) {
		return
	}
	const (
		// An UPDATE every 12 ms at most (about 75 a second): its messages
		// alone keep within the bound of 100 a second.
		packed = 800 // prefixes an UPDATE announces or withdraws
		every  = 12 * time.Millisecond
	)
	port := freePort(t)
	routes := &memRoutes{}
	r, err := New(Config{ASN: 65001, RouterID: "127.0.0.1", Routes: routes, PeerPort: port, LimitHold: 2 * time.Second,
		HostAddrs: func() []netip.Addr { return []netip.Addr{netip.MustParseAddr("127.0.0.1")} }})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	calm := startTenantSpeakerAt(t, "127.0.0.3", "", port)
	loudNH, steady := netip.MustParseAddr("127.0.0.2"), netip.MustParsePrefix("10.244.200.0/24")
	loud := startRawSpeaker(t, loudNH.String(), port, steady)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	go r.Run(ctx)
	calmNH, calmRoute := netip.MustParseAddr("127.0.0.3"), netip.MustParsePrefix("10.245.1.0/24")
	nh, _ := bgp.NewPathAttributeNextHop(calmNH)
	nlri, _ := bgp.NewIPAddrPrefix(calmRoute)
	if _, err := calm.srv.AddPath(apiutil.AddPathRequest{Paths: []*apiutil.Path{{Family: bgp.RF_IPv4_UC, Nlri: nlri,
		Attrs: []bgp.PathAttributeInterface{bgp.NewPathAttributeOrigin(bgp.BGP_ORIGIN_ATTR_TYPE_IGP), nh}}}}); err != nil {
		t.Fatal(err)
	}
	// Both at the defaults: 100 per second, maxPrefixes 1,000.
	r.Update([]*pb.Object{
		{Kind: &pb.Object_Tenant{Tenant: &pb.Tenant{Name: "kube", Networks: []string{"127.0.0.2/32", "10.244.0.0/16"},
			Bgp: &pb.TenantBGP{Asn: 64600, Peers: []string{"127.0.0.2"}}}}},
		{Kind: &pb.Object_Tenant{Tenant: &pb.Tenant{Name: "calm", Networks: []string{"127.0.0.3/32", "10.245.0.0/16"},
			Bgp: &pb.TenantBGP{Asn: 64600, Peers: []string{"127.0.0.3"}}}}},
	})
	session := func(tenant string) *pb.TenantBGPSession {
		var h pb.HostObservation
		r.Observe(observe.Filter{Tenant: tenant}, &h)
		if len(h.GetTenantBgp()) == 1 && len(h.GetTenantBgp()[0].GetSessions()) == 1 {
			return h.GetTenantBgp()[0].GetSessions()[0]
		}
		return nil
	}
	calmKept := func() error {
		if s := session("calm"); s.GetState() != "established" {
			return fmt.Errorf("the other tenant's session: %v", s)
		}
		if got := routes.get()[calmRoute]; got != calmNH {
			return fmt.Errorf("the other tenant's route: %v", got)
		}
		return nil
	}
	bothUp := func() error {
		if got := routes.get(); len(got) != 2 || got[steady] != loudNH || session("kube").GetState() != "established" {
			return fmt.Errorf("installed %v, session %v", got, session("kube"))
		}
		return calmKept()
	}
	waitUntil(t, "both sessions established and their routes installed", bothUp)

	// Announce 800 /32s in one UPDATE, withdraw them in the next, again.
	var churn []netip.Prefix
	for i := range packed {
		churn = append(churn, netip.PrefixFrom(netip.AddrFrom4([4]byte{10, 244, byte(i / 250), byte(1 + i%250)}), 32))
	}
	announce, withdraw := wire(t, packedUpdate(loudNH, nil, churn)), wire(t, packedUpdate(loudNH, churn, nil))
	cpu0, start := cpuTime(), time.Now()
	sent := 0
	closed := func() bool { return session("kube").GetState() == stateUpdateLimit }
	for time.Since(start) < 5*time.Second && !closed() {
		m := announce
		if sent%2 == 1 {
			m = withdraw
		}
		if !loud.send(m) {
			break // the relay closed the session
		}
		sent++
		time.Sleep(every)
		if err := calmKept(); err != nil {
			t.Fatal(err)
		}
	}
	took := time.Since(start)
	t.Logf("sent %d route changes in %d UPDATEs in %s (%.0f UPDATEs and %.0f route changes a second); %s of CPU (relay and speakers)",
		sent*packed, sent, took.Round(time.Millisecond), float64(sent)/took.Seconds(), float64(sent*packed)/took.Seconds(), (cpuTime() - cpu0).Round(time.Millisecond))
	waitUntil(t, "the session closed for its route changes", func() error {
		if s := session("kube"); s.GetState() != stateUpdateLimit ||
			!strings.Contains(s.GetReason(), "sent route changes faster than maxUpdatesPerSecond (100 per second, bursts of 1100)") {
			return fmt.Errorf("%.0f route changes a second in %.0f UPDATEs a second: session %v",
				float64(sent*packed)/took.Seconds(), float64(sent)/took.Seconds(), s)
		}
		return calmKept()
	})
	waitUntil(t, "the session's routes gone", func() error {
		for p := range routes.get() {
			if netip.MustParsePrefix("10.244.0.0/16").Overlaps(p) {
				return fmt.Errorf("still installed: %v", p)
			}
		}
		return calmKept()
	})
	r.mu.Lock()
	if r.rateLimits["kube"] != 1 || r.rateLimits["calm"] != 0 {
		t.Errorf("sessions closed for their rate: kube %d, calm %d; want 1 and 0", r.rateLimits["kube"], r.rateLimits["calm"])
	}
	r.mu.Unlock()
	waitUntil(t, "the session back after the hold with its route", bothUp)
}

// A table packed as speakers pack it passes whole however large its
// maxPrefixes: the burst of route changes is the table, and only a
// table sent one route a message is cut at 1,000 UPDATE messages
// (TestRelayBurstBounded).
func TestRelayPackedTableWhole(t *testing.T) {
	if ownProcess(t) {
		return
	}
	const n = 5000
	port := freePort(t)
	routes := &memRoutes{}
	r, err := New(Config{ASN: 65001, RouterID: "127.0.0.1", Routes: routes, PeerPort: port, LimitHold: time.Minute,
		HostAddrs: func() []netip.Addr { return []netip.Addr{netip.MustParseAddr("127.0.0.1")} }})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	nh, steady := netip.MustParseAddr("127.0.0.2"), netip.MustParsePrefix("10.244.200.0/24")
	sp := startRawSpeaker(t, nh.String(), port, steady)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	go r.Run(ctx)
	r.Update([]*pb.Object{{Kind: &pb.Object_Tenant{Tenant: &pb.Tenant{Name: "kube", Networks: []string{"127.0.0.2/32", "10.0.0.0/8"},
		Bgp: &pb.TenantBGP{Asn: 64600, Peers: []string{"127.0.0.2"}, MaxPrefixes: 20000}}}}})
	waitUntil(t, "the session established", func() error {
		if got := routes.get(); len(got) != 1 {
			return fmt.Errorf("installed %v", got)
		}
		return nil
	})
	var table []byte
	for i := 0; i < n; i += 800 {
		var ps []netip.Prefix
		for j := i; j < min(i+800, n); j++ {
			ps = append(ps, netip.PrefixFrom(netip.AddrFrom4([4]byte{10, 1, byte(j >> 8), byte(j)}), 32))
		}
		table = append(table, wire(t, packedUpdate(nh, nil, ps))...)
	}
	if !sp.send(table) {
		t.Fatal("no session to send the table on")
	}
	waitUntil(t, "the whole table installed", func() error {
		if o := observed(r); len(o.GetSessions()) != 1 || o.GetSessions()[0].GetState() != "established" {
			return fmt.Errorf("sessions %v", o.GetSessions())
		}
		if got := len(routes.get()); got != n+1 {
			return fmt.Errorf("%d of %d routes installed", got, n+1)
		}
		return nil
	})
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.rateLimits["kube"] != 0 {
		t.Errorf("closed %d times for the rate, want 0", r.rateLimits["kube"])
	}
}
