package proxy

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"sync"
	"syscall"

	"github.com/teapot-lb/teapot-lb/proxy/snapshot"
	"github.com/teapot-lb/teapot-lb/proxy/steer"
)

// With Config.Steer, a TCP listener has no socket of its own: its
// address is steered (a BPF sk_lookup program) to a socket its tenant's
// listeners share, one per address family, bound to an ephemeral loopback
// port. The accepted connection's local address says which listener it
// came for. A tenant's accept queue is its own, as before: a flood of
// connections to one tenant's addresses fills that tenant's queue only.

// sharedKey names a shared socket: a tenant's, of one family.
type sharedKey struct {
	tenant string
	v6     bool
}

// sharedSocket is a listening socket shared by the TCP listeners of one
// tenant and family.
type sharedSocket struct {
	key  sharedKey
	ln   *net.TCPListener
	slot uint32
	refs int // guarded by p.mu
}

// steering is what the proxy keeps of the shared sockets (guarded by
// p.mu but for listeners, which the accept loops read, and what umu
// guards).
type steering struct {
	s      *steer.Steer
	shared map[sharedKey]*sharedSocket
	// listeners are the steered listeners' sockets, by key.
	listeners sync.Map // snapshot.Key -> *socket

	// umu guards the slots and the UDP side (taken after p.mu, or
	// alone: an HTTP/3 port lets go of its address once its
	// connections drained).
	umu  sync.Mutex
	free []uint32
	next uint32
	// udp are the shared UDP sockets; udpDests the steered UDP
	// addresses.
	udp      map[udpSharedKey]*udpShared
	udpDests map[netip.AddrPort]*udpDest
}

// acquireShared returns the shared socket of tenant for k's family,
// opening it when none is open.
func (p *Proxy) acquireShared(tenant string, k snapshot.Key) (*sharedSocket, error) {
	st := p.steering
	sk := sharedKey{tenant: tenant, v6: !k.Addr.Addr().Unmap().Is4()}
	if sh := st.shared[sk]; sh != nil {
		sh.refs++
		return sh, nil
	}
	slot, err := st.allocSlot()
	if err != nil {
		return nil, err
	}
	network, addr := "tcp4", "127.0.0.1:0"
	if sk.v6 {
		network, addr = "tcp6", "[::1]:0"
	}
	var lc net.ListenConfig
	lc.SetMultipathTCP(false) // a sockmap holds TCP sockets only
	l, err := lc.Listen(context.Background(), network, addr)
	if err != nil {
		st.freeSlot(slot)
		return nil, fmt.Errorf("open the tenant's shared socket: %w", err)
	}
	ln := l.(*net.TCPListener)
	rc, err := ln.SyscallConn()
	if err == nil {
		err = st.s.SetSocket(slot, rc)
	}
	if err != nil {
		ln.Close()
		st.freeSlot(slot)
		return nil, err
	}
	sh := &sharedSocket{key: sk, ln: ln, slot: slot, refs: 1}
	st.shared[sk] = sh
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		acceptEach(p, ln, ln.Addr().String(), func(c *net.TCPConn) { p.acceptSteered(sh, c) })
	}()
	return sh, nil
}

// releaseShared drops a reference to sh; the last one closes it (the
// sockmap lets go of a closed socket by itself).
func (p *Proxy) releaseShared(sh *sharedSocket) {
	if sh.refs--; sh.refs > 0 {
		return
	}
	st := p.steering
	delete(st.shared, sh.key)
	sh.ln.Close()
	if err := st.s.ClearSocket(sh.slot); err != nil {
		p.log.Warn("shared socket not cleared", "tenant", sh.key.tenant, "error", err)
	}
	st.freeSlot(sh.slot)
}

// steerListener steers s's address to tenant's shared socket, moving it
// from another tenant's when it was there.
func (p *Proxy) steerListener(s *socket, tenant string) error {
	if s.shared != nil && s.shared.key.tenant == tenant {
		return nil
	}
	sh, err := p.acquireShared(tenant, s.key)
	if err != nil {
		return err
	}
	if err := p.steering.s.Add(s.key.Addr, sh.slot); err != nil {
		p.releaseShared(sh)
		return err
	}
	old := s.shared
	s.shared = sh
	p.steering.listeners.Store(s.key, s)
	if old != nil {
		p.releaseShared(old)
	}
	return nil
}

// unsteerListener stops steering s's address.
func (p *Proxy) unsteerListener(s *socket) {
	if err := p.steering.s.Remove(s.key.Addr); err != nil {
		p.log.Warn("steered address not removed", "tenant", tenantOf(s.owner), "lb", s.owner, "listener", s.key.String(), "error", err)
	}
	p.steering.listeners.Delete(s.key)
	if s.shared != nil {
		p.releaseShared(s.shared)
		s.shared = nil
	}
}

// acceptSteered hands a connection accepted on sh to the listener it was
// steered to, if that listener is still there and still sh's tenant's.
func (p *Proxy) acceptSteered(sh *sharedSocket, c *net.TCPConn) {
	local, _ := c.LocalAddr().(*net.TCPAddr)
	if local == nil {
		refuse(c)
		return
	}
	ap := local.AddrPort()
	k := snapshot.Key{Network: snapshot.TCP, Addr: netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port())}
	v, ok := p.steering.listeners.Load(k)
	if !ok {
		refuse(c)
		return
	}
	p.acceptFor(v.(*socket), c, sh.key.tenant)
}

// Ways TCP listeners listen (serve's listen-sockets).
const (
	// ListenPerListener opens a socket per listener.
	ListenPerListener = "listener"
	// ListenPerTenant steers listeners' addresses to a socket per tenant
	// and address family.
	ListenPerTenant = "tenant"
)

// maxSteered bounds the TCP listeners one host steers (the BPF map's
// size; its entries are allocated as they are added).
const maxSteered = 1 << 20

// OpenSteer returns what Config.Steer needs for mode: nil for
// ListenPerListener, an attached program for ListenPerTenant.
func OpenSteer(mode string) (*steer.Steer, error) {
	switch mode {
	case ListenPerListener, "":
		return nil, nil
	case ListenPerTenant:
		s, err := steer.Open(maxSteered)
		if errors.Is(err, syscall.EPERM) {
			// steer names the cause.
			return nil, fmt.Errorf("%w (listen-sockets: listener needs no BPF)", err)
		}
		if err != nil {
			return nil, fmt.Errorf("%w (listen-sockets: tenant needs Linux 5.9 or later, CAP_BPF and CAP_NET_ADMIN; listen-sockets: listener needs neither)", err)
		}
		return s, nil
	}
	return nil, CheckListenSockets(mode)
}

// CheckListenSockets reports whether mode is a way to listen OpenSteer
// knows.
func CheckListenSockets(mode string) error {
	switch mode {
	case ListenPerListener, ListenPerTenant, "":
		return nil
	}
	if len(mode) > 40 {
		mode = mode[:40] + "..."
	}
	return fmt.Errorf("%q is not a way to listen: use %q (a socket per listener) or %q (a socket per tenant)", mode, ListenPerListener, ListenPerTenant)
}
