package proxy

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	pb "github.com/teapot-lb/teapot-lb/api/proto/teapotv1"
	"github.com/teapot-lb/teapot-lb/proxy/snapshot"
)

// nsAttachments attaches tenant "acme" through a real network namespace
// bound at path, as vip/attach does: sockets are made on a thread inside
// it.
type nsAttachments struct {
	path string
	// opened counts the sockets made in the namespace.
	opened int
}

func (a *nsAttachments) Attached(tenant string) bool { return tenant == "acme" }

func (a *nsAttachments) in(fn func() error) error { return inNS(a.path, fn) }

func (a *nsAttachments) DialContext(ctx context.Context, tenant string, d *net.Dialer, network, addr string) (c net.Conn, err error) {
	err = a.in(func() (err error) {
		c, err = d.DialContext(ctx, network, addr)
		return err
	})
	return c, err
}

func (a *nsAttachments) InNamespace(tenant string, fn func() error) error {
	if tenant != "acme" {
		return errors.New("not attached")
	}
	a.opened++
	return a.in(fn)
}

// tenantNetns makes a namespace bound in a directory of the test's with lo
// up and addrs on it.
func tenantNetns(t *testing.T, addrs ...string) string {
	t.Helper()
	if os.Geteuid() != 0 {
		if os.Getenv("CI") != "" { // CI runs as root: not being root there is a failure
			t.Fatal("CI: needs root for network namespaces")
		}
		t.Skip("needs root for network namespaces")
	}
	path := filepath.Join(t.TempDir(), "teapot-att-acme")
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread() // never unlocked
		f, err := os.Create(path)
		if err != nil {
			errc <- err
			return
		}
		f.Close()
		if err := unix.Unshare(unix.CLONE_NEWNET); err != nil {
			errc <- err
			return
		}
		errc <- unix.Mount(fmt.Sprintf("/proc/self/task/%d/ns/net", unix.Gettid()), path, "none", unix.MS_BIND, "")
	}()
	if err := <-errc; err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("CI: cannot make a network namespace: %v", err)
		}
		t.Skipf("cannot make a network namespace: %v", err)
	}
	t.Cleanup(func() { _ = unix.Unmount(path, unix.MNT_DETACH) })
	ns, err := netns.GetFromPath(path)
	if err != nil {
		t.Fatal(err)
	}
	defer ns.Close()
	h, err := netlink.NewHandleAt(ns)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	lo, err := h.LinkByName("lo")
	if err != nil {
		t.Fatal(err)
	}
	if err := h.LinkSetUp(lo); err != nil {
		t.Fatal(err)
	}
	for _, s := range addrs {
		a, _ := netlink.ParseAddr(s)
		if err := h.AddrAdd(lo, a); err != nil {
			t.Fatal(err)
		}
	}
	return path
}

// TestListenerInAttachment: a load balancer whose VIP lies in a pool in
// the tenant's attachment listens inside the tenant's namespace (its key
// names the tenant), where a client of the tenant's network reaches its
// member through it; the host's namespace has no such listener. Without
// Attachments the listener is not opened, with a reason.
func TestListenerInAttachment(t *testing.T) {
	t.Parallel()
	path := tenantNetns(t, "10.0.0.100/32", "10.0.0.10/32")
	att := &nsAttachments{path: path}
	var member net.Listener
	if err := att.in(func() (err error) { member, err = net.Listen("tcp", "10.0.0.10:0"); return err }); err != nil {
		t.Fatal(err)
	}
	defer member.Close()
	go func() {
		for {
			c, err := member.Accept()
			if err != nil {
				return
			}
			io.WriteString(c, "tenant acme\n")
			c.Close()
		}
	}()
	objs := func(port int) []*pb.Object {
		return []*pb.Object{
			{Kind: &pb.Object_Tenant{Tenant: &pb.Tenant{Name: "acme", Networks: []string{"10.0.0.0/24"}, Pools: []string{"private"}}}},
			{Kind: &pb.Object_VipPool{VipPool: &pb.VIPPool{Name: "private", Cidrs: []string{"10.0.0.96/28"}, Mode: "arp", Attachment: "acme"}}},
			{Kind: &pb.Object_LoadBalancer{LoadBalancer: &pb.LoadBalancer{Name: "web", Tenant: "acme", Vip: &pb.VIPRequest{Pool: "private"},
				Listeners: []*pb.Listener{{Port: uint32(port), Protocol: "tcp", Pool: "app"}},
				Pools:     map[string]*pb.BackendPool{"app": {Members: []*pb.Member{{Address: member.Addr().String()}}}},
				Status:    &pb.LoadBalancerStatus{Address: "10.0.0.100"}}}},
		}
	}
	free, err := net.Listen("tcp4", "0.0.0.0:0") // a port free on every address of the host's namespace
	if err != nil {
		t.Fatal(err)
	}
	port := free.Addr().(*net.TCPAddr).Port
	free.Close()
	p, _ := newProxy(t, Config{Attachments: att})
	if err := p.Update(objs(port), 1); err != nil && !errors.Is(err, ErrNoChanges) {
		t.Fatal(err)
	}
	k := snapshot.Key{Addr: netip.AddrPortFrom(netip.MustParseAddr("10.0.0.100"), uint16(port)), Network: snapshot.TCP, Space: "acme"}
	if p.snap.Listener(k) == nil || k.String() != fmt.Sprintf("10.0.0.100:%d/tcp@acme", port) {
		t.Fatalf("no listener %s in the snapshot", k)
	}
	if att.opened == 0 {
		t.Fatal("no socket was made in the tenant's namespace")
	}
	var got string
	err = att.in(func() error {
		c, err := net.DialTimeout("tcp", fmt.Sprintf("10.0.0.100:%d", port), 5*time.Second)
		if err != nil {
			return err
		}
		defer c.Close()
		_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
		b, err := io.ReadAll(c)
		got = string(b)
		return err
	})
	if err != nil || got != "tenant acme\n" {
		t.Fatalf("through the VIP in the tenant's namespace: %q, %v", got, err)
	}
	// The host's namespace has the port free on that address: the
	// listener is not there.
	lc := net.ListenConfig{Control: func(_, _ string, c syscall.RawConn) error {
		var serr error
		err := c.Control(func(fd uintptr) { serr = unix.SetsockoptInt(int(fd), unix.IPPROTO_IP, unix.IP_FREEBIND, 1) })
		return errors.Join(err, serr)
	}}
	hl, err := lc.Listen(context.Background(), "tcp4", fmt.Sprintf("10.0.0.100:%d", port))
	if err != nil {
		t.Fatalf("the host's namespace has the VIP's port taken: %v", err)
	}
	hl.Close()

	// Without Attachments: not opened, and the reason says why.
	q, _ := newProxy(t, Config{})
	_ = q.Update(objs(port+1), 1)
	found := false
	for _, pr := range q.Status()["acme/web"] {
		found = found || strings.Contains(pr.Reason, ErrNoAttachments.Error())
	}
	if !found {
		t.Fatalf("why acme/web is not served without Attachments: %+v", q.Status()["acme/web"])
	}
}
