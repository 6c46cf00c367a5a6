package proxy

import (
	"crypto/rand"
	"errors"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/quic-go/quic-go"
	"github.com/teapot-lb/teapot-lb/proxy/cpubudget"
	"golang.org/x/net/ipv4"
)

// Per-tenant bounds of what a tenant's QUIC clients make the host keep
// and send, on each host, over all its HTTP/3 sockets.
const (
	// H3ConnIDRate and H3ConnIDBurst bound the connection IDs issued for
	// a tenant's listeners (a token bucket: per second, and at once): the
	// first of each connection, the ones a connection is given after its
	// handshake (at most 5 at a time), one for each a client retires, and
	// those of Retry packets. Each stays in the transport's table while
	// in use and for 3 PTOs after it is retired, so a client that retires
	// IDs as fast as it can (RETIRE_CONNECTION_ID frames, or a new path
	// per ID), or opens and closes connections as fast as it can, no
	// longer grows the table without bound: past the bucket a new
	// connection gets no spare IDs (it keeps the one it has), a
	// connection whose client retired one is closed, new connections and
	// Retries wait for the bucket (their Initial is dropped), and each
	// refusal counts as RefusedConnIDs.
	H3ConnIDRate  = 4096
	H3ConnIDBurst = 8192
	// H3ResetRate and H3ResetBurst bound the stateless resets sent from
	// a tenant's HTTP/3 sockets (answers to packets of unknown
	// connections: 42 bytes each, for at least 43 received). Past the
	// bucket, no reset is sent (the client times out instead), and each
	// counts as RefusedStatelessReset.
	H3ResetRate  = 256
	H3ResetBurst = 1024
	// h3ConnIDLen is the length of the connection IDs issued.
	h3ConnIDLen = 8
	// h3ResetSize is the size of a stateless reset quic-go sends
	// (protocol.MinStatelessResetSize).
	h3ResetSize = 42
)

// Reasons for ConnRefused of HTTP/3 listeners.
const (
	// RefusedConnIDs: a connection ID not issued, over the tenant's
	// H3ConnIDRate.
	RefusedConnIDs = "connection-ids"
	// RefusedStatelessReset: a stateless reset not sent, over the
	// tenant's H3ResetRate.
	RefusedStatelessReset = "stateless-reset"
	// RefusedTenantWindow: a QUIC connection's receive window not grown,
	// as its tenant's connections on this host together grew theirs by
	// Limits.H3WindowGrowthPerTenant (h3Window).
	RefusedTenantWindow = "tenant-window"
)

// errH3ConnIDs refuses a connection ID over the tenant's bucket.
var errH3ConnIDs = errors.New("proxy: the tenant's QUIC connection IDs are spent")

// h3Limits is one tenant's account of connection IDs and stateless
// resets on this host.
type h3Limits struct {
	ids, resets, early bucket
	// issued, resetsSent and earlyAccepted count what was given, sent and
	// accepted; idsRefused, resetsDropped and earlyRejected what was not.
	issued, idsRefused, resetsSent, resetsDropped atomic.Int64
	earlyAccepted, earlyRejected                  atomic.Int64
}

// h3Limits returns a tenant's account, made on first use.
func (p *Proxy) h3Limits(tenant string) *h3Limits {
	if v, ok := p.h3limits.Load(tenant); ok {
		return v.(*h3Limits)
	}
	v, _ := p.h3limits.LoadOrStore(tenant, &h3Limits{})
	return v.(*h3Limits)
}

// bucket is a token bucket, full when first used.
type bucket struct {
	mu     sync.Mutex
	tokens float64
	last   time.Time
}

// take takes a token if one is left of a bucket refilled at rate per
// second up to burst.
func (b *bucket) take(rate, burst float64, now time.Time) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.last.IsZero() {
		b.tokens = burst
	} else if el := now.Sub(b.last).Seconds(); el > 0 {
		b.tokens = min(burst, b.tokens+el*rate)
	}
	b.last = now
	if b.tokens < 1 {
		return false
	}
	b.tokens--
	return true
}

// h3ConnIDs is the connection ID generator of an HTTP/3 socket: it
// charges each ID to the tenant of the listener in service.
type h3ConnIDs struct{ hs *h3Socket }

var _ quic.ConnectionIDGenerator = h3ConnIDs{}

func (g h3ConnIDs) GenerateConnectionID() (quic.ConnectionID, error) {
	hs := g.hs
	l := hs.listener()
	if l == nil {
		return quic.ConnectionID{}, errH3Refused
	}
	p := hs.s.p
	acct := p.h3Limits(l.Tenant)
	if !acct.ids.take(p.cfg.H3ConnIDRate, p.cfg.H3ConnIDBurst, time.Now()) {
		acct.idsRefused.Add(1)
		p.metrics.ConnRefused(l.LB, l.Name, RefusedConnIDs)
		return quic.ConnectionID{}, errH3ConnIDs
	}
	acct.issued.Add(1)
	var b [h3ConnIDLen]byte
	_, _ = rand.Read(b[:])
	return quic.ConnectionIDFromBytes(b[:]), nil
}

func (h3ConnIDs) ConnectionIDLen() int { return h3ConnIDLen }

// h3UDP is the UDP side of an HTTP/3 port: a socket of its own
// (boundH3), or its address on its tenant's shared socket
// (h3SteeredConn). quic-go reads it in batches and writes it with control
// messages (GSO, ECN).
type h3UDP interface {
	quic.OOBCapablePacketConn
	ReadBatch(ms []ipv4.Message, flags int) (int, error)
	SetWriteBuffer(int) error
}

// boundH3 is a UDP socket bound to the listener's address.
type boundH3 struct {
	*net.UDPConn
	batch *ipv4.PacketConn
}

func newBoundH3(c *net.UDPConn) *boundH3 {
	return &boundH3{UDPConn: c, batch: ipv4.NewPacketConn(c)}
}

// ReadBatch reads as the socket itself would (quic-go uses it when the
// connection has it).
func (b *boundH3) ReadBatch(ms []ipv4.Message, flags int) (int, error) {
	return b.batch.ReadBatch(ms, flags)
}

// h3PacketConn is the UDP side of an HTTP/3 listener as quic-go sees
// it (batched reads, GSO and ECN stay), with its stateless resets
// charged to the tenant of the listener in service. quic-go writes a
// stateless reset alone, 42 bytes with a short header and no control
// message (no ECN mark, no GSO, no packet info: a steered port's
// reader passes none up); a packet of a connection that looks the same
// is rare and is charged too (dropped only past the bucket, as a lost
// packet).
type h3PacketConn struct {
	h3UDP
	hs *h3Socket
}

func newH3PacketConn(c h3UDP, hs *h3Socket) *h3PacketConn {
	return &h3PacketConn{h3UDP: c, hs: hs}
}

// Each datagram the port reads is a unit of its listener's tenant's
// work (cpubudget.WorkDatagram), as a UDP listener's datagrams are:
// QUIC's per-packet work (decryption, acknowledgements, and Initials
// that never become a connection, which admit never sees) is then split
// to the tenant whose port it reached, beside its connections, requests
// and body bytes.

// ReadBatch reads as the socket does and counts what it read.
func (c *h3PacketConn) ReadBatch(ms []ipv4.Message, flags int) (int, error) {
	n, err := c.h3UDP.ReadBatch(ms, flags)
	c.work(n)
	return n, err
}

// ReadMsgUDP reads one datagram and counts it.
func (c *h3PacketConn) ReadMsgUDP(b, oob []byte) (n, oobn, flags int, addr *net.UDPAddr, err error) {
	n, oobn, flags, addr, err = c.h3UDP.ReadMsgUDP(b, oob)
	if err == nil {
		c.work(1)
	}
	return n, oobn, flags, addr, err
}

// ReadFrom reads one datagram and counts it.
func (c *h3PacketConn) ReadFrom(b []byte) (int, net.Addr, error) {
	n, addr, err := c.h3UDP.ReadFrom(b)
	if err == nil {
		c.work(1)
	}
	return n, addr, err
}

// work counts n datagrams read for the listener in service.
func (c *h3PacketConn) work(n int) {
	if n <= 0 {
		return
	}
	if l := c.hs.listener(); l != nil {
		l.cpu.Work(int64(n) * cpubudget.WorkDatagram)
	}
}

// WriteMsgUDP sends b, unless it is a stateless reset past the tenant's
// bucket.
func (c *h3PacketConn) WriteMsgUDP(b, oob []byte, addr *net.UDPAddr) (n, oobn int, err error) {
	if len(b) == h3ResetSize && len(oob) == 0 && b[0]&0xc0 == 0x40 {
		if l := c.hs.listener(); l != nil {
			p := c.hs.s.p
			acct := p.h3Limits(l.Tenant)
			if !acct.resets.take(p.cfg.H3ResetRate, p.cfg.H3ResetBurst, time.Now()) {
				acct.resetsDropped.Add(1)
				p.metrics.ConnRefused(l.LB, l.Name, RefusedStatelessReset)
				return len(b), 0, nil
			}
			acct.resetsSent.Add(1)
		}
	}
	return c.h3UDP.WriteMsgUDP(b, oob, addr)
}
