package proxy

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"net"
	"testing"
	"time"

	"github.com/quic-go/quic-go"

	pb "github.com/teapot-lb/teapot-lb/api/proto/teapotv1"
	"github.com/teapot-lb/teapot-lb/proxy/l7"
)

// startH3Limited serves acme's https listener with http3 on 127.0.0.2 and
// other's on 127.0.0.3 (same port), under the cluster's shared keys and
// cfg's bounds; it returns the proxy and both addresses.
func startH3Limited(t *testing.T, cfg Config) (p *Proxy, acme, other string) {
	t.Helper()
	main := startRoutingBackend(t, "main")
	srv := l7.New(l7.Config{})
	t.Cleanup(func() { srv.Close() })
	cfg.HTTP = h3Keyed{newH3Term(t, srv)}
	p, _ = newProxy(t, cfg)
	port := freePort(t)
	a := h3LB(port, map[string]*routingBackend{"main": main})
	a.Routes = a.Routes[:1]
	a.Pools = map[string]*pb.BackendPool{"main": a.Pools["main"]}
	o := clone(a)
	o.Tenant, o.Status = "other", &pb.LoadBalancerStatus{Address: "127.0.0.3"}
	o.Routes[0].Host = "gw.other.example"
	objs := append(labObjects(a, o), &pb.Object{Kind: &pb.Object_Tenant{Tenant: &pb.Tenant{Name: "other", Domains: []string{"other.example"},
		Networks: []string{"127.0.0.0/8", "::1/128"}}}})
	if err := p.Update(objs, 1); err != nil {
		t.Fatal(err)
	}
	if st := p.Status(); len(st["acme/gw"])+len(st["other/gw"]) != 0 {
		t.Fatalf("problems: %v", st)
	}
	return p, vipAddr("127.0.0.2", port), vipAddr("127.0.0.3", port)
}

// TestHTTP3StatelessResetsBounded: an attacker sends 2,000 packets (or more) with
// short headers and made-up connection IDs to acme's HTTP/3 port (each
// would be answered by a stateless reset): acme's resets stop at its
// bucket (burst 40, 20 a second here) and the rest count as refused,
// while other's port, flooded by nobody, still answers its first packet
// of an unknown connection with a reset.
func TestHTTP3StatelessResetsBounded(t *testing.T) {
	t.Parallel()
	const rate, burst = 20, 40
	p, acme, other := startH3Limited(t, Config{H3ResetRate: rate, H3ResetBurst: burst})
	c, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	resets := make(chan int, 4096)
	go func() {
		buf := make([]byte, 2048)
		for {
			n, err := c.Read(buf)
			if err != nil {
				close(resets)
				return
			}
			resets <- n
		}
	}()
	junk := func() []byte {
		b := make([]byte, 100)
		_, _ = rand.Read(b)
		b[0] = 0x40 | b[0]&0x3f // short header
		return b
	}
	ua := net.UDPAddrFromAddrPort(mustAddrPort(t, acme))
	acct := p.h3Limits("acme")
	start := time.Now()
	// At least 2,000 packets, and on until resets are refused (a slow
	// machine refills the bucket meanwhile).
	sent := 0
	for ; sent < 2000 || acct.resetsDropped.Load() == 0 && time.Since(start) < 20*time.Second; sent++ {
		if _, err := c.WriteToUDP(junk(), ua); err != nil {
			t.Fatal(err)
		}
		if sent%50 == 49 {
			time.Sleep(time.Millisecond) // quic-go drops resets it cannot queue at once
		}
	}
	// quic-go queues at most 4 resets at once and drops the rest: wait
	// until the count settles.
	last := int64(-1)
	waitFor(t, 10*time.Second, "the resets to settle", func() bool {
		n := acct.resetsSent.Load() + acct.resetsDropped.Load()
		if n == last {
			return true
		}
		last = n
		time.Sleep(100 * time.Millisecond)
		return false
	})
	// Read what arrived.
	got := 0
	_ = c.SetReadDeadline(time.Now().Add(300 * time.Millisecond))
	for range resets {
		got++
	}
	sentResets := acct.resetsSent.Load()
	elapsed := time.Since(start)
	allowed := burst + int(rate*elapsed.Seconds()) + 1
	t.Logf("%d packets of unknown connections in %v: %d resets received, %d sent, %d refused (bucket %d + %d/s)",
		sent, elapsed.Round(time.Millisecond), got, sentResets, acct.resetsDropped.Load(), burst, rate)
	if got > allowed || int(sentResets) > allowed {
		t.Errorf("%d resets received (%d sent), want at most %d", got, sentResets, allowed)
	}
	if acct.resetsDropped.Load() == 0 {
		t.Error("no reset refused")
	}
	// The other tenant's bucket is its own.
	c2, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close()
	if _, err := c2.WriteToUDP(junk(), net.UDPAddrFromAddrPort(mustAddrPort(t, other))); err != nil {
		t.Fatal(err)
	}
	_ = c2.SetReadDeadline(time.Now().Add(5 * time.Second))
	buf := make([]byte, 2048)
	if n, err := c2.Read(buf); err != nil || n != h3ResetSize {
		t.Fatalf("other's port: %d bytes, %v; want a stateless reset", n, err)
	}
}

// TestHTTP3ConnectionIDsBounded: an attacker opens QUIC connections to
// acme and closes them as fast as it can: each is given several
// connection IDs (its first, and more after its handshake), which stay in
// the transport's table while it lives and for 3 PTOs after it closed.
// Past acme's bucket (burst 40, 20 a second here) the server issues no
// more: the IDs issued stay within the bucket (without it, about 6 for
// each connection), the refusals are counted, and another tenant's
// client is served.
func TestHTTP3ConnectionIDsBounded(t *testing.T) {
	t.Parallel()
	const rate, burst = 20, 40
	p, acme, other := startH3Limited(t, Config{H3ConnIDRate: rate, H3ConnIDBurst: burst})
	tc := &tls.Config{InsecureSkipVerify: true, NextProtos: []string{"h3"}, ServerName: "gw.acme.example"}
	start := time.Now()
	// At least 60 connections, and on until IDs are refused (a slow
	// machine refills the bucket meanwhile).
	attempts, ok := 0, 0
	for ; attempts < 60 || p.h3Limits("acme").idsRefused.Load() == 0 && time.Since(start) < 30*time.Second; attempts++ {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		conn, err := quic.DialAddr(ctx, acme, tc, &quic.Config{})
		cancel()
		if err != nil {
			continue
		}
		ok++
		// Wait for the IDs the server gives after the handshake.
		time.Sleep(5 * time.Millisecond)
		_ = conn.CloseWithError(0, "")
	}
	acct := p.h3Limits("acme")
	issued := acct.issued.Load()
	elapsed := time.Since(start)
	allowed := burst + int(rate*elapsed.Seconds()) + 1
	t.Logf("%d connections in %v, %d opened: %d connection IDs issued, %d refused (bucket %d + %d/s)", attempts, elapsed.Round(time.Millisecond),
		ok, issued, acct.idsRefused.Load(), burst, rate)
	if int(issued) > allowed {
		t.Errorf("%d connection IDs issued, want at most %d", issued, allowed)
	}
	if acct.idsRefused.Load() == 0 {
		t.Errorf("no connection ID refused (%d of %d connections opened): want refusals past the bucket", ok, attempts)
	}
	// Another tenant's client has a bucket of its own.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	oc, err := quic.DialAddr(ctx, other, &tls.Config{InsecureSkipVerify: true, NextProtos: []string{"h3"}, ServerName: "gw.other.example"}, &quic.Config{})
	if err != nil {
		t.Fatalf("other's client: %v", err)
	}
	_ = oc.CloseWithError(0, "")
}

// TestHTTP3RetiredConnectionIDsBounded: a client keeps one connection to
// acme and retires its connection IDs as fast as it can without opening
// any other: it probes a new path (a new UDP socket, which takes a new ID
// of the connection's) and abandons it (RETIRE_CONNECTION_ID), over and
// over (quic-go's client API has no other way to retire an ID); the
// server issues a new ID for each one retired. Past acme's
// bucket (burst 20, refilled once in 1,000 s here) none is issued: the
// connection is closed, the IDs issued stay within the bucket and the
// refusal is counted, and another tenant's client is served.
func TestHTTP3RetiredConnectionIDsBounded(t *testing.T) {
	t.Parallel()
	const rate, burst = 0.001, 20
	p, acme, other := startH3Limited(t, Config{H3ConnIDRate: rate, H3ConnIDBurst: burst})
	acct := p.h3Limits("acme")
	tc := &tls.Config{InsecureSkipVerify: true, NextProtos: []string{"h3"}, ServerName: "gw.acme.example"}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	conn, err := quic.DialAddr(ctx, acme, tc, &quic.Config{})
	cancel()
	if err != nil {
		t.Fatal(err)
	}
	defer conn.CloseWithError(0, "")
	afterDial := acct.issued.Load()
	retired := 0
	for i := 0; i < 200 && conn.Context().Err() == nil; i++ {
		uc, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
		if err != nil {
			t.Fatal(err)
		}
		tr := &quic.Transport{Conn: uc}
		path, err := conn.AddPath(tr)
		if err == nil {
			// The probe takes an ID for the path and sends a
			// PATH_CHALLENGE with it; abandoning the path retires the
			// ID whether the probe was answered or not.
			ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
			_ = path.Probe(ctx)
			cancel()
			if path.Close() == nil {
				retired++
			}
		}
		// A transport's Close would close the connection too.
		defer tr.Close()
		defer uc.Close()
	}
	select {
	case <-conn.Context().Done():
	case <-time.After(10 * time.Second):
		t.Fatalf("the connection still open after %d IDs retired", retired)
	}
	issued := acct.issued.Load()
	t.Logf("%d connection IDs on the handshake, %d paths abandoned: %d IDs issued, %d refused, the connection closed: %v",
		afterDial, retired, issued, acct.idsRefused.Load(), context.Cause(conn.Context()))
	if issued > burst+1 {
		t.Errorf("%d connection IDs issued, want at most %d", issued, burst+1)
	}
	if retired < int(burst-afterDial) {
		t.Errorf("only %d IDs retired before the connection closed, want at least %d (the bucket's rest)", retired, burst-afterDial)
	}
	if acct.idsRefused.Load() == 0 {
		t.Error("no connection ID refused")
	}
	ctx, cancel = context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	oc, err := quic.DialAddr(ctx, other, &tls.Config{InsecureSkipVerify: true, NextProtos: []string{"h3"}, ServerName: "gw.other.example"}, &quic.Config{})
	if err != nil {
		t.Fatalf("other's client: %v", err)
	}
	_ = oc.CloseWithError(0, "")
}
