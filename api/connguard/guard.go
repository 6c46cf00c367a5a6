// Package connguard bounds the connections of an LB host's API port, which
// tenant clusters must reach: a connection holds a descriptor before it
// has said who it is, so unauthenticated connections are bounded per
// source and in total and given a deadline, and authenticated ones are
// bounded in total and per tenant, with room kept for the admin and the
// other LB hosts.
//
// A Guard wraps the port's listener (Listener) and gRPC's transport
// credentials (Credentials). The listener counts every accepted
// connection as unauthenticated against its source (an IPv4 address or
// an IPv6 /64) and the total, and sets its handshake deadline; it never
// blocks on a client, since gRPC handshakes each connection in a
// goroutine of its own. The credentials run the TLS handshake and then
// move the connection to the class of its client certificate (admin,
// node, or one tenant), or, without one, keep it unauthenticated for a
// bounded lifetime (a host joining with a token).
//
// Over a source's bound the newcomer is closed at once. At the total
// bound a newcomer whose source holds none or one unauthenticated
// connection, fewer than the source that holds the most, takes the place
// of that source's oldest; otherwise it is closed. So a flood from any
// number of sources never keeps out a client that is not itself
// flooding (the admin's CLI, a tenant's agent, a joining host), and the
// flood's own sources do not churn each other's connections.
package connguard

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"github.com/teapot-lb/teapot-lb/api/pki"
)

// Sentinel errors of refusals at the end of a TLS handshake.
var (
	// ErrRefused marks a connection closed because of a bound.
	ErrRefused = errors.New("API connection refused")
)

// Reasons a connection is refused or closed, the label of
// teapot_lb_api_connections_refused_total.
const (
	ReasonSource        = "source"            // its source holds PerSource unauthenticated connections
	ReasonUnauth        = "unauthenticated"   // Unauthenticated are held and no source holds more than its own
	ReasonEvicted       = "evicted"           // made room at the Unauthenticated bound for a lighter source
	ReasonTimeout       = "handshake_timeout" // no TLS handshake and preface within HandshakeTimeout
	ReasonLifetime      = "anonymous_lifetime"
	ReasonAuthenticated = "authenticated" // Authenticated are held
	ReasonTenants       = "tenants"       // Tenants are held by tenant certificates
	ReasonTenant        = "tenant"        // its tenant holds PerTenant
)

var reasons = [...]string{ReasonSource, ReasonUnauth, ReasonEvicted, ReasonTimeout, ReasonLifetime, ReasonAuthenticated, ReasonTenants, ReasonTenant}

func reasonIndex(r string) int {
	for i, x := range reasons {
		if x == r {
			return i
		}
	}
	panic("connguard: unknown reason " + r)
}

// Config configures a Guard.
type Config struct {
	// Limits; zero fields are derived from the descriptor limit.
	Limits Limits
	// Logger receives the refusals, at most one line per reason every
	// logEvery.
	Logger *slog.Logger
	// now is the clock (tests).
	now func() time.Time
}

// evictBelow: at the total bound, only a newcomer whose source holds
// fewer unauthenticated connections than this may take the place of
// another's (a client's handshake takes milliseconds; a flood's sources
// hold many and do not take each other's places).
const evictBelow = 2

// MaxClosing bounds the evicted connections whose descriptors are not
// closed yet (a goroutine of their own resets each; it is counted until
// that reset and its owner's Close have both returned): the descriptors
// of unauthenticated connections never exceed Unauthenticated+MaxClosing+1,
// the one being the connection the listener has just accepted and is
// closing because it is over a bound.
const MaxClosing = 8

// logEvery is the least time between two log lines of one reason.
const logEvery = 10 * time.Second

// Guard bounds the connections of one API port.
type Guard struct {
	lim Limits
	log *slog.Logger
	now func() time.Time

	accepted atomic.Uint64
	refused  [len(reasons)]atomic.Uint64

	mu sync.Mutex
	// sources are the sources holding unauthenticated connections;
	// byCount[n] those holding n.
	sources map[netip.Prefix]*source
	byCount []map[*source]struct{}
	// Open connections by state.
	handshaking, anonymous, admin, node, tenants int
	// closing counts the evicted connections not closed yet.
	closing   int
	perTenant map[string]int
	// Peaks since New: unauthenticated connections, and of one source.
	peakUnauth, peakSource int
	// logged is when each reason was last logged, and how many were
	// refused since.
	logged  [len(reasons)]time.Time
	pending [len(reasons)]int
}

// source is the unauthenticated connections of one source, oldest first.
type source struct {
	key         netip.Prefix
	first, last *conn
	n           int
}

// New returns a Guard with cfg's limits, zero ones derived from the
// process's descriptor limit.
func New(cfg Config) *Guard {
	g := &Guard{
		lim: cfg.Limits.withDefaults(DescriptorLimit()),
		log: cfg.Logger, now: cfg.now,
		sources: map[netip.Prefix]*source{}, perTenant: map[string]int{},
	}
	if g.log == nil {
		g.log = slog.New(slog.DiscardHandler)
	}
	g.log = g.log.With("component", "api")
	if g.now == nil {
		g.now = time.Now
	}
	g.byCount = make([]map[*source]struct{}, g.lim.PerSource+1)
	for i := range g.byCount {
		g.byCount[i] = map[*source]struct{}{}
	}
	l := g.lim
	g.log.Info("API connection bounds", "unauthenticated", l.Unauthenticated, "per-source", l.PerSource,
		"handshake-timeout", l.HandshakeTimeout, "authenticated", l.Authenticated, "tenants", l.Tenants, "per-tenant", l.PerTenant)
	return g
}

// Limits returns the bounds in force.
func (g *Guard) Limits() Limits { return g.lim }

// sourceKey is the source a bound applies to: an IPv4 address, or the
// /64 of an IPv6 address. Addresses of other kinds share one source.
func sourceKey(a net.Addr) netip.Prefix {
	ta, ok := a.(*net.TCPAddr)
	if !ok {
		return netip.Prefix{}
	}
	ip, ok := netip.AddrFromSlice(ta.IP)
	if !ok {
		return netip.Prefix{}
	}
	ip = ip.Unmap()
	bits := 32
	if ip.Is6() {
		bits = 64
	}
	p, _ := ip.Prefix(bits)
	return p
}

// connection states
const (
	stHandshake = iota
	stAnonymous
	stAuthenticated
	stGone
)

// admit counts a new connection, or refuses it (reason). It may evict
// another unauthenticated connection to make room: the caller closes
// victim after admit returns.
func (g *Guard) admit(c *conn) (victim *conn, reason string) {
	key := sourceKey(c.RemoteAddr())
	g.accepted.Add(1)
	g.mu.Lock()
	defer g.mu.Unlock()
	s := g.sources[key]
	held := 0
	if s != nil {
		held = s.n
	}
	if held >= g.lim.PerSource {
		g.refuseLocked(ReasonSource, g.lim.PerSource)
		return nil, ReasonSource
	}
	if g.handshaking+g.anonymous >= g.lim.Unauthenticated {
		h := g.heaviestLocked()
		if held >= evictBelow || h == nil || h.n <= held || g.closing >= MaxClosing {
			g.refuseLocked(ReasonUnauth, g.lim.Unauthenticated)
			return nil, ReasonUnauth
		}
		victim = h.first
		g.dropLocked(victim)
		victim.state, victim.evicted = stGone, true
		victim.resets++
		g.closing++
		g.refuseLocked(ReasonEvicted, g.lim.Unauthenticated)
	}
	if s == nil {
		s = &source{key: key}
		g.sources[key] = s
	}
	c.state = stHandshake
	g.handshaking++
	g.pushLocked(s, c)
	g.peakUnauth = max(g.peakUnauth, g.handshaking+g.anonymous)
	g.peakSource = max(g.peakSource, s.n)
	return victim, ""
}

// heaviestLocked is a source holding the most unauthenticated
// connections.
func (g *Guard) heaviestLocked() *source {
	for n := len(g.byCount) - 1; n > 0; n-- {
		for s := range g.byCount[n] {
			return s
		}
	}
	return nil
}

// pushLocked appends c to s's connections.
func (g *Guard) pushLocked(s *source, c *conn) {
	c.src, c.prev, c.next = s, s.last, nil
	if s.last != nil {
		s.last.next = c
	} else {
		s.first = c
	}
	s.last = c
	g.recountLocked(s, s.n+1)
}

// dropLocked removes an unauthenticated c from its source and the counts.
func (g *Guard) dropLocked(c *conn) {
	s := c.src
	if c.prev != nil {
		c.prev.next = c.next
	} else {
		s.first = c.next
	}
	if c.next != nil {
		c.next.prev = c.prev
	} else {
		s.last = c.prev
	}
	c.prev, c.next, c.src = nil, nil, nil
	g.recountLocked(s, s.n-1)
	if s.n == 0 {
		delete(g.sources, s.key)
	}
	switch c.state {
	case stHandshake:
		g.handshaking--
	case stAnonymous:
		g.anonymous--
	}
}

func (g *Guard) recountLocked(s *source, n int) {
	delete(g.byCount[s.n], s)
	s.n = n
	if n > 0 {
		g.byCount[n][s] = struct{}{}
	}
}

// class is who an authenticated connection belongs to.
type class struct {
	role   string
	tenant string
}

// promote moves c, whose handshake has finished, to the class of its
// client certificate (ok) or keeps it unauthenticated as anonymous. It
// refuses c when the class is at a bound, and when c was evicted or
// closed meanwhile.
func (g *Guard) promote(c *conn, id pki.Identity, ok bool) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	if c.state != stHandshake {
		return fmt.Errorf("connection from %s closed during its handshake: %w", c.RemoteAddr(), ErrRefused)
	}
	if !ok {
		g.handshaking--
		g.anonymous++
		c.state = stAnonymous
		c.lifetime = time.AfterFunc(g.lim.AnonymousLifetime, func() { g.expire(c) })
		return nil
	}
	var reason string
	var bound int
	switch total := g.admin + g.node + g.tenants; {
	case total >= g.lim.Authenticated:
		reason, bound = ReasonAuthenticated, g.lim.Authenticated
	case id.Role == pki.RoleTenant && g.tenants >= g.lim.Tenants:
		reason, bound = ReasonTenants, g.lim.Tenants
	case id.Role == pki.RoleTenant && g.perTenant[id.Name] >= g.lim.PerTenant:
		reason, bound = ReasonTenant, g.lim.PerTenant
	}
	if reason != "" {
		// Counted until gRPC closes it.
		g.refuseLocked(reason, bound)
		return fmt.Errorf("%s: %d %s connections are open: %w", id, bound, reason, ErrRefused)
	}
	g.dropLocked(c)
	c.state, c.class = stAuthenticated, class{role: id.Role}
	switch id.Role {
	case pki.RoleAdmin:
		g.admin++
	case pki.RoleTenant:
		c.class.tenant = id.Name
		g.tenants++
		g.perTenant[id.Name]++
	default:
		g.node++
	}
	return nil
}

// release notes that c's owner has closed c; it reports whether c was
// still counted (not evicted). c stays counted while a reset from
// another goroutine is under way: of two Closes of one descriptor the
// second returns at once, maybe before the first has closed it, so c is
// uncounted when both have returned.
func (g *Guard) release(c *conn) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	counted := c.state != stGone
	c.closed = true
	if c.resets == 0 {
		g.uncountLocked(c)
	}
	return counted
}

// reset closes c with a reset from a goroutine other than its owner's,
// counted in c.resets by the caller: an eviction, the end of an
// anonymous lifetime. It uncounts c if its owner has closed it already.
func (g *Guard) reset(c *conn) {
	c.abort()
	g.mu.Lock()
	defer g.mu.Unlock()
	if c.resets--; c.resets == 0 && c.closed {
		g.uncountLocked(c)
	}
}

// uncountLocked uncounts c, whose descriptor is closed.
func (g *Guard) uncountLocked(c *conn) {
	switch c.state {
	case stHandshake, stAnonymous:
		g.dropLocked(c)
	case stAuthenticated:
		switch c.class.role {
		case pki.RoleAdmin:
			g.admin--
		case pki.RoleTenant:
			g.tenants--
			if g.perTenant[c.class.tenant]--; g.perTenant[c.class.tenant] == 0 {
				delete(g.perTenant, c.class.tenant)
			}
		default:
			g.node--
		}
	default:
		if c.evicted {
			c.evicted = false
			g.closing--
		}
		return
	}
	c.state = stGone
	if c.lifetime != nil {
		c.lifetime.Stop()
	}
}

// expire closes an anonymous connection at the end of its lifetime; it
// stays counted until gRPC closes it.
func (g *Guard) expire(c *conn) {
	g.mu.Lock()
	if c.state != stAnonymous || c.closed {
		g.mu.Unlock()
		return
	}
	g.refuseLocked(ReasonLifetime, g.lim.AnonymousLifetime)
	c.resets++
	g.mu.Unlock()
	g.reset(c)
}

// timedOut counts a handshake that missed its deadline.
func (g *Guard) timedOut() {
	g.mu.Lock()
	g.refuseLocked(ReasonTimeout, g.lim.HandshakeTimeout)
	g.mu.Unlock()
}

// refuseLocked counts a refusal and logs it, at most once per reason
// every logEvery, with the number refused since the last line.
func (g *Guard) refuseLocked(reason string, bound any) {
	i := reasonIndex(reason)
	g.refused[i].Add(1)
	g.pending[i]++
	now := g.now()
	if now.Sub(g.logged[i]) < logEvery {
		return
	}
	n := g.pending[i]
	g.logged[i], g.pending[i] = now, 0
	g.log.Warn("API connections closed at a bound; the bounds grow with the descriptor limit (LimitNOFILE)",
		"reason", reason, "bound", bound, "closed", n, "since", logEvery)
}

// Stats are a Guard's counts.
type Stats struct {
	// Open connections.
	Handshaking, Anonymous, Admin, Node, Tenants int
	// Accepted counts the connections the listener accepted; Refused the
	// closed ones by reason.
	Accepted uint64
	Refused  map[string]uint64
	// PeakUnauthenticated and PeakSource are the most unauthenticated
	// connections held at once, in total and by one source.
	PeakUnauthenticated, PeakSource int
}

// Stats returns the counts now.
func (g *Guard) Stats() Stats {
	st := Stats{Accepted: g.accepted.Load(), Refused: map[string]uint64{}}
	for i, r := range reasons {
		st.Refused[r] = g.refused[i].Load()
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	st.Handshaking, st.Anonymous, st.Admin, st.Node, st.Tenants = g.handshaking, g.anonymous, g.admin, g.node, g.tenants
	st.PeakUnauthenticated, st.PeakSource = g.peakUnauth, g.peakSource
	return st
}
