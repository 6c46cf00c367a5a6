package proxy

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/quic-go/quic-go"

	"github.com/teapot-lb/teapot-lb/api/observe"
	pb "github.com/teapot-lb/teapot-lb/api/proto/teapotv1"
	"github.com/teapot-lb/teapot-lb/proxy/l7"
	"github.com/teapot-lb/teapot-lb/proxy/snapshot"
)

// h3Conns is how many QUIC connections the socket of k serves.
func h3Conns(p *Proxy, k snapshot.Key) int {
	p.mu.Lock()
	s := p.sockets[k]
	p.mu.Unlock()
	if s == nil || s.h3 == nil {
		return 0
	}
	return s.h3.count()
}

// dialH3 opens a bare QUIC connection with ALPN h3 to target.
func dialH3(t testing.TB, target string) (*quic.Conn, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := quic.DialAddr(ctx, target, &tls.Config{InsecureSkipVerify: true, NextProtos: []string{"h3"}, ServerName: "gw.acme.example"}, &quic.Config{})
	if err == nil {
		t.Cleanup(func() { _ = c.CloseWithError(0, "") })
	}
	return c, err
}

// TestHTTP3TenantConnectionBudget: each QUIC connection counts in its
// tenant's connections (quotas.connections 2 here): a third is refused at
// its first packet, while another tenant on the same port of another VIP
// is served; closing one makes room again.
func TestHTTP3TenantConnectionBudget(t *testing.T) {
	t.Parallel()
	main := startRoutingBackend(t, "main")
	srv := l7.New(l7.Config{})
	t.Cleanup(func() { srv.Close() })
	p, _ := newProxy(t, Config{HTTP: newH3Term(t, srv)})
	port := freePort(t)
	acme := h3LB(port, map[string]*routingBackend{"main": main})
	acme.Routes = acme.Routes[:1]
	acme.Pools = map[string]*pb.BackendPool{"main": acme.Pools["main"]}
	other := clone(acme)
	other.Tenant, other.Status = "other", &pb.LoadBalancerStatus{Address: "127.0.0.3"}
	other.Routes[0].Host = "gw.other.example"
	objs := labObjects(acme, other)
	objs[0].GetTenant().Quotas = &pb.Quotas{Connections: 2}
	objs = append(objs, &pb.Object{Kind: &pb.Object_Tenant{Tenant: &pb.Tenant{Name: "other", Domains: []string{"other.example"},
		Networks: []string{"127.0.0.0/8", "::1/128"}}}})
	if err := p.Update(objs, 1); err != nil {
		t.Fatal(err)
	}
	if st := p.Status(); len(st["acme/gw"])+len(st["other/gw"]) != 0 {
		t.Fatalf("problems: %v", st)
	}
	target := vipAddr("127.0.0.2", port)
	c1, err := dialH3(t, target)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := dialH3(t, target); err != nil {
		t.Fatal(err)
	}
	if _, err := dialH3(t, target); err == nil {
		t.Fatal("a third QUIC connection of a tenant limited to 2 was accepted")
	} else if te, ok := errors.AsType[*quic.TransportError](err); !ok || te.ErrorCode != quic.ConnectionRefused {
		t.Fatalf("third connection: %v, want CONNECTION_REFUSED", err)
	}
	if got := p.tenantBudget("acme").conns.Load(); got != 2 {
		t.Errorf("acme holds %d connections, want 2", got)
	}
	// The neighbour is served meanwhile.
	resp, err := newH3Client(t, vipAddr("127.0.0.3", port)).do("GET", "https://gw.other.example/x", nil, "")
	if err != nil {
		t.Fatalf("other tenant: %v", err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("other tenant: status %d", resp.StatusCode)
	}
	// A closed connection gives its charge back.
	_ = c1.CloseWithError(0, "")
	deadline := time.Now().Add(10 * time.Second)
	for p.tenantBudget("acme").conns.Load() != 1 {
		if time.Now().After(deadline) {
			t.Fatalf("acme still holds %d connections", p.tenantBudget("acme").conns.Load())
		}
		time.Sleep(5 * time.Millisecond)
	}
	if _, err := dialH3(t, target); err != nil {
		t.Fatalf("after a close: %v", err)
	}
}

// TestHTTP3StreamsPerConnection: a QUIC connection may open H3MaxStreams
// request streams at once; the next one is refused by the stream limit.
func TestHTTP3StreamsPerConnection(t *testing.T) {
	t.Parallel()
	_, target, _ := startH3(t)
	c, err := dialH3(t, target)
	if err != nil {
		t.Fatal(err)
	}
	for i := range H3MaxStreams {
		if _, err := c.OpenStream(); err != nil {
			t.Fatalf("stream %d: %v", i, err)
		}
	}
	if _, err := c.OpenStream(); err == nil {
		t.Fatalf("stream %d opened past the bound of %d", H3MaxStreams+1, H3MaxStreams)
	} else if _, ok := errors.AsType[*quic.StreamLimitReachedError](err); !ok {
		t.Fatalf("stream %d: %v, want the stream limit", H3MaxStreams+1, err)
	}
}

// TestHTTP3HitlessChange: a change of the listener's load balancer (a
// new route) keeps the QUIC connection, whose next request takes the new
// route; turning http3 off closes it with H3_NO_ERROR after a GOAWAY.
func TestHTTP3HitlessChange(t *testing.T) {
	t.Parallel()
	p, target, bes := startH3(t)
	c := newH3Client(t, target)
	url := "https://gw.acme.example:" + portOf(target)
	get := func(path string) string {
		t.Helper()
		resp, err := c.do("GET", url+path, nil, "")
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.Header.Get("X-Backend")
	}
	if b := get("/fresh/x"); b != "main" {
		t.Fatalf("before: served by %q", b)
	}
	lb := h3LB(mustAtoi(t, portOf(target)), bes)
	lb.Routes = append(lb.Routes, &pb.Route{Host: "gw.acme.example", Path: "/fresh/", Pool: "other"})
	update(t, p, lb)
	if b := get("/fresh/x"); b != "other" {
		t.Fatalf("after the change: served by %q, want the new route's pool", b)
	}
	if n := c.dials.Load(); n != 1 {
		t.Fatalf("%d QUIC connections, want the first kept", n)
	}
	qc, err := dialH3(t, target)
	if err != nil {
		t.Fatal(err)
	}
	key := snapshot.Key{Addr: mustAddrPort(t, target), Network: snapshot.TCP}
	waitFor(t, 20*time.Second, "the server serves both connections", func() bool { return h3Conns(p, key) == 2 })
	lb = clone(lb)
	lb.Listeners[0].Http3 = false
	update(t, p, lb)
	select {
	case <-qc.Context().Done():
	case <-time.After(20 * time.Second):
		t.Fatal("the QUIC connection is still open with http3 off")
	}
	if ae, ok := errors.AsType[*quic.ApplicationError](context.Cause(qc.Context())); !ok || ae.ErrorCode != h3CodeNoError {
		t.Fatalf("closed with %v, want H3_NO_ERROR", context.Cause(qc.Context()))
	}
}

// TestHTTP3BindFailureReported: an https listener with http3 whose UDP
// port is taken still serves HTTP/1.1 and HTTP/2, and its load balancer's
// status names listeners[0].http3 and the cause; its answers advertise
// no Alt-Svc.
func TestHTTP3BindFailureReported(t *testing.T) {
	t.Parallel()
	main := startRoutingBackend(t, "main")
	srv := l7.New(l7.Config{})
	t.Cleanup(func() { srv.Close() })
	p, _ := newProxy(t, Config{HTTP: newH3Term(t, srv)})
	port := freePort(t)
	taken, err := net.ListenPacket("udp", vipAddr("127.0.0.2", port))
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	lb := h3LB(port, map[string]*routingBackend{"main": main})
	lb.Routes = lb.Routes[:1]
	update(t, p, lb)
	st := p.Status()["acme/gw"]
	if len(st) != 1 || st[0].Field != "listeners[0].http3" || !strings.Contains(st[0].Reason, "address already in use") {
		t.Fatalf("status %+v, want listeners[0].http3 with the bind error", st)
	}
	resp, err := doTLS(vipAddr("127.0.0.2", port), "/x")
	if err != nil {
		t.Fatalf("HTTPS without its UDP port: %v", err)
	}
	if resp.StatusCode != 200 || resp.Header.Get("Alt-Svc") != "" {
		t.Fatalf("HTTPS without its UDP port: status %d, Alt-Svc %q, want 200 and none", resp.StatusCode, resp.Header.Get("Alt-Svc"))
	}
	// What explain lists per host: the https listener bound, its HTTP/3
	// port not, with the reason.
	var h pb.HostObservation
	p.Observe(observe.Filter{}, &h)
	var rows []string
	for _, l := range h.GetListeners() {
		rows = append(rows, fmt.Sprintf("%s bound=%v %s", l.GetProtocol(), l.GetBound(), l.GetError()))
	}
	if len(rows) != 2 || rows[0] != "https bound=true " || !strings.HasPrefix(rows[1], "http3 bound=false cannot serve HTTP/3") {
		t.Fatalf("observed listeners %q", rows)
	}
}

// TestHTTP3TenantStreams: the requests of a tenant's QUIC connections in
// progress count in its streams (bounded at quotas.connections, 2 here):
// a third request at once is answered 503 without reaching a member.
func TestHTTP3TenantStreams(t *testing.T) {
	t.Parallel()
	main := startRoutingBackend(t, "main")
	srv := l7.New(l7.Config{})
	t.Cleanup(func() { srv.Close() })
	p, _ := newProxy(t, Config{HTTP: newH3Term(t, srv)})
	port := freePort(t)
	lb := h3LB(port, map[string]*routingBackend{"main": main})
	lb.Routes = lb.Routes[:1]
	objs := labObjects(lb)
	objs[0].GetTenant().Quotas = &pb.Quotas{Connections: 2}
	if err := p.Update(objs, 1); err != nil {
		t.Fatal(err)
	}
	c := newH3Client(t, vipAddr("127.0.0.2", port))
	codes := make(chan int, 3)
	for i := range 3 {
		go func() {
			resp, err := c.do("GET", fmt.Sprintf("https://gw.acme.example/r%d?sleep=2s", i), nil, "")
			if err != nil {
				codes <- 0
				return
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			codes <- resp.StatusCode
		}()
	}
	got := map[int]int{}
	for range 3 {
		got[<-codes]++
	}
	if got[200] != 2 || got[503] != 1 {
		t.Fatalf("answers %v, want two 200 and one 503", got)
	}
	if n := main.n.Load(); n != 2 {
		t.Fatalf("the member served %d requests, want 2", n)
	}
}

// TestHTTP3Handover: a handover of the VIP sends the QUIC connections a
// GOAWAY; CloseConnections counts one with a request in progress as busy
// and closes the idle ones with H3_NO_ERROR, and with force the rest.
func TestHTTP3Handover(t *testing.T) {
	t.Parallel()
	p, target, _ := startH3(t)
	key := snapshot.Key{Addr: mustAddrPort(t, target), Network: snapshot.TCP}
	idle, err := dialH3(t, target)
	if err != nil {
		t.Fatal(err)
	}
	busy := newH3Client(t, target)
	done := make(chan int, 1)
	go func() {
		resp, err := busy.do("GET", "https://gw.acme.example/slow?sleep=3s", nil, "")
		if err != nil {
			done <- 0
			return
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		done <- resp.StatusCode
	}()
	waitFor(t, 20*time.Second, "both connections served", func() bool { return h3Conns(p, key) == 2 })
	waitFor(t, 20*time.Second, "the slow request in progress", func() bool {
		p.mu.Lock()
		defer p.mu.Unlock()
		for c := range p.sockets[key].h3.conns {
			if c.active.Load() == 1 {
				return true
			}
		}
		return false
	})
	p.HandOver([]netip.Addr{key.Addr.Addr()})
	if n := p.CloseConnections(false); n != 1 {
		t.Fatalf("CloseConnections: %d busy, want the one with a request in progress", n)
	}
	select {
	case <-idle.Context().Done():
	case <-time.After(10 * time.Second):
		t.Fatal("the idle connection is still open")
	}
	if ae, ok := errors.AsType[*quic.ApplicationError](context.Cause(idle.Context())); !ok || ae.ErrorCode != h3CodeNoError {
		t.Fatalf("idle connection closed with %v, want H3_NO_ERROR", context.Cause(idle.Context()))
	}
	// The request in progress finishes after the GOAWAY.
	if code := <-done; code != 200 {
		t.Fatalf("the request in progress got %d", code)
	}
	waitFor(t, 20*time.Second, "no connection left after force", func() bool {
		p.CloseConnections(true)
		return h3Conns(p, key) == 0
	})
}
