package attach

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"sync"
	"syscall"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"github.com/teapot-lb/teapot-lb/api"
	pb "github.com/teapot-lb/teapot-lb/api/proto/teapotv1"
)

// nsRef is an open namespace shared by the dials in flight: it closes
// after the attachment is gone and the last dial has its socket.
type nsRef struct {
	mu   sync.Mutex
	f    *os.File
	refs int // 1 for the attachment, 1 per dial
}

func (r *nsRef) acquire() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.refs == 0 {
		return false
	}
	r.refs++
	return true
}

func (r *nsRef) release() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.refs == 0 {
		return
	}
	if r.refs--; r.refs == 0 {
		r.f.Close()
	}
}

// apply makes or adopts tenant's namespace and converges it on t's
// attachment with addr as this host's address; it returns the open
// namespace.
func (m *Manager) apply(t *pb.Tenant, addr string) (*nsRef, error) {
	spec := t.GetAttachment()
	name := api.AttachmentNamespace(t.GetName())
	path := filepath.Join(m.cfg.NetnsDir, name)
	p, err := hostPrefix(addr)
	if err != nil {
		return nil, err
	}
	if _, err := os.Stat(path); errors.Is(err, os.ErrNotExist) {
		if err := createNamed(m.cfg.NetnsDir, path); err != nil {
			return nil, fmt.Errorf("create namespace %s: %w", name, err)
		}
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("open namespace %s: %w", name, err)
	}
	if err := m.converge(f, spec, p, t.GetNetworks()); err != nil {
		f.Close()
		return nil, fmt.Errorf("namespace %s: %w", name, err)
	}
	return &nsRef{f: f, refs: 1}, nil
}

// converge sets up the namespace f: lo, the VXLAN device with its
// flooding entries, the host's address and the routes to networks.
func (m *Manager) converge(f *os.File, spec *pb.TenantAttachment, p netip.Prefix, networks []string) error {
	nh, err := netlink.NewHandleAt(netns.NsHandle(f.Fd()))
	if err != nil {
		return fmt.Errorf("netlink: %w", err)
	}
	defer nh.Close()
	if lo, err := nh.LinkByName("lo"); err == nil {
		if err := nh.LinkSetUp(lo); err != nil {
			return fmt.Errorf("set lo up: %w", err)
		}
	}
	v := spec.GetVxlan()
	port, mtu := int(api.VXLANPort(spec)), api.AttachmentMTU(spec)
	underlay := 0
	if u := v.GetUnderlay(); u != "" {
		ul, err := netlink.LinkByName(u)
		if err != nil {
			return fmt.Errorf("underlay interface %s: %w", u, err)
		}
		underlay = ul.Attrs().Index
		if err := checkMTU(mtu, u, ul.Attrs().MTU, v.GetRemotes()); err != nil {
			return err
		}
	}
	link, err := nh.LinkByName(Device)
	if err == nil {
		if a := link.Attrs().Alias; a != m.owner() {
			return fmt.Errorf("its device %s belongs to %q, not to this host; delete the namespace if that host is gone", Device, a)
		}
		vx, ok := link.(*netlink.Vxlan)
		if !ok || vx.VxlanId != int(v.GetVni()) || vx.Port != port || vx.VtepDevIndex != underlay {
			if err := nh.LinkDel(link); err != nil {
				return fmt.Errorf("replace %s: %w", Device, err)
			}
			link = nil
		}
	} else {
		link = nil
	}
	if link == nil {
		vx := &netlink.Vxlan{LinkAttrs: netlink.LinkAttrs{Name: Device, MTU: mtu, Namespace: netlink.NsFd(int(f.Fd()))},
			VxlanId: int(v.GetVni()), Port: port, VtepDevIndex: underlay, Learning: true}
		if err := netlink.LinkAdd(vx); err != nil {
			return fmt.Errorf("add VXLAN device (VNI %d, port %d): %w", v.GetVni(), port, err)
		}
		if link, err = nh.LinkByName(Device); err != nil {
			return fmt.Errorf("find %s: %w", Device, err)
		}
		if err := nh.LinkSetAlias(link, m.owner()); err != nil {
			return fmt.Errorf("mark %s: %w", Device, err)
		}
	}
	if err := nh.LinkSetMTU(link, mtu); err != nil {
		return fmt.Errorf("set MTU %d: %w", mtu, err)
	}
	if err := nh.LinkSetUp(link); err != nil {
		return fmt.Errorf("set %s up: %w", Device, err)
	}
	idx := link.Attrs().Index
	if err := convergeRemotes(nh, idx, v.GetRemotes()); err != nil {
		return err
	}
	if err := convergeAddr(nh, link, p); err != nil {
		return err
	}
	return convergeRoutes(nh, idx, p, spec.GetGateway(), networks)
}

var zeroMAC = net.HardwareAddr{0, 0, 0, 0, 0, 0}

// convergeRemotes keeps one all-zero forwarding entry per remote VTEP
// (flooding of broadcast and unknown frames), and no other.
func convergeRemotes(nh *netlink.Handle, idx int, remotes []string) error {
	want := map[netip.Addr]bool{}
	for _, r := range remotes {
		if a, err := netip.ParseAddr(r); err == nil {
			want[a] = true
		}
	}
	have, err := nh.NeighList(idx, unix.AF_BRIDGE)
	if err != nil {
		return fmt.Errorf("list forwarding entries: %w", err)
	}
	for _, n := range have {
		a, ok := netip.AddrFromSlice(n.IP)
		if !ok || n.HardwareAddr.String() != zeroMAC.String() {
			continue
		}
		if a = a.Unmap(); want[a] {
			delete(want, a)
			continue
		}
		if err := nh.NeighDel(&n); err != nil {
			return fmt.Errorf("remove remote %s: %w", a, err)
		}
	}
	for a := range want {
		n := &netlink.Neigh{LinkIndex: idx, Family: unix.AF_BRIDGE, State: netlink.NUD_PERMANENT, Flags: netlink.NTF_SELF,
			IP: net.IP(a.AsSlice()), HardwareAddr: zeroMAC}
		if err := nh.NeighAppend(n); err != nil {
			return fmt.Errorf("add remote %s: %w", a, err)
		}
	}
	return nil
}

// convergeAddr leaves p as the device's only address (IPv6 link-local
// ones aside).
func convergeAddr(nh *netlink.Handle, link netlink.Link, p netip.Prefix) error {
	have, err := nh.AddrList(link, netlink.FAMILY_ALL)
	if err != nil {
		return fmt.Errorf("list addresses: %w", err)
	}
	for _, a := range have {
		if a.IP.IsLinkLocalUnicast() {
			continue
		}
		ones, _ := a.Mask.Size()
		ad, _ := netip.AddrFromSlice(a.IP)
		if netip.PrefixFrom(ad.Unmap(), ones) == p {
			continue
		}
		if err := nh.AddrDel(link, &a); err != nil {
			return fmt.Errorf("remove address %s: %w", a.IPNet, err)
		}
	}
	na := &netlink.Addr{IPNet: &net.IPNet{IP: net.IP(p.Addr().AsSlice()), Mask: net.CIDRMask(p.Bits(), p.Addr().BitLen())}}
	if err := nh.AddrReplace(link, na); err != nil {
		return fmt.Errorf("add address %s: %w", p, err)
	}
	return nil
}

// convergeRoutes routes the tenant's networks beyond p through gateway
// (none without one) with RouteProtocol, and removes the package's other
// routes.
func convergeRoutes(nh *netlink.Handle, idx int, p netip.Prefix, gateway string, networks []string) error {
	var want []netip.Prefix
	gw, gerr := netip.ParseAddr(gateway)
	if gerr == nil {
		for _, s := range networks {
			n, err := netip.ParsePrefix(s)
			if err != nil || n.Addr().Is4() != gw.Is4() || (n.Bits() >= p.Bits() && p.Contains(n.Addr())) {
				continue
			}
			want = append(want, n.Masked())
		}
	}
	have, err := nh.RouteListFiltered(netlink.FAMILY_ALL, &netlink.Route{Protocol: RouteProtocol}, netlink.RT_FILTER_PROTOCOL)
	if err != nil {
		return fmt.Errorf("list routes: %w", err)
	}
	for _, r := range have {
		if r.Dst != nil {
			ones, _ := r.Dst.Mask.Size()
			a, _ := netip.AddrFromSlice(r.Dst.IP)
			if slices.Contains(want, netip.PrefixFrom(a.Unmap(), ones)) {
				continue
			}
		}
		if err := nh.RouteDel(&r); err != nil {
			return fmt.Errorf("remove route %v: %w", r.Dst, err)
		}
	}
	for _, n := range want {
		r := &netlink.Route{LinkIndex: idx, Dst: &net.IPNet{IP: net.IP(n.Addr().AsSlice()), Mask: net.CIDRMask(n.Bits(), n.Addr().BitLen())},
			Gw: net.IP(gw.AsSlice()), Protocol: RouteProtocol}
		if err := nh.RouteReplace(r); err != nil {
			return fmt.Errorf("route %s via %s: %w", n, gw, err)
		}
	}
	return nil
}

// createNamed makes a network namespace bound at path, on a thread that
// ends with it (its namespace is not the host's any more).
func createNamed(dir, path string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread ends with the goroutine
		f, err := os.OpenFile(path, os.O_RDONLY|os.O_CREATE|os.O_EXCL, 0o444)
		if err != nil {
			errc <- err
			return
		}
		f.Close()
		if err := unix.Unshare(unix.CLONE_NEWNET); err != nil {
			os.Remove(path)
			errc <- fmt.Errorf("unshare: %w", err)
			return
		}
		if err := unix.Mount(fmt.Sprintf("/proc/self/task/%d/ns/net", unix.Gettid()), path, "none", unix.MS_BIND, ""); err != nil {
			os.Remove(path)
			errc <- fmt.Errorf("bind mount: %w", err)
			return
		}
		errc <- nil
	}()
	return <-errc
}

// remove deletes tenant's namespace if this host made it: its device
// first (so the tunnel's port and VNI are free at once, even while
// sockets keep the namespace alive), then the bind mount.
func (m *Manager) remove(tenant string) {
	path := filepath.Join(m.cfg.NetnsDir, api.AttachmentNamespace(tenant))
	f, err := os.Open(path)
	if err != nil {
		return
	}
	defer f.Close()
	nh, err := netlink.NewHandleAt(netns.NsHandle(f.Fd()))
	if err != nil {
		return
	}
	defer nh.Close()
	if link, err := nh.LinkByName(Device); err == nil {
		if link.Attrs().Alias != m.owner() {
			return
		}
		if err := nh.LinkDel(link); err != nil {
			m.cfg.Logger.Warn("remove attachment device", "tenant", tenant, "err", err)
		}
	}
	if err := unix.Unmount(path, unix.MNT_DETACH); err != nil {
		m.cfg.Logger.Warn("unmount attachment namespace", "tenant", tenant, "err", err)
	}
	if err := os.Remove(path); err != nil {
		m.cfg.Logger.Warn("remove attachment namespace", "tenant", tenant, "err", err)
	}
}

// ownerOf returns the alias of the device in the namespace at path ("":
// none).
func ownerOf(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	nh, err := netlink.NewHandleAt(netns.NsHandle(f.Fd()))
	if err != nil {
		return "", err
	}
	defer nh.Close()
	link, err := nh.LinkByName(Device)
	if err != nil {
		return "", nil //nolint:nilerr // no device: nobody's yet
	}
	return link.Attrs().Alias, nil
}

// Attached reports whether tenant has an attachment (up or not): its
// members are dialled through DialContext only.
func (m *Manager) Attached(tenant string) bool {
	_, ok := (*m.spaces.Load())[tenant]
	return ok
}

// DialContext dials addr as d would: from inside tenant's namespace
// when the tenant is attached (an error wrapping ErrNotUp when the
// attachment is not up on this host), else from the host's. The socket
// is made by a thread that enters the namespace and leaves it before the
// connect; the connection then works from any thread.
func (m *Manager) DialContext(ctx context.Context, tenant string, d *net.Dialer, network, addr string) (net.Conn, error) {
	s := (*m.spaces.Load())[tenant]
	if s == nil {
		return d.DialContext(ctx, network, addr)
	}
	return m.dialSpace(ctx, s, d, network, addr)
}

// DialInside is DialContext for a dial that must never leave tenant's
// namespace (its BGP speakers, whose addresses the host's own table may
// route elsewhere): with no attachment of tenant on this host, as when
// it was just removed, it fails with an error wrapping ErrNotUp.
func (m *Manager) DialInside(ctx context.Context, tenant string, d *net.Dialer, network, addr string) (net.Conn, error) {
	s := (*m.spaces.Load())[tenant]
	if s == nil {
		return nil, fmt.Errorf("%w: tenant %s has no attachment on this host", ErrNotUp, tenant)
	}
	return m.dialSpace(ctx, s, d, network, addr)
}

// dialSpace dials from inside s's namespace when it is up.
func (m *Manager) dialSpace(ctx context.Context, s *space, d *net.Dialer, network, addr string) (net.Conn, error) {
	if s.state != StateUp || !s.ns.acquire() {
		return nil, fmt.Errorf("%w: %s", ErrNotUp, s.reason)
	}
	defer s.ns.release()
	return m.dialIn(ctx, s.ns.f, d, network, addr)
}

type dialResult struct {
	c   net.Conn
	err error
}

// errReturn: a thread could not return to the host's namespace.
var errReturn = errors.New("cannot return to the host's network namespace")

func (m *Manager) dialIn(ctx context.Context, ns *os.File, d *net.Dialer, network, addr string) (net.Conn, error) {
	ch := make(chan dialResult, 1)
	go func() {
		runtime.LockOSThread()
		if err := unix.Setns(int(ns.Fd()), unix.CLONE_NEWNET); err != nil {
			runtime.UnlockOSThread()
			ch <- dialResult{nil, fmt.Errorf("enter the attachment's namespace: %w", err)}
			return
		}
		home := false
		leave := func() bool {
			if !home && unix.Setns(int(m.host.Fd()), unix.CLONE_NEWNET) == nil {
				home = true
			}
			return home
		}
		dd := *d
		inner, innerOld := d.ControlContext, d.Control
		dd.ControlContext = func(ctx context.Context, network, address string, c syscall.RawConn) error {
			// The socket is made: it stays in the tenant's namespace.
			if !leave() {
				return errReturn
			}
			switch {
			case inner != nil:
				return inner(ctx, network, address, c)
			case innerOld != nil:
				return innerOld(network, address, c)
			}
			return nil
		}
		c, err := dd.DialContext(ctx, network, addr)
		if leave() {
			runtime.UnlockOSThread()
		} // else the thread ends with the goroutine
		ch <- dialResult{c, err}
	}()
	r := <-ch
	return r.c, r.err
}

// InNamespace runs fn on a thread inside tenant's namespace, so that the
// sockets fn makes live there (the data plane's listeners on a VIP of a
// pool in the tenant's attachment); they work from any thread after. It
// fails with an error wrapping ErrNotUp, without running fn, when the
// tenant has no attachment up on this host.
func (m *Manager) InNamespace(tenant string, fn func() error) error {
	s := (*m.spaces.Load())[tenant]
	if s == nil {
		return fmt.Errorf("%w: tenant %s has no attachment", ErrNotUp, tenant)
	}
	if s.state != StateUp || !s.ns.acquire() {
		return fmt.Errorf("%w: %s", ErrNotUp, s.reason)
	}
	defer s.ns.release()
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		if err := unix.Setns(int(s.ns.f.Fd()), unix.CLONE_NEWNET); err != nil {
			runtime.UnlockOSThread()
			errc <- fmt.Errorf("enter the attachment's namespace: %w", err)
			return
		}
		err := fn()
		if unix.Setns(int(m.host.Fd()), unix.CLONE_NEWNET) != nil {
			errc <- errors.Join(err, errReturn) // the thread ends with the goroutine
			return
		}
		runtime.UnlockOSThread()
		errc <- err
	}()
	return <-errc
}

// vxlanOverhead is what VXLAN adds to each frame: the outer IP header
// (20 bytes over IPv4, 40 over IPv6), UDP (8), VXLAN (8) and the inner
// Ethernet header (14).
func vxlanOverhead(remotes []string) int {
	for _, r := range remotes {
		if a, err := netip.ParseAddr(r); err == nil && a.Is6() && !a.Is4In6() {
			return 70
		}
	}
	return 50
}

// checkMTU refuses an attachment MTU that frames through the underlay
// link (whose MTU is linkMTU) cannot carry once VXLAN's headers are
// added: the kernel would clamp the device and refuse the MTU with
// EINVAL, which names no bound.
func checkMTU(mtu int, link string, linkMTU int, remotes []string) error {
	over := vxlanOverhead(remotes)
	if linkMTU <= 0 || mtu+over <= linkMTU {
		return nil
	}
	return fmt.Errorf("attachment.mtu %d does not fit %s (MTU %d) with VXLAN's %d bytes of headers: set attachment.mtu to at most %d, or raise %s's MTU to at least %d",
		mtu, link, linkMTU, over, linkMTU-over, link, mtu+over)
}
