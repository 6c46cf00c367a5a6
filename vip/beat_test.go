package vip

import (
	"log/slog"
	"net"
	"net/netip"
	"testing"
	"time"
)

// beatPair is a sender on one loopback socket and a reader on another.
func beatPair(t *testing.T) (*Manager, *net.UDPConn) {
	t.Helper()
	listen := func() *net.UDPConn {
		c, err := net.ListenUDP("udp", net.UDPAddrFromAddrPort(netip.MustParseAddrPort("127.0.0.1:0")))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}
	m := &Manager{log: slog.New(slog.DiscardHandler), cfg: Config{NodeID: "n1", HeartbeatInterval: 5 * time.Millisecond}}
	m.conn = listen()
	m.beats = newBeatSender(m)
	m.epoch = time.Now()
	m.arrivals.Store(&map[string]*peerArrival{})
	return m, listen()
}

func testPlan(now time.Time, to netip.AddrPort) *beatPlan {
	return &beatPlan{
		hb: heartbeat{ID: "n1", Incarnation: 7, Revision: 3, Eligible: true, Holdings: true,
			Sightings: []sighting{{ID: "n2", Eligible: true}, {ID: "n3"}},
			Holding:   []netip.Addr{netip.MustParseAddr("192.0.2.200")},
			NotReady:  []netip.Addr{netip.MustParseAddr("2001:db8::200")}},
		heard:   []time.Time{now.Add(-5 * time.Millisecond), now.Add(-7 * time.Millisecond)},
		since:   []time.Time{now.Add(-2 * time.Second), now.Add(-10 * time.Millisecond)},
		arrived: []*peerArrival{nil, nil},
		to:      []beatDest{{id: "n2", addr: to, withHolding: true}, {id: "n3", addr: to}},
		key:     testKey, built: now, stale: time.Minute, pause: time.Minute, settle: time.Second,
	}
}

// TestBeatSenderAllocatesNothing: once warmed up, sending a heartbeat to
// every peer produces no garbage; what arrives is a valid heartbeat with
// the ages of the moment of sending.
func TestBeatSenderAllocatesNothing(t *testing.T) {
	m, rx := beatPair(t)
	now := time.Now()
	to := rx.LocalAddr().(*net.UDPAddr).AddrPort()
	m.beats.plan.Store(testPlan(now, to))
	m.beats.send(now)
	buf := make([]byte, maxDatagram+1)
	read := func() *heartbeat {
		t.Helper()
		_ = rx.SetReadDeadline(time.Now().Add(5 * time.Second))
		n, err := rx.Read(buf)
		if err != nil {
			t.Fatal(err)
		}
		hb, err := parseHeartbeat(buf[:n], testKey)
		if err != nil {
			t.Fatal(err)
		}
		return hb
	}
	full, plain := read(), read()
	if full.Seq != 1 || !full.HoldingSent || len(full.Holding) != 1 || plain.HoldingSent {
		t.Fatalf("first datagrams: %+v / %+v", full, plain)
	}
	s := full.Sightings
	if len(s) != 2 || s[0].Age != 5*time.Millisecond || !s[0].Settled || s[1].Settled || s[1].AliveFor != 10*time.Millisecond {
		t.Fatalf("sightings %+v", s)
	}
	allocs := testing.AllocsPerRun(200, func() { m.beats.send(now) })
	if allocs != 0 {
		t.Errorf("send allocates %v times per call, want 0", allocs)
	}
	// With the partly ready addresses and the tenant sets, to a peer that
	// reads them.
	p := testPlan(now, to)
	a := netip.MustParseAddr("10.0.0.100")
	p.hb.ReadsPartly, p.hb.PartlySent, p.hb.Partly = true, true, []netip.Addr{a}
	p.hb.ReadsTenants, p.hb.TenantsSent, p.hb.Tenants = true, true, []tenantSet{mustSet(a, []string{"ta", "tb"}, "tb")}
	p.hb.NotReady = []netip.Addr{a}
	p.to = []beatDest{{id: "n2", addr: to, withHolding: true, withPartly: true, withTenants: true}}
	m.beats.plan.Store(p)
	for { // what the runs above sent
		_ = rx.SetReadDeadline(time.Now().Add(50 * time.Millisecond))
		if _, err := rx.Read(buf); err != nil {
			break
		}
	}
	m.beats.send(now)
	if hb := read(); !hb.TenantsSent || len(hb.Tenants) != 1 || !hb.Tenants[0].equal(p.hb.Tenants[0]) {
		t.Fatalf("with tenant sets: %+v", hb)
	}
	if allocs := testing.AllocsPerRun(200, func() { m.beats.send(now) }); allocs != 0 {
		t.Errorf("with tenant sets, send allocates %v times per call, want 0", allocs)
	}
}

// TestBeatSenderSkipsAStalePlan: a loop stuck for longer than the bound
// falls silent.
func TestBeatSenderSkipsAStalePlan(t *testing.T) {
	m, rx := beatPair(t)
	now := time.Now()
	p := testPlan(now, rx.LocalAddr().(*net.UDPAddr).AddrPort())
	p.stale = 100 * time.Millisecond
	m.beats.plan.Store(p)
	m.beats.send(now.Add(150 * time.Millisecond))
	_ = rx.SetReadDeadline(time.Now().Add(200 * time.Millisecond))
	if _, err := rx.Read(make([]byte, maxDatagram)); err == nil {
		t.Fatal("a plan older than its bound was sent: a stuck loop must fall silent")
	}
}

// TestBeatSenderRidesOutALaggingLoopNotAPause: on a busy machine the loop
// may plan late while the heartbeat thread sends on time; its last plan
// keeps going out. After the whole process was stopped, the plan from
// before the pause is not sent (the peers may have taken this host's VIPs
// meanwhile); the loop's next plan is.
func TestBeatSenderRidesOutALaggingLoopNotAPause(t *testing.T) {
	m, rx := beatPair(t)
	t0 := time.Now()
	p := testPlan(t0, rx.LocalAddr().(*net.UDPAddr).AddrPort())
	p.stale, p.pause = 500*time.Millisecond, 80*time.Millisecond
	m.beats.plan.Store(p)
	buf := make([]byte, maxDatagram+1)
	got := func() uint64 {
		t.Helper()
		_ = rx.SetReadDeadline(time.Now().Add(100 * time.Millisecond))
		n, err := rx.Read(buf)
		if err != nil {
			return 0
		}
		hb, err := parseHeartbeat(buf[:n], testKey)
		if err != nil {
			t.Fatal(err)
		}
		_ = rx.SetReadDeadline(time.Now().Add(100 * time.Millisecond))
		if _, err := rx.Read(buf); err != nil { // the second destination's copy
			t.Fatal(err)
		}
		return hb.Seq
	}
	// The loop lags: sends every 20ms of a plan up to 200ms old.
	for d := time.Duration(0); d <= 200*time.Millisecond; d += 20 * time.Millisecond {
		m.beats.send(t0.Add(d))
		if got() == 0 {
			t.Fatalf("the plan was not sent %s after it was built, with the heartbeat thread on time", d)
		}
	}
	// The process is stopped for 150ms: the old plan stays unsent.
	resume := t0.Add(350 * time.Millisecond)
	m.beats.send(resume)
	m.beats.send(resume.Add(20 * time.Millisecond))
	if seq := got(); seq != 0 {
		t.Fatalf("the plan from before a 150ms pause went out (seq %d)", seq)
	}
	// The loop plans again: it goes out.
	fresh := testPlan(resume.Add(time.Millisecond), rx.LocalAddr().(*net.UDPAddr).AddrPort())
	fresh.stale, fresh.pause = p.stale, p.pause
	m.beats.plan.Store(fresh)
	m.beats.send(resume.Add(2 * time.Millisecond))
	if got() == 0 {
		t.Fatal("the plan built after the pause was not sent")
	}
}

// TestSendUsesTheReadersArrival: a heartbeat the reader noted after the
// loop planned counts in the age this host reports.
func TestSendUsesTheReadersArrival(t *testing.T) {
	m, rx := beatPair(t)
	now := time.Now()
	p := testPlan(now, rx.LocalAddr().(*net.UDPAddr).AddrPort())
	p.arrived[0] = &peerArrival{}
	p.arrived[0].at.Store(int64(now.Add(-time.Millisecond).Sub(m.epoch)))
	m.beats.plan.Store(p)
	m.beats.send(now)
	buf := make([]byte, maxDatagram+1)
	_ = rx.SetReadDeadline(time.Now().Add(5 * time.Second))
	n, err := rx.Read(buf)
	if err != nil {
		t.Fatal(err)
	}
	hb, err := parseHeartbeat(buf[:n], testKey)
	if err != nil {
		t.Fatal(err)
	}
	if got := hb.Sightings[0].Age; got != time.Millisecond {
		t.Errorf("reported age %s, want 1ms (the reader's arrival, not the plan's 5ms)", got)
	}
}

// TestBeatThreadKeepsTime: the thread sends about one heartbeat per
// interval and stops when told.
func TestBeatThreadKeepsTime(t *testing.T) {
	m, rx := beatPair(t)
	stop, done := make(chan struct{}), make(chan struct{})
	go func() { defer close(done); m.beatThread(stop) }()
	buf := make([]byte, maxDatagram+1)
	start := time.Now()
	got := 0
	for time.Since(start) < 500*time.Millisecond {
		// The plan is refreshed as the loop would.
		m.beats.plan.Store(testPlan(time.Now(), rx.LocalAddr().(*net.UDPAddr).AddrPort()))
		_ = rx.SetReadDeadline(time.Now().Add(20 * time.Millisecond))
		if _, err := rx.Read(buf); err == nil {
			got++
		}
	}
	close(stop)
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("the heartbeat thread did not stop")
	}
	// Two datagrams (two peers) per 5ms interval: about 200; a loaded
	// machine may lose some time.
	if got < 50 {
		t.Errorf("%d datagrams in 500ms at a 5ms interval to two peers, want about 200", got)
	}
	t.Logf("%d datagrams in 500ms", got)
}
