package attach

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"github.com/teapot-lb/teapot-lb/api"
	pb "github.com/teapot-lb/teapot-lb/api/proto/teapotv1"
)

// newManager returns a Manager whose namespaces live in a directory of
// the test's (bind mounts of their own, removed at the end). It skips
// where namespaces cannot be made.
func newManager(t *testing.T, node string) (*Manager, string) {
	t.Helper()
	if os.Geteuid() != 0 {
		if os.Getenv("CI") != "" { // CI runs as root: not being root there is a failure
			t.Fatal("CI: needs root for network namespaces")
		}
		t.Skip("needs root for network namespaces")
	}
	dir := t.TempDir()
	m, err := New(Config{NodeID: node, NetnsDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	m.Settle() // a host that has caught up with the cluster
	t.Cleanup(func() {
		m.Update(nil)
		m.Close()
		ents, _ := os.ReadDir(dir)
		for _, e := range ents {
			_ = unix.Unmount(filepath.Join(dir, e.Name()), unix.MNT_DETACH)
		}
	})
	return m, dir
}

// tenant returns an attached tenant; vni must be unique among the tests
// of this package run at once (the VXLAN devices share the host's port).
func tenant(name string, vni, port uint32, node string) *pb.Object {
	return &pb.Object{Kind: &pb.Object_Tenant{Tenant: &pb.Tenant{Name: name, Networks: []string{"10.0.0.0/24", "10.9.0.0/16"},
		Attachment: &pb.TenantAttachment{
			Vxlan:   &pb.AttachmentVXLAN{Vni: vni, Remotes: []string{"192.0.2.7"}, Port: port},
			Hosts:   map[string]string{node: "10.0.0.2/24"},
			Gateway: "10.0.0.1",
		}}}}
}

// inNS runs fn with a netlink handle in the namespace at path.
func inNS(t *testing.T, path string, fn func(nh *netlink.Handle)) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	nh, err := netlink.NewHandleAt(netns.NsHandle(f.Fd()))
	if err != nil {
		t.Fatal(err)
	}
	defer nh.Close()
	fn(nh)
}

// vniOf gives each test three VNIs of its own (from the returned one).
func vniOf(t *testing.T) uint32 {
	pid := uint32(os.Getpid())
	var h uint32
	for _, c := range t.Name() {
		h = h*31 + uint32(c)
	}
	return 200000 + (pid*7+h)%1000000*3
}

// TestManagerMakesChangesAndRemoves: an attached tenant gets a namespace
// with the VXLAN device (its VNI, owner alias, flooding entry per remote),
// the host's address and a route to the tenant's other network through
// the gateway; a change of remotes is applied in place; a tenant that
// leaves the state has its namespace removed.
func TestManagerMakesChangesAndRemoves(t *testing.T) {
	t.Parallel()
	m, dir := newManager(t, "lb1")
	vni := vniOf(t)
	name := fmt.Sprintf("mk%d", os.Getpid())
	obj := tenant(name, vni, 0, "lb1")
	m.Update([]*pb.Object{obj})
	obs := m.Observe(name)
	if len(obs) != 1 || obs[0].State != StateUp {
		t.Fatalf("observed %+v, want the attachment up", obs)
	}
	path := filepath.Join(dir, api.AttachmentNamespace(name))
	inNS(t, path, func(nh *netlink.Handle) {
		link, err := nh.LinkByName(Device)
		if err != nil {
			t.Fatalf("no %s: %v", Device, err)
		}
		vx, ok := link.(*netlink.Vxlan)
		if !ok || vx.VxlanId != int(vni) || vx.Port != api.DefaultVXLANPort || vx.Alias != "teapot-lb host lb1" || vx.MTU != api.DefaultAttachmentMTU {
			t.Fatalf("device %+v", link.Attrs())
		}
		addrs, _ := nh.AddrList(link, netlink.FAMILY_V4)
		if len(addrs) != 1 || addrs[0].IPNet.String() != "10.0.0.2/24" {
			t.Fatalf("addresses %v, want 10.0.0.2/24", addrs)
		}
		routes, _ := nh.RouteListFiltered(netlink.FAMILY_V4, &netlink.Route{Protocol: RouteProtocol}, netlink.RT_FILTER_PROTOCOL)
		if len(routes) != 1 || routes[0].Dst.String() != "10.9.0.0/16" || routes[0].Gw.String() != "10.0.0.1" {
			t.Fatalf("routes %v, want 10.9.0.0/16 via 10.0.0.1", routes)
		}
		if got := remotes(t, nh, link.Attrs().Index); got != "192.0.2.7" {
			t.Fatalf("flooding entries %q", got)
		}
	})

	obj.GetTenant().Attachment.Vxlan.Remotes = []string{"192.0.2.8", "192.0.2.9"}
	m.Update([]*pb.Object{obj})
	inNS(t, path, func(nh *netlink.Handle) {
		link, _ := nh.LinkByName(Device)
		if got := remotes(t, nh, link.Attrs().Index); got != "192.0.2.8,192.0.2.9" {
			t.Fatalf("flooding entries after the change %q", got)
		}
	})

	m.Update(nil)
	if _, err := os.Stat(path); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("namespace left after the tenant left: %v", err)
	}
	if got := m.Observe(""); len(got) != 0 {
		t.Fatalf("observed %+v after removal", got)
	}
}

func remotes(t *testing.T, nh *netlink.Handle, idx int) string {
	t.Helper()
	ns, err := nh.NeighList(idx, unix.AF_BRIDGE)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, n := range ns {
		if n.HardwareAddr.String() == zeroMAC.String() {
			out = append(out, n.IP.String())
		}
	}
	return strings.Join(sortStrings(out), ",")
}

func sortStrings(s []string) []string {
	for i := range s {
		for j := i + 1; j < len(s); j++ {
			if s[j] < s[i] {
				s[i], s[j] = s[j], s[i]
			}
		}
	}
	return s
}

// TestManagerDialsFromTheNamespace: a member at an address that exists
// only inside the tenant's namespace is reached through DialContext, and
// the connection comes from the host's address there; an unattached
// tenant dials from the host's namespace; a tenant not listed for this
// host is never dialled from the host's table.
func TestManagerDialsFromTheNamespace(t *testing.T) {
	t.Parallel()
	m, dir := newManager(t, "lb1")
	vni := vniOf(t)
	name := fmt.Sprintf("dl%d", os.Getpid())
	unlisted := fmt.Sprintf("ul%d", os.Getpid())
	m.Update([]*pb.Object{tenant(name, vni, 0, "lb1"), tenant(unlisted, vni+1, 0, "lb9")})
	ln := listenIn(t, filepath.Join(dir, api.AttachmentNamespace(name)), "10.0.0.2:0")
	defer ln.Close()
	accepted := make(chan string, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		accepted <- c.RemoteAddr().(*net.TCPAddr).IP.String()
		c.Close()
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c, err := m.DialContext(ctx, name, &net.Dialer{}, "tcp", ln.Addr().String())
	if err != nil {
		t.Fatalf("dial from the namespace: %v", err)
	}
	c.Close()
	if src := <-accepted; src != "10.0.0.2" {
		t.Fatalf("connection from %s, want 10.0.0.2", src)
	}
	// A UDP flow too (the data plane's UDP listeners dial this way).
	pc := listenUDPIn(t, filepath.Join(dir, api.AttachmentNamespace(name)), "10.0.0.2:0")
	defer pc.Close()
	uc, err := m.DialContext(ctx, name, &net.Dialer{}, "udp", pc.LocalAddr().String())
	if err != nil {
		t.Fatalf("UDP dial from the namespace: %v", err)
	}
	defer uc.Close()
	if _, err := uc.Write([]byte("ping")); err != nil {
		t.Fatal(err)
	}
	_ = pc.SetReadDeadline(time.Now().Add(5 * time.Second))
	buf := make([]byte, 16)
	if n, from, err := pc.ReadFrom(buf); err != nil || string(buf[:n]) != "ping" || from.(*net.UDPAddr).IP.String() != "10.0.0.2" {
		t.Fatalf("UDP datagram %q from %v: %v", buf[:n], from, err)
	}
	// The host's namespace has no such address: the same dial without
	// the attachment fails.
	if c, err := (&net.Dialer{Timeout: time.Second}).DialContext(ctx, "tcp", ln.Addr().String()); err == nil {
		c.Close()
		t.Fatal("the host's namespace reaches the tenant's address; the test proves nothing")
	}
	if _, err := m.DialContext(ctx, unlisted, &net.Dialer{}, "tcp", ln.Addr().String()); !errors.Is(err, ErrNotUp) {
		t.Fatalf("a tenant not attached on this host dialled: %v", err)
	}
	if !m.Attached(unlisted) || m.Attached("nobody") {
		t.Fatal("Attached")
	}
	// DialInside never dials from the host's namespace: a tenant without
	// an attachment here (one just removed) gets ErrNotUp, where
	// DialContext would dial from the host's own table.
	hostLn, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer hostLn.Close()
	if c, err := m.DialInside(ctx, "nobody", &net.Dialer{}, "tcp", hostLn.Addr().String()); !errors.Is(err, ErrNotUp) {
		if c != nil {
			c.Close()
		}
		t.Fatalf("DialInside for a tenant with no attachment: %v, want ErrNotUp", err)
	}
	if c, err := m.DialContext(ctx, "nobody", &net.Dialer{}, "tcp", hostLn.Addr().String()); err != nil {
		t.Fatalf("DialContext for a tenant with no attachment, from the host's: %v", err)
	} else {
		c.Close()
	}
	if c, err := m.DialInside(ctx, name, &net.Dialer{}, "tcp", ln.Addr().String()); err != nil {
		t.Fatalf("DialInside from the namespace: %v", err)
	} else {
		c.Close()
	}
	obs := m.Observe(unlisted)
	if len(obs) != 1 || obs[0].State != StateNotListed {
		t.Fatalf("observed %+v, want not-listed", obs)
	}
}

// TestManagerAdoptsAndCleansLeftovers: a new Manager (a restart) adopts
// the namespace of a tenant still attached, and removes one of its own
// that no tenant wants, leaving one of another host alone.
func TestManagerAdoptsAndCleansLeftovers(t *testing.T) {
	t.Parallel()
	m, dir := newManager(t, "lb1")
	vni := vniOf(t)
	keep, gone := fmt.Sprintf("kp%d", os.Getpid()), fmt.Sprintf("gn%d", os.Getpid())
	m.Update([]*pb.Object{tenant(keep, vni, 0, "lb1"), tenant(gone, vni+1, 0, "lb1")})
	other, err := New(Config{NodeID: "lb2", NetnsDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	other.Settle()
	foreign := fmt.Sprintf("fr%d", os.Getpid())
	other.Update([]*pb.Object{tenant(foreign, vni+2, 0, "lb2")})
	t.Cleanup(func() { other.Update(nil); other.Close() })
	m.Close() // the process ends; the namespaces stay

	again, err := New(Config{NodeID: "lb1", NetnsDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	defer again.Close()
	again.Update([]*pb.Object{tenant(keep, vni, 0, "lb1")})
	again.Settle()
	if obs := again.Observe(keep); len(obs) != 1 || obs[0].State != StateUp {
		t.Fatalf("adopted %+v", obs)
	}
	if _, err := os.Stat(filepath.Join(dir, api.AttachmentNamespace(gone))); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("leftover of this host kept: %v", err)
	}
	if _, err := os.Stat(filepath.Join(dir, api.AttachmentNamespace(foreign))); err != nil {
		t.Fatalf("another host's namespace removed: %v", err)
	}
	again.Update(nil)
}

// nsInode returns the inode of the namespace bound at path (its nsfs
// file): a namespace made again has another.
func nsInode(t *testing.T, path string) uint64 {
	t.Helper()
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		t.Fatalf("namespace %s: %v", path, err)
	}
	return st.Ino
}

// TestManagerRestartRemovesNothingUntilSettled: a restarted host's
// Manager, fed as serve feeds it at start (a first view without the
// tenants, as a host without a snapshot restores, then the state it
// catches up to), keeps the namespace of a tenant it still wants: the
// same namespace (inode) and device, and a connection and a listener
// opened in it before the restart still work. Its leftover no tenant
// wants stays until Settle (the committed state known), which removes it.
func TestManagerRestartRemovesNothingUntilSettled(t *testing.T) {
	t.Parallel()
	m, dir := newManager(t, "lb1")
	vni := vniOf(t)
	keep, gone := fmt.Sprintf("rk%d", os.Getpid()), fmt.Sprintf("rg%d", os.Getpid())
	m.Update([]*pb.Object{tenant(keep, vni, 0, "lb1"), tenant(gone, vni+1, 0, "lb1")})
	keepPath, gonePath := filepath.Join(dir, api.AttachmentNamespace(keep)), filepath.Join(dir, api.AttachmentNamespace(gone))
	ino, goneIno := nsInode(t, keepPath), nsInode(t, gonePath)
	var dev int
	inNS(t, keepPath, func(nh *netlink.Handle) {
		link, err := nh.LinkByName(Device)
		if err != nil {
			t.Fatal(err)
		}
		dev = link.Attrs().Index
	})
	// A listener in the namespace and a connection to it, as a VIP's
	// listener and a member's connection live there.
	ln := listenIn(t, keepPath, "10.0.0.2:0")
	defer ln.Close()
	accepted := make(chan net.Conn, 4)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			accepted <- c
		}
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	before, err := m.DialContext(ctx, keep, &net.Dialer{}, "tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer before.Close()
	served := <-accepted
	defer served.Close()
	m.Close() // the process ends; the namespaces stay

	again, err := New(Config{NodeID: "lb1", NetnsDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	defer again.Close()
	again.Update(nil) // the first view: no tenant yet
	if got := nsInode(t, keepPath); got != ino {
		t.Fatalf("the namespace of %s was made again on the first view (inode %d, was %d)", keep, got, ino)
	}
	if got := nsInode(t, gonePath); got != goneIno {
		t.Fatalf("the namespace of %s removed before the committed state was known (inode %d, was %d)", gone, got, goneIno)
	}
	again.Update([]*pb.Object{tenant(keep, vni, 0, "lb1")}) // caught up: gone left the state
	if obs := again.Observe(keep); len(obs) != 1 || obs[0].State != StateUp {
		t.Fatalf("adopted %+v", obs)
	}
	if got := nsInode(t, keepPath); got != ino {
		t.Fatalf("the namespace of %s was made again (inode %d, was %d)", keep, got, ino)
	}
	if _, err := os.Stat(gonePath); err != nil {
		t.Fatalf("the namespace of %s removed before Settle: %v", gone, err)
	}
	again.Settle()
	if _, err := os.Stat(gonePath); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the namespace no tenant wants kept after Settle: %v", err)
	}
	if got := nsInode(t, keepPath); got != ino {
		t.Fatalf("the namespace of %s was made again at Settle (inode %d, was %d)", keep, got, ino)
	}
	inNS(t, keepPath, func(nh *netlink.Handle) {
		link, err := nh.LinkByName(Device)
		if err != nil || link.Attrs().Index != dev {
			t.Fatalf("the device was replaced: %v, %v (index was %d)", link, err, dev)
		}
	})
	// The connection made before the restart still carries data both
	// ways, and the listener takes a new one through the adopted
	// attachment.
	_ = before.SetDeadline(time.Now().Add(5 * time.Second))
	_ = served.SetDeadline(time.Now().Add(5 * time.Second))
	buf := make([]byte, 4)
	if _, err := before.Write([]byte("ping")); err != nil {
		t.Fatalf("write on the connection made before the restart: %v", err)
	}
	if _, err := io.ReadFull(served, buf); err != nil || string(buf) != "ping" {
		t.Fatalf("read %q: %v", buf, err)
	}
	if _, err := served.Write([]byte("pong")); err != nil {
		t.Fatal(err)
	}
	if _, err := io.ReadFull(before, buf); err != nil || string(buf) != "pong" {
		t.Fatalf("read %q on the connection made before the restart: %v", buf, err)
	}
	after, err := again.DialContext(ctx, keep, &net.Dialer{}, "tcp", ln.Addr().String())
	if err != nil {
		t.Fatalf("dial the listener opened before the restart: %v", err)
	}
	after.Close()
	(<-accepted).Close()
	again.Update(nil)
}

func listenIn(t *testing.T, path, addr string) net.Listener {
	t.Helper()
	type res struct {
		ln  net.Listener
		err error
	}
	ch := make(chan res, 1)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread ends with the goroutine
		f, err := os.Open(path)
		if err != nil {
			ch <- res{nil, err}
			return
		}
		defer f.Close()
		if err := unix.Setns(int(f.Fd()), unix.CLONE_NEWNET); err != nil {
			ch <- res{nil, err}
			return
		}
		ln, err := net.Listen("tcp", addr)
		ch <- res{ln, err}
	}()
	r := <-ch
	if r.err != nil {
		t.Fatal(r.err)
	}
	return r.ln
}

func listenUDPIn(t *testing.T, path, addr string) net.PacketConn {
	t.Helper()
	type res struct {
		pc  net.PacketConn
		err error
	}
	ch := make(chan res, 1)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread ends with the goroutine
		f, err := os.Open(path)
		if err != nil {
			ch <- res{nil, err}
			return
		}
		defer f.Close()
		if err := unix.Setns(int(f.Fd()), unix.CLONE_NEWNET); err != nil {
			ch <- res{nil, err}
			return
		}
		pc, err := net.ListenPacket("udp", addr)
		ch <- res{pc, err}
	}()
	r := <-ch
	if r.err != nil {
		t.Fatal(r.err)
	}
	return r.pc
}

// TestManagerListensInTheNamespace: a listener made through InNamespace
// lives in the tenant's namespace (what the data plane does for a VIP of
// a pool in the attachment): a connection from inside the namespace
// reaches it, the host's namespace does not; a tenant not attached on
// this host runs nothing.
func TestManagerListensInTheNamespace(t *testing.T) {
	t.Parallel()
	m, _ := newManager(t, "lb1")
	vni := vniOf(t)
	name := fmt.Sprintf("li%d", os.Getpid())
	unlisted := fmt.Sprintf("lu%d", os.Getpid())
	m.Update([]*pb.Object{tenant(name, vni, 0, "lb1"), tenant(unlisted, vni+1, 0, "lb9")})
	var ln net.Listener
	if err := m.InNamespace(name, func() (err error) {
		ln, err = net.Listen("tcp", "10.0.0.2:0")
		return err
	}); err != nil {
		t.Fatalf("listen in the namespace: %v", err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.Write([]byte("ok"))
			c.Close()
		}
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c, err := m.DialContext(ctx, name, &net.Dialer{}, "tcp", ln.Addr().String())
	if err != nil {
		t.Fatalf("dial the listener from the namespace: %v", err)
	}
	buf := make([]byte, 2)
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.ReadFull(c, buf); err != nil || string(buf) != "ok" {
		t.Fatalf("read %q: %v", buf, err)
	}
	c.Close()
	if c, err := (&net.Dialer{Timeout: time.Second}).DialContext(ctx, "tcp", ln.Addr().String()); err == nil {
		c.Close()
		t.Fatal("the host's namespace reaches the listener: it is not in the tenant's namespace")
	}
	ran := false
	if err := m.InNamespace(unlisted, func() error { ran = true; return nil }); !errors.Is(err, ErrNotUp) || ran {
		t.Fatalf("a tenant not attached on this host: %v, ran %t", err, ran)
	}
	if err := m.InNamespace("nobody", func() error { ran = true; return nil }); !errors.Is(err, ErrNotUp) || ran {
		t.Fatalf("a tenant without an attachment: %v, ran %t", err, ran)
	}
}
