package vip

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"slices"
	"testing"
	"time"

	"github.com/mdlayher/packet"
	"golang.org/x/sys/unix"
)

// TestActuatorAnnouncesAgainOnANewTake: an arp VIP that the decision loop
// released and took again before the actuator converged never left the
// interface, but a peer may have announced it in between; a new take
// (target.announce) is announced again, an unchanged one is not.
func TestActuatorAnnouncesAgainOnANewTake(t *testing.T) {
	inNetns(t, func() {
		ifi, err := net.InterfaceByName("v1")
		if err != nil {
			t.Fatal(err)
		}
		capture, err := packet.Listen(ifi, packet.Raw, unix.ETH_P_ALL, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer capture.Close()
		vip := netip.MustParseAddr("192.0.2.10")
		// arps counts the ARP frames for vip that arrive within d.
		arps := func(d time.Duration) int {
			n := 0
			buf := make([]byte, 1500)
			deadline := time.Now().Add(d)
			for {
				_ = capture.SetReadDeadline(deadline)
				k, _, err := capture.ReadFrom(buf)
				if errors.Is(err, os.ErrDeadlineExceeded) {
					return n
				}
				if err != nil {
					t.Fatal(err)
				}
				if f := buf[:k]; len(f) >= 42 && f[12] == 0x08 && f[13] == 0x06 && netip.AddrFrom4([4]byte(f[28:32])) == vip {
					n++
				}
			}
		}
		m := &Manager{log: slog.New(slog.DiscardHandler)}
		m.frames = &sender{name: "v0"}
		defer m.frames.close()
		a := newActuator(m)
		f := &iface{name: "v0"}
		defer f.remove(vip)
		converge := func(announce uint64) {
			a.set(map[netip.Addr]target{vip: {mode: ModeARP, iface: f, announce: announce}}, nil)
			a.converge(time.Now())
		}
		converge(1)
		if n := arps(300 * time.Millisecond); n < 2 {
			t.Fatalf("taking the VIP sent %d ARP frames, want the announcement (request and reply)", n)
		}
		a.pending = nil // the rest of the burst is not what this test is about
		converge(1)
		if n := arps(300 * time.Millisecond); n != 0 {
			t.Fatalf("converging on the same take sent %d ARP frames, want none", n)
		}
		converge(2)
		if n := arps(300 * time.Millisecond); n < 2 {
			t.Fatalf("a new take of a VIP still on the interface sent %d ARP frames, want it announced again", n)
		}
		if len(a.pending) == 0 {
			t.Error("a new take queued no further announcements (the burst)")
		}
	})
}

// TestPeerThatLostThisHostTriggersAnAnnouncement: a peer whose heartbeats
// stop reporting this host (it took it for dead, and may have taken and
// announced its VIPs) and then report it again makes this host announce
// its VIPs again; a peer that always heard it does not.
func TestPeerThatLostThisHostTriggersAnAnnouncement(t *testing.T) {
	m := &Manager{cfg: Config{NodeID: "n1", HeartbeatInterval: 20 * time.Millisecond}, dead: 100 * time.Millisecond,
		log: slog.New(slog.DiscardHandler)}
	m.loop.init()
	m.loop.members = map[string]member{"n2": {}, "n3": {}}
	now := time.Now()
	m.loop.lastTrigger = now.Add(time.Hour) // sends no heartbeats
	seq := map[string]uint64{}
	beat := func(from string, hears bool) {
		seq[from]++
		hb := &heartbeat{ID: from, Incarnation: 1, Seq: seq[from], Eligible: true}
		if hears {
			hb.Sightings = []sighting{{ID: "n1", Age: 10 * time.Millisecond, Eligible: true}}
		}
		now = now.Add(20 * time.Millisecond)
		m.receive(received{hb: hb, at: now})
	}
	beat("n2", true)
	beat("n3", true)
	m.loop.reannounce = false // first contact is not the point here
	beat("n3", true)
	if m.loop.reannounce {
		t.Fatal("a peer that always heard this host asked for an announcement")
	}
	beat("n2", false) // n2 lost sight of n1
	beat("n2", false)
	if m.loop.reannounce {
		t.Fatal("announcing while the peer still takes this host for dead")
	}
	beat("n2", true)
	if !m.loop.reannounce {
		t.Fatal("a peer that heard this host again after losing it asked for no announcement")
	}
}

// TestPeerPartlyReady: a peer's heartbeat that lists an address as not
// ready and partly ready makes it a candidate for that address among the
// hosts that carry it for some of its tenants (hostView.Partly); an
// address listed as partly ready alone is ignored; a change of the list
// is a change of the peer (its version) that decides the arp VIPs again.
func TestPeerPartlyReady(t *testing.T) {
	m := &Manager{cfg: Config{NodeID: "n1", HeartbeatInterval: 20 * time.Millisecond}, dead: 100 * time.Millisecond,
		log: slog.New(slog.DiscardHandler)}
	m.loop.init()
	m.loop.members = map[string]member{"n2": {}}
	now := time.Now()
	m.loop.lastTrigger = now.Add(time.Hour) // sends no heartbeats
	a, b := netip.MustParseAddr("10.0.0.100"), netip.MustParseAddr("10.0.0.101")
	seq := uint64(0)
	beat := func(notReady, partly []netip.Addr) view {
		seq++
		now = now.Add(20 * time.Millisecond)
		m.receive(received{hb: &heartbeat{ID: "n2", Incarnation: 1, Seq: seq, Eligible: true, Holdings: true, HoldingSent: true,
			ReadsPartly: true, PartlySent: true, NotReady: notReady, Partly: partly}, at: now})
		return m.view(now)
	}
	v := beat([]netip.Addr{a}, []netip.Addr{a, b})
	version := m.loop.peers["n2"].Version
	if hv := v.Alive["n2"]; !hv.Partly[a] || hv.Partly[b] || !m.loop.peers["n2"].ReadsPartly {
		t.Fatalf("n2 in the view: %+v", hv)
	}
	if !usablePartly(v, "n2", a) || usable(v, "n2", a) {
		t.Fatal("n2 is not a candidate of the partly ready hosts alone")
	}
	// This host's heartbeats carry its own list to n2, which reads it.
	m.beats = newBeatSender(m)
	m.arrivals.Store(&map[string]*peerArrival{})
	m.key = testKey
	d := desired{}
	m.loop.want = &d
	m.loop.ready.have = true
	m.loop.ready.arpNotReady, m.loop.ready.arpPartly = []netip.Addr{b}, []netip.Addr{b}
	m.planBeats(now)
	if p := m.beats.plan.Load(); p == nil || !p.hb.ReadsPartly || !slices.Equal(p.hb.Partly, []netip.Addr{b}) || len(p.to) != 1 || !p.to[0].withPartly {
		t.Fatalf("heartbeat plan %+v", p)
	}
	if v := beat([]netip.Addr{a}, nil); v.Alive["n2"].Partly[a] || m.loop.peers["n2"].Version == version {
		t.Fatalf("n2 no longer partly ready: %+v, version %d (was %d)", v.Alive["n2"], m.loop.peers["n2"].Version, version)
	}
}

// beatingHost is host n1 of a cluster with n2, whose heartbeats n2 reads
// with their held and partly ready lists; it is ready, wants nothing and
// sends no heartbeats of its own (the test plans them).
func beatingHost() (*Manager, time.Time) {
	m := &Manager{cfg: Config{NodeID: "n1", HeartbeatInterval: 20 * time.Millisecond}, dead: 100 * time.Millisecond,
		log: slog.New(slog.DiscardHandler)}
	m.loop.init()
	m.loop.members = map[string]member{"n2": {}}
	now := time.Now()
	m.loop.lastTrigger = now.Add(time.Hour) // sends no heartbeats
	m.receive(received{hb: &heartbeat{ID: "n2", Incarnation: 1, Seq: 1, Eligible: true, Holdings: true, HoldingSent: true,
		ReadsPartly: true, PartlySent: true}, at: now})
	m.beats = newBeatSender(m)
	m.arrivals.Store(&map[string]*peerArrival{})
	m.key = testKey
	m.loop.want = &desired{}
	m.loop.ready.have = true
	return m, now
}

// TestPartlyReadyListThatDoesNotFit: a host whose partly ready list does
// not fit in its heartbeats next to the rest (here 300 IPv6 addresses not
// ready and partly ready) is taken by its peers for not ready for those
// addresses; it is then no candidate for them in its own view either, so
// that it lets go of one it holds rather than keep it while a peer that no
// longer counts it takes it too (both would answer ARP for it in the
// namespaces of the tenants they both carry it for). When the list fits
// again, it is a candidate again.
func TestPartlyReadyListThatDoesNotFit(t *testing.T) {
	m, now := beatingHost()
	addrs := manyAddrs(300)
	a := addrs[0]
	m.loop.ready.unserved = map[netip.Addr]map[string]string{}
	for _, x := range addrs {
		m.loop.ready.unserved[x] = map[string]string{"ta": "tenant ta's attachment is not up on this host"}
	}
	// n2 carries a for some of its tenants too, and holds nothing.
	v := view{Alive: map[string]hostView{"n2": {Eligible: true, Holdings: true, Direct: true,
		NotReady: map[netip.Addr]bool{a: true}, Partly: map[netip.Addr]bool{a: true}}}}
	holder := func() (string, bool) {
		m.planBeats(now)
		p := m.beats.plan.Load()
		b := p.hb.appendTo(nil, true, true, true)
		hb, err := parseHeartbeat(append(b, sign(testKey, b)...), testKey)
		if err != nil {
			t.Fatal(err)
		}
		_, arpMe, _ := m.selves(now, eligibility{ARP: self{ID: "n1"}})
		arpMe.Holding = map[netip.Addr]bool{a: true}
		return holderOf(a, []string{"n1", "n2"}, arpMe, v), hb.PartlySent
	}
	m.loop.ready.arpNotReady, m.loop.ready.arpPartly = addrs, addrs
	if h, sent := holder(); sent || h != "n2" {
		t.Fatalf("list sent to n2: %t; holder in n1's view %q, want n2 (n2 does not count n1)", sent, h)
	}
	m.loop.ready.arpNotReady, m.loop.ready.arpPartly = addrs[:1], addrs[:1]
	if h, sent := holder(); !sent || h != "n1" {
		t.Fatalf("list sent to n2: %t; holder in n1's view %q, want n1 (it holds it)", sent, h)
	}
}

// TestNotReadyOrHeldListThatDoesNotFit: a host whose heartbeats cannot
// carry its not-ready list (more than 409 addresses) say that it is not
// ready for any address, and its peers count it for none; one whose held
// list does not fit leaves it out, and its peers take it for a host that
// does not say what it holds (ranked alone: the holder of an address only
// when it ranks first for it). Its own view of itself is what they read:
// it lets go of an address it holds rather than keep it while a peer takes
// it too (two hosts answering ARP for it, for good). When the list fits
// again, it keeps the address.
func TestNotReadyOrHeldListThatDoesNotFit(t *testing.T) {
	// sent plans n1's heartbeat and reads it as n2 does.
	sent := func(t *testing.T, m *Manager, now time.Time) *heartbeat {
		t.Helper()
		m.planBeats(now)
		b := m.beats.plan.Load().hb.appendTo(nil, true, true, true)
		hb, err := parseHeartbeat(append(b, sign(testKey, b)...), testKey)
		if err != nil {
			t.Fatal(err)
		}
		return hb
	}
	addrs := manyAddrs(600)
	a := addrs[0]
	// n2 is ready for a, eligible, and holds nothing.
	v := view{Alive: map[string]hostView{"n2": {Eligible: true, Holdings: true, Direct: true}}}

	t.Run("not-ready list", func(t *testing.T) {
		m, now := beatingHost()
		holder := func(notReady []netip.Addr) (string, bool) {
			m.loop.ready.arpNotReady = notReady
			m.loop.ready.notReady = map[netip.Addr]string{}
			for _, x := range notReady {
				m.loop.ready.notReady[x] = "tenant ta's attachment is not up on this host"
			}
			hb := sent(t, m, now)
			_, arpMe, _ := m.selves(now, eligibility{ARP: self{ID: "n1"}})
			arpMe.Holding = map[netip.Addr]bool{a: true}
			return holderOf(a, []string{"n1", "n2"}, arpMe, v), hb.NotReadyAll
		}
		// Ready for a, not for 410 others: n2 reads "not ready for any".
		if h, all := holder(addrs[1:411]); !all || h != "n2" {
			t.Fatalf("not ready for any to n2: %t; holder in n1's view %q, want n2 (n2 does not count n1)", all, h)
		}
		if h, all := holder(addrs[1:2]); all || h != "n1" {
			t.Fatalf("not ready for any to n2: %t; holder in n1's view %q, want n1 (it holds it)", all, h)
		}
	})

	t.Run("not-ready list next to the sightings", func(t *testing.T) {
		m, now := beatingHost()
		m.gap = time.Second
		// 20 peers heard, with ids of 250 bytes: their sightings take
		// 5 KB of the datagram, and 300 IPv6 addresses do not fit next
		// to them.
		for i := range 20 {
			m.loop.peers[fmt.Sprintf("%0250d", i)] = &peerState{Heard: now}
		}
		m.loop.ready.arpNotReady = addrs[1:301]
		m.loop.ready.notReady = map[netip.Addr]string{}
		for _, x := range m.loop.ready.arpNotReady {
			m.loop.ready.notReady[x] = "tenant ta's attachment is not up on this host"
		}
		hb := sent(t, m, now)
		_, arpMe, _ := m.selves(now, eligibility{ARP: self{ID: "n1"}})
		arpMe.Holding = map[netip.Addr]bool{a: true}
		if h := holderOf(a, []string{"n1", "n2"}, arpMe, v); !hb.NotReadyAll || h != "n2" {
			t.Fatalf("not ready for any to n2: %t; holder in n1's view %q, want n2 (n2 does not count n1)", hb.NotReadyAll, h)
		}
	})

	t.Run("held list", func(t *testing.T) {
		m, now := beatingHost()
		holder := func(held []netip.Addr) (string, bool) {
			m.loop.heldARP = held
			hb := sent(t, m, now)
			_, arpMe, _ := m.selves(now, eligibility{ARP: self{ID: "n1"}})
			arpMe.Holding = map[netip.Addr]bool{}
			for _, x := range held {
				arpMe.Holding[x] = true
			}
			// n2 ranks first for a; n1 took it while n2 was away.
			return holderOf(a, []string{"n2", "n1"}, arpMe, v), hb.HoldingSent
		}
		// 600 IPv6 addresses held do not fit: n2 does not see that n1
		// holds a, and takes it.
		if h, held := holder(addrs); held || h != "n2" {
			t.Fatalf("held list sent to n2: %t; holder in n1's view %q, want n2 (n2 does not see that n1 holds it)", held, h)
		}
		if h, held := holder(addrs[:1]); !held || h != "n1" {
			t.Fatalf("held list sent to n2: %t; holder in n1's view %q, want n1 (n2 sees that it holds it)", held, h)
		}
	})
}
