package tenantbgp

import (
	"context"
	"fmt"
	"maps"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"testing"

	gobgpapi "github.com/osrg/gobgp/v4/api"
	"github.com/osrg/gobgp/v4/pkg/apiutil"
	"github.com/osrg/gobgp/v4/pkg/packet/bgp"
	"github.com/osrg/gobgp/v4/pkg/server"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/teapot-lb/teapot-lb/api/observe"
	pb "github.com/teapot-lb/teapot-lb/api/proto/teapotv1"
)

// nsPair is a tenant's side of a host, made of two namespaces joined by a
// veth pair: the host's attachment (10.0.0.2/24, 2001:db8::2/64) and the
// tenant's node (10.0.0.10/24, 2001:db8::10/64), as vip/attach and a
// VXLAN tunnel would join them.
type nsPair struct{ host, node string }

func newNSPair(t testing.TB, tag string) nsPair {
	t.Helper()
	if os.Geteuid() != 0 {
		if os.Getenv("CI") != "" { // CI runs as root: not being root there is a failure
			t.Fatal("CI: needs root for network namespaces")
		}
		t.Skip("needs root (CAP_SYS_ADMIN, CAP_NET_ADMIN) for network namespaces")
	}
	p := nsPair{host: fmt.Sprintf("tbgp%s%dh", tag, os.Getpid()), node: fmt.Sprintf("tbgp%s%dn", tag, os.Getpid())}
	t.Cleanup(func() {
		_ = exec.Command("ip", "netns", "del", p.host).Run()
		_ = exec.Command("ip", "netns", "del", p.node).Run()
	})
	for _, st := range [][]string{
		{"netns", "add", p.host}, {"netns", "add", p.node},
		{"-n", p.host, "link", "add", "a0", "type", "veth", "peer", "name", "b0", "netns", p.node},
		{"-n", p.host, "addr", "add", "10.0.0.2/24", "dev", "a0"},
		{"-n", p.node, "addr", "add", "10.0.0.10/24", "dev", "b0"},
		{"-n", p.host, "addr", "add", "2001:db8::2/64", "dev", "a0", "nodad"},
		{"-n", p.node, "addr", "add", "2001:db8::10/64", "dev", "b0", "nodad"},
		{"-n", p.host, "link", "set", "a0", "up"}, {"-n", p.node, "link", "set", "b0", "up"},
		{"-n", p.host, "link", "set", "lo", "up"}, {"-n", p.node, "link", "set", "lo", "up"},
	} {
		if out, err := exec.Command("ip", st...).CombinedOutput(); err != nil {
			t.Fatalf("ip %s: %v: %s", strings.Join(st, " "), err, out) // as root this is a failure, not a missing condition
		}
	}
	return p
}

// inNetns runs fn on a thread inside the named namespace; the thread
// ends with it.
func inNetns(name string, fn func() error) error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread ends with the goroutine
		f, err := os.Open("/var/run/netns/" + name)
		if err != nil {
			errc <- err
			return
		}
		defer f.Close()
		if err := unix.Setns(int(f.Fd()), unix.CLONE_NEWNET); err != nil {
			errc <- err
			return
		}
		errc <- fn()
	}()
	return <-errc
}

// pairs is Attachments over real namespaces: each tenant's host side.
type pairs map[string]nsPair

func (p pairs) DialInside(ctx context.Context, tenant string, d *net.Dialer, network, addr string) (net.Conn, error) {
	if _, ok := p[tenant]; !ok {
		return nil, fmt.Errorf("tenant %s has no attachment here", tenant)
	}
	var c net.Conn
	err := inNetns(p[tenant].host, func() (err error) {
		c, err = d.DialContext(ctx, network, addr)
		return err
	})
	return c, err
}

func (p pairs) InNamespace(tenant string, fn func() error) error { return inNetns(p[tenant].host, fn) }

// startNodeSpeaker starts a BGP speaker inside the node namespace, on
// 10.0.0.10:179, peering with the host's 10.0.0.2 (password signs it when
// set), and announces prefixes via 10.0.0.10. gobgp makes its listener
// on the goroutine that serves it, which runs inside the namespace.
func startNodeSpeaker(t testing.TB, p nsPair, password string, prefixes ...string) *server.BgpServer {
	t.Helper()
	return startNodeSpeakerAt(t, p, "10.0.0.10", "10.0.0.2", password, prefixes...)
}

// startNodeSpeakerAt is startNodeSpeaker on the node's address self,
// peering with the host's address host.
func startNodeSpeakerAt(t testing.TB, p nsPair, self, host, password string, prefixes ...string) *server.BgpServer {
	t.Helper()
	srv := server.NewBgpServer()
	go func() { _ = inNetns(p.node, func() error { srv.Serve(); return nil }) }()
	t.Cleanup(srv.Stop)
	ctx := t.Context()
	if err := srv.StartBgp(ctx, &gobgpapi.StartBgpRequest{Global: &gobgpapi.Global{Asn: 64600, RouterId: "10.0.0.10",
		ListenPort: 179, ListenAddresses: []string{self}}}); err != nil {
		t.Fatal(err)
	}
	six := netip.MustParseAddr(self).Is6()
	fam := &gobgpapi.Family{Afi: gobgpapi.Family_AFI_IP, Safi: gobgpapi.Family_SAFI_UNICAST}
	if six {
		fam.Afi = gobgpapi.Family_AFI_IP6
	}
	if err := srv.AddPeer(ctx, &gobgpapi.AddPeerRequest{Peer: &gobgpapi.Peer{
		Conf:      &gobgpapi.PeerConf{NeighborAddress: host, PeerAsn: 65001, AuthPassword: password},
		Transport: &gobgpapi.Transport{PassiveMode: true},
		AfiSafis:  []*gobgpapi.AfiSafi{{Config: &gobgpapi.AfiSafiConfig{Family: fam, Enabled: true}}},
	}}); err != nil {
		t.Fatal(err)
	}
	for _, s := range prefixes {
		nlri, err := bgp.NewIPAddrPrefix(netip.MustParsePrefix(s))
		if err != nil {
			t.Fatal(err)
		}
		origin := bgp.NewPathAttributeOrigin(bgp.BGP_ORIGIN_ATTR_TYPE_IGP)
		path := &apiutil.Path{Family: bgp.RF_IPv4_UC, Nlri: nlri}
		if six {
			reach, err := bgp.NewPathAttributeMpReachNLRI(bgp.RF_IPv6_UC, []bgp.PathNLRI{{NLRI: nlri}}, netip.MustParseAddr(self))
			if err != nil {
				t.Fatal(err)
			}
			path.Family, path.Attrs = bgp.RF_IPv6_UC, []bgp.PathAttributeInterface{origin, reach}
		} else {
			nh, err := bgp.NewPathAttributeNextHop(netip.MustParseAddr(self))
			if err != nil {
				t.Fatal(err)
			}
			path.Attrs = []bgp.PathAttributeInterface{origin, nh}
		}
		if _, err := srv.AddPath(apiutil.AddPathRequest{Paths: []*apiutil.Path{path}}); err != nil {
			t.Fatal(err)
		}
	}
	return srv
}

// nsRoutesOf lists the routes marked RouteProtocol in a namespace.
func nsRoutesOf(name string) (map[netip.Prefix]netip.Addr, error) {
	got := map[netip.Prefix]netip.Addr{}
	err := inNetns(name, func() error {
		rs, err := netlink.RouteListFiltered(netlink.FAMILY_ALL, &netlink.Route{Protocol: RouteProtocol, Table: unix.RT_TABLE_MAIN},
			netlink.RT_FILTER_PROTOCOL|netlink.RT_FILTER_TABLE)
		for i := range rs {
			if p, nh, ok := routeOf(&rs[i]); ok {
				got[p] = nh
			}
		}
		return err
	})
	return got, err
}

func attachedTenant(name string, vni uint32, password string) *pb.Object {
	return &pb.Object{Kind: &pb.Object_Tenant{Tenant: &pb.Tenant{Name: name, Networks: []string{"10.0.0.0/24", "10.0.1.0/24"},
		Attachment: &pb.TenantAttachment{Vxlan: &pb.AttachmentVXLAN{Vni: vni, Remotes: []string{"203.0.113.2"}}, Hosts: map[string]string{"lb1": "10.0.0.2/24"}},
		Bgp:        &pb.TenantBGP{Asn: 64600, Peers: []string{"10.0.0.10"}, Password: password}}}}
}

// Two attached tenants with the same networks and the same speaker
// address: each session is made from inside its tenant's namespace (the
// speakers are reachable there only; one of them requires TCP MD5), each
// tenant's routes go to its namespace's table and none to the host's,
// the observation names the attachment, and closing the relay removes
// the routes from the namespaces.
func TestRelayAttached(t *testing.T) {
	if ownProcess(t) {
		return
	}
	pa, pb2 := newNSPair(t, "a"), newNSPair(t, "b")
	host := &memRoutes{}
	r, err := New(Config{ASN: 65001, RouterID: "127.0.0.1", Routes: host, NodeID: "lb1", Attachments: pairs{"a": pa, "b": pb2},
		HostAddrs: func() []netip.Addr { return []netip.Addr{netip.MustParseAddr("10.0.0.1")} }})
	if err != nil {
		t.Fatal(err)
	}
	closed := false
	t.Cleanup(func() {
		if !closed {
			r.Close()
		}
	})
	startNodeSpeaker(t, pa, "s3cret", "10.0.1.0/24")
	startNodeSpeaker(t, pb2, "", "10.0.1.0/24", "10.0.1.128/25")
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	go r.Run(ctx)
	r.Update([]*pb.Object{attachedTenant("a", 100, "s3cret"), attachedTenant("b", 200, "")})

	nh := netip.MustParseAddr("10.0.0.10")
	want := map[string]map[netip.Prefix]netip.Addr{
		pa.host:  {netip.MustParsePrefix("10.0.1.0/24"): nh},
		pb2.host: {netip.MustParsePrefix("10.0.1.0/24"): nh, netip.MustParsePrefix("10.0.1.128/25"): nh},
	}
	for ns, routes := range want {
		waitUntil(t, "the routes in "+ns, func() error {
			got, err := nsRoutesOf(ns)
			if err != nil {
				return err
			}
			if !maps.Equal(got, routes) {
				return fmt.Errorf("routes %v, want %v", got, routes)
			}
			return nil
		})
	}
	if got := host.get(); len(got) != 0 {
		t.Errorf("the host's table got %v", got)
	}
	// The pass that installs the routes publishes its observation after:
	// it is waited for.
	for _, name := range []string{"a", "b"} {
		waitUntil(t, name+"'s observation", func() error {
			var h pb.HostObservation
			r.Observe(observe.Filter{Tenant: name}, &h)
			o := h.GetTenantBgp()[0]
			if o.GetAttachment() != "teapot-att-"+name || len(o.GetSessions()) != 1 {
				return fmt.Errorf("%s observed %v", name, o)
			}
			s := o.GetSessions()[0]
			if s.GetPeer() != "10.0.0.10" || s.GetAttachment() != "teapot-att-"+name || s.GetState() != "established" {
				return fmt.Errorf("%s's session %v", name, s)
			}
			if len(o.GetAccepted()) == 0 || o.GetAccepted()[0].GetPeer() != "10.0.0.10" {
				return fmt.Errorf("%s's routes %v", name, o.GetAccepted())
			}
			return nil
		})
	}

	closed = true
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	for ns := range want {
		if got, err := nsRoutesOf(ns); err != nil || len(got) != 0 {
			t.Errorf("%s keeps %v after the relay closed (%v)", ns, got, err)
		}
	}
}

// A speaker that does not answer in the attachment shows why: the
// tunnel's dial from inside the namespace, not gobgp's view of its
// loopback side.
func TestRelayAttachedUnreachable(t *testing.T) {
	if ownProcess(t) {
		return
	}
	pa := newNSPair(t, "u")
	r, err := New(Config{ASN: 65001, RouterID: "127.0.0.1", Routes: &memRoutes{}, NodeID: "lb1", Attachments: pairs{"a": pa}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	go r.Run(ctx)
	r.Update([]*pb.Object{attachedTenant("a", 100, "")})
	waitUntil(t, "the reason of the session", func() error {
		var h pb.HostObservation
		r.Observe(observe.Filter{Tenant: "a"}, &h)
		ss := h.GetTenantBgp()[0].GetSessions()
		if len(ss) != 1 || !strings.Contains(ss[0].GetReason(), "cannot reach 10.0.0.10 from inside teapot-att-a") ||
			!strings.Contains(ss[0].GetReason(), "refused") {
			return fmt.Errorf("sessions %v", ss)
		}
		return nil
	})
}

// An attached tenant's IPv6 speaker: the session to it is IPv6 unicast,
// carried like an IPv4 one (gobgp's side of the tunnel is an IPv4
// loopback address), and its route lands in the namespace's IPv6 table.
func TestRelayAttachedIPv6(t *testing.T) {
	if ownProcess(t) {
		return
	}
	pa := newNSPair(t, "6")
	r, err := New(Config{ASN: 65001, RouterID: "127.0.0.1", Routes: &memRoutes{}, NodeID: "lb1", Attachments: pairs{"a": pa}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	startNodeSpeakerAt(t, pa, "2001:db8::10", "2001:db8::2", "", "2001:db8:1::/64")
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	go r.Run(ctx)
	r.Update([]*pb.Object{{Kind: &pb.Object_Tenant{Tenant: &pb.Tenant{Name: "a", Networks: []string{"2001:db8::/64", "2001:db8:1::/48"},
		Attachment: &pb.TenantAttachment{Vxlan: &pb.AttachmentVXLAN{Vni: 100, Remotes: []string{"203.0.113.2"}}, Hosts: map[string]string{"lb1": "2001:db8::2/64"}},
		Bgp:        &pb.TenantBGP{Asn: 64600, Peers: []string{"2001:db8::10"}}}}}})
	want := map[netip.Prefix]netip.Addr{netip.MustParsePrefix("2001:db8:1::/64"): netip.MustParseAddr("2001:db8::10")}
	waitUntil(t, "the IPv6 route in the namespace", func() error {
		got, err := nsRoutesOf(pa.host)
		if err != nil {
			return err
		}
		if !maps.Equal(got, want) {
			var h pb.HostObservation
			r.Observe(observe.Filter{Tenant: "a"}, &h)
			return fmt.Errorf("routes %v, want %v; observed %v", got, want, h.GetTenantBgp())
		}
		return nil
	})
}
