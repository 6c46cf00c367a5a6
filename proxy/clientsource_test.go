package proxy

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/teapot-lb/teapot-lb/api/observe"
	pb "github.com/teapot-lb/teapot-lb/api/proto/teapotv1"
	"github.com/teapot-lb/teapot-lb/proxy/clientsource"
	"github.com/teapot-lb/teapot-lb/proxy/snapshot"
)

// The client-source lab: three network namespaces on two links.
//
//	client 192.0.2.100 --- 192.0.2.1 LB host 198.51.100.1 --- 198.51.100.2 node
//	(default via the LB host)   (VIP 203.0.113.10 on lo;       (pod 203.0.113.133 on lo;
//	                             203.0.113.128/25 via the node; default via the LB host,
//	                             forwarding on)                 as the tenant routes clients)
//
// The proxy runs in the LB host's namespace: the test binary runs itself
// there (ip netns exec), so every socket it makes and the host's policy
// routing it installs are the LB host's; the client's and the pod's
// sockets are made on threads inside their namespaces.
const (
	csChildEnv  = "TEAPOT_TEST_CLIENT_SOURCE_NS" // "client-ns node-ns" in the child
	csClient    = "192.0.2.100"
	csHostLeft  = "192.0.2.1"
	csHostRight = "198.51.100.1"
	csNode      = "198.51.100.2"
	csVIP       = "203.0.113.10"
	csPod       = "203.0.113.133"
)

// TestClientSourceReachesMember: a tcp and a udp listener whose pool has
// clientSource reach a pod behind a routed node from the client's own
// address (the pod answers with the peer it saw: 192.0.2.100), while a
// pool without it reaches the pod from the LB host's address; the pool's
// health checks still come from the host and take a closed member down;
// the host's nftables table, routing rule and local route are there
// while the proxy serves and gone after it stops. Where the host cannot
// install them (no nft), or the proxy was given no ClientSource, the
// pool's connections are refused and counted as client-source, one event
// says why, and nothing is left installed.
func TestClientSourceReachesMember(t *testing.T) {
	if env := os.Getenv(csChildEnv); env != "" {
		clientSourceChild(t, env)
		return
	}
	if os.Geteuid() != 0 {
		if os.Getenv("CI") != "" {
			t.Fatal("CI: needs root for network namespaces")
		}
		t.Skip("needs root for network namespaces")
	}
	for _, tool := range []string{"ip", "nft"} {
		if _, err := exec.LookPath(tool); err != nil {
			if os.Getenv("CI") != "" {
				t.Fatalf("CI: %s is not installed (iproute2, nftables)", tool)
			}
			t.Skipf("%s is not installed (iproute2, nftables)", tool)
		}
	}
	t.Parallel()
	prefix := fmt.Sprintf("tcs%d", os.Getpid()%100000)
	cl, lb, nd := prefix+"c", prefix+"l", prefix+"n"
	ip := func(args ...string) {
		t.Helper()
		if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
			t.Fatalf("ip %s: %v: %s", strings.Join(args, " "), err, out)
		}
	}
	for _, ns := range []string{cl, lb, nd} {
		ip("netns", "add", ns)
		t.Cleanup(func() { _ = exec.Command("ip", "netns", "del", ns).Run() })
		ip("-n", ns, "link", "set", "lo", "up")
	}
	ip("link", "add", "c0", "netns", cl, "type", "veth", "peer", "name", "l0", "netns", lb)
	ip("link", "add", "l1", "netns", lb, "type", "veth", "peer", "name", "n0", "netns", nd)
	for _, a := range [][3]string{{cl, "c0", csClient + "/24"}, {lb, "l0", csHostLeft + "/24"}, {lb, "l1", csHostRight + "/24"}, {nd, "n0", csNode + "/24"},
		{lb, "lo", csVIP + "/32"}, {nd, "lo", csPod + "/32"}} {
		ip("-n", a[0], "addr", "add", a[2], "dev", a[1])
		ip("-n", a[0], "link", "set", a[1], "up")
	}
	ip("-n", cl, "route", "add", "default", "via", csHostLeft)
	// The LB host reaches the pods through the node (a route learned over
	// the tenant's BGP session, in production), and forwards: a reply
	// its policy routing did not claim would go on to the client.
	ip("-n", lb, "route", "add", "203.0.113.128/25", "via", csNode)
	if out, err := exec.Command("ip", "netns", "exec", lb, "sysctl", "-qw", "net.ipv4.ip_forward=1").CombinedOutput(); err != nil {
		t.Fatalf("sysctl: %v: %s", err, out)
	}
	// The tenant routes its clients' addresses via the LB host.
	ip("-n", nd, "route", "add", "default", "via", csHostRight)

	args := []string{"netns", "exec", lb, os.Args[0], "-test.run", "^TestClientSourceReachesMember$", "-test.count=1", "-test.v"}
	cmd := exec.Command("ip", args...)
	cmd.Env = append(os.Environ(), csChildEnv+"=/run/netns/"+cl+" /run/netns/"+nd)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	if err != nil || testing.Verbose() {
		t.Logf("in the LB host's namespace:\n%s", out.String())
	}
	if err != nil {
		t.Fatalf("the lab failed: %v", err)
	}
	if !strings.Contains(out.String(), "--- PASS: TestClientSourceReachesMember") {
		t.Fatal("the lab did not run")
	}
}

// inNS runs fn on a thread inside the network namespace at path; the
// sockets fn makes live there.
func inNS(path string, fn func() error) error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread ends with the goroutine
		f, err := os.Open(path)
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

func clientSourceChild(t *testing.T, env string) {
	clientNS, nodeNS, _ := strings.Cut(env, " ")
	// The pod: a TCP and a UDP member that answer with the peer they
	// saw, and a TCP port nothing listens on.
	var tcpL net.Listener
	var udpC net.PacketConn
	var closedPort int
	err := inNS(nodeNS, func() (err error) {
		if tcpL, err = net.Listen("tcp", csPod+":0"); err != nil {
			return err
		}
		if udpC, err = net.ListenPacket("udp", csPod+":0"); err != nil {
			return err
		}
		l, err := net.Listen("tcp", csPod+":0")
		if err != nil {
			return err
		}
		closedPort = l.Addr().(*net.TCPAddr).Port
		return l.Close()
	})
	if err != nil {
		t.Fatal(err)
	}
	defer tcpL.Close()
	defer udpC.Close()
	go func() {
		for {
			c, err := tcpL.Accept()
			if err != nil {
				return
			}
			fmt.Fprintf(c, "peer=%s\n", c.RemoteAddr())
			c.Close()
		}
	}()
	go func() {
		b := make([]byte, 512)
		for {
			_, from, err := udpC.ReadFrom(b)
			if err != nil {
				return
			}
			_, _ = udpC.WriteTo(fmt.Appendf(nil, "peer=%s\n", from), from)
		}
	}()
	tcpMember, udpMember := tcpL.Addr().String(), udpC.LocalAddr().String()
	down := fmt.Sprintf("%s:%d", csPod, closedPort)

	objs := func(lbs ...*pb.LoadBalancer) []*pb.Object {
		out := []*pb.Object{
			{Kind: &pb.Object_Tenant{Tenant: &pb.Tenant{Name: "acme", Networks: []string{"203.0.113.128/25"}}}},
			{Kind: &pb.Object_VipPool{VipPool: &pb.VIPPool{Name: "lab", Cidrs: []string{"203.0.113.0/25"}, Mode: "static"}}},
		}
		for _, lb := range lbs {
			out = append(out, &pb.Object{Kind: &pb.Object_LoadBalancer{LoadBalancer: lb}})
		}
		return out
	}
	transparent := &pb.LoadBalancer{Name: "transparent", Tenant: "acme",
		Listeners: []*pb.Listener{{Port: 8080, Protocol: "tcp", Pool: "app"}, {Port: 8053, Protocol: "udp", Pool: "dns"}},
		Pools: map[string]*pb.BackendPool{
			"app": {ClientSource: true, Members: []*pb.Member{{Address: tcpMember}, {Address: down}},
				HealthCheck: &pb.HealthCheck{Tcp: &pb.TCPCheck{}, Interval: dur(time.Second), Timeout: dur(500 * time.Millisecond), Fall: 1, Rise: 1}},
			"dns": {ClientSource: true, Members: []*pb.Member{{Address: udpMember}}},
		},
		Status: &pb.LoadBalancerStatus{Address: csVIP}}
	plain := &pb.LoadBalancer{Name: "plain", Tenant: "acme",
		Listeners: []*pb.Listener{{Port: 8081, Protocol: "tcp", Pool: "app"}},
		Pools:     map[string]*pb.BackendPool{"app": {Members: []*pb.Member{{Address: tcpMember}}}},
		Status:    &pb.LoadBalancerStatus{Address: csVIP}}

	host := clientsource.New(clientsource.Config{})
	p, m := newProxy(t, Config{ClientSource: host})
	if err := p.Update(objs(transparent, plain), 1); err != nil {
		t.Fatal(err)
	}
	if ps := p.Status()["acme/transparent"]; len(ps) > 0 {
		t.Fatalf("problems: %v", ps)
	}
	if installed(t) {
		t.Fatal("the host's pieces are installed before any connection needs them")
	}

	// The checks come from the host's address and still work: the
	// closed port goes down, the pod stays up.
	deadline := time.Now().Add(15 * time.Second)
	for {
		var up, dn bool
		for _, mh := range p.Members("acme/transparent") {
			switch mh.Addr.String() {
			case tcpMember:
				up = mh.Healthy
			case down:
				dn = !mh.Healthy
			}
		}
		if up && dn {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("health: %+v, want %s up and %s down", p.Members("acme/transparent"), tcpMember, down)
		}
		time.Sleep(100 * time.Millisecond)
	}

	wait := 3 * time.Second
	ask := func(network, port string) (string, error) {
		var line string
		err := inNS(clientNS, func() error {
			c, err := net.DialTimeout(network, net.JoinHostPort(csVIP, port), wait)
			if err != nil {
				return err
			}
			defer c.Close()
			_ = c.SetDeadline(time.Now().Add(wait))
			if network == "udp" {
				if _, err := c.Write([]byte("who\n")); err != nil {
					return err
				}
			}
			line, err = bufio.NewReader(c).ReadString('\n')
			return err
		})
		return strings.TrimSpace(line), err
	}
	peerOf := func(line string) netip.Addr {
		ap, err := netip.ParseAddrPort(strings.TrimPrefix(line, "peer="))
		if err != nil {
			return netip.Addr{}
		}
		return ap.Addr()
	}
	for range 3 { // round-robin over both members: the one down is never picked
		got, err := ask("tcp", "8080")
		if err != nil || peerOf(got).String() != csClient {
			t.Fatalf("tcp with clientSource: the pod answered %q (%v), want peer=%s:PORT", got, err, csClient)
		}
	}
	if got, err := ask("udp", "8053"); err != nil || peerOf(got).String() != csClient {
		t.Fatalf("udp with clientSource: the pod answered %q (%v), want peer=%s:PORT", got, err, csClient)
	}
	if got, err := ask("tcp", "8081"); err != nil || peerOf(got).String() != csHostRight {
		t.Fatalf("tcp without clientSource: the pod answered %q (%v), want peer=%s:PORT", got, err, csHostRight)
	}
	t.Logf("tcp and udp from the client's address, the plain pool from the host's; health: %+v", p.Members("acme/transparent"))
	if !installed(t) {
		t.Fatal("the host's pieces are not installed while the pool serves")
	}
	if n := refusedFor(m, RefusedClientSource); n != 0 {
		t.Errorf("%d connections refused as client-source", n)
	}
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	if err := host.Close(); err != nil {
		t.Fatal(err)
	}
	if installed(t) {
		t.Fatal("the host's pieces are left after Close")
	}

	// A host that cannot: no nft. The pool's connections are refused
	// with their reason, and nothing is installed.
	wait = 500 * time.Millisecond // a refused datagram gets no answer
	for _, tc := range []struct {
		name string
		cs   ClientSource
		why  string
	}{
		{"no nft", clientsource.New(clientsource.Config{NFT: "/nonexistent/nft"}), "/nonexistent/nft not found (install nftables)"},
		{"no ClientSource", nil, "this host does not dial members from clients' addresses"},
	} {
		var mu sync.Mutex
		var events []*pb.Event
		p, m := newProxy(t, Config{ClientSource: tc.cs, Events: func(e *pb.Event) { mu.Lock(); events = append(events, e); mu.Unlock() }})
		if err := p.Update(objs(transparent), 1); err != nil {
			t.Fatal(err)
		}
		got, err := ask("tcp", "8080")
		if err == nil && got != "" {
			t.Errorf("%s: the pod answered %q, want the connection refused", tc.name, got)
		}
		_, _ = ask("udp", "8053")
		// The datagram gets no answer either way: its refusal is counted
		// when the proxy reads it, which the ask's timeout does not wait for.
		for deadline := time.Now().Add(10 * time.Second); refusedFor(m, RefusedClientSource) < 2 && time.Now().Before(deadline); {
			time.Sleep(5 * time.Millisecond)
		}
		if n := refusedFor(m, RefusedClientSource); n != 2 {
			t.Errorf("%s: %d connections refused as client-source, want 2 (tcp and udp)", tc.name, n)
		}
		if installed(t) {
			t.Errorf("%s: pieces installed", tc.name)
		}
		said := func() []string {
			mu.Lock()
			defer mu.Unlock()
			var said []string
			for _, e := range events {
				if e.GetType() == observe.EventClientSourceFailed && e.GetLoadBalancer() == "acme/transparent" {
					said = append(said, e.GetMessage())
				}
			}
			return said
		}
		// One event per reason, not one per connection.
		if got := said(); len(got) != 1 || !strings.Contains(got[0], tc.why) {
			t.Errorf("%s: events %q, want one saying %q", tc.name, got, tc.why)
		}
		// Deleted, the load balancer's reason is forgotten; created
		// again, its failure is reported again.
		if err := p.Update(objs(), 2); err != nil {
			t.Fatal(err)
		}
		p.clientSourceErrs.Range(func(k, _ any) bool {
			if k.(clientSourceKey).lb == "acme/transparent" {
				t.Errorf("%s: the deleted load balancer's reason is still held (%v)", tc.name, k)
			}
			return true
		})
		if err := p.Update(objs(transparent), 3); err != nil {
			t.Fatal(err)
		}
		_, _ = ask("tcp", "8080")
		if got := said(); len(got) != 2 {
			t.Errorf("%s: %d events after the load balancer came back and failed again, want 2", tc.name, len(got))
		}
		p.Close()
	}
}

// installed reports whether the host's IPv4 pieces are all in place
// (and fails the test when only some are).
func installed(t *testing.T) bool {
	t.Helper()
	table := exec.Command("nft", "list", "table", "ip", clientsource.TableName).Run() == nil
	rules, err := netlink.RuleList(netlink.FAMILY_V4)
	if err != nil {
		t.Fatal(err)
	}
	rule := false
	for _, r := range rules {
		if r.Table == clientsource.RouteTable && r.Mark == clientsource.Mark {
			rule = true
		}
	}
	routes, err := netlink.RouteListFiltered(netlink.FAMILY_V4, &netlink.Route{Table: clientsource.RouteTable}, netlink.RT_FILTER_TABLE)
	if err != nil && !errors.Is(err, unix.ENOENT) {
		t.Fatal(err)
	}
	route := len(routes) > 0
	if table != rule || rule != route {
		t.Fatalf("partly installed: nft table %v, rule %v, local route %v", table, rule, route)
	}
	return table
}

// A load balancer's failures to dial from clients' addresses are
// remembered per family: an IPv4 connection that works does not clear an
// IPv6 failure (one event, not one a connection while both families
// come), and a pool's member of another family than the client is
// reported once until the load balancer changes, whatever works meanwhile.
func TestClientSourceFailuresByFamily(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	events := 0
	p, _ := newProxy(t, Config{Events: func(e *pb.Event) {
		if e.GetType() == observe.EventClientSourceFailed {
			mu.Lock()
			events++
			mu.Unlock()
		}
	}})
	defer p.Close()
	l := &ListenerSnapshot{Listener: &snapshot.Listener{LB: "acme/x", Name: "l", Tenant: "acme"}}
	v4, v6 := netip.MustParseAddr("192.0.2.1"), netip.MustParseAddr("2001:db8::1")
	mapped := netip.MustParseAddr("::ffff:192.0.2.1")
	noV6 := errors.New("ipv6 policy routing: operation not supported")
	want := func(n int, after string) {
		t.Helper()
		mu.Lock()
		defer mu.Unlock()
		if events != n {
			t.Fatalf("%s: %d events, want %d", after, events, n)
		}
	}
	p.clientSourceFailed(l, v6, noV6)
	want(1, "an IPv6 failure")
	for range 3 {
		p.clientSourceWorks(l.LB, v4)
		p.clientSourceWorks(l.LB, mapped)
		p.clientSourceFailed(l, v6, noV6)
	}
	want(1, "IPv4 connections that worked between IPv6 ones that failed")
	p.clientSourceWorks(l.LB, v6)
	p.clientSourceFailed(l, v6, noV6)
	want(2, "IPv6 working, then failing again")

	for range 3 {
		p.clientSourceFailed(l, v4, errOtherFamily)
		p.clientSourceWorks(l.LB, v4)
	}
	want(3, "members of another family between connections that worked")
	p.forgetClientSource(l.LB)
	p.clientSourceFailed(l, v4, errOtherFamily)
	want(4, "the load balancer changed")
}
