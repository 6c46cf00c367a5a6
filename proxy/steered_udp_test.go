package proxy

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/quic-go/quic-go"
	"github.com/quic-go/quic-go/http3"

	pb "github.com/teapot-lb/teapot-lb/api/proto/teapotv1"
	"github.com/teapot-lb/teapot-lb/proxy/internal/netnstest"
	"github.com/teapot-lb/teapot-lb/proxy/l7"
	"github.com/teapot-lb/teapot-lb/proxy/snapshot"
	"github.com/teapot-lb/teapot-lb/proxy/steer"
)

// steeredUDPObjects are tenants acme and bolt (with their domains), a
// pool of documentation addresses and lbs.
func steeredUDPObjects(lbs ...*pb.LoadBalancer) []*pb.Object {
	out := []*pb.Object{
		{Kind: &pb.Object_VipPool{VipPool: &pb.VIPPool{Name: "lab", Cidrs: []string{"192.0.2.0/24", "2001:db8::/64"}, Mode: "static"}}},
	}
	for _, t := range []string{"acme", "bolt"} {
		out = append(out, &pb.Object{Kind: &pb.Object_Tenant{Tenant: &pb.Tenant{Name: t, Domains: []string{t + ".example"}, Networks: []string{"127.0.0.0/8"}}}})
	}
	for _, lb := range lbs {
		out = append(out, wrapLB(lb))
	}
	return out
}

// steeredH3LB is an https listener with http3 on vip:443 routing every
// request of gw.acme.example to be.
func steeredH3LB(name, vip string, be *routingBackend) *pb.LoadBalancer {
	return &pb.LoadBalancer{
		Name: name, Tenant: "acme",
		Listeners: []*pb.Listener{{Port: 443, Protocol: "https", Http3: true, Tls: &pb.TLSPolicy{Certificates: []string{"gw"}}}},
		Status:    &pb.LoadBalancerStatus{Address: vip},
		Pools:     map[string]*pb.BackendPool{"main": {Members: []*pb.Member{{Address: be.addr}}}},
		Routes:    []*pb.Route{{Host: "gw.acme.example", Path: "/", Pool: "main"}},
	}
}

// udpSocketsOnPort counts the UDP sockets of the calling thread's
// network namespace bound to port.
func udpSocketsOnPort(t *testing.T, port int) int {
	t.Helper()
	n := 0
	for _, f := range []string{"/proc/thread-self/net/udp", "/proc/thread-self/net/udp6"} {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, line := range strings.Split(string(b), "\n")[1:] {
			if fs := strings.Fields(line); len(fs) > 1 && strings.HasSuffix(fs[1], fmt.Sprintf(":%04X", port)) {
				n++
			}
		}
	}
	return n
}

// connectedPC is a UDP socket connected to one address, as a
// net.PacketConn: the kernel gives it only datagrams whose source is
// that address.
type connectedPC struct{ c *net.UDPConn }

func (c connectedPC) ReadFrom(b []byte) (int, net.Addr, error) {
	n, err := c.c.Read(b)
	return n, c.c.RemoteAddr(), err
}
func (c connectedPC) WriteTo(b []byte, _ net.Addr) (int, error) { return c.c.Write(b) }
func (c connectedPC) Close() error                              { return c.c.Close() }
func (c connectedPC) LocalAddr() net.Addr                       { return c.c.LocalAddr() }
func (c connectedPC) SetDeadline(t time.Time) error             { return c.c.SetDeadline(t) }
func (c connectedPC) SetReadDeadline(t time.Time) error         { return c.c.SetReadDeadline(t) }
func (c connectedPC) SetWriteDeadline(t time.Time) error        { return c.c.SetWriteDeadline(t) }

// h3Backend asks vip for https://gw.acme.example/ over HTTP/3 from a UDP
// socket connected to vip, opened on the calling goroutine (in its
// namespace): an answer proves the replies came from vip. It returns the
// member that answered. A handshake that gets no answer is tried again
// from a new socket (see askConnected).
func h3Backend(t *testing.T, vip netip.AddrPort) (string, error) {
	t.Helper()
	return h3BackendOf(t, vip, "gw.acme.example")
}

// h3BackendOf is h3Backend for https://host/.
func h3BackendOf(t *testing.T, vip netip.AddrPort, host string) (string, error) {
	t.Helper()
	var err error
	for range 5 {
		var got string
		if got, err = h3BackendOnce(vip, host, 2*time.Second); err == nil {
			return got, nil
		}
	}
	return "", err
}

func h3BackendOnce(vip netip.AddrPort, host string, handshake time.Duration) (string, error) {
	uc, err := net.DialUDP("udp", nil, net.UDPAddrFromAddrPort(vip))
	if err != nil {
		return "", err
	}
	tr := &quic.Transport{Conn: connectedPC{uc}}
	defer uc.Close()
	defer tr.Close()
	rt := &http3.Transport{
		TLSClientConfig: &tls.Config{InsecureSkipVerify: true, ServerName: host},
		Dial: func(ctx context.Context, _ string, tc *tls.Config, qc *quic.Config) (*quic.Conn, error) {
			qc = qc.Clone()
			qc.HandshakeIdleTimeout = handshake
			return tr.DialEarly(ctx, net.UDPAddrFromAddrPort(vip), tc, qc)
		},
	}
	defer rt.Close()
	resp, err := (&http.Client{Transport: rt, Timeout: 20 * time.Second}).Get("https://" + host + "/")
	if err != nil {
		return "", err
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("status %d", resp.StatusCode)
	}
	return resp.Header.Get("X-Backend"), nil
}

// TestSteeredHTTP3OneSocketPerTenant: with Config.Steer, the HTTP/3 ports
// of a tenant's https listeners on two IPv4 and two IPv6 VIPs, all on
// 443, are served through one UDP socket per address family (two in
// all, not four); each VIP's requests reach its own load balancer, and
// the replies come from the VIP the client sent to. A load balancer that
// moves to another tenant has its port served from that tenant's
// socket; what still reaches the former tenant's is dropped there.
func TestSteeredHTTP3OneSocketPerTenant(t *testing.T) {
	bes := map[string]*routingBackend{}
	for _, n := range []string{"v4a", "v4b", "v6a", "v6b"} {
		bes[n] = startRoutingBackend(t, n)
	}
	vips := map[string]string{"v4a": "192.0.2.1", "v4b": "192.0.2.2", "v6a": "2001:db8::1", "v6b": "2001:db8::2"}
	netnstest.Run(t, []string{"192.0.2.1/32", "192.0.2.2/32", "2001:db8::1/128", "2001:db8::2/128"}, func() {
		st, err := steer.Open(1024)
		if err != nil {
			t.Fatal(err)
		}
		defer st.Close()
		srv := l7.New(l7.Config{})
		defer srv.Close()
		p, _ := newProxy(t, Config{Steer: st, HTTP: newH3Term(t, srv)})
		defer p.Close()
		var lbs []*pb.LoadBalancer
		for n, vip := range vips {
			lbs = append(lbs, steeredH3LB(n, vip, bes[n]))
		}
		if err := p.Update(steeredUDPObjects(lbs...), 1); err != nil {
			t.Fatalf("Update: %v", err)
		}
		for n, vip := range vips {
			if st := p.Status()["acme/"+n]; len(st) != 0 {
				t.Fatalf("%s: problems: %v", n, st)
			}
			addr := netip.AddrPortFrom(netip.MustParseAddr(vip), 443)
			got, err := h3Backend(t, addr)
			if err != nil || got != n {
				t.Errorf("HTTP/3 to %s: member %q, %v; want %q", addr, got, err, n)
			}
		}
		if n := udpSocketsOnPort(t, 443); n != 2 {
			t.Errorf("%d UDP sockets on port 443 for one tenant's 4 VIPs; want 2 (one per address family)", n)
		}
		p.mu.Lock()
		shared, own := len(p.steering.udp), 0
		for _, s := range p.sockets {
			if s.h3 != nil {
				if _, ok := s.h3.pc.(*boundH3); ok {
					own++
				}
			}
		}
		p.mu.Unlock()
		if shared != 2 || own != 0 {
			t.Errorf("%d shared UDP sockets and %d of a listener's own; want 2 and 0", shared, own)
		}
		// v4b moves to bolt: its HTTP/3 port moves to bolt's socket,
		// and a datagram for it that still reaches acme's is dropped.
		var moved []*pb.LoadBalancer
		for _, lb := range lbs {
			if lb.Name == "v4b" {
				lb = clone(lb)
				lb.Tenant = "bolt"
				lb.Routes[0].Host = "gw.bolt.example"
			}
			moved = append(moved, lb)
		}
		if err := p.Update(steeredUDPObjects(moved...), 2); err != nil {
			t.Fatalf("Update: %v", err)
		}
		if st := p.Status()["bolt/v4b"]; len(st) != 0 {
			t.Fatalf("bolt/v4b: problems: %v", st)
		}
		v4b := netip.MustParseAddrPort("192.0.2.2:443")
		p.steering.umu.Lock()
		acme := p.steering.udp[udpSharedKey{tenant: "acme", port: 443, h3: true}]
		bolt := p.steering.udp[udpSharedKey{tenant: "bolt", port: 443, h3: true}]
		p.steering.umu.Unlock()
		if slot, ok := st.LookupUDP(v4b); !ok || bolt == nil || slot != bolt.slot {
			t.Fatalf("%s is steered to slot %d (%t); want bolt's socket", v4b, slot, ok)
		}
		if got, err := h3BackendOf(t, v4b, "gw.bolt.example"); err != nil || got != "v4b" {
			t.Errorf("HTTP/3 to %s under bolt: member %q, %v", v4b, got, err)
		}
		before := acme.dropped.Load()
		if err := st.AddUDP(v4b, acme.slot); err != nil {
			t.Fatal(err)
		}
		if got, err := h3BackendOnce(v4b, "gw.bolt.example", time.Second); err == nil {
			t.Errorf("acme's socket served %s, now bolt's (member %q)", v4b, got)
		}
		if acme.dropped.Load() == before {
			t.Error("acme's socket did not drop the datagrams for bolt's address")
		}
		notSteeredCounted(t, p, acme)
		if err := st.AddUDP(v4b, bolt.slot); err != nil {
			t.Fatal(err)
		}

		// The ports close with their listeners, and so do the sockets.
		if err := p.Update(steeredUDPObjects(), 3); err != nil {
			t.Fatalf("Update: %v", err)
		}
		eventually(t, "the shared UDP sockets to close", func() bool {
			p.steering.umu.Lock()
			defer p.steering.umu.Unlock()
			return len(p.steering.udp) == 0 && len(p.steering.udpDests) == 0
		})
		if n := udpSocketsOnPort(t, 443); n != 0 {
			t.Errorf("%d UDP sockets left on port 443", n)
		}
		if _, ok := st.LookupUDP(netip.MustParseAddrPort("192.0.2.1:443")); ok {
			t.Error("192.0.2.1:443 is still steered")
		}
	})
}

// namedUDPEcho answers every datagram with name, ":" and the payload.
func namedUDPEcho(t *testing.T, name string) string {
	t.Helper()
	c, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	go func() {
		buf := make([]byte, 65536)
		for {
			n, from, err := c.ReadFrom(buf)
			if err != nil {
				return
			}
			c.WriteTo(append([]byte(name+":"), buf[:n]...), from)
		}
	}()
	return c.LocalAddr().String()
}

// askConnected sends msg to vip from a UDP socket connected to it (on
// the calling goroutine) and returns the answer ("" when none came from
// vip within wait). It tries again from a new socket every 250 ms: a
// fresh namespace's IPv6 address now and then loses what a socket
// connected to it right after it was added sends (the route is cached at
// connect; proxy/steer's TestSteersUDPDatagrams sees it without a proxy).
func askConnected(t *testing.T, vip string, msg string, wait time.Duration) string {
	t.Helper()
	b := make([]byte, 256)
	for deadline := time.Now().Add(wait); time.Now().Before(deadline); {
		c, err := net.Dial("udp", vip)
		if err != nil {
			t.Fatal(err)
		}
		c.Write([]byte(msg))
		c.SetReadDeadline(time.Now().Add(min(250*time.Millisecond, time.Until(deadline))))
		n, err := c.Read(b)
		c.Close()
		if err == nil {
			return string(b[:n])
		}
	}
	return ""
}

// TestSteeredUDPListeners: with Config.Steer, a tenant's udp listeners
// on one port share one socket; flows work both ways through it, the
// replies come from the VIP each client sent to; another tenant has its
// own; a listener that moves to another tenant is served from that
// tenant's socket, and a datagram for it that still reaches the former
// tenant's socket is dropped there, not relayed to either member.
func TestSteeredUDPListeners(t *testing.T) {
	m1, m2, mb := namedUDPEcho(t, "a1"), namedUDPEcho(t, "a2"), namedUDPEcho(t, "b1")
	netnstest.Run(t, []string{"192.0.2.1/32", "192.0.2.2/32", "192.0.2.3/32", "2001:db8::1/128"}, func() {
		st, err := steer.Open(1024)
		if err != nil {
			t.Fatal(err)
		}
		defer st.Close()
		p, _ := newProxy(t, Config{Steer: st})
		defer p.Close()
		apply := func(v uint64, lbs ...*pb.LoadBalancer) {
			t.Helper()
			if err := p.Update(steeredUDPObjects(lbs...), v); err != nil {
				t.Fatalf("Update: %v", err)
			}
		}
		dns1 := tenantLB("acme", "dns1", "192.0.2.1", 53, m1)
		dns2 := tenantLB("acme", "dns2", "192.0.2.2", 53, m2)
		dns6 := tenantLB("acme", "dns6", "2001:db8::1", 53, m1)
		bolt := tenantLB("bolt", "ns", "192.0.2.3", 53, mb)
		for _, lb := range []*pb.LoadBalancer{dns1, dns2, dns6, bolt} {
			lb.Listeners[0].Protocol = "udp"
		}
		apply(1, dns1, dns2, dns6, bolt)
		want := map[string]string{"192.0.2.1:53": "a1:q", "192.0.2.2:53": "a2:q", "[2001:db8::1]:53": "a1:q", "192.0.2.3:53": "b1:q"}
		for vip, w := range want {
			if got := askConnected(t, vip, "q", 5*time.Second); got != w {
				t.Errorf("%s answered %q; want %q", vip, got, w)
			}
		}
		// acme: one IPv4 and one IPv6 socket on port 53; bolt one.
		if n := udpSocketsOnPort(t, 53); n != 3 {
			t.Errorf("%d UDP sockets on port 53; want 3 (acme's two families, bolt's)", n)
		}
		// Many datagrams of one flow both ways.
		c, err := net.Dial("udp", "192.0.2.2:53")
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		b := make([]byte, 256)
		for i := range 50 {
			msg := fmt.Sprintf("m%d", i)
			c.Write([]byte(msg))
			c.SetReadDeadline(time.Now().Add(5 * time.Second))
			n, err := c.Read(b)
			if err != nil || string(b[:n]) != "a2:"+msg {
				t.Fatalf("datagram %d: %q, %v", i, b[:n], err)
			}
		}
		key2 := snapshot.Key{Addr: netip.MustParseAddrPort("192.0.2.2:53"), Network: snapshot.UDP}
		if n := p.udpFlows(key2); n < 2 {
			t.Errorf("%d flows on 192.0.2.2:53; want one for each of its clients", n)
		}

		// dns2 moves to bolt.
		moved := clone(dns2)
		moved.Tenant = "bolt"
		apply(2, dns1, moved, dns6, bolt)
		p.steering.umu.Lock()
		acme := p.steering.udp[udpSharedKey{tenant: "acme", port: 53}]
		boltSh := p.steering.udp[udpSharedKey{tenant: "bolt", port: 53}]
		p.steering.umu.Unlock()
		if slot, ok := st.LookupUDP(key2.Addr); !ok || boltSh == nil || slot != boltSh.slot {
			t.Fatalf("192.0.2.2:53 is steered to slot %d (%t); want bolt's", slot, ok)
		}
		if got := askConnected(t, "192.0.2.2:53", "q", 5*time.Second); got != "a2:q" {
			t.Errorf("192.0.2.2:53 under bolt answered %q", got)
		}
		// A datagram for it that reaches acme's socket (as one queued
		// there before the move would): steer it there behind the
		// proxy's back.
		before := acme.dropped.Load()
		if err := st.AddUDP(key2.Addr, acme.slot); err != nil {
			t.Fatal(err)
		}
		if got := askConnected(t, "192.0.2.2:53", "stale", 300*time.Millisecond); got != "" {
			t.Errorf("acme's socket served 192.0.2.2:53, now bolt's: %q", got)
		}
		eventually(t, "acme's socket to drop the datagram", func() bool { return acme.dropped.Load() > before })
		notSteeredCounted(t, p, acme)
		if err := st.AddUDP(key2.Addr, boltSh.slot); err != nil {
			t.Fatal(err)
		}
		if got := askConnected(t, "192.0.2.2:53", "q", 5*time.Second); got != "a2:q" {
			t.Errorf("192.0.2.2:53 steered back to bolt answered %q", got)
		}
		// The shared sockets close with their last listener.
		apply(3)
		p.steering.umu.Lock()
		left := len(p.steering.udp)
		p.steering.umu.Unlock()
		if left != 0 {
			t.Errorf("%d shared UDP sockets left", left)
		}
		if n := udpSocketsOnPort(t, 53); n != 0 {
			t.Errorf("%d UDP sockets left on port 53", n)
		}
	})
}

// TestSteeredUDPRelayAllocs: a datagram relayed both ways through a
// steered udp listener (the shared socket's reader, the packet info, the
// reply from the VIP) allocates nothing, as through a socket of the
// listener's own.
func TestSteeredUDPRelayAllocs(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector allocates")
	}
	m, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	go func() {
		buf := make([]byte, 2048)
		for {
			n, from, err := m.ReadFromUDPAddrPort(buf)
			if err != nil {
				return
			}
			m.WriteToUDPAddrPort(buf[:n], from)
		}
	}()
	netnstest.Run(t, []string{"192.0.2.1/32"}, func() {
		st, err := steer.Open(1024)
		if err != nil {
			t.Fatal(err)
		}
		defer st.Close()
		p, _ := newProxy(t, Config{Steer: st})
		defer p.Close()
		lb := tenantLB("acme", "dns", "192.0.2.1", 53, m.LocalAddr().String())
		lb.Listeners[0].Protocol = "udp"
		if err := p.Update(steeredUDPObjects(lb), 1); err != nil {
			t.Fatalf("Update: %v", err)
		}
		if got := askConnected(t, "192.0.2.1:53", "q", 5*time.Second); got != "q" {
			t.Fatalf("the first datagram came back as %q", got)
		}
		c, err := net.Dial("udp", "192.0.2.1:53")
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		msg, b := []byte("0123456789abcdef"), make([]byte, 64)
		c.SetDeadline(time.Now().Add(time.Minute))
		roundTrip := func() {
			if _, err := c.Write(msg); err != nil {
				t.Fatal(err)
			}
			if _, err := c.Read(b); err != nil {
				t.Fatal(err)
			}
		}
		roundTrip() // the flow
		if n := testing.AllocsPerRun(500, roundTrip); n > 0 {
			t.Errorf("%.2f allocations per datagram relayed both ways; want 0", n)
		}
	})
}

// notSteeredCounted waits for teapot_lb_steered_datagrams_dropped_total
// {reason=not-steered} of sh's tenant to count at least the datagrams sh
// dropped: the socket's reader counts a drop in sh.dropped, then in its
// tenant's counter (udpShared.drop), so a drop just seen in the first may
// not be in the second yet. The socket's count is read first.
func notSteeredCounted(t *testing.T, p *Proxy, sh *udpShared) {
	t.Helper()
	var got float64
	var dropped int64
	waited := false
	defer func() {
		// eventually's Fatalf runs this: the last values read.
		if !waited {
			t.Logf("teapot_lb_steered_datagrams_dropped_total{tenant=%s,reason=not-steered} = %v, want at least %s's socket's %d", sh.key.tenant, got, sh.key.tenant, dropped)
		}
	}()
	eventually(t, "the not-steered drop metric counting the socket's drops", func() bool {
		dropped = sh.dropped.Load()
		got = steeredDropMetric(t, p, sh.key.tenant, "not-steered")
		return got >= float64(dropped)
	})
	waited = true
}

// steeredDropMetric reads teapot_lb_steered_datagrams_dropped_total for
// tenant and reason from the data path's collector (-1: no series).
func steeredDropMetric(t *testing.T, p *Proxy, tenant, reason string) float64 {
	t.Helper()
	reg := prometheus.NewRegistry()
	reg.MustRegister(p.DataPathCollector())
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "teapot_lb_steered_datagrams_dropped_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			lbl := map[string]string{}
			for _, l := range m.GetLabel() {
				lbl[l.GetName()] = l.GetValue()
			}
			if lbl["tenant"] == tenant && lbl["reason"] == reason {
				return m.GetCounter().GetValue()
			}
		}
	}
	return -1
}
