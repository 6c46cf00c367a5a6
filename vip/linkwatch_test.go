package vip

import (
	"context"
	"net"
	"net/netip"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"github.com/teapot-lb/teapot-lb/api"
	pb "github.com/teapot-lb/teapot-lb/api/proto/teapotv1"
)

// attachmentHost runs a Manager for the one host n1 (--vip-interface lo)
// whose state holds an arp pool in tenant a's attachment, bound in dir,
// and a load balancer at vip in it, ready; it returns the Manager, what
// reads the state of vip on it, and what gives it a new state with the
// pool and load balancer or without them.
func attachmentHost(t *testing.T, dir string, vip netip.Addr) (*Manager, func() *pb.VIPHolding, func(withPool bool)) {
	t.Helper()
	c, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	hbAddr := c.LocalAddr().String()
	c.Close()
	m, err := New(Config{NodeID: "n1", Interface: "lo", HeartbeatAddr: hbAddr, HeartbeatInterval: 20 * time.Millisecond, NetnsDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	m.SetKey([]byte("key"))
	revision := uint64(0)
	update := func(withPool bool) {
		objs := []*pb.Object{api.Wrap(&pb.Node{Id: "n1", HeartbeatAddr: hbAddr})}
		if withPool {
			objs = append(objs,
				api.Wrap(&pb.VIPPool{Name: "a-private", Cidrs: []string{"10.0.0.96/28"}, Mode: ModeARP, Attachment: "a"}),
				api.Wrap(&pb.LoadBalancer{Tenant: "a", Name: "web", Vip: &pb.VIPRequest{Pool: "a-private"},
					Status: &pb.LoadBalancerStatus{Address: vip.String()}}))
		}
		revision++
		m.Update(objs, revision)
	}
	update(true)
	m.setReady(map[string]string{"a/web": ""})
	ctx, cancel := context.WithCancel(context.Background())
	ran := make(chan error, 1)
	go func() { ran <- m.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-ran; err != nil {
			t.Errorf("Run = %v", err)
		}
		if n := m.loop.nsLinks.live.Load(); n != 0 {
			t.Errorf("%d subscriptions to namespaces outlived Run", n)
		}
		m.Close()
	})
	return m, func() *pb.VIPHolding {
		var ns pb.NodeStatus
		m.Describe(&ns)
		for _, v := range ns.GetVips() {
			if v.GetAddress() == vip.String() {
				return v
			}
		}
		return nil
	}, update
}

// setAttachmentUp sets the attachment device in the namespace bound at
// path up or down.
func setAttachmentUp(t *testing.T, path string, up bool) {
	t.Helper()
	if !up {
		setAttachmentDown(t, path)
		return
	}
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
	l, err := h.LinkByName(AttachmentDevice)
	if err != nil {
		t.Fatal(err)
	}
	if err := h.LinkSetUp(l); err != nil {
		t.Fatal(err)
	}
}

// waitHolding waits up to limit for vip's state to be held (or not) and
// returns how long that took.
func waitHolding(t *testing.T, state func() *pb.VIPHolding, held bool, limit time.Duration) time.Duration {
	t.Helper()
	start := time.Now()
	for {
		v := state()
		if (v.GetState() == "holding") == held {
			return time.Since(start)
		}
		if time.Since(start) > limit {
			t.Fatalf("after %s the VIP is %q (%q), want held %t", limit, v.GetState(), v.GetReason(), held)
		}
		time.Sleep(time.Millisecond)
	}
}

// TestAttachmentLinkChangeActedOnAtOnce: the device of a tenant's
// attachment set down inside the tenant's namespace releases the VIPs of
// the pool in it at once, and set up again has them held again at once,
// not at the next check of the links (every second).
func TestAttachmentLinkChangeActedOnAtOnce(t *testing.T) {
	dir := t.TempDir()
	path := boundNetns(t, dir, api.AttachmentNamespace("a"))
	vip := netip.MustParseAddr("10.0.0.100")
	_, state, _ := attachmentHost(t, dir, vip)
	waitHolding(t, state, true, 10*time.Second)
	const bound = 300 * time.Millisecond
	for i := range 3 {
		setAttachmentUp(t, path, false)
		down := waitHolding(t, state, false, 5*time.Second)
		t.Logf("cycle %d: released %s after the device went down (%q)", i, down, state().GetReason())
		setAttachmentUp(t, path, true)
		up := waitHolding(t, state, true, 5*time.Second)
		t.Logf("cycle %d: held %s after the device came up", i, up)
		if down > bound || up > bound {
			t.Errorf("cycle %d: released %s after the device went down, held %s after it came up; want both within %s", i, down, up, bound)
		}
	}
}

// waitFor waits up to limit for cond and returns how long that took.
func waitFor(t *testing.T, what string, limit time.Duration, cond func() bool) time.Duration {
	t.Helper()
	start := time.Now()
	for !cond() {
		if time.Since(start) > limit {
			t.Fatalf("after %s: %s", limit, what)
		}
		time.Sleep(time.Millisecond)
	}
	return time.Since(start)
}

// TestAttachmentLinkWatchFollowsTheAttachments: the subscription to the
// links of a tenant's attachment namespace ends when no pool lives in it
// any more and is made again when one does; a namespace deleted under
// the watch is let go at the next check of the links (its socket would
// keep it alive) and not subscribed to again while it is missing; a new
// namespace bound at its path is subscribed to, and a device going down
// in it is acted on at once.
func TestAttachmentLinkWatchFollowsTheAttachments(t *testing.T) {
	dir := t.TempDir()
	path := boundNetns(t, dir, api.AttachmentNamespace("a"))
	vip := netip.MustParseAddr("10.0.0.100")
	m, state, update := attachmentHost(t, dir, vip)
	w := &m.loop.nsLinks
	waitHolding(t, state, true, 10*time.Second)
	if n := w.live.Load(); n != 2 {
		t.Fatalf("%d subscriptions to namespaces, want 2 (the host's and the attachment's)", n)
	}

	update(false)
	waitFor(t, "the subscription outlived the pool in the attachment", 2*time.Second, func() bool { return w.live.Load() == 1 })
	update(true)
	waitFor(t, "no subscription to the attachment's namespace once a pool lives in it again", 2*time.Second, func() bool { return w.live.Load() == 2 })
	waitHolding(t, state, true, 5*time.Second)

	// Deleted under the watch.
	if err := unix.Unmount(path, unix.MNT_DETACH); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	gone := waitFor(t, "the subscription keeps a deleted namespace", 3*time.Second, func() bool { return w.live.Load() == 1 })
	t.Logf("let the deleted namespace go after %s", gone)
	// Released at the check; the renewal of its lease may fail first.
	waitFor(t, "not released for the missing namespace", 3*time.Second, func() bool {
		v := state()
		return v.GetState() != "holding" && strings.Contains(v.GetReason(), "no namespace teapot-att-a")
	})
	made := w.made.Load()
	time.Sleep(2500 * time.Millisecond) // two checks of the links at least
	if n := w.made.Load(); n != made || w.live.Load() != 1 {
		t.Errorf("while the namespace is missing: %d subscriptions made, %d live; want none", n-made, w.live.Load())
	}

	// A new namespace at the same path.
	boundNetns(t, dir, api.AttachmentNamespace("a"))
	waitFor(t, "no subscription to the new namespace", 3*time.Second, func() bool { return w.live.Load() == 2 })
	waitHolding(t, state, true, 5*time.Second)
	setAttachmentUp(t, path, false)
	down := waitHolding(t, state, false, 5*time.Second)
	t.Logf("released %s after the device in the new namespace went down", down)
	if down > 300*time.Millisecond {
		t.Errorf("released %s after the device in the new namespace went down, want within 300ms", down)
	}
}

// TestLinkWatchMadeAgainAfterItFails: a subscription whose socket failed
// (the kernel drops a subscriber that cannot keep up with a burst of
// changes), the host's or an attachment namespace's, is made again at the
// next check of the links, and a change after that is acted on at once
// again. Before, the host's was made once, at start: after a failure its
// interfaces were seen only at the check every second, for the rest of
// the process.
func TestLinkWatchMadeAgainAfterItFails(t *testing.T) {
	dir := t.TempDir()
	path := boundNetns(t, dir, api.AttachmentNamespace("a"))
	vip := netip.MustParseAddr("10.0.0.100")
	m, state, _ := attachmentHost(t, dir, vip)
	w := &m.loop.nsLinks
	waitHolding(t, state, true, 10*time.Second)
	waitFor(t, "the host's and the attachment's subscriptions", 3*time.Second, func() bool { return w.live.Load() == 2 })
	for _, p := range []string{hostLinks, path} {
		w.mu.Lock()
		s := w.subs[p]
		w.mu.Unlock()
		if s == nil {
			t.Fatalf("no subscription to %q", p)
		}
		made := w.made.Load()
		s.end() // as a failed socket: its reader ends
		waitFor(t, "the failed subscription's reader to end", 2*time.Second, func() bool { return w.live.Load() == 1 })
		again := waitFor(t, "the failed subscription made again", 3*time.Second, func() bool { return w.made.Load() == made+1 && w.live.Load() == 2 })
		t.Logf("subscription to %q made again %s after it failed", p, again)
	}
	setAttachmentUp(t, path, false)
	down := waitHolding(t, state, false, 5*time.Second)
	if down > 300*time.Millisecond {
		t.Errorf("released %s after the device went down, want within 300ms", down)
	}
}
