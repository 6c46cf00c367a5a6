package tenantbgp

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"sync"
	"syscall"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/teapot-lb/teapot-lb/api"
)

// Attachments are the attached tenants' network namespaces on this host
// (vip/attach.Manager): the relay dials an attached tenant's speakers
// from inside its namespace and installs its routes in the namespace's
// table.
type Attachments interface {
	// DialInside dials addr from inside tenant's namespace: an error when
	// the attachment is not up on this host or the tenant has none here
	// (never a dial from the host's own table).
	DialInside(ctx context.Context, tenant string, d *net.Dialer, network, addr string) (net.Conn, error)
	// InNamespace runs fn on a thread inside tenant's namespace.
	InNamespace(tenant string, fn func() error) error
}

// An attached tenant's session is carried by a tunnel: gobgp cannot be
// given a dialer nor a namespace (v4.8.0 offers a local address, a local
// port and an interface to bind to, all in the host's namespace), so it
// dials a listener of the relay's own on a loopback address of the
// session's (loopbackBase and up), whose accepted connection the relay
// joins to one it dials from inside the tenant's namespace. The tenant
// side is the speaker's real session: TCP MD5 (bgp.password) and, for
// eBGP, a TTL of 1 are set on that socket, as gobgp sets them on its
// own. The loopback side is gobgp's alone: it dials from the session's
// loopback address with a TCP MD5 key drawn at random when the relay
// starts, which the listener requires of that address, and the listener
// drops a connection from any other address.
var loopbackBase = netip.MustParseAddr("127.77.0.1")

// tunnelRetry is how often a tunnel dials the tenant's speaker again
// while gobgp's connection waits, and tunnelBuffer the most gobgp may
// send meanwhile (its OPEN).
const (
	tunnelRetry  = time.Second
	tunnelBuffer = 64 << 10
)

// tunnel carries one attached session.
type tunnel struct {
	att      Attachments
	tenant   string
	local    netip.Addr // the session's loopback address, gobgp's peer
	remote   netip.AddrPort
	password string
	ttl      int
	ln       net.Listener

	mu sync.Mutex
	// up: the tenant side is connected; err: why the last dial failed
	// (while gobgp's connection waits); cur: gobgp's connection.
	up   bool
	err  error
	cur  net.Conn
	done bool
}

// newLoopbackSecret is the key gobgp's connections to the tunnels are
// signed with.
func newLoopbackSecret() string {
	b := make([]byte, 24)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// openTunnel listens on local (a port the kernel picks) for gobgp's
// connections, signed with secret.
func openTunnel(att Attachments, tenant string, local netip.Addr, remote netip.AddrPort, password, secret string, ttl int) (*tunnel, error) {
	lc := net.ListenConfig{Control: func(_, _ string, c syscall.RawConn) error {
		return setMD5(c, local, secret)
	}}
	ln, err := lc.Listen(context.Background(), "tcp4", netip.AddrPortFrom(local, 0).String())
	if err != nil {
		return nil, fmt.Errorf("listen for the session on %s: %w", local, err)
	}
	t := &tunnel{att: att, tenant: tenant, local: local, remote: remote, password: password, ttl: ttl, ln: ln}
	go t.accept()
	return t, nil
}

// port is the listener's port (gobgp's remote port for the session).
func (t *tunnel) port() uint16 { return uint16(t.ln.Addr().(*net.TCPAddr).Port) }

// state is the tenant side's state: whether it is connected, and why
// the last dial failed while gobgp waited.
func (t *tunnel) state() (bool, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.up, t.err
}

func (t *tunnel) close() {
	t.mu.Lock()
	t.done = true
	if t.cur != nil {
		t.cur.Close()
	}
	t.mu.Unlock()
	t.ln.Close()
}

func (t *tunnel) accept() {
	for {
		c, err := t.ln.Accept()
		if err != nil {
			return
		}
		if ap, err := netip.ParseAddrPort(c.RemoteAddr().String()); err != nil || ap.Addr().Unmap() != t.local {
			c.Close() // not gobgp's
			continue
		}
		t.mu.Lock()
		if t.done {
			t.mu.Unlock()
			c.Close()
			return
		}
		if t.cur != nil {
			// gobgp's connection in place is still carried: as in a BGP
			// connection collision, the one in place stays (a dial of its
			// connect loop that crossed the session's establishment must
			// not cut it). One gobgp gave up on is closed by gobgp, which
			// ends its carry and frees the place.
			t.mu.Unlock()
			c.Close()
			continue
		}
		t.cur = c
		t.mu.Unlock()
		go t.carry(c)
	}
}

// carry dials the tenant's speaker from inside its namespace, every
// tunnelRetry until it answers or gobgp closes c, and then copies both
// ways until either side closes. What gobgp sends meanwhile (its OPEN)
// is kept and sent first.
func (t *tunnel) carry(c net.Conn) {
	defer func() {
		c.Close()
		t.mu.Lock()
		if t.cur == c {
			t.cur, t.up = nil, false
		}
		t.mu.Unlock()
	}()
	var held []byte
	b := make([]byte, 4096)
	var tc net.Conn
	for {
		d := &net.Dialer{Timeout: 3 * time.Second, KeepAlive: -1, Control: func(_, _ string, rc syscall.RawConn) error {
			if err := setMD5(rc, t.remote.Addr(), t.password); err != nil {
				return err
			}
			return setTTL(rc, t.remote.Addr(), t.ttl)
		}}
		conn, err := t.att.DialInside(context.Background(), t.tenant, d, "tcp", t.remote.String())
		t.mu.Lock()
		t.err = err
		t.mu.Unlock()
		if err == nil {
			tc = conn
			break
		}
		// Wait tunnelRetry, reading what gobgp sends; its close ends it.
		_ = c.SetReadDeadline(time.Now().Add(tunnelRetry))
		for {
			n, rerr := c.Read(b)
			held = append(held, b[:n]...)
			if ne, ok := rerr.(net.Error); ok && ne.Timeout() {
				break
			}
			if rerr != nil || len(held) > tunnelBuffer {
				return
			}
		}
	}
	defer tc.Close()
	_ = c.SetReadDeadline(time.Time{})
	t.mu.Lock()
	t.up = true
	t.mu.Unlock()
	if len(held) > 0 {
		if _, err := tc.Write(held); err != nil {
			return
		}
	}
	done := make(chan struct{}, 2)
	go func() { _, _ = io.Copy(tc, c); done <- struct{}{} }()
	go func() { _, _ = io.Copy(c, tc); done <- struct{}{} }()
	<-done
	c.Close()
	tc.Close()
	<-done
}

// setMD5 sets a TCP MD5 key for peer on the socket (none when key is
// empty).
func setMD5(c syscall.RawConn, peer netip.Addr, key string) error {
	if key == "" {
		return nil
	}
	sig := unix.TCPMD5Sig{Keylen: uint16(len(key))}
	copy(sig.Key[:], key)
	if peer.Is4() {
		// struct sockaddr_in after its family: port, address.
		sig.Addr.Family = unix.AF_INET
		a := peer.As4()
		copy(sig.Addr.Data[2:6], a[:])
	} else {
		// struct sockaddr_in6 after its family: port, flow info, address.
		sig.Addr.Family = unix.AF_INET6
		a := peer.As16()
		copy(sig.Addr.Data[6:22], a[:])
	}
	var serr error
	if err := c.Control(func(fd uintptr) {
		serr = unix.SetsockoptTCPMD5Sig(int(fd), unix.IPPROTO_TCP, unix.TCP_MD5SIG, &sig)
	}); err != nil {
		return err
	}
	if serr != nil {
		return fmt.Errorf("set the TCP MD5 key for %s: %w", peer, serr)
	}
	return nil
}

// setTTL sets the socket's TTL (hop limit); 0 leaves the default.
func setTTL(c syscall.RawConn, peer netip.Addr, ttl int) error {
	if ttl == 0 {
		return nil
	}
	var serr error
	if err := c.Control(func(fd uintptr) {
		if peer.Is4() {
			serr = unix.SetsockoptInt(int(fd), unix.IPPROTO_IP, unix.IP_TTL, ttl)
		} else {
			serr = unix.SetsockoptInt(int(fd), unix.IPPROTO_IPV6, unix.IPV6_UNICAST_HOPS, ttl)
		}
	}); err != nil {
		return err
	}
	return serr
}

// loopbackFor picks a loopback address for a new attached session: the
// first from loopbackBase that no session (nor a peer of the host's
// table) has.
func loopbackFor(taken func(netip.Addr) bool) (netip.Addr, error) {
	for a, i := loopbackBase, 0; i < 1<<16; a, i = a.Next(), i+1 {
		if !taken(a) {
			return a, nil
		}
	}
	return netip.Addr{}, errors.New("no loopback address left for the attached sessions")
}

// nsRoutes installs an attached tenant's routes in its namespace's main
// table, marked RouteProtocol. It keeps nothing: each Set reads the
// namespace's routes so marked and converges them (convergeTable), so a
// namespace made again (the attachment re-applied) gets its routes at the
// next Set.
type nsRoutes struct {
	att    Attachments
	tenant string
}

var (
	_ Installer = nsRoutes{}
	_ rereader  = nsRoutes{}
)

func (n nsRoutes) Set(routes map[netip.Prefix]netip.Addr) map[netip.Prefix]error {
	failed, err := n.Reread(routes)
	if err != nil {
		failed = map[netip.Prefix]error{}
		for p := range routes {
			failed[p] = err
		}
	}
	return failed
}

// Reread is Set, with the error of entering the namespace or reading its
// table apart.
func (n nsRoutes) Reread(routes map[netip.Prefix]netip.Addr) (map[netip.Prefix]error, error) {
	var failed map[netip.Prefix]error
	err := n.att.InNamespace(n.tenant, func() (err error) {
		_, failed, err = convergeTable(routes)
		return err
	})
	return failed, err
}

// Close removes the relay's routes from the namespace.
func (n nsRoutes) Close() error {
	if err := n.Set(nil); len(err) > 0 {
		for _, e := range err {
			return e
		}
	}
	return nil
}

// routeOf is a kernel route's prefix and next hop.
func routeOf(r *netlink.Route) (netip.Prefix, netip.Addr, bool) {
	if r.Dst == nil {
		return netip.Prefix{}, netip.Addr{}, false
	}
	a, ok := netip.AddrFromSlice(r.Dst.IP)
	if !ok {
		return netip.Prefix{}, netip.Addr{}, false
	}
	bits, _ := r.Dst.Mask.Size()
	nh, _ := netip.AddrFromSlice(r.Gw)
	return netip.PrefixFrom(a.Unmap(), bits).Masked(), nh.Unmap(), true
}

// namespaceOf names the namespace of an attached tenant's space ("" for
// the host's table).
func namespaceOf(space string) string {
	if space == "" {
		return ""
	}
	return api.AttachmentNamespace(space)
}
