package proxy

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/teapot-lb/teapot-lb/proxy/clientsource"
	"github.com/teapot-lb/teapot-lb/proxy/cpubudget"
	"github.com/teapot-lb/teapot-lb/proxy/health"
	"github.com/teapot-lb/teapot-lb/proxy/internal/freebind"
)

// udpSocket forwards datagrams of one udp listener. Each client address
// gets a flow: a connected UDP socket to the member picked for it. Replies
// are sent from the listening socket, which is bound to the VIP, so
// clients see them come from the address they sent to. Flows expire after
// the listener's idle timeout; the table is bounded by max_connections.
//
// A removed udp listener closes its flows at once (the socket must close
// so that the address can be bound again); so does a change of the load
// balancer serving it.
type udpSocket struct {
	s *socket
	// conn is the listener's own socket; nil when its address is
	// steered to its tenant's shared socket (dest).
	conn *net.UDPConn
	dest *udpDest
	// now is a coarse clock (Unix nanoseconds) the janitor advances, so
	// that packets need no clock read.
	now  atomic.Int64
	tick time.Duration
	done chan struct{}

	mu     sync.Mutex
	flows  map[netip.AddrPort]*flow
	closed bool
}

type flow struct {
	u      *udpSocket
	client netip.AddrPort
	up     *net.UDPConn
	l      *ListenerSnapshot
	target *health.Target
	idle   int64
	last   atomic.Int64
	opened time.Time
	done   func()
	once   sync.Once
	// refused: a port unreachable was counted in the member's passive
	// window.
	refused atomic.Bool

	// The reply budget (udpReplyAllowed). rx counts the bytes the client
	// sent; replied is set once a reply left; verified by a client
	// datagram read after that. tx counts the bytes relayed to the client
	// (the replies goroutine's).
	rx       atomic.Int64
	replied  atomic.Bool
	verified atomic.Bool
	tx       int64
}

// The reply budget of a UDP flow. A source address of a datagram is not
// proof that the client lives there: a spoofed datagram would make the
// listener send its member's replies to a victim, from the VIP. So a flow
// relays at most max(udpReplyFloor, udpReplyRatio × the bytes its client
// sent) until the client has sent a datagram after the flow's first reply
// left (as a client that waits on replies does); then at most
// max(udpReplyFloor, udpReplyRatioVerified × the bytes its client sent).
// The rest of the member's replies is dropped and counted
// (UDPReplyMetrics), and does not keep the flow alive. A blind spoofer
// can send that second datagram too: the verification only chooses the
// ratio, it never lifts the bound. A reflection through a listener is
// thus at most udpReplyRatioVerified times what the attacker sends (plus
// udpReplyFloor per flow), whatever its member sends.
//
// The floor lets a first answer of up to 4 KiB through (a DNS answer is
// often ten times its query; EDNS answers stay under 1,232 bytes); 3× is
// what QUIC allows a server before it validates an address; 64× covers a
// download whose client acknowledges every second full datagram (QUIC,
// or TCP inside WireGuard: 30 to 60 times what the client sends).
const (
	udpReplyFloor         = 4 << 10
	udpReplyRatio         = 3
	udpReplyRatioVerified = 64
)

// replyRoom is how many more bytes the flow may relay now.
func (f *flow) replyRoom() int64 {
	ratio := int64(udpReplyRatio)
	if f.verified.Load() {
		ratio = udpReplyRatioVerified
	}
	return max(udpReplyFloor, ratio*f.rx.Load()) - f.tx
}

// udpReplyAllowed reports whether a reply of n bytes fits the flow's
// budget, and counts it when it does.
func (f *flow) udpReplyAllowed(n int) bool {
	ratio := int64(udpReplyRatio)
	if f.verified.Load() {
		ratio = udpReplyRatioVerified
	}
	if f.tx+int64(n) > max(udpReplyFloor, ratio*f.rx.Load()) {
		return false
	}
	f.tx += int64(n)
	return true
}

// received counts a datagram of n bytes from the client, and verifies
// the flow when it comes after the first reply.
func (f *flow) received(n int) {
	f.rx.Add(int64(n))
	if !f.verified.Load() && f.replied.Load() {
		f.verified.Store(true)
	}
}

func (p *Proxy) listenUDP(s *socket) (*udpSocket, error) {
	lc := net.ListenConfig{Control: freebind.Control}
	pc, err := lc.ListenPacket(context.Background(), "udp"+family(s.key), s.key.Addr.String())
	if err != nil {
		return nil, err
	}
	return p.newUDPSocket(s, pc.(*net.UDPConn)), nil
}

// newUDPSocket serves s's udp listener on conn (nil: steered).
func (p *Proxy) newUDPSocket(s *socket, conn *net.UDPConn) *udpSocket {
	u := &udpSocket{
		s:     s,
		conn:  conn,
		tick:  min(max(p.cfg.Limits.UDPIdleTimeout/4, 10*time.Millisecond), time.Second),
		done:  make(chan struct{}),
		flows: map[netip.AddrPort]*flow{},
	}
	u.now.Store(time.Now().UnixNano())
	return u
}

// steerUDPSocket serves s's udp listener through tenant's shared socket.
func (p *Proxy) steerUDPSocket(s *socket, tenant string) (*udpSocket, error) {
	u := p.newUDPSocket(s, nil)
	u.dest = newUDPDest(s.key, false, func(b, _ []byte, from netip.AddrPort) { u.receive(b, from) })
	if err := p.steerUDP(u.dest, tenant); err != nil {
		return nil, err
	}
	return u, nil
}

// writeTo sends a reply to the client from the listener's address.
func (u *udpSocket) writeTo(b []byte, to netip.AddrPort) error {
	if u.dest != nil {
		_, err := u.dest.writeTo(b, nil, to)
		return err
	}
	_, err := u.conn.WriteToUDPAddrPort(b, to)
	return err
}

// bufPool holds datagram buffers for replies, taken only once a reply is
// ready to read, so that idle flows hold none.
var bufPool = sync.Pool{New: func() any { b := make([]byte, maxDatagram); return &b }}

func (u *udpSocket) readLoop() {
	p := u.s.p
	defer p.wg.Done()
	p.wg.Add(1)
	go u.janitor()
	buf := make([]byte, 65536)
	for {
		n, client, err := u.conn.ReadFromUDPAddrPort(buf)
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			time.Sleep(time.Millisecond)
			continue
		}
		u.receive(buf[:n], netip.AddrPortFrom(client.Addr().Unmap(), client.Port()))
	}
}

// receive relays a datagram from client to its flow's member.
func (u *udpSocket) receive(b []byte, client netip.AddrPort) {
	f := u.flow(client)
	if f == nil {
		return
	}
	// The listener's socket (or the shared one its address is steered
	// to) is its tenant's alone: a tenant in debt of its host CPU budget
	// stops reading it (the kernel drops past its buffer).
	f.l.cpu.Work(cpubudget.WorkDatagram)
	f.l.cpu.Throttle()
	f.last.Store(u.now.Load())
	f.received(len(b))
	if _, err := f.up.Write(b); err == nil {
		u.s.p.metrics.BytesIn(f.l.LB, f.l.Name, int64(len(b)))
	}
}

// flow returns the client's flow, creating it when the table has room and
// a member is usable; nil drops the datagram.
func (u *udpSocket) flow(client netip.AddrPort) *flow {
	p := u.s.p
	u.mu.Lock()
	defer u.mu.Unlock()
	if f := u.flows[client]; f != nil || u.closed {
		return f
	}
	l := p.current.Load().listener(u.s.key)
	if l == nil {
		return nil
	}
	if !p.admitSourceAddr(l, client.Addr()) || !p.admitConnRateAddr(l, client.Addr()) {
		return nil
	}
	if len(u.flows) >= l.Limits.MaxConnections {
		p.metrics.ConnRefused(l.LB, l.Name, RefusedListenerLimit)
		return nil
	}
	done, refused := p.admitTenant(l.Tenant, l.Limits.TenantConnections)
	if done == nil {
		p.metrics.ConnRefused(l.LB, l.Name, refused)
		return nil
	}
	m := l.Backend().Pick(clientKey(client.Addr()))
	if m == nil {
		done()
		p.metrics.ConnRefused(l.LB, l.Name, RefusedNoMember)
		return nil
	}
	tg := Target(m)
	var from netip.Addr
	if l.Backend().Spec.ClientSource {
		from = client.Addr()
	}
	up, err := p.dialUDP(l.Tenant, m.Addr, from)
	if err != nil {
		done()
		if errors.Is(err, ErrNoClientSource) || errors.Is(err, clientsource.ErrUnavailable) {
			p.clientSourceFailed(l, client.Addr(), err)
			p.metrics.ConnRefused(l.LB, l.Name, RefusedClientSource)
			return nil
		}
		tg.ConnectFailed()
		tg.Record(health.OutcomeConnect)
		p.metrics.ConnRefused(l.LB, l.Name, RefusedNoMember)
		return nil
	}
	if from.IsValid() {
		p.clientSourceWorks(l.LB, from)
	}
	tg.Record(health.OutcomeOK)
	tg.Begin()
	f := &flow{u: u, client: client, up: up, l: l, target: tg, idle: int64(l.Limits.IdleTimeout), opened: time.Now(), done: done}
	f.last.Store(u.now.Load())
	u.flows[client] = f
	p.metrics.ConnOpened(l.LB, l.Name)
	p.wg.Add(1)
	go f.replies()
	return f
}

// replies sends the member's datagrams back to the client from the VIP.
func (f *flow) replies() {
	p := f.u.s.p
	defer p.wg.Done()
	defer f.u.remove(f)
	rc, err := f.up.SyscallConn()
	if err != nil {
		return
	}
	for {
		var bp *[]byte
		var n int
		var rerr error
		drop := false
		err := rc.Read(func(fd uintptr) bool {
			if f.replyRoom() < maxDatagram {
				// Near or over the budget: the datagram's size first;
				// one that does not fit is discarded in the kernel,
				// without a buffer or a copy (a reflecting member sends
				// many times what a flow may relay).
				n, rerr = recvLen(fd, unix.MSG_PEEK|unix.MSG_TRUNC)
				if rerr == unix.EAGAIN {
					return false
				}
				if rerr != nil {
					return true
				}
				if int64(n) > f.replyRoom() {
					_, rerr = recvLen(fd, 0)
					drop = true
					return true
				}
			}
			bp = bufPool.Get().(*[]byte)
			replyBufTakes.Add(1)
			n, rerr = unix.Read(int(fd), *bp)
			if rerr == unix.EAGAIN {
				bufPool.Put(bp)
				bp = nil
				return false
			}
			return true
		})
		if err != nil {
			if bp != nil {
				bufPool.Put(bp)
			}
			return
		}
		switch {
		case rerr == unix.ECONNREFUSED:
			// ICMP port unreachable: nothing listens on the member
			// (a failed flow in its passive window, once).
			f.target.ConnectFailed()
			if f.refused.CompareAndSwap(false, true) {
				f.target.RecordFailure(health.OutcomeConnect)
			}
		case rerr == unix.EINTR:
		case rerr != nil:
			if bp != nil {
				bufPool.Put(bp)
			}
			return
		case drop || !f.udpReplyAllowed(n):
			f.dropReply(n)
		default:
			f.target.ConnectSucceeded()
			f.last.Store(f.u.now.Load())
			if !f.replied.Load() {
				f.replied.Store(true)
			}
			f.l.cpu.Work(cpubudget.WorkDatagram)
			if err := f.u.writeTo((*bp)[:n], f.client); err == nil {
				p.metrics.BytesOut(f.l.LB, f.l.Name, int64(n))
			}
		}
		if bp != nil {
			bufPool.Put(bp)
		}
	}
}

// remove takes f out of the table and ends it.
func (u *udpSocket) remove(f *flow) {
	u.mu.Lock()
	if u.flows[f.client] == f {
		delete(u.flows, f.client)
	}
	u.mu.Unlock()
	f.end()
}

// dropReply counts a reply of n bytes over the flow's budget: dropped,
// and it does not keep the flow alive.
func (f *flow) dropReply(n int) {
	f.target.ConnectSucceeded()
	if m, ok := f.u.s.p.metrics.(UDPReplyMetrics); ok {
		m.UDPReplyDropped(f.l.LB, f.l.Name, int64(n))
	}
}

// maxDatagram is the largest datagram a reply may be (the size of a reply
// buffer).
const maxDatagram = 65536

// replyBufTakes counts the reply buffers taken (tests read it: a reply
// over the budget takes none).
var replyBufTakes atomic.Int64

// recvLen receives from fd into no buffer: with MSG_PEEK|MSG_TRUNC it
// returns the size of the next datagram and leaves it queued; with no
// flags it discards that datagram (a zero-length read(2) would not). It
// allocates nothing (unix.Recvfrom converts the source address).
func recvLen(fd uintptr, flags int) (int, error) {
	var b byte
	n, _, errno := unix.Syscall6(unix.SYS_RECVFROM, fd, uintptr(unsafe.Pointer(&b)), 0, uintptr(flags), 0, 0)
	if errno != 0 {
		return 0, errno
	}
	return int(n), nil
}

func (f *flow) end() {
	f.once.Do(func() {
		f.up.Close()
		f.target.End()
		f.done()
		f.u.s.p.metrics.ConnClosed(f.l.LB, f.l.Name, time.Since(f.opened))
	})
}

// janitor advances the coarse clock and expires idle flows.
func (u *udpSocket) janitor() {
	defer u.s.p.wg.Done()
	t := time.NewTicker(u.tick)
	defer t.Stop()
	for {
		select {
		case <-u.done:
			return
		case now := <-t.C:
			u.now.Store(now.UnixNano())
			u.closeFlows(func(f *flow) bool { return now.UnixNano()-f.last.Load() >= f.idle })
		}
	}
}

// closeFlows ends the flows that match.
func (u *udpSocket) closeFlows(match func(*flow) bool) {
	var ended []*flow
	u.mu.Lock()
	for c, f := range u.flows {
		if match(f) {
			delete(u.flows, c)
			ended = append(ended, f)
		}
	}
	u.mu.Unlock()
	for _, f := range ended {
		f.end()
	}
}

// close stops the socket and ends every flow.
func (u *udpSocket) close() {
	u.mu.Lock()
	u.closed = true
	u.mu.Unlock()
	if u.conn != nil {
		u.conn.Close()
	}
	close(u.done)
	u.closeFlows(func(*flow) bool { return true })
}
