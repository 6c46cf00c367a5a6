package proxy

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/teapot-lb/teapot-lb/proxy/balance"
	"github.com/teapot-lb/teapot-lb/proxy/cpubudget"
	"github.com/teapot-lb/teapot-lb/proxy/health"
	"github.com/teapot-lb/teapot-lb/proxy/internal/splice"
	"github.com/teapot-lb/teapot-lb/proxy/proxyproto"
)

// serveTCP forwards one tcp connection to a member.
func (p *Proxy) serveTCP(l *ListenerSnapshot, c *net.TCPConn, t *tracked) {
	p.forwardTCP(l, c, l.Backend(), nil, t)
}

// forwardTCP forwards a connection to a member of pool; read, the bytes
// already read from the client, go first. The member connection is
// charged to the tenant's descriptors; at the limit the client is reset.
func (p *Proxy) forwardTCP(l *ListenerSnapshot, c *net.TCPConn, pool *Pool, read []byte, t *tracked) {
	up, tg, done, ok := p.memberLeg(l, c, pool)
	if !ok {
		return
	}
	defer done()
	if len(read) > 0 {
		if _, err := up.Write(read); err != nil {
			refuse(c)
			refuse(up)
			return
		}
		p.metrics.BytesIn(l.LB, l.Name, int64(len(read)))
	}
	p.pipe(l, c, up, tg, closeOnDown(pool, tg), t)
}

// memberLeg opens the member side of a client connection c: the member
// connection's descriptor is charged to the tenant, as its client's is
// (admitTenant), and at the limit c is reset; the member counts the
// connection until done; the PROXY protocol header goes first when the
// pool asks for one. ok false: c (and the member connection) were reset.
func (p *Proxy) memberLeg(l *ListenerSnapshot, c *net.TCPConn, pool *Pool) (up *net.TCPConn, tg *health.Target, done func(), ok bool) {
	client := addrPort(c.RemoteAddr())
	budget := p.tenantBudget(l.Tenant)
	if !budget.TakeDescriptor() {
		p.metrics.ConnRefused(l.LB, l.Name, RefusedTenantLimit)
		refuse(c)
		return nil, nil, nil, false
	}
	up, m, refused := p.dialMember(l, pool, client.Addr())
	if up == nil {
		budget.ReleaseDescriptor()
		p.metrics.ConnRefused(l.LB, l.Name, refused)
		refuse(c)
		return nil, nil, nil, false
	}
	tg = Target(m)
	tg.Begin()
	done = func() { tg.End(); budget.ReleaseDescriptor() }
	if v := pool.Spec.ProxyProtocol; v != 0 {
		var buf [proxyHeaderMax]byte
		h := proxyproto.Header{Version: v, Src: client, Dst: addrPort(c.LocalAddr())}
		if _, err := up.Write(h.Append(buf[:0])); err != nil {
			refuse(c)
			refuse(up)
			done()
			return nil, nil, nil, false
		}
	}
	return up, tg, done, true
}

// closeOnDown is the member to watch when the pool's check closes the
// connections of members it takes down (nil when it does not).
func closeOnDown(pool *Pool, tg *health.Target) *health.Target {
	if h := pool.Spec.Health; h != nil && h.CloseOnDown {
		return tg
	}
	return nil
}

// proxyHeaderMax bounds an encoded PROXY header (v1 is at most 107 bytes).
const proxyHeaderMax = 108

// addrPort returns a TCP or UDP address without IPv4 mapping.
func addrPort(a net.Addr) netip.AddrPort {
	var ap netip.AddrPort
	switch v := a.(type) {
	case *net.TCPAddr:
		ap = v.AddrPort()
	case *net.UDPAddr:
		ap = v.AddrPort()
	}
	return netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port())
}

// clientKey is the client IP as hash input.
func clientKey(a netip.Addr) []byte {
	if a.Is4() {
		b := a.As4()
		return b[:]
	}
	b := a.As16()
	return b[:]
}

// maxTried bounds the members remembered as tried for one connection.
const maxTried = 8

// synWait bounds a connect attempt that leaves others to make, when the
// pool's connectTimeout is longer: what the kernel does after it is send
// the SYN again, which keeps the first one's connection tracking and so,
// behind a NodePort, the endpoint the node chose for it. One the node's
// rules still send to while it cannot answer (a pod starting or
// stopping) drops every retransmission as it dropped the SYN; a new
// connection, to the next member or the same one, gets a new choice.
const synWait = time.Second

// dialMember connects to a member, making up to ConnectAttempts
// attempts; it returns nil when none is usable or none accepted. Each
// attempt takes a member not tried yet; when every usable member was
// tried and the last one refused at once, or did not answer within
// synWait on an attempt that left others, a member is tried again:
// behind a NodePort each connect is sent to an endpoint of the node's
// choosing, and one that refused or dropped the SYN (a pod that just
// stopped or is starting, still or already in the node's rules) says
// nothing about the next. Every attempt but the last waits at most
// synWait (when connectTimeout is longer), the last connectTimeout. A pool with
// ClientSource dials from client's own address, members of client's
// family only; refused is why no connection was made (ConnRefused's
// reason).
func (p *Proxy) dialMember(l *ListenerSnapshot, pool *Pool, client netip.Addr) (*net.TCPConn, *balance.Member, string) {
	key := clientKey(client)
	var triedBuf [maxTried]*balance.Member
	tried := triedBuf[:0]
	d := net.Dialer{Timeout: pool.Spec.ConnectTimeout}
	if pool.Spec.ClientSource {
		if err := p.clientSourceDialer(&d, "tcp", client); err != nil {
			p.clientSourceFailed(l, client, err)
			return nil, nil, RefusedClientSource
		}
		p.clientSourceWorks(l.LB, client)
	}
	again := false
	attempts := min(p.cfg.Limits.ConnectAttempts, maxTried)
	for i := range attempts {
		d.Timeout = pool.Spec.ConnectTimeout
		short := i < attempts-1 && synWait < d.Timeout
		if short {
			d.Timeout = synWait
		}
		m := pool.pickUntried(key, tried)
		if m == nil && again {
			m = pool.Pick(key)
		}
		if m == nil {
			break
		}
		if !slices.Contains(tried, m) {
			tried = append(tried, m)
		}
		if pool.Spec.ClientSource && otherFamily(client, m.Addr) {
			continue
		}
		tg := Target(m)
		name := tg.Name()
		start := time.Now()
		c, err := p.dial(context.Background(), l.Tenant, &d, "tcp", name)
		took := time.Since(start)
		if err != nil {
			tg.ConnectFailed()
			status, outcome := StatusConnectFailed, health.OutcomeConnect
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				status, outcome = StatusConnectTimeout, health.OutcomeTimeout
			}
			tg.Record(outcome)
			// A refusal, or a SYN unanswered for synWait, says nothing
			// about the next connection to the same member.
			again = status == StatusConnectFailed || short
			p.metrics.MemberRequest(l.LB, pool.Spec.Name, name, status, took)
			continue
		}
		tg.ConnectSucceeded()
		tg.Record(health.OutcomeOK)
		p.metrics.MemberRequest(l.LB, pool.Spec.Name, name, StatusConnected, took)
		return c.(*net.TCPConn), m, ""
	}
	return nil, nil, RefusedNoMember
}

// pipe copies both ways between a client and a member: through the
// io_uring relay on that data path (pipeRing), else with splice(2)
// through the host's pipe pool (package splice) while bytes move. When one side ends its half (EOF), the other side's write half
// is closed; when a side fails, both are reset. A read deadline of a
// quarter of the idle timeout wakes each direction to check whether either
// moved bytes lately; after IdleTimeout of silence both are closed. With
// downWatch set (the pool's check closes connections of members it takes
// down), the directions wake at least every downPoll and close both sides
// once that member's check says down.
func (p *Proxy) pipe(l *ListenerSnapshot, client, up *net.TCPConn, member, downWatch *health.Target, t *tracked) {
	if p.relay != nil && p.pipeRing(l, client, up, member, downWatch, t) {
		return
	}
	idle := l.Limits.IdleTimeout
	pp := &pipe{client: client, up: up, idle: idle, tick: max(idle/4, 10*time.Millisecond), member: member, downWatch: downWatch}
	if downWatch != nil {
		pp.tick = min(pp.tick, downPoll)
	}
	pp.last.Store(time.Now().UnixNano())
	out, in := splice.New(p.pipes, client, up), splice.New(p.pipes, up, client)
	if l.cpu != nil {
		// Counted and paced as the bytes move, not only when a
		// direction pauses: a tenant in debt slows its open connections.
		// A message copied costs about what 64 KiB spliced cost (its
		// read, write and empty read: 13 µs against 17 on loopback), so
		// it counts at least a unit whatever its size.
		out.SetQuantum(relayQuantum)
		in.SetQuantum(relayQuantum)
		out.SetReadCost(1 << cpubudget.WorkBytesShift)
		in.SetReadCost(1 << cpubudget.WorkBytesShift)
	}
	var wg sync.WaitGroup
	wg.Go(func() {
		pp.copy(out, func(n int64) { p.metrics.BytesOut(l.LB, l.Name, n); l.cpu.Relay(bytesWork(out.TakeWeight())) })
	})
	pp.copy(in, func(n int64) { p.metrics.BytesIn(l.LB, l.Name, n); l.cpu.Relay(bytesWork(in.TakeWeight())) })
	wg.Wait()
	pp.end(false)
}

// relayQuantum is what a direction of an L4 connection moves at most
// between two looks at its tenant's host CPU budget (cpubudget.Relay):
// 4 units of work (256 KiB, or 4 small messages copied). A tenant in debt waits there, so its open
// connections slow with its new ones, and its neighbours' never wait.
const relayQuantum = 4 << cpubudget.WorkBytesShift

// downPoll is how often a connection whose pool closes connections of
// members taken down looks at its member's check.
const downPoll = 500 * time.Millisecond

type pipe struct {
	client, up *net.TCPConn
	idle, tick time.Duration
	// member is the member's live state: a reset it sends counts in its
	// passive window.
	member    *health.Target
	downWatch *health.Target
	// last is when bytes last moved either way, in Unix nanoseconds.
	last atomic.Int64
	once sync.Once
	// reset: the member's reset was counted.
	reset atomic.Bool
}

// copy moves sp's source to its destination until the source's half
// ends or the pipe does; count counts what each Move moved (and may wait
// there: the tenant's CPU budget).
func (pp *pipe) copy(sp *splice.Splicer, count func(int64)) {
	defer sp.Close()
	dst, src := sp.Dst(), sp.Src()
	for {
		if err := src.SetReadDeadline(time.Now().Add(pp.tick)); err != nil {
			pp.end(true)
			return
		}
		n, err := sp.Move()
		if n > 0 {
			pp.last.Store(time.Now().UnixNano())
			count(n) // may wait for the tenant's CPU budget
		}
		switch {
		case errors.Is(err, splice.ErrQuantum):
			continue
		case err == nil:
			dst.CloseWrite()
			return
		case errors.Is(err, os.ErrDeadlineExceeded):
			if pp.downWatch != nil && pp.downWatch.CheckedDown() {
				pp.end(false)
				return
			}
			if time.Since(time.Unix(0, pp.last.Load())) < pp.idle {
				continue
			}
			pp.end(false)
			return
		default:
			pp.memberFailed()
			pp.end(true)
			return
		}
	}
}

// memberFailed counts, once per connection, a reset the member sent: a
// copy failed and the member's socket is closed by the peer (a client
// that resets leaves the member's socket established, so it does not
// count against the member).
func (pp *pipe) memberFailed() {
	if pp.member == nil || !peerReset(pp.up) || !pp.reset.CompareAndSwap(false, true) {
		return
	}
	pp.member.RecordFailure(health.OutcomeReset)
}

// end closes both sides once: with a reset after a failure, gracefully
// otherwise.
func (pp *pipe) end(reset bool) {
	pp.once.Do(func() {
		if reset {
			pp.client.SetLinger(0)
			pp.up.SetLinger(0)
		}
		pp.client.Close()
		pp.up.Close()
	})
}

// bytesWork is the work n bytes relayed count in the tenant's host CPU
// budget: a unit per 64 KiB begun.
func bytesWork(n int64) int64 {
	return (n + 1<<cpubudget.WorkBytesShift - 1) >> cpubudget.WorkBytesShift
}

// byteMeter counts one direction's bytes in units of work, a unit per
// 64 KiB moved, carrying the rest to the next count (a copy loop moves a
// buffer at a time: rounding each up would charge a unit per read).
type byteMeter struct{ carry int64 }

// message adds a message of n bytes moved on its own (a receive and a
// send): it weighs at least a unit, what its system calls cost whatever
// its size, and returns the whole units completed.
func (m *byteMeter) message(n int64) int64 {
	if n <= 0 {
		return m.units(0)
	}
	return m.units(max(n, 1<<cpubudget.WorkBytesShift))
}

// units adds n bytes and returns the whole units they complete.
func (m *byteMeter) units(n int64) int64 {
	m.carry += n
	u := m.carry >> cpubudget.WorkBytesShift
	m.carry -= u << cpubudget.WorkBytesShift
	return u
}
