package l7

import (
	"context"
	"crypto/tls"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

// Errors a request to a member ends with; Member.Done receives them
// (wrapped).
var (
	// ErrConnect: the member could not be dialled.
	ErrConnect = errors.New("connect to member")
	// ErrUpstreamTimeout: a connect, response head or body timeout.
	ErrUpstreamTimeout = errors.New("member timed out")
	// ErrUpstreamClosed: the member closed or reset the connection early.
	ErrUpstreamClosed = errors.New("member closed the connection")
	// ErrUpstreamProtocol: the member's response is not valid HTTP.
	ErrUpstreamProtocol = errors.New("malformed response from member")
)

// upBufSize is the read buffer of a member connection.
const upBufSize = 16 << 10

// staleAfter is how long a connection may sit unused before it is checked
// for a close by the member before reuse.
const staleAfter = int64(time.Second)

// poolKey names a pool of connections to one member: its address, the
// protocol, and for TLS the configuration that verified the member
// (BackendOptions.TLS, never modified once published: its server name,
// CAs and client certificate), so that backends verifying a member
// differently never share a connection, and the budget its connections
// are charged to (BackendOptions.Budget), so that tenants never share one.
type poolKey struct {
	addr   netip.AddrPort
	proto  Protocol
	tls    *tls.Config
	budget *MemberBudget
	dialer Dialer
}

// keyOf is the pool key of member addr under opts, speaking proto.
func keyOf(addr netip.AddrPort, proto Protocol, opts *BackendOptions) poolKey {
	k := poolKey{addr: addr, proto: proto, budget: opts.Budget, dialer: opts.Dialer}
	if proto == HTTP1TLS || proto == H2TLS {
		k.tls = opts.TLS
	}
	return k
}

// upConn is one connection to a member.
type upConn struct {
	nc  net.Conn
	raw *net.TCPConn // the TCP connection under nc
	tcp *net.TCPConn // nc itself when it is bare TCP (splice)
	key poolKey
	// pool is the pool u was last kept in (nil before it first was):
	// putting u back there takes no lookup of key (see pools.putBack).
	pool *memberPool
	// private connections carry a PROXY protocol header and serve a
	// single client connection.
	private bool

	readBuf
	resp respHead

	idleAt   int64 // unix nanos when it was last released
	rdl, wdl int64 // deadlines set, unix nanos
	got      int   // bytes received for the current request

	aw      *rawAwait // sendAwait's state on a bare TCP connection
	pending error     // a read error sendAwait met, for the next fill

	// charged is the budget the connection's descriptor is charged to,
	// until it closes.
	charged atomic.Pointer[MemberBudget]
}

// fill reads more of the member's bytes into rb.
func (u *upConn) fill() error {
	if err := u.pending; err != nil {
		u.pending = nil
		return err
	}
	n, err := u.fillFrom(u.nc, ErrUpstreamProtocol)
	u.got += n
	return err
}

func (u *upConn) setReadDeadline(now int64, d time.Duration) error {
	return setDeadline(u.nc.SetReadDeadline, &u.rdl, now, d)
}

func (u *upConn) setWriteDeadline(now int64, d time.Duration) error {
	return setDeadline(u.nc.SetWriteDeadline, &u.wdl, now, d)
}

// setDeadline moves a deadline to now+d, skipping the call when the
// deadline already set is later than now+d by less than d/16: a timer
// update per request is measurable on the fast path.
func setDeadline(set func(time.Time) error, cur *int64, now int64, d time.Duration) error {
	want := now + int64(d)
	if *cur != 0 && want >= *cur && want-*cur < int64(d)>>4 {
		return nil
	}
	*cur = want
	return set(timeAt(want))
}

// memberPool holds the idle connections to one member, newest last.
type memberPool struct {
	key  poolKey
	mu   sync.Mutex
	idle []*upConn
	used atomic.Int64
	// gone is set (under mu) when the pool leaves its map (pools.prune,
	// pools.closeAll): it keeps no connection from then on.
	gone atomic.Bool
}

// take returns the newest idle connection, closing the ones idle longer
// than maxIdle.
func (p *memberPool) take(now int64, maxIdle time.Duration) *upConn {
	p.used.Store(now)
	p.mu.Lock()
	for n := len(p.idle); n > 0; n = len(p.idle) {
		u := p.idle[n-1]
		p.idle[n-1] = nil
		p.idle = p.idle[:n-1]
		if now-u.idleAt < int64(maxIdle) {
			p.mu.Unlock()
			return u
		}
		// The newest is too old, so all are.
		p.mu.Unlock()
		u.close()
		p.mu.Lock()
	}
	p.mu.Unlock()
	return nil
}

// put keeps u for reuse, or reports false when the pool is full or has
// left its map (gone).
func (p *memberPool) put(u *upConn, max int) (kept, gone bool) {
	p.mu.Lock()
	if p.gone.Load() || len(p.idle) >= max {
		gone = p.gone.Load()
		p.mu.Unlock()
		return false, gone
	}
	u.pool = p
	p.idle = append(p.idle, u)
	p.mu.Unlock()
	return true, false
}

// prune closes the connections idle since before cutoff and reports
// whether the pool is empty.
func (p *memberPool) prune(cutoff int64) (empty bool) {
	p.mu.Lock()
	i := 0
	for i < len(p.idle) && p.idle[i].idleAt < cutoff {
		i++
	}
	old := append([]*upConn(nil), p.idle[:i]...)
	n := copy(p.idle, p.idle[i:])
	clear(p.idle[n:])
	p.idle = p.idle[:n]
	empty = n == 0
	p.mu.Unlock()
	for _, u := range old {
		u.close()
	}
	return empty
}

func (p *memberPool) closeAll() {
	p.mu.Lock()
	idle := p.idle
	p.idle = nil
	p.gone.Store(true)
	p.mu.Unlock()
	for _, u := range idle {
		u.close()
	}
}

const poolShards = 32

// pools maps members to their pools, sharded to keep lookups cheap.
type pools struct {
	shards [poolShards]struct {
		mu sync.RWMutex
		m  map[poolKey]*memberPool
		_  [40]byte
	}
}

func (k poolKey) shard() int {
	a := k.addr.Addr().As16()
	h := uint32(2166136261)
	for _, c := range a[8:] {
		h = (h ^ uint32(c)) * 16777619
	}
	h = (h ^ uint32(k.addr.Port())) * 16777619
	return int(h % poolShards)
}

func (ps *pools) get(k poolKey) *memberPool {
	sh := &ps.shards[k.shard()]
	sh.mu.RLock()
	p := sh.m[k]
	sh.mu.RUnlock()
	if p != nil {
		return p
	}
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if p = sh.m[k]; p == nil {
		if sh.m == nil {
			sh.m = make(map[poolKey]*memberPool)
		}
		p = &memberPool{key: k}
		sh.m[k] = p
		if k.budget != nil {
			k.budget.addPool(p)
		}
	}
	return p
}

// poolOf returns the pool of key: the one last holds when it is key's
// and still in its map, else the map's, which last then holds. A
// connection's streams mostly go to one member; last saves them the
// lookup.
func (ps *pools) poolOf(key poolKey, last *atomic.Pointer[memberPool]) *memberPool {
	if p := last.Load(); p != nil && p.key == key && !p.gone.Load() {
		return p
	}
	p := ps.get(key)
	last.Store(p)
	return p
}

// putBack keeps u for reuse in its member's pool, or reports false when
// that pool is full. The pool u was last kept in serves while it is in
// its map, without a lookup of u.key (whose Dialer, an interface, costs
// a hash of its type): an HTTP/2 stream's connection goes back each
// request. One that has left the map (gone) sends u to the member's
// current pool.
func (ps *pools) putBack(u *upConn, max int) bool {
	for {
		p := u.pool
		if p == nil {
			p = ps.get(u.key)
		}
		kept, gone := p.put(u, max)
		if !gone {
			return kept
		}
		u.pool = nil
	}
}

// prune closes connections idle since before cutoff and forgets pools
// unused since before forget.
func (ps *pools) prune(cutoff, forget int64) {
	for i := range ps.shards {
		sh := &ps.shards[i]
		sh.mu.RLock()
		list := make([]*memberPool, 0, len(sh.m))
		for _, p := range sh.m {
			list = append(list, p)
		}
		sh.mu.RUnlock()
		for _, p := range list {
			if p.prune(cutoff) && p.used.Load() < forget {
				sh.mu.Lock()
				// Recheck under the lock: a racing put leaves the pool
				// in the map.
				p.mu.Lock()
				gone := len(p.idle) == 0
				if gone {
					delete(sh.m, p.key)
					p.gone.Store(true)
				}
				p.mu.Unlock()
				sh.mu.Unlock()
				if gone && p.key.budget != nil {
					p.key.budget.dropPool(p)
				}
			}
		}
	}
}

func (ps *pools) closeAll() {
	for i := range ps.shards {
		sh := &ps.shards[i]
		sh.mu.Lock()
		m := sh.m
		sh.m = nil
		sh.mu.Unlock()
		for _, p := range m {
			p.closeAll()
		}
	}
}

// proxyAddrs are the addresses a PROXY protocol header reports.
type proxyAddrs struct {
	src, dst netip.AddrPort
}

// dial opens a connection to a member.
func (s *Server) dial(ctx context.Context, key poolKey, opts *BackendOptions, pp *proxyAddrs) (*upConn, error) {
	timeout := opts.ConnectTimeout
	if timeout <= 0 {
		timeout = s.cfg.ConnectTimeout
	}
	if err := s.charge(ctx, key); err != nil {
		return nil, err
	}
	u, err := s.dialCharged(ctx, key, opts, pp, timeout)
	if err != nil && key.budget != nil {
		key.budget.d.ReleaseDescriptor()
	}
	return u, err
}

// dialCharged dials once the connection's descriptor is charged; the
// connection gives it back when it closes.
func (s *Server) dialCharged(ctx context.Context, key poolKey, opts *BackendOptions, pp *proxyAddrs, timeout time.Duration) (*upConn, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	d := net.Dialer{KeepAlive: 30 * time.Second}
	var nc net.Conn
	var err error
	if key.dialer != nil {
		nc, err = key.dialer.DialContext(ctx, &d, "tcp", key.addr.String())
	} else {
		nc, err = d.DialContext(ctx, "tcp", key.addr.String())
	}
	if err != nil {
		return nil, dialError(err)
	}
	raw := nc.(*net.TCPConn)
	if pp != nil && opts.ProxyProtocol != 0 {
		hdr := appendProxyHeader(nil, opts.ProxyProtocol, pp.src, pp.dst)
		_ = raw.SetWriteDeadline(time.Now().Add(timeout))
		if _, err := raw.Write(hdr); err != nil {
			raw.Close()
			return nil, dialError(err)
		}
	}
	u := &upConn{nc: nc, raw: raw, tcp: raw, key: key, private: opts.ProxyProtocol != 0, readBuf: readBuf{rb: make([]byte, upBufSize)}}
	if key.proto == HTTP1TLS || key.proto == H2TLS {
		cfg := opts.TLS
		if cfg == nil {
			cfg = &tls.Config{InsecureSkipVerify: true} //nolint:gosec // members are addressed by IP; see BackendOptions.TLS
		}
		cfg = cfg.Clone()
		cfg.NextProtos = []string{"http/1.1"}
		if key.proto == H2TLS {
			cfg.NextProtos = []string{"h2"}
		}
		if hc, ok := key.budgetDescriptors().(HandshakeCharger); ok {
			if err := hc.ChargeHandshake(); err != nil {
				raw.Close()
				return nil, fmt.Errorf("%w: the TLS handshake to the member is over the tenant's handshake budget: %w", ErrMemberLimit, err)
			}
		}
		tc := tls.Client(nc, cfg)
		if err := tc.HandshakeContext(ctx); err != nil {
			raw.Close()
			return nil, dialError(err)
		}
		if key.proto == H2TLS && tc.ConnectionState().NegotiatedProtocol != "h2" {
			raw.Close()
			return nil, fmt.Errorf("%w: member did not negotiate h2 (ALPN)", ErrConnect)
		}
		u.nc, u.tcp = tc, nil
	}
	u.aw = newRawAwait(u.tcp)
	u.charged.Store(key.budget)
	return u, nil
}

func dialError(err error) error {
	if isTimeout(err) || errors.Is(err, context.DeadlineExceeded) {
		return fmt.Errorf("%w: %w: %w", ErrConnect, ErrUpstreamTimeout, err)
	}
	return fmt.Errorf("%w: %w", ErrConnect, err)
}

func (u *upConn) close() {
	if u.nc != nil {
		_ = u.nc.Close()
	}
	if b := u.charged.Swap(nil); b != nil {
		b.d.ReleaseDescriptor()
	}
}

// shutdown ends the connection both ways without closing it, from any
// goroutine (ConnState.Cut): a read or a wait for the member's bytes
// returns at once (EOF), whatever deadline is set after it. Its user
// closes it.
func (u *upConn) shutdown() {
	if u.raw != nil {
		_ = u.raw.CloseRead()
		_ = u.raw.CloseWrite()
	}
}

func isTimeout(err error) bool {
	if errors.Is(err, os.ErrDeadlineExceeded) {
		return true
	}
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// statusFor maps a failed exchange with a member to the client's status.
func statusFor(err error) int {
	if errors.Is(err, ErrMemberLimit) {
		return 503
	}
	if errors.Is(err, ErrUpstreamTimeout) {
		return 504
	}
	return 502
}

var proxyV2Sig = []byte("\r\n\r\n\x00\r\nQUIT\n")

// appendProxyHeader appends a PROXY protocol header (version 1 or 2) for
// a TCP connection from src to dst. Mixed families are sent as IPv6.
func appendProxyHeader(b []byte, version uint8, src, dst netip.AddrPort) []byte {
	sa, da := src.Addr().Unmap(), dst.Addr().Unmap()
	valid := sa.IsValid() && da.IsValid()
	v4 := valid && sa.Is4() && da.Is4()
	if valid && !v4 {
		sa, da = netip.AddrFrom16(sa.As16()), netip.AddrFrom16(da.As16())
	}
	if version == 1 {
		if !valid {
			return append(b, "PROXY UNKNOWN\r\n"...)
		}
		fam := "PROXY TCP6 "
		if v4 {
			fam = "PROXY TCP4 "
		}
		b = append(b, fam...)
		b = sa.AppendTo(b)
		b = append(b, ' ')
		b = da.AppendTo(b)
		b = append(b, ' ')
		b = strconv.AppendUint(b, uint64(src.Port()), 10)
		b = append(b, ' ')
		b = strconv.AppendUint(b, uint64(dst.Port()), 10)
		return append(b, "\r\n"...)
	}
	b = append(b, proxyV2Sig...)
	switch {
	case !valid:
		return append(b, 0x20, 0x00, 0, 0) // LOCAL, no address
	case v4:
		b = append(b, 0x21, 0x11, 0, 12)
		s4, d4 := sa.As4(), da.As4()
		b = append(b, s4[:]...)
		b = append(b, d4[:]...)
	default:
		b = append(b, 0x21, 0x21, 0, 36)
		s16, d16 := sa.As16(), da.As16()
		b = append(b, s16[:]...)
		b = append(b, d16[:]...)
	}
	b = binary.BigEndian.AppendUint16(b, src.Port())
	return binary.BigEndian.AppendUint16(b, dst.Port())
}
