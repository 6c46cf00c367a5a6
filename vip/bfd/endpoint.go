package bfd

import (
	"cmp"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"
)

// Ports of RFC 5881: control packets go to Port, from a source port in
// SourcePortMin..SourcePortMax.
const (
	Port          = 3784
	SourcePortMin = 49152
	SourcePortMax = 65535
	// ttl is the TTL (hop limit) every packet is sent with and every
	// packet must arrive with (RFC 5881 section 5): a packet that crossed
	// a router, or came from farther, is not a single-hop peer's.
	ttl = 255
	// rxQueue is how many packets a session holds before the endpoint
	// drops more of them.
	rxQueue = 8
	// lateCheck is how long a detection waits for packets not yet read.
	lateCheck = 5 * time.Millisecond
	// byeMax bounds how long an ending session tells its peer AdminDown.
	byeMax = time.Second
)

// ErrClosed: the endpoint is closed.
var ErrClosed = errors.New("BFD endpoint closed")

// Config configures an Endpoint.
type Config struct {
	// Port is where the endpoint takes packets (default Port), PeerPort
	// where it sends them (default Port); tests change them.
	Port, PeerPort uint16
	// ListenPacket opens a UDP socket ("udp4" or "udp6"); the default is
	// net.ListenPacket. An endpoint for a network namespace opens its
	// sockets inside it.
	ListenPacket func(network, address string) (net.PacketConn, error)
	// OnChange is told of every change of a session's state (on the
	// session's goroutine; it must not block).
	OnChange func(peer netip.Addr, st Status)
	Logger   *slog.Logger
}

// Status is what an endpoint knows of one session.
type Status struct {
	State State
	// Diag is why the session last went Down (DiagNone once Up).
	Diag Diag
	// Since is when State began.
	Since time.Time
	// Remote is the state the peer last sent.
	Remote State
	// Prev is the state before State (Down for a new session).
	Prev State
}

// Stats count what an endpoint dropped: packets that failed the checks
// of the packet, that came from an address with no session, with a TTL
// under 255 or a discriminator not the session's, and those a session
// had no room for (the sockets' kernel filter drops packets with a TTL
// under 255 or from no peer before they are read: those counted came
// while the filter was being changed, or past the peers it lists); Throttled counts the times the endpoint stopped
// reading because packets came faster than its sessions' intervals allow
// (the kernel drops the rest). Late counts the detection times put off
// for packets that had come but were not read yet; Received and Sent the
// packets handed to sessions and sent by them.
type Stats struct {
	Invalid, UnknownPeer, BadTTL, BadDisc, Overflow, Throttled, Late uint64
	Received, Sent                                                   uint64
}

// Endpoint runs the BFD sessions with the single-hop peers reachable from
// one network namespace: one socket per address family takes every
// peer's packets on Port, and they are demultiplexed by source address;
// one more per family sends them, from a port of the RFC's range.
type Endpoint struct {
	cfg Config
	log *slog.Logger

	mu     sync.Mutex
	closed bool
	// wg counts the sessions' goroutines, those ending included.
	wg       sync.WaitGroup
	sessions map[netip.Addr]*session
	socks    map[bool]*sockets // by IPv6
	// budget is the packets a second the sessions may be sent together
	// (twice what their MinRx allow, and some); read bounds reading to it.
	budget float64

	stats struct {
		invalid, unknown, badTTL, badDisc, overflow, throttled, late atomic.Uint64
		received, sent                                               atomic.Uint64
	}
}

type sockets struct {
	rx, tx *net.UDPConn
	done   chan struct{}
}

// New makes an endpoint; its sockets open with the first session of
// their family (Set).
func New(cfg Config) *Endpoint {
	cfg.Port = cmp.Or(cfg.Port, Port)
	cfg.PeerPort = cmp.Or(cfg.PeerPort, Port)
	if cfg.ListenPacket == nil {
		cfg.ListenPacket = net.ListenPacket
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	return &Endpoint{cfg: cfg, log: cfg.Logger, sessions: map[netip.Addr]*session{}, socks: map[bool]*sockets{}}
}

// Set makes the endpoint's sessions those of peers (the whole set): a
// new peer's session starts Down, one whose Params changed takes them in
// place (a Poll Sequence while Up), one left out ends. The sockets'
// kernel filters then take packets from the peers only. It fails when a
// family's sockets cannot be opened; the peers of the other family are
// set all the same.
func (e *Endpoint) Set(peers map[netip.Addr]Params) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.closed {
		return ErrClosed
	}
	for a, s := range e.sessions {
		p, ok := peers[a]
		switch {
		case !ok:
			// It tells the peer AdminDown on its own goroutine.
			close(s.bye)
			delete(e.sessions, a)
		case p != s.params:
			// In place: a session started again would tell the peer
			// Down, which ends its BGP session too. s.params is Set's
			// own (under mu); the session's goroutine has its machine.
			s.params = p
			select {
			case <-s.newParams: // replaced
			default:
			}
			s.newParams <- p
		}
	}
	var errs []error
	budget := 10.0
	for a, p := range peers {
		a = a.Unmap()
		budget += 2 * float64(time.Second) / float64(max(p.MinRx, time.Millisecond))
		if _, ok := e.sessions[a]; ok {
			continue
		}
		sk, err := e.open(a.Is6())
		if err != nil {
			errs = append(errs, err)
			continue
		}
		e.sessions[a] = e.start(a, p, sk)
	}
	e.budget = budget
	for six, sk := range e.socks {
		if err := e.filter(sk, six); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// filter sets the kernel's filter of the family's socket to the current
// sessions (under mu).
func (e *Endpoint) filter(sk *sockets, six bool) error {
	var peers []netip.Addr
	for a := range e.sessions {
		if a.Is6() == six {
			peers = append(peers, a)
		}
	}
	if err := attachFilter(sk.rx, rxFilter(six, peers)); err != nil {
		return fmt.Errorf("filter BFD packets: %w", err)
	}
	return nil
}

// Status is the state of peer's session.
func (e *Endpoint) Status(peer netip.Addr) (Status, bool) {
	e.mu.Lock()
	s := e.sessions[peer.Unmap()]
	e.mu.Unlock()
	if s == nil {
		return Status{}, false
	}
	return s.status(), true
}

// Stats are the endpoint's counts of dropped packets.
func (e *Endpoint) Stats() Stats {
	return Stats{Invalid: e.stats.invalid.Load(), UnknownPeer: e.stats.unknown.Load(), BadTTL: e.stats.badTTL.Load(),
		BadDisc: e.stats.badDisc.Load(), Overflow: e.stats.overflow.Load(), Throttled: e.stats.throttled.Load(), Late: e.stats.late.Load(),
		Received: e.stats.received.Load(), Sent: e.stats.sent.Load()}
}

// Close ends every session, each telling its peer AdminDown first (at
// most byeMax, the sessions together), and closes the sockets.
func (e *Endpoint) Close() {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.closed {
		return
	}
	e.closed = true
	for a, s := range e.sessions {
		close(s.bye)
		delete(e.sessions, a)
	}
	// Sessions that Set ended and that still say AdminDown too.
	e.wg.Wait()
	for _, sk := range e.socks {
		close(sk.done)
		sk.rx.Close()
		sk.tx.Close()
	}
}

// open opens the family's sockets, once (under mu).
func (e *Endpoint) open(six bool) (*sockets, error) {
	if sk := e.socks[six]; sk != nil {
		return sk, nil
	}
	network, any := "udp4", "0.0.0.0"
	if six {
		network, any = "udp6", "::"
	}
	rx, err := e.listen(network, netip.AddrPortFrom(netip.MustParseAddr(any), e.cfg.Port).String())
	if err != nil {
		return nil, fmt.Errorf("listen for BFD on port %d: %w", e.cfg.Port, err)
	}
	if err := setSockopt(rx, six, true); err != nil {
		rx.Close()
		return nil, err
	}
	// No session of the family yet (Set sets the filter to its
	// sessions): nothing is taken until then.
	if err := attachFilter(rx, rxFilter(six, nil)); err != nil {
		rx.Close()
		return nil, fmt.Errorf("filter BFD packets: %w", err)
	}
	var tx *net.UDPConn
	for range 32 {
		port := SourcePortMin + rand.IntN(SourcePortMax-SourcePortMin+1)
		tx, err = e.listen(network, netip.AddrPortFrom(netip.MustParseAddr(any), uint16(port)).String())
		if err == nil {
			break
		}
	}
	if err != nil {
		rx.Close()
		return nil, fmt.Errorf("open a BFD source port: %w", err)
	}
	if err := setSockopt(tx, six, false); err != nil {
		rx.Close()
		tx.Close()
		return nil, err
	}
	sk := &sockets{rx: rx, tx: tx, done: make(chan struct{})}
	e.socks[six] = sk
	go e.read(sk, six)
	return sk, nil
}

func (e *Endpoint) listen(network, address string) (*net.UDPConn, error) {
	c, err := e.cfg.ListenPacket(network, address)
	if err != nil {
		return nil, err
	}
	u, ok := c.(*net.UDPConn)
	if !ok {
		c.Close()
		return nil, fmt.Errorf("listen %s %s: not a UDP socket", network, address)
	}
	return u, nil
}

// setSockopt sets the TTL packets leave with (tx) or asks for the TTL
// they arrived with (rx).
func setSockopt(c *net.UDPConn, six, rx bool) error {
	rc, err := c.SyscallConn()
	if err != nil {
		return err
	}
	var serr error
	err = rc.Control(func(fd uintptr) {
		switch {
		case rx && six:
			serr = unix.SetsockoptInt(int(fd), unix.IPPROTO_IPV6, unix.IPV6_RECVHOPLIMIT, 1)
		case rx:
			serr = unix.SetsockoptInt(int(fd), unix.IPPROTO_IP, unix.IP_RECVTTL, 1)
		case six:
			serr = unix.SetsockoptInt(int(fd), unix.IPPROTO_IPV6, unix.IPV6_UNICAST_HOPS, ttl)
		default:
			serr = unix.SetsockoptInt(int(fd), unix.IPPROTO_IP, unix.IP_TTL, ttl)
		}
	})
	return cmp.Or(err, serr)
}

// read takes the family's packets until the endpoint closes, at most
// budget a second (a token bucket): packets that come faster wait in
// the socket's buffer, and the kernel drops what does not fit, so a
// flood costs the host no more than the sessions' own rate. Only what
// the kernel filter let through (filter.go) takes tokens: a flood from
// off the segment or from an address with no session costs none.
func (e *Endpoint) read(sk *sockets, six bool) {
	buf := make([]byte, 512)
	oob := make([]byte, 128)
	tokens, last := 0.0, time.Now()
	for {
		e.mu.Lock()
		budget := e.budget
		e.mu.Unlock()
		now := time.Now()
		tokens = min(budget, tokens+now.Sub(last).Seconds()*budget)
		last = now
		if tokens < 1 {
			e.stats.throttled.Add(1)
			select {
			case <-sk.done:
				return
			case <-time.After(time.Duration((1 - tokens) / budget * float64(time.Second))):
			}
			continue
		}
		n, oobn, _, from, err := sk.rx.ReadMsgUDPAddrPort(buf, oob)
		if err != nil {
			select {
			case <-sk.done:
				return
			default:
			}
			if errors.Is(err, net.ErrClosed) {
				return
			}
			continue
		}
		tokens--
		e.take(buf[:n], oob[:oobn], from.Addr().Unmap(), six)
	}
}

// take checks one packet and hands it to its session.
func (e *Endpoint) take(b, oob []byte, from netip.Addr, six bool) {
	if got, ok := arrivalTTL(oob, six); !ok || got != ttl {
		e.stats.badTTL.Add(1)
		return
	}
	pk, err := unmarshal(b)
	if err != nil {
		e.stats.invalid.Add(1)
		return
	}
	e.mu.Lock()
	s := e.sessions[from]
	e.mu.Unlock()
	if s == nil {
		e.stats.unknown.Add(1)
		return
	}
	if pk.yourDisc != 0 && pk.yourDisc != s.myDisc {
		e.stats.badDisc.Add(1)
		return
	}
	select {
	case s.rx <- pk:
		e.stats.received.Add(1)
	default:
		e.stats.overflow.Add(1)
	}
}

// unread says whether c has datagrams waiting to be read.
func unread(c *net.UDPConn) bool {
	rc, err := c.SyscallConn()
	if err != nil {
		return false
	}
	n := 0
	_ = rc.Control(func(fd uintptr) {
		n, _ = unix.IoctlGetInt(int(fd), unix.SIOCINQ)
	})
	return n > 0
}

// arrivalTTL is the TTL (hop limit) a packet arrived with, from its
// control messages.
func arrivalTTL(oob []byte, six bool) (int, bool) {
	msgs, err := unix.ParseSocketControlMessage(oob)
	if err != nil {
		return 0, false
	}
	for _, m := range msgs {
		if len(m.Data) < 1 {
			continue
		}
		switch {
		case six && m.Header.Level == unix.IPPROTO_IPV6 && m.Header.Type == unix.IPV6_HOPLIMIT && len(m.Data) >= 4:
			return int(nativeInt32(m.Data)), true
		case !six && m.Header.Level == unix.IPPROTO_IP && m.Header.Type == unix.IP_TTL:
			if len(m.Data) >= 4 {
				return int(nativeInt32(m.Data)), true
			}
			return int(m.Data[0]), true
		}
	}
	return 0, false
}

func nativeInt32(b []byte) int32 { return int32(binary.NativeEndian.Uint32(b)) }

// session runs one machine on its own goroutine.
type session struct {
	peer   netip.AddrPort
	params Params
	myDisc uint32
	rx     chan *packet
	// bye ends the session: it tells the peer AdminDown for the peer's
	// detection time (RFC 5880 section 6.8.16), at most byeMax.
	bye chan struct{}
	// newParams takes the session's new Params (the latest only).
	newParams chan Params

	mu sync.Mutex
	st Status
}

func (e *Endpoint) start(peer netip.Addr, p Params, sk *sockets) *session {
	disc := rand.Uint32()
	for disc == 0 {
		disc = rand.Uint32()
	}
	s := &session{peer: netip.AddrPortFrom(peer, e.cfg.PeerPort), params: p, myDisc: disc,
		rx: make(chan *packet, rxQueue), bye: make(chan struct{}), newParams: make(chan Params, 1), st: Status{State: Down, Since: time.Now(), Remote: Down, Prev: Down}}
	// The machine is made here, from p, not from s.params on the
	// session's goroutine: Set changes s.params while the session runs.
	m := newMachine(p, disc)
	e.wg.Add(1)
	go e.run(s, m, sk)
	return s
}

func (s *session) status() Status {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.st
}

func (e *Endpoint) run(s *session, m *machine, sk *sockets) {
	tx := sk.tx
	defer e.wg.Done()
	send := func(final bool) {
		if _, err := tx.WriteToUDPAddrPort(m.packet(final).marshal(), s.peer); err != nil {
			e.log.Debug("cannot send a BFD packet", "peer", s.peer, "err", err)
			return
		}
		e.stats.sent.Add(1)
	}
	txTimer := time.NewTimer(0)
	defer txTimer.Stop()
	detect := time.NewTimer(time.Hour)
	detect.Stop()
	defer detect.Stop()
	changed := func(now time.Time) {
		s.mu.Lock()
		st := Status{State: m.state, Diag: m.diag, Since: now, Remote: m.remoteState, Prev: s.st.State}
		s.st = st
		s.mu.Unlock()
		if e.cfg.OnChange != nil {
			e.cfg.OnChange(s.peer.Addr(), st)
		}
	}
	for {
		select {
		case <-s.bye:
			e.goodbye(m, send)
			return
		case <-txTimer.C:
			if d, ok := m.txInterval(); ok {
				send(false)
				txTimer.Reset(jittered(d, m.p.Multiplier))
			} else {
				txTimer.Reset(slowTx)
			}
		case p := <-s.newParams:
			before, _ := m.txInterval()
			m.setParams(p)
			if m.state == Up {
				// The Poll goes at once.
				send(false)
			}
			if d, ok := m.txInterval(); ok && (d < before || m.state == Up) {
				txTimer.Reset(jittered(d, m.p.Multiplier))
			}
			if m.receivedSomeRx {
				detect.Reset(max(0, m.detectTime()-time.Since(m.lastRx)))
			}
		case <-detect.C:
			now := time.Now()
			// Packets not yet read (this process did not run for a
			// while: a loaded host) are read first, up to a second
			// detection time: the peer's silence is measured, not this
			// process's.
			if (len(s.rx) > 0 || unread(sk.rx)) && now.Sub(m.lastRx) < 2*m.detectTime() {
				e.stats.late.Add(1)
				detect.Reset(lateCheck)
				continue
			}
			if m.expire(now) {
				changed(now)
				// Down again at the slow rate.
				txTimer.Reset(0)
			}
		case pk := <-s.rx:
			now := time.Now()
			wasUp := m.state == Up
			before, _ := m.txInterval()
			ch, final := m.receive(pk, now)
			if ch {
				changed(now)
			} else {
				s.mu.Lock()
				s.st.Remote = m.remoteState
				s.mu.Unlock()
			}
			detect.Reset(m.detectTime())
			d, ok := m.txInterval()
			switch {
			case final:
				send(true)
			case ch && (m.state == Up || wasUp || m.state == Init):
				// A change is told at once, not at the next interval.
				send(false)
				if ok {
					txTimer.Reset(jittered(d, m.p.Multiplier))
				}
				continue
			}
			// The peer takes packets faster now (its Poll ends with our
			// Final): the next one goes at the new interval, not at the
			// old one, which would be past its new detection time.
			if ok && d < before {
				txTimer.Reset(jittered(d, m.p.Multiplier))
			}
		}
	}
}

// goodbye tells the peer the session ends: AdminDown (diagnostic
// AdminDown) at the interval the session sent at, for the peer's
// detection time (RFC 5880 section 6.8.16), at most byeMax. A peer never
// heard from is told nothing. The peer's BFD goes Down without its
// client's session being ended (RFC 5882 section 3.2).
func (e *Endpoint) goodbye(m *machine, send func(final bool)) {
	if m.state == Down && !m.receivedSomeRx {
		return
	}
	d, ok := m.txInterval()
	if !ok {
		return
	}
	m.state, m.diag, m.pollPending = AdminDown, DiagAdminDown, false
	end := time.Now().Add(min(time.Duration(max(m.remoteMult, 1))*d, byeMax))
	for {
		send(false)
		next := jittered(d, m.p.Multiplier)
		if time.Now().Add(next).After(end) {
			return
		}
		time.Sleep(next)
	}
}
