package proxy

import (
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"sync"
	"testing"
	"time"

	"github.com/teapot-lb/teapot-lb/api/porttest"
	pb "github.com/teapot-lb/teapot-lb/api/proto/teapotv1"
	"github.com/teapot-lb/teapot-lb/proxy/metrics"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
)

// labObjects is the tenant and VIP pool of every test: loopback VIPs and
// members, which the tenant's networks name on purpose.
func labObjects(lbs ...*pb.LoadBalancer) []*pb.Object {
	out := []*pb.Object{
		{Kind: &pb.Object_Tenant{Tenant: &pb.Tenant{Name: "acme", Domains: []string{"acme.example"},
			Networks: []string{"127.0.0.0/8", "::1/128"}}}},
		{Kind: &pb.Object_VipPool{VipPool: &pb.VIPPool{Name: "lab", Cidrs: []string{"127.0.0.0/8", "::1/128"}, Mode: "static"}}},
	}
	for _, lb := range lbs {
		out = append(out, &pb.Object{Kind: &pb.Object_LoadBalancer{LoadBalancer: lb}})
	}
	return out
}

// l4LB is a load balancer with one listener of proto on vip:port to pool
// "app" of members.
func l4LB(name, vip string, port int, proto string, members ...string) *pb.LoadBalancer {
	ms := make([]*pb.Member, len(members))
	for i, m := range members {
		ms[i] = &pb.Member{Address: m}
	}
	return &pb.LoadBalancer{
		Name:      name,
		Tenant:    "acme",
		Listeners: []*pb.Listener{{Port: uint32(port), Protocol: proto, Pool: "app"}},
		Pools:     map[string]*pb.BackendPool{"app": {Members: ms}},
		Status:    &pb.LoadBalancerStatus{Address: vip},
	}
}

func clone(lb *pb.LoadBalancer) *pb.LoadBalancer { return proto.Clone(lb).(*pb.LoadBalancer) }

func dur(d time.Duration) *durationpb.Duration { return durationpb.New(d) }

// newProxy returns a proxy closed when the test ends, recording metrics.
func newProxy(t testing.TB, cfg Config) (*Proxy, *metrics.Memory) {
	t.Helper()
	m := &metrics.Memory{}
	cfg.Metrics = m
	if cfg.DataPath == "" {
		cfg.DataPath = testDataPath
	}
	if cfg.DrainTimeout == 0 {
		cfg.DrainTimeout = 200 * time.Millisecond
	}
	p := New(cfg)
	t.Cleanup(func() { p.Close() })
	if cfg.DataPath == DataPathIOURing && p.DataPath() != DataPathIOURing {
		t.Fatalf("data path %s asked for, the proxy runs %s", cfg.DataPath, p.DataPath())
	}
	return p, m
}

func update(t testing.TB, p *Proxy, lbs ...*pb.LoadBalancer) {
	t.Helper()
	if err := p.Update(labObjects(lbs...), 1); err != nil && !errors.Is(err, ErrNoChanges) {
		t.Fatalf("Update: %v", err)
	}
}

// freePort returns a TCP and UDP port free on the loopback addresses
// used by the tests.
func freePort(t testing.TB) int {
	t.Helper()
	return porttest.Pick(t, "127.0.0.1", "127.0.0.2", "127.0.0.3", "127.0.0.4", "::1")
}

// backend is a TCP test server whose connections it can cut.
type backend struct {
	l     net.Listener
	addr  string
	mu    sync.Mutex
	conns map[net.Conn]struct{}
	wg    sync.WaitGroup
}

// startBackend serves each connection with serve on host ("127.0.0.1" or
// "[::1]").
func startBackend(t testing.TB, host string, serve func(net.Conn)) *backend {
	t.Helper()
	l, err := net.Listen("tcp", host+":0")
	if err != nil {
		t.Fatal(err)
	}
	b := &backend{l: l, addr: l.Addr().String(), conns: map[net.Conn]struct{}{}}
	b.wg.Go(func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			b.mu.Lock()
			b.conns[c] = struct{}{}
			b.mu.Unlock()
			b.wg.Go(func() {
				defer func() {
					b.mu.Lock()
					delete(b.conns, c)
					b.mu.Unlock()
					c.Close()
				}()
				serve(c)
			})
		}
	})
	t.Cleanup(b.close)
	return b
}

// close stops accepting and closes every connection.
func (b *backend) close() {
	b.l.Close()
	b.mu.Lock()
	for c := range b.conns {
		c.Close()
	}
	b.mu.Unlock()
	b.wg.Wait()
}

// echo copies everything back and closes its write half at EOF.
func echo(c net.Conn) {
	io.Copy(c, c)
	if tc, ok := c.(*net.TCPConn); ok {
		tc.CloseWrite()
		io.Copy(io.Discard, c)
	}
}

// deadAddr is an address where nothing listens.
func deadAddr(t testing.TB) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	return addr
}

// roundTrip writes msg and reads the same number of bytes back.
func roundTrip(c net.Conn, msg []byte) error {
	if err := c.SetDeadline(time.Now().Add(5 * time.Second)); err != nil {
		return err
	}
	if _, err := c.Write(msg); err != nil {
		return fmt.Errorf("write: %w", err)
	}
	got := make([]byte, len(msg))
	if _, err := io.ReadFull(c, got); err != nil {
		return fmt.Errorf("read: %w", err)
	}
	if string(got) != string(msg) {
		return fmt.Errorf("echo mismatch: sent %q, got %q", msg, got)
	}
	return nil
}

// eventually polls cond until it holds or the deadline passes.
func eventually(t testing.TB, what string, cond func() bool) {
	t.Helper()
	// A poll: it returns as soon as cond holds; the deadline is for a
	// 2-core machine loaded by other builds and labs.
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func vipAddr(vip string, port int) string {
	return netip.AddrPortFrom(netip.MustParseAddr(vip), uint16(port)).String()
}

// expectRefused checks that a connection to addr is accepted and then
// closed at once, or refused outright, within a second.
func expectRefused(t testing.TB, addr string) {
	t.Helper()
	start := time.Now()
	c, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		return
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(2 * time.Second))
	if _, err := c.Read(make([]byte, 1)); err == nil {
		t.Fatalf("connection to %s was served, want refused", addr)
	}
	if d := time.Since(start); d > time.Second {
		t.Fatalf("refusing took %v, want at once", d)
	}
}

func wrapLB(lb *pb.LoadBalancer) *pb.Object {
	return &pb.Object{Kind: &pb.Object_LoadBalancer{LoadBalancer: lb}}
}
