package vip

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/mdlayher/packet"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"github.com/teapot-lb/teapot-lb/api"
	pb "github.com/teapot-lb/teapot-lb/api/proto/teapotv1"
)

// boundNetns makes a network namespace bound at dir/name with a veth pair
// tpx0-cap0, both up, and removes it at the end of the test.
func boundNetns(t *testing.T, dir, name string) string {
	t.Helper()
	if os.Geteuid() != 0 {
		if os.Getenv("CI") != "" { // CI runs as root: not being root there is a failure
			t.Fatal("CI: needs root for network namespaces")
		}
		t.Skip("needs root to create a network namespace")
	}
	path := filepath.Join(dir, name)
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread ends with the goroutine
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
		if err := unix.Mount(fmt.Sprintf("/proc/self/task/%d/ns/net", unix.Gettid()), path, "none", unix.MS_BIND, ""); err != nil {
			errc <- err
			return
		}
		if err := netlink.LinkAdd(&netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: AttachmentDevice}, PeerName: "cap0"}); err != nil {
			errc <- err
			return
		}
		for _, n := range []string{AttachmentDevice, "cap0", "lo"} {
			l, err := netlink.LinkByName(n)
			if err == nil {
				err = netlink.LinkSetUp(l)
			}
			if err != nil {
				errc <- err
				return
			}
		}
		for range 200 {
			if l, err := netlink.LinkByName(AttachmentDevice); err == nil && l.Attrs().OperState == netlink.OperUp {
				break
			}
			time.Sleep(10 * time.Millisecond)
		}
		errc <- nil
	}()
	if err := <-errc; err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("CI: cannot make a network namespace: %v", err)
		}
		t.Skipf("cannot set up a network namespace: %v", err)
	}
	t.Cleanup(func() {
		_ = unix.Unmount(path, unix.MNT_DETACH)
		_ = os.Remove(path)
	})
	return path
}

// TestPoolInAttachmentLivesInItsNamespace: the VIP of a pool in a
// tenant's attachment is put on the attachment's device inside the
// tenant's namespace (not on the host's interfaces), renewed and removed
// there, and announced on that device only; a tenant whose namespace is
// missing makes the pool's VIPs not ready on this host, with the reason.
func TestPoolInAttachmentLivesInItsNamespace(t *testing.T) {
	dir := t.TempDir()
	path := boundNetns(t, dir, api.AttachmentNamespace("a"))
	m := &Manager{cfg: Config{NetnsDir: dir}, log: slog.New(slog.DiscardHandler)}
	d := desiredState([]*pb.Object{
		api.Wrap(&pb.VIPPool{Name: "a-private", Cidrs: []string{"10.0.0.96/28"}, Mode: ModeARP, Attachment: "a"}),
		api.Wrap(&pb.VIPPool{Name: "b-private", Cidrs: []string{"10.0.0.112/28"}, Mode: ModeARP, Attachment: "b"}),
	})
	m.loop.want = &d
	if inRanges(d.Ranges, netip.MustParseAddr("10.0.0.100")) {
		t.Fatalf("the ranges swept on the host's interfaces hold a pool in an attachment: %v", d.Ranges)
	}
	f := m.arpIface("a-private")
	if f.name != AttachmentDevice || f.ns != path || m.arpIface("a-private") != f {
		t.Fatalf("arpIface = %+v, want %s in %s, the same each time", f, AttachmentDevice, path)
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
	vip := netip.MustParseAddr("10.0.0.100")
	if err := f.add(vip); err != nil {
		t.Fatal(err)
	}
	l, err := h.LinkByName(AttachmentDevice)
	if err != nil {
		t.Fatal(err)
	}
	list, err := h.AddrList(l, netlink.FAMILY_V4)
	if err != nil || len(list) != 1 || !list[0].IP.Equal(vip.AsSlice()) || list[0].Label != AttachmentDevice+":vip" {
		t.Fatalf("addresses of %s in the namespace: %v, %v; want %s labelled %s:vip", AttachmentDevice, list, err, vip, AttachmentDevice)
	}
	if host, err := netlink.AddrList(nil, netlink.FAMILY_V4); err == nil {
		for _, a := range host {
			if a.IP.Equal(vip.AsSlice()) {
				t.Fatalf("%s is on the host's interface %d", vip, a.LinkIndex)
			}
		}
	}
	if got, err := f.hostAddrs(); err != nil || !got[vip] {
		t.Fatalf("hostAddrs = %v, %v; want %s as ours", got, err, vip)
	}

	// The announcement goes out on the namespace's device.
	var capture *packet.Conn
	if err := inNamespace(path, func() error {
		ifi, err := net.InterfaceByName("cap0")
		if err != nil {
			return err
		}
		capture, err = packet.Listen(ifi, packet.Raw, unix.ETH_P_ARP, nil)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	defer capture.Close()
	s := m.senderOf(f)
	if s == m.frames || s.ns != path {
		t.Fatalf("sender of the attachment's device: %+v", s)
	}
	defer s.close()
	if err := s.send(vip); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 1500)
	got := 0
	deadline := time.Now().Add(2 * time.Second)
	for got < 2 {
		_ = capture.SetReadDeadline(deadline)
		n, _, err := capture.ReadFrom(buf)
		if errors.Is(err, os.ErrDeadlineExceeded) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if n >= 42 && netip.AddrFrom4([4]byte(buf[28:32])) == vip {
			got++
		}
	}
	if got != 2 {
		t.Fatalf("captured %d ARP announcements of %s in the namespace, want 2", got, vip)
	}

	if err := f.remove(vip); err != nil {
		t.Fatal(err)
	}
	if list, _ := h.AddrList(l, netlink.FAMILY_V4); len(list) != 0 {
		t.Fatalf("after remove: %v", list)
	}

	// b has no namespace here: its pool's VIPs are not ready, with the reason.
	m.checkPoolIfaces()
	want := "pool b-private lives in tenant b's attachment, which is not up on this host (no namespace teapot-att-b)"
	if probs := m.loop.ready.ifProblems; len(probs) != 1 || probs["b-private"] != want {
		t.Fatalf("problems = %q, want b-private: %q", probs, want)
	}
	// a's device down: its pool is not ready either.
	if err := h.LinkSetDown(l); err != nil {
		t.Fatal(err)
	}
	m.checkPoolIfaces()
	if why := m.loop.ready.ifProblems["a-private"]; why != "pool a-private lives in tenant a's attachment, which is not up on this host (tpx0 in namespace teapot-att-a is down)" {
		t.Fatalf("a-private with its device down: %q", why)
	}
}

// TestSamePrivateVIPInTwoAttachments: two attached tenants each with a
// pool of the same address in its own attachment make one VIP carried in
// both namespaces (Spaces); the holder puts the address on each tenant's
// device and takes it off both; when one tenant's load balancer goes, the
// VIP lives in the other's namespace only; a host where one of the
// attachments is down carries it for the other tenant alone, naming the
// one it does not carry it for and why, and one where both are down is
// not ready for it.
func TestSamePrivateVIPInTwoAttachments(t *testing.T) {
	dir := t.TempDir()
	pa := boundNetns(t, dir, api.AttachmentNamespace("a"))
	pb2 := boundNetns(t, dir, api.AttachmentNamespace("b"))
	m := &Manager{cfg: Config{NetnsDir: dir}, log: slog.New(slog.DiscardHandler)}
	lb := func(tenant string) *pb.LoadBalancer {
		return &pb.LoadBalancer{Name: "web", Tenant: tenant, Vip: &pb.VIPRequest{Pool: tenant + "-private"},
			Status: &pb.LoadBalancerStatus{Address: "10.0.0.100"}}
	}
	d := desiredState([]*pb.Object{
		api.Wrap(&pb.VIPPool{Name: "a-private", Cidrs: []string{"10.0.0.100/32"}, Mode: ModeARP, Attachment: "a"}),
		api.Wrap(&pb.VIPPool{Name: "b-private", Cidrs: []string{"10.0.0.100/32"}, Mode: ModeARP, Attachment: "b"}),
		api.Wrap(lb("a")), api.Wrap(lb("b")),
	})
	m.loop.want = &d
	vip := netip.MustParseAddr("10.0.0.100")
	vs, ok := d.vip(vip)
	if !ok || !slices.Equal(vs.LBs, []string{"a/web", "b/web"}) || !slices.Equal(vs.Spaces, []string{"a", "b"}) {
		t.Fatalf("the VIP: %+v, %t; want both load balancers in spaces a and b", vs, ok)
	}
	tg := m.arpTarget(vs, nil)
	if ps := tg.places(); len(ps) != 2 || ps[0].ns != pa || ps[1].ns != pb2 || ps[0].name != AttachmentDevice {
		t.Fatalf("places: %+v", ps)
	}
	if err := tg.add(vip); err != nil {
		t.Fatal(err)
	}
	for _, f := range tg.places() {
		if got, err := f.hostAddrs(); err != nil || !got[vip] {
			t.Fatalf("%s: %v, %v; want %s", f, got, err, vip)
		}
	}
	if err := tg.remove(vip); err != nil {
		t.Fatal(err)
	}
	for _, f := range tg.places() {
		if got, _ := f.hostAddrs(); got[vip] {
			t.Fatalf("%s still has %s", f, vip)
		}
	}

	// b's load balancer goes: the VIP is a's alone.
	d2, touched := d.withLoadBalancers([]lbChange{{prev: lb("b")}})
	if vs, _ := d2.vip(vip); !slices.Equal(vs.Spaces, []string{"a"}) || len(touched) != 1 {
		t.Fatalf("after b/web left: %+v (touched %v)", vs, touched)
	}
	if vs, _ := d.vip(vip); !slices.Equal(vs.Spaces, []string{"a", "b"}) {
		t.Fatalf("the earlier state changed: %+v", vs)
	}
	// And comes back.
	d3, _ := d2.withLoadBalancers([]lbChange{{next: lb("b")}})
	if vs, _ := d3.vip(vip); !slices.Equal(vs.Spaces, []string{"a", "b"}) {
		t.Fatalf("after b/web came back: %+v", vs)
	}

	// b's device down: the shared VIP is not ready here, naming b.
	setAttachmentDown(t, pb2)
	m.checkPoolIfaces()
	m.loop.ready.have = true
	m.loop.ready.ready = map[string]string{"a/web": "", "b/web": ""}
	downB := "tenant b's attachment, which carries this VIP, is not up on this host (tpx0 in namespace teapot-att-b is down)"
	if why, unserved := m.loop.ready.why(vs); why != "" || len(unserved) != 1 || unserved["b"] != downB {
		t.Fatalf("the shared VIP with b's attachment down: not ready %q, unserved %q; want ready for a, b unserved: %q", why, unserved, downB)
	}
	if ps := m.arpTarget(vs, map[string]string{"b": downB}).places(); len(ps) != 1 || ps[0].ns != pa {
		t.Fatalf("places with b's attachment down: %+v, want a's device alone", ps)
	}
	// a's device down too: not ready, naming both.
	setAttachmentDown(t, pa)
	m.checkPoolIfaces()
	if why, _ := m.loop.ready.why(vs); why != "tenant a's attachment, which carries this VIP, is not up on this host (tpx0 in namespace teapot-att-a is down); "+downB {
		t.Fatalf("why the shared VIP is not ready with both attachments down: %q", why)
	}
}

// setAttachmentDown sets the attachment device in the namespace bound at
// path down.
func setAttachmentDown(t *testing.T, path string) {
	t.Helper()
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
	if err := h.LinkSetDown(l); err != nil {
		t.Fatal(err)
	}
}

// TestActuatorMovesASharedVIPBetweenPlaces: when a tenant's load balancer
// joins or leaves an address that other attached tenants' VIPs use, the
// actuator puts the address on, or takes it off, that tenant's device
// only: the others keep it without a gap and are not announced again
// (no new burst for them).
func TestActuatorMovesASharedVIPBetweenPlaces(t *testing.T) {
	dir := t.TempDir()
	boundNetns(t, dir, api.AttachmentNamespace("a"))
	boundNetns(t, dir, api.AttachmentNamespace("b"))
	m := &Manager{cfg: Config{NetnsDir: dir}, log: slog.New(slog.DiscardHandler)}
	m.act = newActuator(m)
	vip := netip.MustParseAddr("10.0.0.100")
	fa := m.pools.getIn(AttachmentDevice, m.attachmentNS("a")).f
	fb := m.pools.getIn(AttachmentDevice, m.attachmentNS("b")).f
	defer func() {
		for _, e := range m.pools.all() {
			e.frames.close()
		}
	}()
	a := m.act
	t0 := time.Now()
	a.set(map[netip.Addr]target{vip: {mode: ModeARP, iface: fa}}, nil)
	a.converge(t0)
	if got, _ := fa.hostAddrs(); !got[vip] {
		t.Fatalf("a's device: %v", got)
	}
	// b's load balancer joins the address: put on b's device only.
	t1 := t0.Add(10 * time.Second)
	a.change(map[netip.Addr]*target{vip: {mode: ModeARP, iface: fa, more: []*iface{fb}}}, nil)
	a.converge(t1)
	if got, _ := fb.hostAddrs(); !got[vip] {
		t.Fatalf("b's device after b joined: %v", got)
	}
	burstsOn := func(f *iface, after time.Time) int {
		n := 0
		for _, p := range a.pending {
			if p.iface == f && p.at.After(after) {
				n++
			}
		}
		return n
	}
	if n := burstsOn(fa, t1); n != 0 {
		t.Fatalf("a's device announced again (%d) when b joined: it was taken off and put back", n)
	}
	if n := burstsOn(fb, t1); n == 0 {
		t.Fatal("b's device not announced when b joined")
	}
	// b leaves: off b's device only.
	t2 := t1.Add(10 * time.Second)
	a.change(map[netip.Addr]*target{vip: {mode: ModeARP, iface: fa}}, nil)
	a.converge(t2)
	if got, _ := fb.hostAddrs(); got[vip] {
		t.Fatalf("b's device after b left: %v", got)
	}
	if got, _ := fa.hostAddrs(); !got[vip] {
		t.Fatalf("a's device after b left: %v", got)
	}
	if n := burstsOn(fa, t2); n != 0 {
		t.Fatalf("a's device announced again (%d) when b left", n)
	}
	if errs := a.errors(); len(errs) != 0 {
		t.Fatalf("errors: %v", errs)
	}
}

// tenantVIPsRec records what the VIP layer asks the tenants' relay to
// announce (the relay's own export is tested in vip/tenantbgp).
type tenantVIPsRec struct {
	announced map[netip.Addr][]string
	problem   map[netip.Addr]string
	// withdrawn counts the withdrawals; lost counts, by tenant, the calls
	// after which a tenant the VIP was announced to no longer has it.
	withdrawn int
	lost      map[string]int
	// fail: the next calls of AnnounceVIP that fail (and change nothing).
	fail int
}

func (r *tenantVIPsRec) VIPProblem(a netip.Addr) string { return r.problem[a] }

func (r *tenantVIPsRec) AnnounceVIP(a netip.Addr, tenants []string, _ []uint32) error {
	if r.fail > 0 {
		r.fail--
		return errors.New("relay refused the announcement")
	}
	r.lose(r.announced[a], tenants)
	r.announced[a] = slices.Clone(tenants)
	return nil
}

func (r *tenantVIPsRec) WithdrawVIP(a netip.Addr) error {
	r.withdrawn++
	r.lose(r.announced[a], nil)
	delete(r.announced, a)
	return nil
}

func (r *tenantVIPsRec) lose(before, after []string) {
	for _, t := range before {
		if !slices.Contains(after, t) {
			if r.lost == nil {
				r.lost = map[string]int{}
			}
			r.lost[t]++
		}
	}
}

// TestBGPPoolInAttachment: a VIP of a bgp pool in a tenant's attachment
// is announced, when this host serves it, to that tenant's speakers
// through TenantVIPs (never to the fabric speaker), put on the
// attachment's device in the tenant's namespace with no gratuitous ARP,
// and withdrawn and taken off it when released; a host where the
// attachment is not up is not ready for it, with the reason.
func TestBGPPoolInAttachment(t *testing.T) {
	dir := t.TempDir()
	pa := boundNetns(t, dir, api.AttachmentNamespace("a"))
	rec := &tenantVIPsRec{announced: map[netip.Addr][]string{}}
	m := &Manager{cfg: Config{NetnsDir: dir, TenantVIPs: rec, NodeID: "n1"}, log: slog.New(slog.DiscardHandler)}
	m.loop.init()
	m.act = newActuator(m)
	defer func() {
		for _, e := range m.pools.all() {
			e.frames.close()
		}
	}()
	lb := func(tenant, pool, addr string) *pb.LoadBalancer {
		return &pb.LoadBalancer{Name: "web", Tenant: tenant, Vip: &pb.VIPRequest{Pool: pool}, Status: &pb.LoadBalancerStatus{Address: addr}}
	}
	d := desiredState([]*pb.Object{
		api.Wrap(&pb.VIPPool{Name: "a-bgp", Cidrs: []string{"10.0.0.96/28"}, Mode: ModeBGP, Attachment: "a"}),
		api.Wrap(&pb.VIPPool{Name: "b-bgp", Cidrs: []string{"10.0.0.96/28"}, Mode: ModeBGP, Attachment: "b"}),
		api.Wrap(lb("a", "a-bgp", "10.0.0.100")), api.Wrap(lb("b", "b-bgp", "10.0.0.101")),
	})
	m.loop.want = &d
	vip := netip.MustParseAddr("10.0.0.100")
	vs, ok := d.vip(vip)
	if !ok || vs.Mode != ModeBGP || !slices.Equal(vs.Spaces, []string{"a"}) || inRanges(d.Ranges, vip) {
		t.Fatalf("the VIP: %+v, %t (ranges %v); want a bgp VIP in space a, outside the swept ranges", vs, ok, d.Ranges)
	}
	me := self{ID: "n1", NotReady: map[netip.Addr]string{}}
	v := view{Alive: map[string]hostView{}, Quorum: true}
	now := time.Now()
	tg, hold := m.decideOne(vs, now, v, me, me, me)
	if !hold || tg.mode != ModeBGP || tg.iface == nil || tg.iface.ns != pa || tg.iface.name != AttachmentDevice ||
		!slices.Equal(tg.route.Spaces, []string{"a"}) {
		t.Fatalf("decided %+v (hold %t); want it announced on %s in %s for tenant a", tg, hold, AttachmentDevice, pa)
	}
	if r := m.loop.records[vip]; !strings.Contains(r.reason, "announced to the speakers of tenant a") {
		t.Errorf("reason %q", r.reason)
	}
	// The relay says the route reaches no router of the tenant: the
	// reason says so, and the host still holds the address.
	rec.problem = map[netip.Addr]string{vip: "tenant a: no session with its IPv4 speakers is established"}
	if _, hold := m.decideOne(vs, now, v, me, me, me); !hold {
		t.Error("released without an established session")
	}
	if r := m.loop.records[vip]; r.reason != "ready and current; tenant a: no session with its IPv4 speakers is established" {
		t.Errorf("reason without a session %q", r.reason)
	}
	rec.problem = nil
	m.decideOne(vs, now, v, me, me, me)
	m.act.set(map[netip.Addr]target{vip: tg}, d.Ranges)
	m.act.converge(now)
	if errs := m.act.errors(); len(errs) != 0 {
		t.Fatalf("errors: %v", errs)
	}
	if got, _ := tg.iface.hostAddrs(); !got[vip] {
		t.Fatalf("the device in a's namespace: %v, want %s", got, vip)
	}
	if !slices.Equal(rec.announced[vip], []string{"a"}) || len(rec.announced) != 1 {
		t.Fatalf("announced %v, want %s to a", rec.announced, vip)
	}
	if len(m.act.pending) != 0 {
		t.Fatalf("gratuitous ARP queued for a bgp VIP: %v", m.act.pending)
	}
	m.act.set(map[netip.Addr]target{}, d.Ranges)
	m.act.converge(now)
	if got, _ := tg.iface.hostAddrs(); got[vip] {
		t.Fatalf("the device keeps %s after the release", vip)
	}
	if len(rec.announced) != 0 {
		t.Fatalf("still announced: %v", rec.announced)
	}

	// b's attachment is not up here: its bgp VIP is not ready, with why.
	m.checkPoolIfaces()
	m.loop.ready.have = true
	m.loop.ready.ready = map[string]string{"a/web": "", "b/web": ""}
	vb, _ := d.vip(netip.MustParseAddr("10.0.0.101"))
	if why, _ := m.loop.ready.why(vb); why != "pool b-bgp lives in tenant b's attachment, which is not up on this host (no namespace teapot-att-b)" {
		t.Fatalf("why b's VIP is not ready: %q", why)
	}
}

// addrRemovals counts the removals of addresses (RTM_DELADDR) in the
// namespace at path until the returned function is called, which returns
// them by address.
func addrRemovals(t *testing.T, path string) func() map[netip.Addr]int {
	t.Helper()
	ns, err := netns.GetFromPath(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ns.Close() })
	// A marker address added and removed last: its removal shows that
	// every earlier update has been read.
	marker := netip.MustParseAddr("192.0.2.254")
	ch := make(chan netlink.AddrUpdate, 64)
	done := make(chan struct{})
	if err := netlink.AddrSubscribeWithOptions(ch, done, netlink.AddrSubscribeOptions{Namespace: &ns}); err != nil {
		t.Fatal(err)
	}
	counts := map[netip.Addr]int{}
	seen := make(chan struct{})
	go func() {
		for u := range ch {
			a, ok := netip.AddrFromSlice(u.LinkAddress.IP)
			if !ok || u.NewAddr {
				continue
			}
			if a.Unmap() == marker {
				close(seen)
				return
			}
			counts[a.Unmap()]++
		}
	}()
	return func() map[netip.Addr]int {
		defer close(done)
		f := &iface{name: AttachmentDevice, ns: path}
		if err := f.add(marker); err != nil {
			t.Fatal(err)
		}
		if err := f.remove(marker); err != nil {
			t.Fatal(err)
		}
		select {
		case <-seen:
		case <-time.After(5 * time.Second):
			t.Fatal("the removal of the marker address was never reported")
		}
		return counts
	}
}

// TestActuatorMovesASharedBGPVIPBetweenPlaces: a VIP of bgp pools in
// several tenants' attachments that gains or loses a tenant keeps its
// address on the devices of the tenants that keep it and its route with
// their speakers (no withdrawal, no removal), the tenant that leaves has
// its route withdrawn and its address removed, and the tenant that joins
// gets both.
func TestActuatorMovesASharedBGPVIPBetweenPlaces(t *testing.T) {
	dir := t.TempDir()
	pa := boundNetns(t, dir, api.AttachmentNamespace("a"))
	boundNetns(t, dir, api.AttachmentNamespace("b"))
	rec := &tenantVIPsRec{announced: map[netip.Addr][]string{}}
	m := &Manager{cfg: Config{NetnsDir: dir, TenantVIPs: rec}, log: slog.New(slog.DiscardHandler)}
	m.act = newActuator(m)
	vip := netip.MustParseAddr("10.0.0.100")
	fa := m.pools.getIn(AttachmentDevice, m.attachmentNS("a")).f
	fb := m.pools.getIn(AttachmentDevice, m.attachmentNS("b")).f
	defer func() {
		for _, e := range m.pools.all() {
			e.frames.close()
		}
	}()
	bgpTarget := func(spaces ...string) *target {
		t := &target{mode: ModeBGP, route: route{Addr: vip, Spaces: spaces}}
		for _, s := range spaces {
			f := map[string]*iface{"a": fa, "b": fb}[s]
			if t.iface == nil {
				t.iface = f
			} else {
				t.more = append(t.more, f)
			}
		}
		return t
	}
	a := m.act
	now := time.Now()
	a.set(map[netip.Addr]target{vip: *bgpTarget("a")}, nil)
	a.converge(now)
	if got, _ := fa.hostAddrs(); !got[vip] || !slices.Equal(rec.announced[vip], []string{"a"}) {
		t.Fatalf("a's device %v, announced %v", got, rec.announced)
	}
	removals := addrRemovals(t, pa)

	// b joins: b gets the address and the route; a keeps both.
	a.change(map[netip.Addr]*target{vip: bgpTarget("a", "b")}, nil)
	a.converge(now)
	if got, _ := fb.hostAddrs(); !got[vip] || !slices.Equal(rec.announced[vip], []string{"a", "b"}) {
		t.Fatalf("after b joined: b's device %v, announced %v", got, rec.announced)
	}
	// b leaves: b loses the address and the route; a keeps both.
	a.change(map[netip.Addr]*target{vip: bgpTarget("a")}, nil)
	a.converge(now)
	if got, _ := fb.hostAddrs(); got[vip] {
		t.Fatalf("b's device keeps %s after b left", vip)
	}
	if got, _ := fa.hostAddrs(); !got[vip] || !slices.Equal(rec.announced[vip], []string{"a"}) {
		t.Fatalf("after b left: a's device %v, announced %v", got, rec.announced)
	}
	if errs := a.errors(); len(errs) != 0 {
		t.Fatalf("errors: %v", errs)
	}
	if n := removals()[vip]; n != 0 || rec.withdrawn != 0 || rec.lost["a"] != 0 {
		t.Fatalf("tenant a, which kept the VIP: address removed %d times, withdrawals %d, route lost %d times; want none",
			n, rec.withdrawn, rec.lost["a"])
	}
	if rec.lost["b"] != 1 {
		t.Fatalf("tenant b lost the route %d times, want once (when it left)", rec.lost["b"])
	}
}

// TestActuatorRetriesAFailedMoveOfASharedBGPVIP: when the relay refuses
// the route of a bgp VIP that gains a tenant, the actuator keeps what it
// held (the address on the kept tenant's device, its route as it was) and
// moves it again at the next converge: it does not take the new tenants'
// route as held while the address is not on the new tenant's device,
// which would leave that device without it for good.
func TestActuatorRetriesAFailedMoveOfASharedBGPVIP(t *testing.T) {
	dir := t.TempDir()
	boundNetns(t, dir, api.AttachmentNamespace("a"))
	boundNetns(t, dir, api.AttachmentNamespace("b"))
	rec := &tenantVIPsRec{announced: map[netip.Addr][]string{}}
	m := &Manager{cfg: Config{NetnsDir: dir, TenantVIPs: rec}, log: slog.New(slog.DiscardHandler)}
	m.act = newActuator(m)
	vip := netip.MustParseAddr("10.0.0.100")
	fa := m.pools.getIn(AttachmentDevice, m.attachmentNS("a")).f
	fb := m.pools.getIn(AttachmentDevice, m.attachmentNS("b")).f
	defer func() {
		for _, e := range m.pools.all() {
			e.frames.close()
		}
	}()
	a := m.act
	now := time.Now()
	a.set(map[netip.Addr]target{vip: {mode: ModeBGP, iface: fa, route: route{Addr: vip, Spaces: []string{"a"}}}}, nil)
	a.converge(now)
	both := &target{mode: ModeBGP, iface: fa, more: []*iface{fb}, route: route{Addr: vip, Spaces: []string{"a", "b"}}}
	a.change(map[netip.Addr]*target{vip: both}, nil)
	rec.fail = 1
	a.converge(now)
	if errs := a.errors(); errs[vip] == "" {
		t.Fatalf("the refused move is not reported: %v", errs)
	}
	if got, _ := fa.hostAddrs(); !got[vip] {
		t.Fatal("a's device lost the address when the move failed")
	}
	if got := rec.announced[vip]; !slices.Equal(got, []string{"a"}) && !slices.Equal(got, []string{"a", "b"}) {
		t.Fatalf("announced to %v after the refusal", got)
	}
	// The next converge moves it.
	a.converge(now)
	if got, _ := fb.hostAddrs(); !got[vip] || !slices.Equal(rec.announced[vip], []string{"a", "b"}) {
		t.Fatalf("after the retry: b's device %v, announced %v", got, rec.announced)
	}
	if got, _ := fa.hostAddrs(); !got[vip] {
		t.Fatal("a's device lost the address")
	}
	if errs := a.errors(); len(errs) != 0 {
		t.Fatalf("errors after the retry: %v", errs)
	}
	if rec.lost["a"] != 0 || rec.withdrawn != 0 {
		t.Fatalf("tenant a lost the route %d times, withdrawals %d; want none", rec.lost["a"], rec.withdrawn)
	}
}

// TestSharedVIPWithOneAttachmentDownEverywhere: tenants a and b share the
// private address of an arp VIP and of a bgp VIP; a's attachment is down
// on every host (here: no namespace), b's is up. The hosts carry the
// addresses for b: the arp VIP's holder is the first host in the ranking
// among those that carry it for b (none carries it for both), puts it on
// b's device alone and says that a is not served and why; a host that
// carries it for both tenants is preferred; the bgp VIP is announced to
// b's speakers alone. The heartbeats list the arp VIP as not ready and
// partly ready, and the status names a as not served.
func TestSharedVIPWithOneAttachmentDownEverywhere(t *testing.T) {
	dir := t.TempDir()
	pbPath := boundNetns(t, dir, api.AttachmentNamespace("b"))
	rec := &tenantVIPsRec{announced: map[netip.Addr][]string{}}
	m := &Manager{cfg: Config{NetnsDir: dir, TenantVIPs: rec, NodeID: "n1"}, log: slog.New(slog.DiscardHandler)}
	m.loop.init()
	m.act = newActuator(m)
	defer func() {
		for _, e := range m.pools.all() {
			e.frames.close()
		}
	}()
	lb := func(tenant, name, pool, addr string) *pb.LoadBalancer {
		return &pb.LoadBalancer{Name: name, Tenant: tenant, Vip: &pb.VIPRequest{Pool: pool}, Status: &pb.LoadBalancerStatus{Address: addr}}
	}
	d := desiredState([]*pb.Object{
		api.Wrap(&pb.VIPPool{Name: "a-private", Cidrs: []string{"10.0.0.100/32"}, Mode: ModeARP, Attachment: "a"}),
		api.Wrap(&pb.VIPPool{Name: "b-private", Cidrs: []string{"10.0.0.100/32"}, Mode: ModeARP, Attachment: "b"}),
		api.Wrap(&pb.VIPPool{Name: "a-bgp", Cidrs: []string{"10.0.0.101/32"}, Mode: ModeBGP, Attachment: "a"}),
		api.Wrap(&pb.VIPPool{Name: "b-bgp", Cidrs: []string{"10.0.0.101/32"}, Mode: ModeBGP, Attachment: "b"}),
		api.Wrap(lb("a", "web", "a-private", "10.0.0.100")), api.Wrap(lb("b", "web", "b-private", "10.0.0.100")),
		api.Wrap(lb("a", "api", "a-bgp", "10.0.0.101")), api.Wrap(lb("b", "api", "b-bgp", "10.0.0.101")),
	})
	m.loop.want = &d
	vip, vipBGP := netip.MustParseAddr("10.0.0.100"), netip.MustParseAddr("10.0.0.101")
	m.checkPoolIfaces()
	// The data plane serves b's load balancers (a's listeners live in its
	// namespace, which is missing).
	m.ready, m.haveReady, m.readyAll = map[string]string{"b/web": "", "b/api": "", "a/web": "no namespace", "a/api": "no namespace"}, true, true
	m.takeReadiness(nil)
	rd := &m.loop.ready
	downA := "tenant a's attachment, which carries this VIP, is not up on this host (no namespace teapot-att-a)"
	if why := rd.notReady[vip]; why != "" || rd.unserved[vip]["a"] != downA || len(rd.unserved[vip]) != 1 {
		t.Fatalf("readiness of the arp VIP: not ready %q, unserved %q; want ready for b, a unserved", why, rd.unserved[vip])
	}
	if !slices.Equal(rd.arpNotReady, []netip.Addr{vip}) || !slices.Equal(rd.arpPartly, []netip.Addr{vip}) {
		t.Fatalf("heartbeats: not ready %v, partly %v; want %s in both", rd.arpNotReady, rd.arpPartly, vip)
	}

	me := self{ID: "n1", NotReady: rd.notReady, Partly: rd.unserved}
	partly := hostView{Eligible: true, Direct: true, Holdings: true, NotReady: map[netip.Addr]bool{vip: true}, Partly: map[netip.Addr]bool{vip: true}}
	full := hostView{Eligible: true, Direct: true, Holdings: true}
	now := time.Now()
	vs, _ := d.vip(vip)

	// Every host carries it for b only: the ranking among them.
	m.loop.ranks[vip] = []string{"n1", "n2", "n3"}
	v := view{Alive: map[string]hostView{"n2": partly, "n3": partly}, Quorum: true}
	tg, hold := m.decideOne(vs, now, v, me, me, me)
	if !hold {
		t.Fatalf("not held though it ranks first among the hosts that carry it for b: %q", m.loop.records[vip].reason)
	}
	if ps := tg.places(); len(ps) != 1 || ps[0].ns != pbPath {
		t.Fatalf("places %+v, want b's device alone", ps)
	}
	r := m.loop.records[vip]
	if !strings.Contains(r.reason, "for tenant b only") || !strings.Contains(r.reason, downA) {
		t.Errorf("reason %q: want it held for b only, and why not for a", r.reason)
	}
	if h := r.holding(vip); h.GetState() != "holding" || h.GetUnservedTenants()["a"] != downA || len(h.GetUnservedTenants()) != 1 {
		t.Errorf("status %+v: want holding, a unserved", h)
	}
	m.act.set(map[netip.Addr]target{vip: tg}, d.Ranges)
	m.act.converge(now)
	if errs := m.act.errors(); len(errs) != 0 {
		t.Fatalf("errors: %v", errs)
	}
	if got, _ := tg.iface.hostAddrs(); !got[vip] {
		t.Fatalf("b's device: %v, want %s", got, vip)
	}

	// A host that carries it for both tenants is preferred, though it
	// ranks lower.
	v.Alive["n3"] = full
	if _, hold := m.decideOne(vs, now, v, me, me, me); hold || m.loop.prev[vip] != "n3" {
		t.Errorf("with n3 carrying it for both: held %t, holder %q; want n3", hold, m.loop.prev[vip])
	}
	// Among the hosts that carry it for b, the ranking.
	m.loop.ranks[vip] = []string{"n2", "n1", "n3"}
	v.Alive["n3"] = partly
	if _, hold := m.decideOne(vs, now, v, me, me, me); hold || m.loop.prev[vip] != "n2" {
		t.Errorf("n2 first: held %t, holder %q; want n2", hold, m.loop.prev[vip])
	}
	if r := m.loop.records[vip]; !strings.Contains(r.reason, downA) || r.holding(vip).GetUnservedTenants()["a"] != downA {
		t.Errorf("a host that does not hold it: reason %q, status %+v; want a named as not served here", r.reason, r.holding(vip))
	}

	// The bgp VIP: announced to b's speakers alone, on b's device.
	vb, _ := d.vip(vipBGP)
	tb, hold := m.decideOne(vb, now, view{Alive: map[string]hostView{}, Quorum: true}, me, me, me)
	if !hold || !slices.Equal(tb.route.Spaces, []string{"b"}) || len(tb.places()) != 1 || tb.iface.ns != pbPath {
		t.Fatalf("the bgp VIP: held %t, %+v; want announced to b alone, on b's device", hold, tb)
	}
	if r := m.loop.records[vipBGP]; !strings.Contains(r.reason, "announced to the speakers of tenant b from") || !strings.Contains(r.reason, downA) {
		t.Errorf("the bgp VIP's reason %q", r.reason)
	}
	m.act.change(map[netip.Addr]*target{vipBGP: &tb}, d.Ranges)
	m.act.converge(now)
	if !slices.Equal(rec.announced[vipBGP], []string{"b"}) {
		t.Fatalf("announced %v, want %s to b alone", rec.announced, vipBGP)
	}
	if errs := m.act.errors(); len(errs) != 0 {
		t.Fatalf("errors: %v", errs)
	}
}

// TestSharedVIPLeavesAnAttachmentThatWentAway: a holder of an address two
// tenants' attachments carry whose namespace for one of them goes away
// keeps it for the other (no removal there) and reports no error: the
// address left with the namespace.
func TestSharedVIPLeavesAnAttachmentThatWentAway(t *testing.T) {
	dir := t.TempDir()
	pa := boundNetns(t, dir, api.AttachmentNamespace("a"))
	pb2 := boundNetns(t, dir, api.AttachmentNamespace("b"))
	rec := &tenantVIPsRec{announced: map[netip.Addr][]string{}}
	m := &Manager{cfg: Config{NetnsDir: dir, TenantVIPs: rec}, log: slog.New(slog.DiscardHandler)}
	m.act = newActuator(m)
	defer func() {
		for _, e := range m.pools.all() {
			e.frames.close()
		}
	}()
	fa := m.pools.getIn(AttachmentDevice, m.attachmentNS("a")).f
	fb := m.pools.getIn(AttachmentDevice, m.attachmentNS("b")).f
	vip, vipBGP := netip.MustParseAddr("10.0.0.100"), netip.MustParseAddr("10.0.0.101")
	both := map[netip.Addr]target{
		vip:    {mode: ModeARP, iface: fa, more: []*iface{fb}},
		vipBGP: {mode: ModeBGP, iface: fa, more: []*iface{fb}, route: route{Addr: vipBGP, Spaces: []string{"a", "b"}}},
	}
	a := m.act
	now := time.Now()
	a.set(both, nil)
	a.converge(now)
	if errs := a.errors(); len(errs) != 0 {
		t.Fatalf("errors: %v", errs)
	}
	removals := addrRemovals(t, pb2)
	// a's attachment goes away on this host.
	if err := unix.Unmount(pa, unix.MNT_DETACH); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(pa); err != nil {
		t.Fatal(err)
	}
	a.set(map[netip.Addr]target{
		vip:    {mode: ModeARP, iface: fb},
		vipBGP: {mode: ModeBGP, iface: fb, route: route{Addr: vipBGP, Spaces: []string{"b"}}},
	}, nil)
	a.converge(now)
	if errs := a.errors(); len(errs) != 0 {
		t.Fatalf("errors after a's attachment went away: %v", errs)
	}
	if got, _ := fb.hostAddrs(); !got[vip] || !got[vipBGP] {
		t.Fatalf("b's device: %v", got)
	}
	if n := removals(); n[vip] != 0 || n[vipBGP] != 0 || rec.lost["b"] != 0 || !slices.Equal(rec.announced[vipBGP], []string{"b"}) {
		t.Fatalf("b: removals %v, route lost %d times, announced %v; want kept", n, rec.lost["b"], rec.announced)
	}
	if h := a.held[vip]; !h.samePlaces(target{iface: fb}) {
		t.Fatalf("held %+v, want b's device alone", h)
	}
}
