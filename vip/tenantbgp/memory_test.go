package tenantbgp

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/osrg/gobgp/v4/pkg/apiutil"
	"github.com/osrg/gobgp/v4/pkg/packet/bgp"

	"github.com/teapot-lb/teapot-lb/api"
	"github.com/teapot-lb/teapot-lb/api/observe"
	pb "github.com/teapot-lb/teapot-lb/api/proto/teapotv1"
)

// BenchmarkRouteMemory reports what a host holds per accepted route (the
// routes sub-benchmarks: 10,000 routes from one session) and per session
// (the sessions sub-benchmarks: a tenant's api.MaxTenantBGPPeers
// sessions established, without routes), for a tenant whose routes go to
// the host's table (host) and for an attached one (attached: each session
// is carried by a tunnel from inside the tenant's namespace, and the
// routes are installed in the namespace's table).
//
// Per route: the session's Adj-RIB-In in gobgp, the relay's mirror,
// judgement and observation, and the installer's record where it keeps
// one (the host's table's does: here memRoutes' copy stands for
// kernelRoutes' record; a namespace's reads the kernel at each install). The kernel's route is not in B/route; for an attached tenant
// kernel-trie-B/route is the namespace's FIB trie alone (whole kB), and
// install-alloc-B/route what one install of the namespace allocates
// (garbage once it returns) when nothing changed.
//
// Per session: the heap and goroutine stacks it holds, its goroutines
// (tunnel-goroutines: those running the tunnel's code) and its file
// descriptors by kind. stack-B/session is rough: the runtime holds
// stacks in whole spans and keeps freed ones for reuse
// (BenchmarkTunnelMemory measures a tunnel's over 200). The speakers run in this process and their side
// of each session is counted too (the same in both spaces); what they
// hold of the routes is taken before the first reading. Run it with
// -benchtime 1x; the attached ones need root.
func BenchmarkRouteMemory(b *testing.B) {
	for _, attached := range []bool{false, true} {
		space := "host"
		if attached {
			space = "attached"
		}
		b.Run(space+"/sessions", func(b *testing.B) { routeMemory(b, attached, api.MaxTenantBGPPeers, 0) })
		b.Run(space+"/routes", func(b *testing.B) { routeMemory(b, attached, 1, 10000) })
	}
}

// routeMemory applies a tenant with k speakers, the first of which
// announces n routes, and reports what the host holds once they are
// installed (with n of 0, once every session is established).
func routeMemory(b *testing.B, attached bool, k, n int) {
	var (
		r         *Relay
		err       error
		speakers  []*tenantSpeaker
		installed func() (map[netip.Prefix]netip.Addr, error)
		tn        *pb.Tenant
		pair      nsPair
		nh        netip.Addr
	)
	if attached {
		pair = newNSPair(b, "m")
		r, err = New(Config{ASN: 65001, RouterID: "127.0.0.1", Routes: &memRoutes{}, NodeID: "lb1", Attachments: pairs{"a": pair},
			HostAddrs: func() []netip.Addr { return []netip.Addr{netip.MustParseAddr("10.0.0.1")} }})
		if err != nil {
			b.Fatal(err)
		}
		tn = attachedTenant("a", 100, "").GetTenant()
		tn.Networks = []string{"10.0.0.0/24", "10.244.0.0/16"}
		tn.Bgp.Peers = nil
		nh = netip.MustParseAddr("10.0.0.10")
		for i, a := 0, nh; i < k; i, a = i+1, a.Next() {
			if i > 0 {
				if out, err := exec.Command("ip", "-n", pair.node, "addr", "add", a.String()+"/24", "dev", "b0").CombinedOutput(); err != nil {
					b.Fatalf("%v: %s", err, out)
				}
			}
			speakers = append(speakers, &tenantSpeaker{srv: startNodeSpeakerAt(b, pair, a.String(), "10.0.0.2", "")})
			tn.Bgp.Peers = append(tn.Bgp.Peers, a.String())
		}
		installed = func() (map[netip.Prefix]netip.Addr, error) { return nsRoutesOf(pair.host) }
	} else {
		port := freePort(b)
		routes := &memRoutes{}
		r, err = New(Config{ASN: 65001, RouterID: "127.0.0.1", Routes: routes, PeerPort: port,
			HostAddrs: func() []netip.Addr { return []netip.Addr{netip.MustParseAddr("127.0.0.1")} }})
		if err != nil {
			b.Fatal(err)
		}
		tn = kubeState(0, true)[0].GetTenant()
		tn.Networks, tn.Bgp.Peers = []string{"127.0.0.2/31", "127.0.0.4/30", "127.0.0.8/29", "127.0.0.16/30", "10.244.0.0/16"}, nil
		nh = netip.MustParseAddr("127.0.0.2")
		for i, a := 0, nh; i < k; i, a = i+1, a.Next() {
			speakers = append(speakers, startTenantSpeakerAt(b, a.String(), "", port))
			tn.Bgp.Peers = append(tn.Bgp.Peers, a.String())
		}
		installed = func() (map[netip.Prefix]netip.Addr, error) { return routes.get(), nil }
	}
	tn.Bgp.MaxPrefixes = uint32(max(n, 1))
	defer r.Close()
	if n > 0 {
		if _, err := speakers[0].srv.AddPath(apiutil.AddPathRequest{Paths: podRoutes(n, nh)}); err != nil {
			b.Fatal(err)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go r.Run(ctx)
	before := takeUse(b)
	for b.Loop() {
		r.Update([]*pb.Object{{Kind: &pb.Object_Tenant{Tenant: tn}}})
		deadline := time.Now().Add(60 * time.Second)
		for {
			var what string
			if n == 0 {
				up := established(r, tn.Name)
				what = fmt.Sprintf("%d of %d sessions established", up, k)
				if up >= k {
					break
				}
			} else {
				got, err := installed()
				what = fmt.Sprintf("%d of %d routes installed (%v)", len(got), n, err)
				if len(got) >= n {
					break
				}
			}
			if time.Now().After(deadline) {
				b.Fatalf("after 60 s: %s", what)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	if n == 0 {
		// A tunnel's goroutines and sockets are made as its session
		// comes up: take them once they stay.
		time.Sleep(time.Second)
	}
	after := takeUse(b)
	if n > 0 {
		b.ReportMetric(float64(after.heap-before.heap)/float64(n), "B/route")
		if attached {
			if kb, err := trieKB(pair.host); err == nil {
				b.ReportMetric(float64(kb<<10)/float64(n), "kernel-trie-B/route")
			} else {
				b.Errorf("the namespace's FIB trie: %v", err)
			}
			routes, err := installed()
			if err != nil {
				b.Fatal(err)
			}
			var m0, m1 runtime.MemStats
			runtime.ReadMemStats(&m0)
			if failed := (nsRoutes{att: pairs{"a": pair}, tenant: "a"}).Set(routes); len(failed) > 0 {
				b.Fatalf("install: %v", failed)
			}
			runtime.ReadMemStats(&m1)
			b.ReportMetric(float64(m1.TotalAlloc-m0.TotalAlloc)/float64(n), "install-alloc-B/route")
		}
		return
	}
	per := func(v int64) float64 { return float64(v) / float64(k) }
	b.ReportMetric(per(after.heap-before.heap), "heap-B/session")
	b.ReportMetric(per(after.stack-before.stack), "stack-B/session")
	b.ReportMetric(per(int64(after.goroutines-before.goroutines)), "goroutines/session")
	b.ReportMetric(per(int64(after.tunnel-before.tunnel)), "tunnel-goroutines/session")
	b.ReportMetric(per(int64(after.sockets-before.sockets)), "sockets/session")
	b.ReportMetric(per(int64(after.pipes-before.pipes)), "pipe-fds/session")
}

// podRoutes are n /32s in 10.244.0.0/16 via nh.
func podRoutes(n int, nh netip.Addr) []*apiutil.Path {
	attr, _ := bgp.NewPathAttributeNextHop(nh)
	paths := make([]*apiutil.Path, 0, n)
	for i := range n {
		nlri, _ := bgp.NewIPAddrPrefix(netip.PrefixFrom(netip.AddrFrom4([4]byte{10, 244, byte(i / 250), byte(1 + i%250)}), 32))
		paths = append(paths, &apiutil.Path{Family: bgp.RF_IPv4_UC, Nlri: nlri,
			Attrs: []bgp.PathAttributeInterface{bgp.NewPathAttributeOrigin(bgp.BGP_ORIGIN_ATTR_TYPE_IGP), attr}})
	}
	return paths
}

// established counts the tenant's established sessions.
func established(r *Relay, tenant string) int {
	var h pb.HostObservation
	r.Observe(observe.Filter{Tenant: tenant}, &h)
	up := 0
	for _, o := range h.GetTenantBgp() {
		for _, s := range o.GetSessions() {
			if s.GetState() == "established" {
				up++
			}
		}
	}
	return up
}

// use is what the process holds: heap and goroutine stacks in bytes, its
// goroutines (tunnel: those running a tunnel's code) and its open
// sockets and pipes.
type use struct {
	heap, stack        int64
	goroutines, tunnel int
	sockets, pipes     int
}

func takeUse(b *testing.B) use {
	b.Helper()
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	u := use{heap: int64(m.HeapAlloc), stack: int64(m.StackInuse), goroutines: runtime.NumGoroutine()}
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			buf = buf[:n]
			break
		}
		buf = make([]byte, 2*len(buf))
	}
	for _, g := range bytes.Split(buf, []byte("\n\n")) {
		if bytes.Contains(g, []byte("tenantbgp.(*tunnel)")) {
			u.tunnel++
		}
	}
	fds, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		b.Fatal(err)
	}
	for _, fd := range fds {
		l, err := os.Readlink(filepath.Join("/proc/self/fd", fd.Name()))
		switch {
		case err != nil:
		case strings.HasPrefix(l, "socket:"):
			u.sockets++
		case strings.HasPrefix(l, "pipe:"):
			u.pipes++
		}
	}
	return u
}

// trieKB is the size of the main table's FIB trie in a namespace, in kB,
// as /proc/thread-self/net/fib_triestat gives it on a thread there.
func trieKB(ns string) (int64, error) {
	var kb int64 = -1
	err := inNetns(ns, func() error {
		f, err := os.Open("/proc/thread-self/net/fib_triestat")
		if err != nil {
			return err
		}
		defer f.Close()
		main := false
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			line := sc.Text()
			switch {
			case line == "Main:":
				main = true
			case main && strings.HasPrefix(line, "Total size:"):
				v, err := strconv.ParseInt(strings.Fields(line)[2], 10, 64)
				if err != nil {
					return err
				}
				kb = v
				return nil
			}
		}
		return sc.Err()
	})
	if err == nil && kb < 0 {
		err = fmt.Errorf("no size of the main table in fib_triestat")
	}
	return kb, err
}

// BenchmarkTunnelMemory reports what the tunnel of one attached session
// holds while it carries the session: heap, goroutine stacks, goroutines
// and file descriptors by kind, over what the same connection holds made
// straight to the speaker. It opens 200 tunnels whose tenant side is
// dialled in this namespace (the code is the product's; in it, the dial
// is made from a thread in the tenant's namespace, the sockets living on
// there), and sends a message each way through each before reading.
// Run it with -benchtime 1x.
func BenchmarkTunnelMemory(b *testing.B) {
	const k = 200
	speaker, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	defer speaker.Close()
	accepted := make(chan net.Conn, 2*k)
	go func() {
		for {
			c, err := speaker.Accept()
			if err != nil {
				return
			}
			accepted <- c
		}
	}()
	remote := netip.MustParseAddrPort(speaker.Addr().String())
	local := netip.MustParseAddr("127.77.0.250")
	secret := newLoopbackSecret()
	var held []net.Conn
	defer func() {
		for _, c := range held {
			c.Close()
		}
	}()
	// connect makes k sessions, through tunnels when tunnels is set, and
	// sends a message each way on each.
	connect := func(tunnels bool) {
		for range k {
			addr := remote
			var d net.Dialer
			if tunnels {
				tun, err := openTunnel(hostDial{}, "t", local, remote, "", secret, 0)
				if err != nil {
					b.Fatal(err)
				}
				b.Cleanup(tun.close)
				addr = netip.AddrPortFrom(local, tun.port())
				d = net.Dialer{LocalAddr: &net.TCPAddr{IP: local.AsSlice()},
					Control: func(_, _ string, rc syscall.RawConn) error { return setMD5(rc, local, secret) }}
			}
			c, err := d.Dial("tcp", addr.String())
			if err != nil {
				b.Fatal(err)
			}
			var s net.Conn
			select {
			case s = <-accepted:
			case <-time.After(10 * time.Second):
				b.Fatal("the speaker accepted no connection")
			}
			held = append(held, c, s)
			for _, p := range [][2]net.Conn{{c, s}, {s, c}} {
				if _, err := p[0].Write([]byte("open")); err != nil {
					b.Fatal(err)
				}
				if _, err := io.ReadFull(p[1], make([]byte, 4)); err != nil {
					b.Fatal(err)
				}
			}
		}
	}
	var direct, through [2]use
	for b.Loop() {
		direct[0] = takeUse(b)
		connect(false)
		direct[1] = takeUse(b)
		through[0] = takeUse(b)
		connect(true)
		time.Sleep(100 * time.Millisecond) // the copies of the last tunnel start
		through[1] = takeUse(b)
	}
	tunnel := func(f func(use) int64) float64 {
		return float64((f(through[1])-f(through[0]))-(f(direct[1])-f(direct[0]))) / k
	}
	b.ReportMetric(tunnel(func(u use) int64 { return u.heap }), "heap-B/tunnel")
	b.ReportMetric(tunnel(func(u use) int64 { return u.stack }), "stack-B/tunnel")
	b.ReportMetric(tunnel(func(u use) int64 { return int64(u.goroutines) }), "goroutines/tunnel")
	b.ReportMetric(tunnel(func(u use) int64 { return int64(u.tunnel) }), "tunnel-goroutines/tunnel")
	b.ReportMetric(tunnel(func(u use) int64 { return int64(u.sockets) }), "sockets/tunnel")
	b.ReportMetric(tunnel(func(u use) int64 { return int64(u.pipes) }), "pipe-fds/tunnel")
}
