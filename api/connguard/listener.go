package connguard

import (
	"net"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc/credentials"

	"github.com/teapot-lb/teapot-lb/api/pki"
)

// Listener returns ln bounded by g: Accept returns only connections g
// admits, with their handshake deadline set, and closes the others at
// once. Serve it with g.Credentials.
func (g *Guard) Listener(ln net.Listener) net.Listener { return &listener{Listener: ln, g: g} }

type listener struct {
	net.Listener
	g *Guard
}

// Accept waits for a connection that g admits. Connections over a bound
// are closed (with a reset, so that they leave nothing behind) without
// returning: an error would stop gRPC's Serve.
func (l *listener) Accept() (net.Conn, error) {
	for {
		raw, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		c := &conn{Conn: raw, g: l.g}
		victim, reason := l.g.admit(c)
		if victim != nil {
			// Close waits for the victim's handshake goroutine to
			// leave its read; Accept does not.
			go l.g.reset(victim)
		}
		if reason != "" {
			abort(raw)
			continue
		}
		c.deadline = l.g.now().Add(l.g.lim.HandshakeTimeout)
		_ = raw.SetDeadline(c.deadline)
		return c, nil
	}
}

// abort closes a connection with a reset.
func abort(c net.Conn) {
	if tc, ok := c.(*net.TCPConn); ok {
		_ = tc.SetLinger(0)
	}
	_ = c.Close()
}

// conn is an accepted connection, counted by its Guard until it closes.
type conn struct {
	net.Conn
	g *Guard
	// deadline ends the TLS handshake and gRPC's preface.
	deadline time.Time
	once     sync.Once
	// ready is set when gRPC clears the deadline: the handshake and the
	// preface are done.
	ready atomic.Bool

	// Guarded by g.mu.
	state      int
	evicted    bool // evicted, and not closed yet
	resets     int  // resets from other goroutines under way (Guard.reset)
	closed     bool // the owner's Close has returned
	class      class
	src        *source
	prev, next *conn
	lifetime   *time.Timer
}

// SetDeadline notes when gRPC clears the deadline it set for the
// handshake and the preface.
func (c *conn) SetDeadline(t time.Time) error {
	if t.IsZero() {
		c.ready.Store(true)
	}
	return c.Conn.SetDeadline(t)
}

// Close closes the connection and then uncounts it, or leaves that to a
// reset under way: its descriptor is counted until it is closed.
func (c *conn) Close() error {
	err := c.Conn.Close()
	c.once.Do(func() {
		if c.g.release(c) && !c.ready.Load() && !c.g.now().Before(c.deadline) {
			c.g.timedOut()
		}
	})
	return err
}

// abort closes a connection with a reset: one evicted, refused or
// expired. Its owner's Close, or Guard.reset if that returns later,
// then uncounts it.
func (c *conn) abort() { abort(c.Conn) }

// Credentials returns tc bounded by g: the server handshake of a
// connection from g's listener ends at the connection's deadline, and a
// finished one is counted in the class of its client certificate, or
// refused when that class is at its bound.
func (g *Guard) Credentials(tc credentials.TransportCredentials) credentials.TransportCredentials {
	return &creds{TransportCredentials: tc, g: g}
}

type creds struct {
	credentials.TransportCredentials
	g *Guard
}

func (t *creds) ServerHandshake(raw net.Conn) (net.Conn, credentials.AuthInfo, error) {
	c, ok := raw.(*conn)
	if !ok || c.g != t.g {
		return t.TransportCredentials.ServerHandshake(raw)
	}
	// gRPC set its own (longer) connection timeout.
	_ = raw.SetDeadline(c.deadline)
	out, info, err := t.TransportCredentials.ServerHandshake(raw)
	if err != nil {
		// gRPC closes raw, which counts a timeout.
		return nil, nil, err
	}
	id, authenticated := identity(info)
	if err := t.g.promote(c, id, authenticated); err != nil {
		c.abort()
		return nil, nil, err
	}
	return out, info, nil
}

// identity is the teapot-lb identity of a verified client certificate.
func identity(info credentials.AuthInfo) (pki.Identity, bool) {
	ti, ok := info.(credentials.TLSInfo)
	if !ok || len(ti.State.VerifiedChains) == 0 || len(ti.State.VerifiedChains[0]) == 0 {
		return pki.Identity{}, false
	}
	id, err := pki.IdentityOf(ti.State.VerifiedChains[0][0])
	return id, err == nil
}

func (t *creds) Clone() credentials.TransportCredentials {
	return &creds{TransportCredentials: t.TransportCredentials.Clone(), g: t.g}
}
