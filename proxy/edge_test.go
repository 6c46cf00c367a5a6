package proxy

import (
	"context"
	"crypto/tls"
	"io"
	"net"
	"net/http"
	"net/netip"
	"sync/atomic"
	"testing"
	"time"

	pb "github.com/teapot-lb/teapot-lb/api/proto/teapotv1"
	"github.com/teapot-lb/teapot-lb/proxy/l7"
	"github.com/teapot-lb/teapot-lb/proxy/metrics"
	"github.com/teapot-lb/teapot-lb/proxy/snapshot"
)

// dialFrom dials addr over network from the loopback address src.
func dialFrom(network, src, addr string) (net.Conn, error) {
	d := net.Dialer{Timeout: 2 * time.Second}
	switch network {
	case "tcp":
		d.LocalAddr = &net.TCPAddr{IP: net.ParseIP(src)}
	case "udp":
		d.LocalAddr = &net.UDPAddr{IP: net.ParseIP(src)}
	}
	return d.Dial(network, addr)
}

// countingEcho is an echo member that counts the connections it accepted.
func countingEcho(t *testing.T) (*backend, *atomic.Int64) {
	var n atomic.Int64
	return startBackend(t, "127.0.0.1", func(c net.Conn) { n.Add(1); echo(c) }), &n
}

func refusedFor(m *metrics.Memory, reason string) int64 {
	var n int64
	for _, l := range m.Report().Listeners {
		n += l.Refused[reason]
	}
	return n
}

// served reports whether a TCP connection from src to addr is served: an
// echo answers.
func servedTCP(t *testing.T, src, addr string) bool {
	t.Helper()
	c, err := dialFrom("tcp", src, addr)
	if err != nil {
		return false
	}
	defer c.Close()
	return roundTrip(c, []byte("ping")) == nil
}

// TestSourceRangesAtAccept: on tcp and tls-passthrough listeners a client
// outside allowedSources, or inside deniedSources, is reset at accept:
// the member never sees a connection, and the refusal is counted. A
// client inside is served. Without the check in acceptFor every client is
// served.
func TestSourceRangesAtAccept(t *testing.T) {
	for _, proto := range []string{"tcp", "tls-passthrough"} {
		t.Run(proto, func(t *testing.T) {
			be, accepted := countingEcho(t)
			served := servedTCP
			if proto == "tls-passthrough" {
				be, accepted, served = countingTLS(t)
			}
			p, m := newProxy(t, Config{})
			port := freePort(t)
			lb := l4LB("edge", "127.0.0.2", port, proto, be.addr)
			lb.Listeners[0].AllowedSources = []string{"127.0.0.3/32", "127.0.0.4"}
			lb.Listeners[0].DeniedSources = []string{"127.0.0.4/32"}
			update(t, p, lb)
			if st := p.Status()["acme/edge"]; len(st) != 0 {
				t.Fatalf("problems: %v", st)
			}
			addr := vipAddr("127.0.0.2", port)
			if !served(t, "127.0.0.3", addr) {
				t.Fatal("a client inside allowedSources was not served")
			}
			for _, src := range []string{"127.0.0.4", "127.0.0.5"} {
				if served(t, src, addr) {
					t.Fatalf("a client at %s was served", src)
				}
			}
			eventually(t, "refusals counted", func() bool { return refusedFor(m, RefusedSource) == 2 })
			if n := accepted.Load(); n != 1 {
				t.Fatalf("the member accepted %d connections, want 1 (refused clients cost none)", n)
			}
		})
	}
}

// countingTLS is a TLS member that answers "ok" and counts connections,
// with the check that a client through tls-passthrough got that answer.
func countingTLS(t *testing.T) (*backend, *atomic.Int64, func(*testing.T, string, string) bool) {
	var n atomic.Int64
	cfg := &tls.Config{Certificates: []tls.Certificate{selfSigned(t, "db.acme.example")}}
	be := startBackend(t, "127.0.0.1", func(c net.Conn) {
		n.Add(1)
		tc := tls.Server(c, cfg)
		if tc.Handshake() == nil {
			io.WriteString(tc, "ok")
		}
		tc.Close()
	})
	return be, &n, func(t *testing.T, src, addr string) bool {
		c, err := dialFrom("tcp", src, addr)
		if err != nil {
			return false
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(5 * time.Second))
		b, _ := io.ReadAll(tls.Client(c, &tls.Config{InsecureSkipVerify: true, ServerName: "db.acme.example"}))
		return string(b) == "ok"
	}
}

// TestSourceRangesIPv6 checks an IPv6 listener: ::1 outside the allowed
// range is refused, inside it served.
func TestSourceRangesIPv6(t *testing.T) {
	be, _ := countingEcho(t)
	p, m := newProxy(t, Config{})
	port := freePort(t)
	lb := l4LB("edge6", "::1", port, "tcp", be.addr)
	lb.Listeners[0].AllowedSources = []string{"2001:db8::/32"}
	update(t, p, lb)
	addr := vipAddr("::1", port)
	if servedTCP(t, "::1", addr) {
		t.Fatal("::1 served outside 2001:db8::/32")
	}
	lb = clone(lb)
	lb.Listeners[0].AllowedSources = []string{"2001:db8::/32", "::1/128"}
	update(t, p, lb)
	if !servedTCP(t, "::1", addr) {
		t.Fatal("::1 refused inside ::1/128")
	}
	if refusedFor(m, RefusedSource) != 1 {
		t.Fatalf("refusals %d, want 1", refusedFor(m, RefusedSource))
	}
}

// TestSourceRangesUDP: a datagram from a denied address starts no flow
// (no member socket) and gets no answer; an allowed one does.
func TestSourceRangesUDP(t *testing.T) {
	member := udpEcho(t, "127.0.0.1")
	p, m := newProxy(t, Config{})
	port := freePort(t)
	lb := l4LB("dns", "127.0.0.2", port, "udp", member)
	lb.Listeners[0].DeniedSources = []string{"127.0.0.4/32"}
	update(t, p, lb)
	vip := netip.MustParseAddrPort(vipAddr("127.0.0.2", port))
	good, bad := udpClient(t, "127.0.0.3"), udpClient(t, "127.0.0.4")
	if got, _, err := udpAsk(t, good, vip, "hi"); err != nil || got != "echo:hi" {
		t.Fatalf("allowed client: %q, %v", got, err)
	}
	if got, _, err := udpAsk(t, bad, vip, "hi"); err == nil {
		t.Fatalf("denied client got %q", got)
	}
	if n := p.udpFlows(lb4Key(lb, port)); n != 1 {
		t.Fatalf("%d flows, want 1", n)
	}
	if refusedFor(m, RefusedSource) != 1 {
		t.Fatalf("refusals %d, want 1", refusedFor(m, RefusedSource))
	}
	// Denying the served client ends its flow at once.
	lb = clone(lb)
	lb.Listeners[0].DeniedSources = []string{"127.0.0.3/32", "127.0.0.4/32"}
	update(t, p, lb)
	if n := p.udpFlows(lb4Key(lb, port)); n != 0 {
		t.Fatalf("%d flows after the client was denied, want 0", n)
	}
}

func lb4Key(lb *pb.LoadBalancer, port int) snapshot.Key {
	k := tcpKey(lb.GetStatus().GetAddress(), port)
	if lb.GetListeners()[0].GetProtocol() == "udp" {
		k.Network = snapshot.UDP
	}
	return k
}

// handshakeCounter terminates TLS on each connection (the work a refused
// client must not cause) and answers "ok".
type handshakeCounter struct {
	cfg *tls.Config
	n   atomic.Int64
}

func (h *handshakeCounter) ServeConn(_ context.Context, c net.Conn, _ func() *ListenerSnapshot) {
	h.n.Add(1)
	tc := tls.Server(c, h.cfg)
	if tc.Handshake() == nil {
		io.WriteString(tc, "ok")
	}
	tc.Close()
}

// TestSourceRangesHTTPS: a denied client of an https listener costs no
// TLS handshake; an allowed one gets one.
func TestSourceRangesHTTPS(t *testing.T) {
	h := &handshakeCounter{cfg: &tls.Config{Certificates: []tls.Certificate{selfSigned(t, "shop.acme.example")}}}
	p, m := newProxy(t, Config{HTTP: h})
	port := freePort(t)
	lb := httpLB("acme", "shop", "127.0.0.2", port, "127.0.0.1:1")
	lb.Listeners[0].Protocol = "https"
	lb.Listeners[0].Tls = &pb.TLSPolicy{Acme: true}
	lb.Listeners[0].AllowedSources = []string{"127.0.0.3/32"}
	update(t, p, lb)
	if st := p.Status()["acme/shop"]; len(st) != 0 {
		t.Fatalf("problems: %v", st)
	}
	try := func(src string) string {
		c, err := dialFrom("tcp", src, vipAddr("127.0.0.2", port))
		if err != nil {
			return ""
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(5 * time.Second))
		tc := tls.Client(c, &tls.Config{InsecureSkipVerify: true, ServerName: "shop.acme.example"})
		b, _ := io.ReadAll(tc)
		return string(b)
	}
	if got := try("127.0.0.4"); got != "" {
		t.Fatalf("denied client got %q", got)
	}
	if n := h.n.Load(); n != 0 {
		t.Fatalf("%d handshakes for a denied client", n)
	}
	if got := try("127.0.0.3"); got != "ok" {
		t.Fatalf("allowed client got %q", got)
	}
	if refusedFor(m, RefusedSource) != 1 {
		t.Fatalf("refusals %d, want 1", refusedFor(m, RefusedSource))
	}
}

// TestSourceRangesHTTP: through the L7 engine, a denied client gets no
// answer and the member no request; an allowed one is proxied.
func TestSourceRangesHTTP(t *testing.T) {
	member := startCountingMember(t)
	srv := l7.New(l7.Config{})
	t.Cleanup(func() { srv.Close() })
	p, m := newProxy(t, Config{HTTP: NewHTTP(srv, nil)})
	port := freePort(t)
	lb := httpLB("acme", "web", "127.0.0.2", port, member.addr)
	lb.Listeners[0].DeniedSources = []string{"127.0.0.4/32"}
	update(t, p, lb)
	client := func(src string) *http.Client {
		tr := &http.Transport{DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			return dialFrom("tcp", src, addr)
		}}
		t.Cleanup(tr.CloseIdleConnections)
		return &http.Client{Transport: tr, Timeout: 5 * time.Second}
	}
	url := "http://" + vipAddr("127.0.0.2", port) + "/"
	if code, err := get(client("127.0.0.3"), url); err != nil || code != 200 {
		t.Fatalf("allowed client: %d, %v", code, err)
	}
	if code, err := get(client("127.0.0.4"), url); err == nil {
		t.Fatalf("denied client got %d", code)
	}
	if refusedFor(m, RefusedSource) != 1 {
		t.Fatalf("refusals %d, want 1", refusedFor(m, RefusedSource))
	}
}

// TestSourceRangeChangeClosesOpenConnections: a connection open from an
// address the listener then denies is closed at the change.
func TestSourceRangeChangeClosesOpenConnections(t *testing.T) {
	be, _ := countingEcho(t)
	p, _ := newProxy(t, Config{})
	port := freePort(t)
	lb := l4LB("edge", "127.0.0.2", port, "tcp", be.addr)
	update(t, p, lb)
	addr := vipAddr("127.0.0.2", port)
	keep, err := dialFrom("tcp", "127.0.0.3", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer keep.Close()
	gone, err := dialFrom("tcp", "127.0.0.4", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer gone.Close()
	for _, c := range []net.Conn{keep, gone} {
		if err := roundTrip(c, []byte("a")); err != nil {
			t.Fatal(err)
		}
	}
	lb = clone(lb)
	lb.Listeners[0].DeniedSources = []string{"127.0.0.4/32"}
	update(t, p, lb)
	gone.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := gone.Read(make([]byte, 1)); err == nil || isTimeout(err) {
		t.Fatalf("the denied client's connection is still open (%v)", err)
	}
	if err := roundTrip(keep, []byte("b")); err != nil {
		t.Fatalf("the allowed client's connection: %v", err)
	}
}

// A listener whose source ranges do not compile is not served at all
// (never served open): the compile skips it with a problem.
func TestBrokenSourceRangeIsNotServedOpen(t *testing.T) {
	be, accepted := countingEcho(t)
	p, _ := newProxy(t, Config{})
	port := freePort(t)
	lb := l4LB("edge", "127.0.0.2", port, "tcp", be.addr)
	lb.Listeners[0].AllowedSources = []string{"127.0.0.3/32", "not-a-cidr"}
	update(t, p, lb)
	if st := p.Status()["acme/edge"]; len(st) == 0 {
		t.Fatal("no problem for a malformed allowedSources entry")
	}
	expectRefused(t, addr4(port))
	if accepted.Load() != 0 {
		t.Fatal("the member was reached")
	}
}

func addr4(port int) string { return vipAddr("127.0.0.2", port) }

func isTimeout(err error) bool {
	ne, ok := err.(net.Error)
	return ok && ne.Timeout()
}
