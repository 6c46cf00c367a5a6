package connguard

import (
	"bufio"
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/teapot-lb/teapot-lb/api/pki"
)

// testServer is an API-port-like gRPC server: mTLS with a cluster CA
// (client certificates verified when given, as serve's), the gRPC health
// service, behind a Guard.
type testServer struct {
	g    *Guard
	addr string
	port int
	ca   *pki.CA
}

// newServer starts a server with the given limits (zero: derived).
// guarded=false serves the same without the Guard (to show what it
// changes).
func newServer(t *testing.T, lim Limits, guarded bool) *testServer {
	t.Helper()
	ca, err := pki.NewCA("test-cluster")
	if err != nil {
		t.Fatal(err)
	}
	certPEM, keyPEM, err := ca.Issue(pki.IssueRequest{Identity: pki.Identity{Role: pki.RoleNode, Name: "n1"}, Server: true, IPs: []net.IP{net.IPv4(127, 0, 0, 1)}})
	if err != nil {
		t.Fatal(err)
	}
	stls, err := pki.ServerTLS(ca.CertPEM, certPEM, keyPEM, false)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	g := New(Config{Limits: lim})
	creds := credentials.NewTLS(stls)
	var serveLn net.Listener = ln
	if guarded {
		creds, serveLn = g.Credentials(creds), g.Listener(ln)
	}
	srv := grpc.NewServer(grpc.Creds(creds))
	healthpb.RegisterHealthServer(srv, health.NewServer())
	go func() { _ = srv.Serve(serveLn) }()
	t.Cleanup(srv.Stop)
	return &testServer{g: g, addr: ln.Addr().String(), port: ln.Addr().(*net.TCPAddr).Port, ca: ca}
}

// clientTLS is the TLS config of a client with id's certificate (none
// when id is zero).
func (s *testServer) clientTLS(t *testing.T, id pki.Identity) *tls.Config {
	t.Helper()
	var certPEM, keyPEM []byte
	if id.Role != "" {
		var err error
		if certPEM, keyPEM, err = s.ca.Issue(pki.IssueRequest{Identity: id}); err != nil {
			t.Fatal(err)
		}
	}
	c, err := pki.ClientTLS(s.ca.CertPEM, certPEM, keyPEM)
	if err != nil {
		t.Fatal(err)
	}
	c.NextProtos = []string{"h2"}
	return c
}

// dialFrom dials addr from the loopback address src.
func dialFrom(ctx context.Context, src, addr string) (net.Conn, error) {
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(src)}}
	return d.DialContext(ctx, "tcp", addr)
}

// client is a gRPC client of s with id's certificate, connecting from src.
func (s *testServer) client(t *testing.T, id pki.Identity, src string) *grpc.ClientConn {
	t.Helper()
	cc, err := grpc.NewClient("passthrough:///"+s.addr,
		grpc.WithTransportCredentials(credentials.NewTLS(s.clientTLS(t, id))),
		grpc.WithContextDialer(func(ctx context.Context, addr string) (net.Conn, error) { return dialFrom(ctx, src, addr) }))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	return cc
}

// call makes one health call on cc.
func call(cc *grpc.ClientConn, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	_, err := healthpb.NewHealthClient(cc).Check(ctx, &healthpb.HealthCheckRequest{})
	return err
}

// waitFor polls cond until it holds or timeout passes.
func waitFor(t *testing.T, timeout time.Duration, what string, cond func() error) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		err := cond()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: %v after %v", what, err, timeout)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// closedWithin reports how long c stays open (reads nothing) after start,
// at most limit.
func closedWithin(c net.Conn, limit time.Duration) (time.Duration, bool) {
	start := time.Now()
	_ = c.SetReadDeadline(start.Add(limit))
	buf := make([]byte, 4096)
	for {
		if _, err := c.Read(buf); err != nil {
			ne, ok := err.(net.Error)
			return time.Since(start), !(ok && ne.Timeout())
		}
	}
}

// flood holds idle TCP connections to addr from each source, slots per
// source, and opens a new one (after a pause) whenever the server closes
// one, until stop. It counts the connections opened. Dials are paced at
// floodRate: the flood shares the test's process and two cores with the
// server, and an unpaced storm measures the CPU, not the bounds.
type flood struct {
	ctx    context.Context
	cancel context.CancelFunc
	tick   *time.Ticker
	wg     sync.WaitGroup
	opened atomic.Int64
	// paused stops opening new connections; held ones stay open.
	paused atomic.Bool
}

const (
	floodRate  = 2000                  // dials per second
	floodPause = 50 * time.Millisecond // after the server closed a slot's connection
)

func newFlood(addr string) *flood {
	ctx, cancel := context.WithCancel(context.Background())
	f := &flood{ctx: ctx, cancel: cancel, tick: time.NewTicker(time.Second / floodRate)}
	context.AfterFunc(ctx, f.tick.Stop)
	return f
}

// from starts slots connections from src.
func (f *flood) from(addr, src string, slots int) {
	for range slots {
		f.wg.Add(1)
		go func() {
			defer f.wg.Done()
			for {
				select {
				case <-f.tick.C:
				case <-f.ctx.Done():
					return
				}
				if f.paused.Load() {
					continue
				}
				if c, err := dialFrom(f.ctx, src, addr); err == nil {
					f.opened.Add(1)
					stop := context.AfterFunc(f.ctx, func() { c.Close() })
					_, _ = c.Read(make([]byte, 1)) // until the server closes it
					stop()
					c.Close()
				}
				select {
				case <-time.After(floodPause):
				case <-f.ctx.Done():
					return
				}
			}
		}()
	}
}

func (f *flood) stop() int64 {
	f.cancel()
	f.wg.Wait()
	return f.opened.Load()
}

// serverSockets counts the descriptors this process holds for
// connections accepted on port, in total and by remote IPv4 address.
//
// It lists the socket inodes of this process's descriptors, then reads
// /proc/net/tcp for their addresses, and counts each inode once. The
// kernel writes /proc/net/tcp a page per read and resumes each read at a
// (hash bucket, offset) position, so a connection opened or closed
// meanwhile in a bucket already begun shifts the rest of it: a socket is
// listed twice, or skipped (prometheus/procfs#576; under
// TestFloodIsBounded's flood one socket came out several times in one
// dump). Counted once, the sockets found were all open at one instant,
// the end of the descriptor listing: each had a descriptor before it and
// was not closed yet after it, since a closed socket is gone from the
// table or shown without an inode. So the count is at most the
// descriptors held at that instant, never more.
func serverSockets(t *testing.T, port int) (total int, bySource map[string]int) {
	t.Helper()
	inodes := map[string]bool{}
	fds, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	for _, fd := range fds {
		link, err := os.Readlink(filepath.Join("/proc/self/fd", fd.Name()))
		if ino, ok := strings.CutPrefix(link, "socket:["); err == nil && ok {
			inodes[strings.TrimSuffix(ino, "]")] = true
		}
	}
	f, err := os.Open("/proc/net/tcp")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	bySource = map[string]int{}
	seen := map[string]bool{}
	sc := bufio.NewScanner(f)
	sc.Scan() // header
	for sc.Scan() {
		fs := strings.Fields(sc.Text())
		if len(fs) < 10 || fs[3] == "0A" { // 0A: LISTEN
			continue
		}
		_, lport, _ := strings.Cut(fs[1], ":")
		if p, _ := strconv.ParseUint(lport, 16, 16); int(p) != port || !inodes[fs[9]] || seen[fs[9]] {
			continue
		}
		seen[fs[9]] = true
		rip, _, _ := strings.Cut(fs[2], ":")
		v, _ := strconv.ParseUint(rip, 16, 32)
		// /proc/net/tcp writes the address in host (little-endian) order.
		src := fmt.Sprintf("%d.%d.%d.%d", byte(v), byte(v>>8), byte(v>>16), byte(v>>24))
		total++
		bySource[src]++
	}
	return total, bySource
}
