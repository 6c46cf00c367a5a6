package proxy

import (
	"bytes"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	pb "github.com/teapot-lb/teapot-lb/api/proto/teapotv1"
	"github.com/teapot-lb/teapot-lb/proxy/internal/splice"
	"github.com/teapot-lb/teapot-lb/proxy/metrics"
	"github.com/teapot-lb/teapot-lb/proxy/proxyproto"
	"github.com/teapot-lb/teapot-lb/proxy/snapshot"
)

func TestTCPEchoWithHalfClose(t *testing.T) {
	tests := []struct {
		name, vip, backendHost string
		size                   int
	}{
		{"IPv4 small", "127.0.0.2", "127.0.0.1", 11},
		{"IPv4 4 MiB", "127.0.0.2", "127.0.0.1", 4 << 20},
		{"IPv6", "::1", "[::1]", 64 << 10},
		{"IPv6 VIP to IPv4 member", "::1", "127.0.0.1", 1000},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			be := startBackend(t, tt.backendHost, echo)
			p, m := newProxy(t, Config{})
			port := freePort(t)
			update(t, p, l4LB("echo", tt.vip, port, "tcp", be.addr))
			c, err := net.Dial("tcp", vipAddr(tt.vip, port))
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			msg := make([]byte, tt.size)
			rand.Read(msg)
			got := make(chan []byte, 1)
			go func() {
				b, _ := io.ReadAll(c)
				got <- b
			}()
			if _, err := c.Write(msg); err != nil {
				t.Fatal(err)
			}
			// Half-close: the member sees EOF, echoes, and ends its half.
			if err := c.(*net.TCPConn).CloseWrite(); err != nil {
				t.Fatal(err)
			}
			select {
			case b := <-got:
				if !bytes.Equal(b, msg) {
					t.Fatalf("echoed %d bytes, want %d", len(b), len(msg))
				}
			case <-time.After(10 * time.Second):
				t.Fatal("no EOF after the member closed its half")
			}
			eventually(t, "byte counters", func() bool {
				r := m.Report()
				return len(r.Listeners) == 1 && r.Listeners[0].BytesIn == int64(tt.size) &&
					r.Listeners[0].BytesOut == int64(tt.size) && r.Listeners[0].Closed == 1
			})
			if s := p.RingStats(); p.DataPath() == DataPathIOURing && s.Conns != 1 {
				t.Fatalf("on io_uring the ring relayed %d connections, want 1", s.Conns)
			}
		})
	}
}

// pipeFDs counts the pipes this process has open.
func pipeFDs(t *testing.T) int {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatalf("list open descriptors: %v", err)
	}
	n := 0
	for _, e := range ents {
		if target, err := os.Readlink("/proc/self/fd/" + e.Name()); err == nil && strings.HasPrefix(target, "pipe:") {
			n++
		}
	}
	return n
}

// TestTCPUsesSplice checks how forwarding moves bytes: a small message
// is copied and takes no pipe; a burst goes through splice(2), through a
// pipe of the host's pool, given back; a connection that waits for bytes
// holds none.
func TestTCPUsesSplice(t *testing.T) {
	be := startBackend(t, "127.0.0.1", echoCopying)
	p, _ := newProxy(t, Config{DataPath: DataPathEpoll}) // splice is the epoll path's
	port := freePort(t)
	update(t, p, l4LB("echo", "127.0.0.2", port, "tcp", be.addr))
	c, err := net.Dial("tcp", vipAddr("127.0.0.2", port))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	for range 10 {
		if err := roundTrip(c, []byte("a small message")); err != nil {
			t.Fatal(err)
		}
	}
	if n := p.pipes.Open(); n != 0 {
		t.Errorf("%d pipes open after small round trips; they are copied", n)
	}
	// A burst (4 MiB each way) goes through a pipe each way.
	burst := make([]byte, 4<<20)
	rand.Read(burst)
	go func() { _, _ = c.Write(burst) }()
	got := make([]byte, len(burst))
	_ = c.SetReadDeadline(time.Now().Add(30 * time.Second))
	if _, err := io.ReadFull(c, got); err != nil || !bytes.Equal(got, burst) {
		t.Fatalf("burst echoed: %v, equal %v", err, bytes.Equal(got, burst))
	}
	if n := p.pipes.Open(); n < 1 || n > 2 {
		t.Errorf("%d pipes open after a burst; splice(2) takes one per direction moving bytes", n)
	}
	// The pool's pipes are open descriptors (the process's count moves
	// with other tests' closing connections: TestPipesReturnToTheBaseline
	// and TestSplicePipesBounded count them alone).
	if n := pipeFDs(t); n < 2*p.pipes.Open() {
		t.Errorf("%d pipe descriptors open, the pool has %d pipes", n, p.pipes.Open())
	}
}

// TestPipesReturnToTheBaseline: 64 TCP connections that moved bytes and
// then wait hold no pipe, and once they close the process holds the
// descriptors it held before, but for the pool's few idle pipes. With Go's
// own splice path each waiting connection held two pipes (four
// descriptors), kept in a sync.Pool after it closed until a garbage
// collection: 4,501 pipe descriptors were seen open after every connection
// had closed.
func TestPipesReturnToTheBaseline(t *testing.T) {
	be := startBackend(t, "127.0.0.1", echoCopying)
	p, _ := newProxy(t, Config{DataPath: DataPathEpoll}) // splice is the epoll path's
	port := freePort(t)
	update(t, p, l4LB("echo", "127.0.0.2", port, "tcp", be.addr))
	before, others := openFDs(t), pipeFDs(t)
	const conns = 64
	var cs []net.Conn
	for range conns {
		c, err := net.Dial("tcp", vipAddr("127.0.0.2", port))
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		cs = append(cs, c)
	}
	var wg sync.WaitGroup
	for _, c := range cs {
		wg.Go(func() {
			if err := bulkEcho(c, bytes.Repeat([]byte("x"), 256<<10)); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	if n := pipeFDs(t) - others; n > 2*splice.FreePipes {
		t.Errorf("%d pipe descriptors open while %d connections wait for bytes", n, conns)
	}
	for _, c := range cs {
		c.Close()
	}
	eventually(t, "the connections to close", func() bool { return p.HostDescriptors() == 0 })
	eventually(t, "descriptors back to the baseline", func() bool { return openFDs(t) <= before+2*splice.FreePipes })
	t.Logf("descriptors: %d before, %d after (%d pipes idle in the pool)", before, openFDs(t), p.pipes.Open())
}

// echoCopying echoes through a buffer: Go's splice path, which io.Copy
// between two TCP connections takes, would open pipes of its own in this
// process.
func echoCopying(c net.Conn) {
	buf := make([]byte, 32<<10)
	for {
		n, err := c.Read(buf)
		if n > 0 {
			if _, werr := c.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			break
		}
	}
	if tc, ok := c.(*net.TCPConn); ok {
		tc.CloseWrite()
	}
}

// bulkEcho writes msg while it reads the echo back.
func bulkEcho(c net.Conn, msg []byte) error {
	if err := c.SetDeadline(time.Now().Add(20 * time.Second)); err != nil {
		return err
	}
	werr := make(chan error, 1)
	go func() {
		_, err := c.Write(msg)
		werr <- err
	}()
	got := make([]byte, len(msg))
	_, err := io.ReadFull(c, got)
	if err := <-werr; err != nil {
		return fmt.Errorf("write: %w", err)
	}
	if err != nil {
		return fmt.Errorf("read: %w", err)
	}
	if !bytes.Equal(got, msg) {
		return errors.New("echo differs from what was sent")
	}
	return nil
}

// TestSplicePipesBounded: with a pool of one pipe, eight transfers at
// once all arrive whole, those that find the pipe taken copy, and the
// process never has more than that pipe open.
func TestSplicePipesBounded(t *testing.T) {
	be := startBackend(t, "127.0.0.1", echoCopying)
	p, _ := newProxy(t, Config{DataPath: DataPathEpoll, Limits: Limits{SplicePipes: 1}}) // splice is the epoll path's
	port := freePort(t)
	update(t, p, l4LB("echo", "127.0.0.2", port, "tcp", be.addr))
	others := pipeFDs(t)
	var wg sync.WaitGroup
	var most, mostFDs atomic.Int64
	stop := make(chan struct{})
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		for {
			if n := int64(p.pipes.Open()); n > most.Load() {
				most.Store(n)
			}
			if n := int64(pipeFDs(t) - others); n > mostFDs.Load() {
				mostFDs.Store(n)
			}
			select {
			case <-stop:
				return
			case <-time.After(100 * time.Microsecond):
			}
		}
	}()
	for i := range 8 {
		wg.Go(func() {
			c, err := net.Dial("tcp", vipAddr("127.0.0.2", port))
			if err != nil {
				t.Error(err)
				return
			}
			defer c.Close()
			msg := bytes.Repeat([]byte{byte('a' + i)}, 1<<20)
			if err := bulkEcho(c, msg); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	close(stop)
	<-sampled
	if n := most.Load(); n > 1 {
		t.Errorf("%d pipes open at once, the pool's bound is 1", n)
	}
	if n := mostFDs.Load(); n > 2 {
		t.Errorf("%d pipe descriptors opened at once, the pool's bound is one pipe", n)
	}
}

func TestFreebindIsSet(t *testing.T) {
	tests := []struct {
		vip        string
		level, opt int
	}{
		{"127.0.0.2", unix.SOL_IP, unix.IP_FREEBIND},
		{"::1", unix.SOL_IPV6, unix.IPV6_FREEBIND},
	}
	for _, tt := range tests {
		t.Run(tt.vip, func(t *testing.T) {
			p, _ := newProxy(t, Config{})
			port := freePort(t)
			lb := l4LB("a", tt.vip, port, "tcp", "127.0.0.1:9")
			lb.Listeners = append(lb.Listeners, &pb.Listener{Port: uint32(port), Protocol: "udp", Pool: "app"})
			update(t, p, lb)
			p.mu.Lock()
			defer p.mu.Unlock()
			for _, n := range []snapshot.Network{snapshot.TCP, snapshot.UDP} {
				s := p.sockets[snapshot.Key{Addr: netip.MustParseAddrPort(vipAddr(tt.vip, port)), Network: n}]
				if s == nil {
					t.Fatalf("no %s socket; status %v", n, p.Status())
				}
				var rc syscall.RawConn
				var err error
				if s.tcp != nil {
					rc, err = s.tcp.SyscallConn()
				} else {
					rc, err = s.udp.conn.SyscallConn()
				}
				if err != nil {
					t.Fatal(err)
				}
				var v int
				var gerr error
				rc.Control(func(fd uintptr) { v, gerr = unix.GetsockoptInt(int(fd), tt.level, tt.opt) })
				if gerr != nil || v != 1 {
					t.Errorf("%s freebind option = %d, %v; want 1", n, v, gerr)
				}
			}
		})
	}
}

func TestMemberDownRetriesNext(t *testing.T) {
	be := startBackend(t, "127.0.0.1", echo)
	p, m := newProxy(t, Config{Limits: Limits{EjectAfter: 100}})
	port := freePort(t)
	dead1, dead2 := deadAddr(t), deadAddr(t)
	update(t, p, l4LB("retry", "127.0.0.2", port, "tcp", dead1, be.addr, dead2))
	for i := range 12 {
		c, err := net.Dial("tcp", vipAddr("127.0.0.2", port))
		if err != nil {
			t.Fatal(err)
		}
		if err := roundTrip(c, []byte("hello")); err != nil {
			t.Fatalf("connection %d: %v", i, err)
		}
		c.Close()
	}
	failed := 0
	for _, ms := range m.Report().Members {
		failed += int(ms.ByStatus[StatusConnectFailed])
	}
	if failed == 0 {
		t.Error("no failed connect recorded; the dead members were never tried")
	}
}

func TestAllMembersDownRefusesAtOnce(t *testing.T) {
	t.Run("connects fail", func(t *testing.T) {
		p, m := newProxy(t, Config{})
		port := freePort(t)
		update(t, p, l4LB("down", "127.0.0.2", port, "tcp", deadAddr(t), deadAddr(t)))
		for range 3 {
			expectRefused(t, vipAddr("127.0.0.2", port))
		}
		eventually(t, "refusals counted", func() bool {
			r := m.Report()
			return len(r.Listeners) == 1 && r.Listeners[0].Refused[RefusedNoMember] == 3
		})
	})
	t.Run("members ejected: still tried, then refused", func(t *testing.T) {
		p, m := newProxy(t, Config{Limits: Limits{EjectAfter: 1, EjectFor: time.Hour}})
		port := freePort(t)
		update(t, p, l4LB("down", "127.0.0.2", port, "tcp", deadAddr(t)))
		expectRefused(t, vipAddr("127.0.0.2", port))
		before := m.Report().Members[0].Latency.Count
		expectRefused(t, vipAddr("127.0.0.2", port))
		if after := m.Report().Members[0].Latency.Count; after != before+3 {
			t.Errorf("the only member, ejected and refusing, was dialled %d times for one connection; want 3 (ConnectAttempts)", after-before)
		}
	})
	t.Run("active check down", func(t *testing.T) {
		be := startBackend(t, "127.0.0.1", echo)
		p, _ := newProxy(t, Config{})
		port := freePort(t)
		lb := l4LB("checked", "127.0.0.2", port, "tcp", be.addr)
		lb.Pools["app"].HealthCheck = &pb.HealthCheck{Http: &pb.HTTPCheck{Path: "/"}, Interval: dur(20 * time.Millisecond), Rise: 1, Fall: 1}
		update(t, p, lb)
		// The echo member does not speak HTTP: its check fails.
		eventually(t, "member down", func() bool {
			return !p.current.Load().listener(snapshot.Key{Addr: netip.MustParseAddrPort(vipAddr("127.0.0.2", port)), Network: snapshot.TCP}).Backend().Members()[0].Usable()
		})
		expectRefused(t, vipAddr("127.0.0.2", port))
	})
}

func TestProxyProtocolHeaders(t *testing.T) {
	tests := []struct {
		name, version, vip, backendHost string
	}{
		{"v1 IPv4", "v1", "127.0.0.3", "127.0.0.1"},
		{"v2 IPv4", "v2", "127.0.0.3", "127.0.0.1"},
		{"v1 IPv6", "v1", "::1", "[::1]"},
		{"v2 IPv6", "v2", "::1", "[::1]"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			headers := make(chan proxyproto.Header, 1)
			be := startBackend(t, tt.backendHost, func(c net.Conn) {
				buf := make([]byte, 0, 256)
				tmp := make([]byte, 256)
				for {
					h, n, err := proxyproto.Decode(buf)
					if err == nil {
						headers <- h
						c.Write(buf[n:])
						echo(c)
						return
					}
					if !errors.Is(err, proxyproto.ErrIncomplete) {
						headers <- proxyproto.Header{}
						return
					}
					k, err := c.Read(tmp)
					if err != nil {
						return
					}
					buf = append(buf, tmp[:k]...)
				}
			})
			p, _ := newProxy(t, Config{})
			port := freePort(t)
			lb := l4LB("pp", tt.vip, port, "tcp", be.addr)
			lb.Pools["app"].ProxyProtocol = tt.version
			update(t, p, lb)
			c, err := net.Dial("tcp", vipAddr(tt.vip, port))
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			if err := roundTrip(c, []byte("after the header")); err != nil {
				t.Fatal(err)
			}
			h := <-headers
			want := proxyproto.Header{Version: int(tt.version[1] - '0'), Src: addrPort(c.LocalAddr()), Dst: addrPort(c.RemoteAddr())}
			if h != want {
				t.Errorf("member got header %+v, want %+v", h, want)
			}
		})
	}
}

func TestIdleTimeoutClosesSilentConnections(t *testing.T) {
	be := startBackend(t, "127.0.0.1", echo)
	p, _ := newProxy(t, Config{})
	port := freePort(t)
	lb := l4LB("idle", "127.0.0.2", port, "tcp", be.addr)
	lb.Listeners[0].IdleTimeout = dur(500 * time.Millisecond)
	update(t, p, lb)
	c, err := net.Dial("tcp", vipAddr("127.0.0.2", port))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	// Traffic every 100ms keeps it open past the timeout (a late wake-up
	// of this test has 400ms before it counts as silence).
	var start time.Time
	for range 8 {
		time.Sleep(100 * time.Millisecond)
		// The proxy last hears the client after this: the silence
		// measured from here is never shorter than the real one.
		start = time.Now()
		if err := roundTrip(c, []byte("ping")); err != nil {
			t.Fatalf("active connection cut: %v", err)
		}
	}
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := c.Read(make([]byte, 1)); err == nil {
		t.Fatal("read data from an idle connection")
	}
	if d := time.Since(start); d < 450*time.Millisecond || d > 2500*time.Millisecond {
		t.Errorf("idle connection closed after %v, want about 500ms", d)
	}
}

func TestListenerConnectionLimit(t *testing.T) {
	be := startBackend(t, "127.0.0.1", echo)
	p, m := newProxy(t, Config{})
	port := freePort(t)
	lb := l4LB("limited", "127.0.0.2", port, "tcp", be.addr)
	lb.Listeners[0].MaxConnections = 1
	update(t, p, lb)
	first, err := net.Dial("tcp", vipAddr("127.0.0.2", port))
	if err != nil {
		t.Fatal(err)
	}
	defer first.Close()
	if err := roundTrip(first, []byte("one")); err != nil {
		t.Fatal(err)
	}
	expectRefused(t, vipAddr("127.0.0.2", port))
	if r := m.Report(); r.Listeners[0].Refused[RefusedListenerLimit] != 1 {
		t.Errorf("refusals %v", r.Listeners[0].Refused)
	}
	first.Close()
	eventually(t, "room again", func() bool {
		c, err := net.Dial("tcp", vipAddr("127.0.0.2", port))
		if err != nil {
			return false
		}
		defer c.Close()
		return roundTrip(c, []byte("two")) == nil
	})
}

// BenchmarkTCPForward moves bytes to a sink member directly and through
// the proxy (splice both ways), one connection per run.
func BenchmarkTCPForward(b *testing.B) {
	sink := startBackend(b, "127.0.0.1", func(c net.Conn) {
		io.Copy(io.Discard, c)
	})
	p, _ := newProxy(b, Config{})
	port := freePort(b)
	update(b, p, l4LB("bulk", "127.0.0.2", port, "tcp", sink.addr))
	chunk := make([]byte, 256<<10)
	for _, tt := range []struct{ name, addr string }{{"direct", sink.addr}, {"proxy", vipAddr("127.0.0.2", port)}} {
		b.Run(tt.name, func(b *testing.B) {
			c, err := net.Dial("tcp", tt.addr)
			if err != nil {
				b.Fatal(err)
			}
			defer c.Close()
			b.SetBytes(int64(len(chunk)))
			for b.Loop() {
				if _, err := c.Write(chunk); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

func TestUnhealthyListsLoadBalancersWithoutUsableMembers(t *testing.T) {
	be := startBackend(t, "127.0.0.1", echo)
	p, _ := newProxy(t, Config{})
	port, port2 := freePort(t), freePort(t)
	checked := l4LB("checked", "127.0.0.2", port, "tcp", be.addr)
	// The echo member does not speak HTTP: its check fails.
	checked.Pools["app"].HealthCheck = &pb.HealthCheck{Http: &pb.HTTPCheck{Path: "/"}, Interval: dur(20 * time.Millisecond), Rise: 1, Fall: 1}
	fine := l4LB("fine", "127.0.0.3", port2, "tcp", be.addr)
	update(t, p, checked, fine)
	eventually(t, "checked listed as unhealthy", func() bool {
		u := p.Unhealthy()
		return u["acme/checked"] != "" && u["acme/fine"] == ""
	})
	if ms := p.Members("acme/checked"); len(ms) != 1 || ms[0].Healthy || ms[0].Pool != "app" || ms[0].Addr.String() != be.addr {
		t.Fatalf("members of acme/checked: %+v", ms)
	}
	if ms := p.Members("acme/fine"); len(ms) != 1 || !ms[0].Healthy {
		t.Fatalf("members of acme/fine: %+v", ms)
	}
	// Back to a TCP check, which the echo member passes: no longer listed.
	// (A change is a new object: the proxy takes an unchanged pointer as
	// an unchanged load balancer.)
	checked = clone(checked)
	checked.Pools["app"].HealthCheck = &pb.HealthCheck{Tcp: &pb.TCPCheck{}, Interval: dur(20 * time.Millisecond), Rise: 1, Fall: 1}
	update(t, p, checked, fine)
	eventually(t, "checked healthy again", func() bool { return len(p.Unhealthy()) == 0 })
}

// TestEjectedPoolRecoversAtOnce: every member of a pool fails its first
// connects (a NodePort the nodes have not programmed yet) and is ejected
// for an hour; the load balancer stays ready, and the moment one member
// listens, the next connection is served and its ejection ends, while a
// member still dead stays ejected.
func TestEjectedPoolRecoversAtOnce(t *testing.T) {
	p, _ := newProxy(t, Config{Limits: Limits{EjectAfter: 1, EjectFor: time.Hour}})
	port := freePort(t)
	late, dead := deadAddr(t), deadAddr(t)
	update(t, p, l4LB("late", "127.0.0.2", port, "tcp", late, dead))
	vip := vipAddr("127.0.0.2", port)
	expectRefused(t, vip)
	pool := p.current.Load().listener(snapshot.Key{Addr: netip.MustParseAddrPort(vip), Network: snapshot.TCP}).Backend()
	for _, m := range pool.Members() {
		if st := Target(m).Status(); !st.Ejected {
			t.Fatalf("member %s not ejected after a failed connect: %+v", m.Addr, st)
		}
	}
	// Ejection alone does not make the load balancer unready here: every
	// host sees the same members fail, and the VIP must not go looking
	// for a host that has none ejected.
	if u := p.Unhealthy(); u["acme/late"] != "" {
		t.Errorf("members only ejected made acme/late unhealthy: %q", u["acme/late"])
	}
	// Nor by either readiness the VIP layer reads: the whole set, and that
	// of the load balancers a member's change touches.
	if r := p.Readiness(); r["acme/late"] != "" {
		t.Errorf("members only ejected made acme/late unready in Readiness: %q", r["acme/late"])
	}
	if r, gone := p.ReadinessOf([]string{"acme/late"}); r["acme/late"] != "" || len(gone) != 0 {
		t.Errorf("members only ejected made acme/late unready in ReadinessOf: %q (gone %v)", r["acme/late"], gone)
	}
	l, err := net.Listen("tcp", late)
	if err != nil {
		t.Fatal(err)
	}
	be := &backend{l: l, addr: late, conns: map[net.Conn]struct{}{}}
	be.wg.Go(func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go echo(c)
		}
	})
	t.Cleanup(func() { l.Close(); be.wg.Wait() })
	for i := range 5 {
		c, err := net.Dial("tcp", vip)
		if err != nil {
			t.Fatal(err)
		}
		if err := roundTrip(c, []byte("hello")); err != nil {
			t.Fatalf("connection %d after the member came up: %v", i, err)
		}
		c.Close()
	}
	for _, m := range pool.Members() {
		st := Target(m).Status()
		if m.Addr.String() == late && st.Ejected {
			t.Errorf("%s served connections but is still ejected", late)
		}
		if m.Addr.String() == dead && !st.Ejected {
			t.Errorf("%s never accepted a connection but is no longer ejected", dead)
		}
	}
}

// listenOnFailure is metrics that start a member's listener when a
// connect to it fails, as a node's rules send the next connect to another
// endpoint.
type listenOnFailure struct {
	*metrics.Memory
	t      testing.TB
	member string
	once   sync.Once
}

func (f *listenOnFailure) MemberRequest(lb, pool, member string, status int, d time.Duration) {
	f.Memory.MemberRequest(lb, pool, member, status, d)
	if member != f.member || status != StatusConnectFailed {
		return
	}
	f.once.Do(func() {
		l, err := net.Listen("tcp", member)
		if err != nil {
			f.t.Errorf("listen on %s: %v", member, err)
			return
		}
		go func() {
			for {
				c, err := l.Accept()
				if err != nil {
					return
				}
				go echo(c)
			}
		}()
		f.t.Cleanup(func() { l.Close() })
	})
}

// TestRefusedConnectIsRetried: the only member refuses the first connect
// and accepts the next (behind a NodePort, each connect may reach another
// pod): the client's connection is served, not refused.
func TestRefusedConnectIsRetried(t *testing.T) {
	member := deadAddr(t)
	m := &listenOnFailure{Memory: &metrics.Memory{}, t: t, member: member}
	p := New(Config{Metrics: m, DrainTimeout: 200 * time.Millisecond})
	t.Cleanup(func() { p.Close() })
	port := freePort(t)
	update(t, p, l4LB("again", "127.0.0.2", port, "tcp", member))
	c, err := net.Dial("tcp", vipAddr("127.0.0.2", port))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := roundTrip(c, []byte("hello")); err != nil {
		t.Fatalf("the connection was not served after one refused connect: %v", err)
	}
	ms := m.Report().Members
	if len(ms) != 1 || ms[0].ByStatus[StatusConnectFailed] != 1 || ms[0].ByStatus[StatusConnected] != 1 {
		t.Errorf("member connects %+v; want one refused, then one connected", ms)
	}
}

// TestMemberHealthPublishesTheLoadBalancersHoldingTheMember: a member
// whose check fails changes the observed state of the load balancers
// whose pools hold it (two share it), not of the others, and ReadinessOf
// them says why.
func TestMemberHealthPublishesTheLoadBalancersHoldingTheMember(t *testing.T) {
	be := startBackend(t, "127.0.0.1", echo)
	other := startBackend(t, "127.0.0.1", echo)
	p, _ := newProxy(t, Config{})
	plane := watchPlane(t, p)
	// The echo member does not speak HTTP: its check fails.
	failing := &pb.HealthCheck{Http: &pb.HTTPCheck{Path: "/"}, Interval: dur(20 * time.Millisecond), Rise: 1, Fall: 1}
	a := l4LB("a", "127.0.0.2", freePort(t), "tcp", be.addr)
	b := l4LB("b", "127.0.0.3", freePort(t), "tcp", be.addr)
	c := l4LB("c", "127.0.0.4", freePort(t), "tcp", other.addr)
	a.Pools["app"].HealthCheck, b.Pools["app"].HealthCheck = failing, failing
	update(t, p, a, b, c)
	eventually(t, "both holders observed with their member down", func() bool {
		plane.mu.Lock()
		defer plane.mu.Unlock()
		a, b := plane.state["acme/a"], plane.state["acme/b"]
		return len(a.Members) == 1 && !a.Members[0].Healthy && len(b.Members) == 1 && !b.Members[0].Healthy
	})
	if r, ok := plane.ready("acme/c"); !ok || r != "" || plane.times("acme/c") != 0 {
		t.Errorf("acme/c observed %q (seen %v), named by %d revisions after the first, though its member did not change", r, ok, plane.times("acme/c"))
	}
	ready, gone := p.ReadinessOf([]string{"acme/a", "acme/c", "acme/ghost"})
	if ready["acme/a"] == "" || ready["acme/c"] != "" || len(gone) != 1 || gone[0] != "acme/ghost" {
		t.Errorf("ReadinessOf: %q, gone %v", ready, gone)
	}
}
