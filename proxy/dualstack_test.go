package proxy

import (
	"net"
	"net/netip"
	"testing"

	pb "github.com/teapot-lb/teapot-lb/api/proto/teapotv1"
)

// A dual-stack load balancer is served on each of its addresses: a tcp
// and a udp listener answer on the IPv4 and the IPv6 VIP (127.0.0.3 and
// ::1 on loopback), and the IPv6 sockets close when the load balancer
// loses its second address.
func TestDualStackServesBothAddresses(t *testing.T) {
	be := startBackend(t, "127.0.0.1", echo)
	ube := udpEcho(t, "127.0.0.1")
	p, _ := newProxy(t, Config{})
	port := freePort(t)
	lb := l4LB("dual", "127.0.0.3", port, "tcp", be.addr)
	lb.Vip = &pb.VIPRequest{Pool: "lab", Families: []string{"ipv4", "ipv6"}}
	lb.Status.Addresses = []string{"127.0.0.3", "::1"}
	lb.Listeners = append(lb.Listeners, &pb.Listener{Port: uint32(port), Protocol: "udp", Pool: "dns"})
	lb.Pools["dns"] = &pb.BackendPool{Members: []*pb.Member{{Address: ube}}}
	update(t, p, lb)
	for _, vip := range []string{"127.0.0.3", "::1"} {
		c, err := net.Dial("tcp", vipAddr(vip, port))
		if err != nil {
			t.Fatalf("tcp on %s: %v", vip, err)
		}
		if err := roundTrip(c, []byte("hello "+vip)); err != nil {
			t.Fatalf("tcp on %s: %v", vip, err)
		}
		c.Close()
		u, err := net.ListenUDP("udp", nil)
		if err != nil {
			t.Fatal(err)
		}
		reply, _, err := udpAsk(t, u, netip.MustParseAddrPort(vipAddr(vip, port)), "datagram")
		u.Close()
		if err != nil || reply != "echo:datagram" {
			t.Fatalf("udp on %s: %q, %v", vip, reply, err)
		}
	}
	if st := p.StatusOf([]string{"acme/dual"})["acme/dual"]; len(st) != 0 {
		t.Fatalf("problems: %v", st)
	}

	single := clone(lb)
	single.Vip.Families = []string{"ipv4"}
	single.Status.Addresses = []string{"127.0.0.3"}
	if err := p.Update(labObjects(single), 2); err != nil {
		t.Fatalf("Update: %v", err)
	}
	expectRefused(t, vipAddr("::1", port))
	c, err := net.Dial("tcp", vipAddr("127.0.0.3", port))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := roundTrip(c, []byte("still")); err != nil {
		t.Fatal(err)
	}
}
