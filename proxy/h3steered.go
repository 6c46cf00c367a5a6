package proxy

import (
	"net"
	"net/netip"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/net/ipv4"
	"golang.org/x/sys/unix"

	"github.com/teapot-lb/teapot-lb/proxy/snapshot"
)

// h3SteeredConn is the HTTP/3 port of one https listener whose address
// is steered to its tenant's shared UDP socket, as its quic.Transport
// sees it: the datagrams the shared socket's reader took for the address
// (udpShared.readLoop), and replies sent from that address. Each key
// keeps a transport of its own, so that everything quic-go does before
// it keeps any state for a connection (ConnContext: admit, with the
// listener's source ranges, connection rate and bound and the tenant's
// budget; VerifySourceAddress: Retry past H3RetryAbove handshakes on
// this address) is per destination, as with a socket per key: a flood to
// one address of a tenant holds no handshakes of its other addresses.
type h3SteeredConn struct {
	p     *Proxy
	d     *udpDest
	local *net.UDPAddr
	// in holds the datagrams read for the address and not yet taken by
	// quic-go; past h3SteeredQueue, datagrams are dropped (dropped).
	in      chan *h3Datagram
	dropped atomic.Int64
	drops   *steeredDrops // the tenant's, exported
	done    chan struct{}
	once    sync.Once

	mu sync.Mutex
	// deadline is closed when the read deadline passed (nil: none).
	deadline chan struct{}
	timer    *time.Timer
	// wake is closed (and replaced) when the deadline changes, so that
	// a reader waiting on the former one looks again.
	wake chan struct{}
}

// h3SteeredQueue bounds the datagrams one steered HTTP/3 port holds
// between the shared socket's reader and quic-go (the kernel's buffer
// is the tenant's socket's, shared by its addresses on the port).
const h3SteeredQueue = 256

// h3Datagram is one datagram passed to quic-go: the QUIC payload (quic-go
// reads at most 1,452 bytes a packet) and its control messages (ECN).
type h3Datagram struct {
	b    [1500]byte
	n    int
	oob  [64]byte
	oobn int
	from netip.AddrPort
}

var h3DatagramPool = sync.Pool{New: func() any { return new(h3Datagram) }}

func newH3SteeredConn(p *Proxy, k snapshot.Key, tenant string) *h3SteeredConn {
	c := &h3SteeredConn{
		p:     p,
		drops: p.steeredDropsOf(tenant),
		local: net.UDPAddrFromAddrPort(netip.AddrPortFrom(k.Addr.Addr().Unmap(), k.Addr.Port())),
		in:    make(chan *h3Datagram, h3SteeredQueue),
		done:  make(chan struct{}),
		wake:  make(chan struct{}),
	}
	c.d = newUDPDest(k, true, c.deliver)
	return c
}

// deliver queues a datagram for quic-go, with its control messages but
// the packet info (the transport answers from its own address; a reset
// has no control message, which h3PacketConn counts on).
func (c *h3SteeredConn) deliver(b, oob []byte, from netip.AddrPort) {
	g := h3DatagramPool.Get().(*h3Datagram)
	g.n = copy(g.b[:], b)
	g.oobn = 0
	for len(oob) > 0 {
		h, _, rest, err := unix.ParseOneSocketControlMessage(oob)
		if err != nil {
			break
		}
		m := oob[:len(oob)-len(rest)]
		pktinfo := h.Level == unix.IPPROTO_IP && h.Type == unix.IP_PKTINFO || h.Level == unix.IPPROTO_IPV6 && h.Type == unix.IPV6_PKTINFO
		if !pktinfo && g.oobn+len(m) <= len(g.oob) {
			g.oobn += copy(g.oob[g.oobn:], m)
		}
		oob = rest
	}
	g.from = from
	select {
	case c.in <- g:
	default:
		c.dropped.Add(1)
		c.drops.queueFull.Add(1)
		h3DatagramPool.Put(g)
	}
}

// next waits for a datagram until the read deadline or Close.
func (c *h3SteeredConn) next() (*h3Datagram, error) {
	for {
		select {
		case g := <-c.in:
			return g, nil
		default:
		}
		c.mu.Lock()
		dl, wake := c.deadline, c.wake
		c.mu.Unlock()
		select {
		case g := <-c.in:
			return g, nil
		case <-dl:
			return nil, os.ErrDeadlineExceeded
		case <-wake:
		case <-c.done:
			return nil, net.ErrClosed
		}
	}
}

func (g *h3Datagram) addr() *net.UDPAddr {
	return &net.UDPAddr{IP: g.from.Addr().AsSlice(), Port: int(g.from.Port())}
}

// ReadBatch fills ms with the datagrams queued, waiting for the first.
func (c *h3SteeredConn) ReadBatch(ms []ipv4.Message, _ int) (int, error) {
	g, err := c.next()
	if err != nil {
		return 0, err
	}
	n := 0
	for {
		m := &ms[n]
		m.N = copy(m.Buffers[0], g.b[:g.n])
		m.NN = copy(m.OOB, g.oob[:g.oobn])
		m.Flags = 0
		m.Addr = g.addr()
		h3DatagramPool.Put(g)
		if n++; n == len(ms) {
			return n, nil
		}
		select {
		case g = <-c.in:
		default:
			return n, nil
		}
	}
}

// ReadMsgUDP reads one datagram.
func (c *h3SteeredConn) ReadMsgUDP(b, oob []byte) (n, oobn, flags int, addr *net.UDPAddr, err error) {
	g, err := c.next()
	if err != nil {
		return 0, 0, 0, nil, err
	}
	defer h3DatagramPool.Put(g)
	return copy(b, g.b[:g.n]), copy(oob, g.oob[:g.oobn]), 0, g.addr(), nil
}

// ReadFrom reads one datagram.
func (c *h3SteeredConn) ReadFrom(b []byte) (int, net.Addr, error) {
	n, _, _, a, err := c.ReadMsgUDP(b, nil)
	if err != nil {
		return 0, nil, err
	}
	return n, a, nil
}

// WriteMsgUDP sends b from the listener's address.
func (c *h3SteeredConn) WriteMsgUDP(b, oob []byte, addr *net.UDPAddr) (n, oobn int, err error) {
	n, err = c.d.writeTo(b, oob, addr.AddrPort())
	return n, len(oob), err
}

// WriteTo sends b from the listener's address.
func (c *h3SteeredConn) WriteTo(b []byte, addr net.Addr) (int, error) {
	ua, ok := addr.(*net.UDPAddr)
	if !ok {
		return 0, syscall.EAFNOSUPPORT
	}
	return c.d.writeTo(b, nil, ua.AddrPort())
}

// Close stops steering the address and wakes a reader.
func (c *h3SteeredConn) Close() error {
	c.once.Do(func() {
		c.p.unsteerUDP(c.d)
		close(c.done)
	})
	return nil
}

// LocalAddr is the listener's address (not an unspecified one: quic-go
// then asks for no packet info of its own).
func (c *h3SteeredConn) LocalAddr() net.Addr { return c.local }

// SetReadDeadline wakes a reader at t (quic-go's Transport.Close sets
// it to now).
func (c *h3SteeredConn) SetReadDeadline(t time.Time) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.timer != nil {
		c.timer.Stop()
		c.timer = nil
	}
	close(c.wake)
	c.wake = make(chan struct{})
	switch d := time.Until(t); {
	case t.IsZero():
		c.deadline = nil
	case d <= 0:
		ch := make(chan struct{})
		close(ch)
		c.deadline = ch
	default:
		ch := make(chan struct{})
		c.deadline = ch
		c.timer = time.AfterFunc(d, func() { close(ch) })
	}
	return nil
}

// SetDeadline sets the read deadline (writes do not block).
func (c *h3SteeredConn) SetDeadline(t time.Time) error { return c.SetReadDeadline(t) }

// SetWriteDeadline does nothing: writes do not block.
func (c *h3SteeredConn) SetWriteDeadline(time.Time) error { return nil }

// shared is the socket the address is steered to now.
func (c *h3SteeredConn) shared() (*net.UDPConn, error) {
	sh := c.d.shared.Load()
	if sh == nil {
		return nil, net.ErrClosed
	}
	return sh.conn, nil
}

// SyscallConn is the shared socket's (quic-go sets DF and ECN on it, as
// listenSharedUDP did, and asks whether the kernel has GSO).
func (c *h3SteeredConn) SyscallConn() (syscall.RawConn, error) {
	sc, err := c.shared()
	if err != nil {
		return nil, err
	}
	return sc.SyscallConn()
}

// SetReadBuffer sets the shared socket's.
func (c *h3SteeredConn) SetReadBuffer(n int) error {
	sc, err := c.shared()
	if err != nil {
		return err
	}
	return sc.SetReadBuffer(n)
}

// SetWriteBuffer sets the shared socket's.
func (c *h3SteeredConn) SetWriteBuffer(n int) error {
	sc, err := c.shared()
	if err != nil {
		return err
	}
	return sc.SetWriteBuffer(n)
}
