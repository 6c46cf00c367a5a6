package scenarios

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"google.golang.org/protobuf/encoding/protojson"

	pb "github.com/teapot-lb/teapot-lb/api/proto/teapotv1"
	"github.com/teapot-lb/teapot-lb/proxy/certs/pebbletest"
	"github.com/teapot-lb/teapot-lb/scenarios/netlab"
)

// The VIP lab: three LB hosts, a backend and a client on one bridge
// (192.0.2.0/24, 2001:db8::/64), and for BGP a router that also links an
// outside client (198.51.100.0/24, 2001:db8:c::/64).
const (
	labLBs         = 3
	labHeartbeat   = "20ms"
	labHTTPTimeout = 500 * time.Millisecond // one probe request
	labASN         = 65001
	labRouterASN   = 64512
)

// labMisses is the default, 5 (100ms), except under the race detector:
// its binaries run several times slower and pause longer, and the tests
// then run beside other packages' on a small machine, so hosts would
// take each other for dead.
var labMisses = map[bool]string{false: "5", true: "10"}[raceEnabled]

var (
	arpVIP4 = netip.MustParseAddr("192.0.2.200")
	arpVIP6 = netip.MustParseAddr("2001:db8::200")
	bgpVIP4 = netip.MustParseAddr("203.0.113.1")
	bgpVIP6 = netip.MustParseAddr("2001:db8:b::1")
)

// labManifest is what every VIP lab applies: an arp and a bgp pool, a
// tenant whose backend is the lab's backend host, and one HTTP load
// balancer per VIP.
const labManifest = `
kind: VIPPool
name: l2
cidrs: ["192.0.2.200-192.0.2.215", "2001:db8::200-2001:db8::20f"]
mode: arp
---
kind: VIPPool
name: edge
cidrs: [203.0.113.0/28, "2001:db8:b::/124"]
mode: bgp
communities: ["65000:100"]
---
kind: Tenant
name: acme
networks: [192.0.2.50/32, "2001:db8::50/128"]
pools: [l2, edge]
` + labLB + labLB6

const labLB = `
---
kind: LoadBalancer
name: %[1]s
tenant: acme
vip: { pool: %[2]s, address: "%[3]s" }
listeners: [{ port: 80, protocol: http }]
routes: [{ path: /, pool: web }]
pools: { web: { members: ["192.0.2.50:8080"] } }
`

const labLB6 = `
---
kind: LoadBalancer
name: %[4]s
tenant: acme
vip: { pool: %[2]s, address: "%[5]s" }
listeners: [{ port: 80, protocol: http }]
routes: [{ path: /, pool: web }]
pools: { web: { members: ["[2001:db8::50]:8080"] } }
`

// lbHost is one LB host of the lab and its teapot-lb process.
type lbHost struct {
	id       string
	host     *netlab.Host
	ip4, ip6 netip.Addr
	dir      string
	logPath  string
	args     []string
	proc     *netlab.Process
	// bin is the binary the host runs (empty: this tree's).
	bin string
	// started is when its process last started.
	started time.Time
}

func (n *lbHost) apiAddr() string { return n.ip4.String() + ":7443" }

func (n *lbHost) metricsAddr() string { return n.ip4.String() + ":9300" }

// scrape returns the samples of n's /metrics, fetched from the client.
func (l *vipLab) scrape(n *lbHost) (map[string][]sample, error) {
	return scrapeAddr(n.metricsAddr(), func(ctx context.Context, network, addr string) (c net.Conn, err error) {
		err = l.client.Do(func() (err error) {
			var d net.Dialer
			c, err = d.DialContext(ctx, network, addr)
			return err
		})
		return c, err
	})
}

// vipMetrics sums, over the running hosts, a VIP metric with the labels.
func (l *vipLab) vipMetrics(name string, match map[string]string) (float64, error) {
	var v float64
	for _, n := range l.lbs {
		s, err := l.scrape(n)
		if err != nil {
			continue // a host that is down
		}
		v += sum(s, name, match)
	}
	return v, nil
}

// vipLab is a running lab.
type vipLab struct {
	tb      testing.TB
	lab     *netlab.Lab
	dir     string
	bin     string
	lbs     []*lbHost
	client  *netlab.Host
	backend *netlab.Host
	router  *netlab.Host
	outside *netlab.Host
	bird    *netlab.Process
	// peb is the ACME server on the client host (labOptions.acme).
	peb *pebbletest.Pebble
	// settled is when settleRestart last waited.
	settled time.Time
}

// labOptions choose what a lab runs.
type labOptions struct {
	// bgp adds the router (BIRD with ECMP and BFD), the outside client
	// and a bgp: section on every LB host.
	bgp bool
	// teapot starts the LB cluster (false for the keepalived comparison).
	teapot bool
	// misses replaces labMisses (the heartbeats a host may miss before
	// its peers take it for dead).
	misses string
	// bin is the binary the LB hosts start with (empty: this tree's).
	bin string
	// acme runs pebble on the client host, with its DNS, and points the
	// LB hosts' ACME at it (names resolve to the client unless AddA says
	// otherwise).
	acme bool
	// args are more serve flags for every LB host.
	args []string
	// hostArgs, when set, gives more serve flags for one LB host.
	hostArgs func(n *lbHost) []string
	// beforeLB, when set, runs once the lab's hosts are made and before
	// the first LB host starts: what it starts in the background (a
	// tenant cluster) comes up while the LB cluster forms.
	beforeLB func(l *vipLab)
}

// needTools skips tb when the lab cannot run here.
func needTools(tb testing.TB, tools ...string) {
	tb.Helper()
	if err := netlab.Check(); err != nil {
		unavailable(tb, "VIP lab: %v", err)
	}
	for _, t := range tools {
		if _, err := exec.LookPath(t); err != nil {
			unavailable(tb, "VIP lab: %s is not installed (Debian packages bird2, keepalived, nftables)", t)
		}
	}
}

// newVIPLab builds the namespaces and, when asked, forms the cluster and
// applies labManifest. Everything is torn down when tb ends.
func newVIPLab(tb testing.TB, opt labOptions) *vipLab {
	tb.Helper()
	lab, err := netlab.New()
	if err != nil {
		tb.Fatal(err)
	}
	l := &vipLab{tb: tb, lab: lab, dir: tb.TempDir()}
	tb.Cleanup(func() {
		for _, n := range l.lbs {
			if n.proc != nil {
				n.proc.Kill()
				if bad := alarming(n.logPath); bad != "" {
					tb.Errorf("%s logged %q", n.id, bad)
				}
			}
		}
		if tb.Failed() {
			for _, n := range l.lbs {
				if n.proc == nil {
					continue
				}
				tb.Logf("---- log of %s, last %d lines ----\n%s", n.id, logTailLines, tail(n.logPath, logTailLines))
			}
			if l.bird != nil {
				tb.Logf("---- BIRD log ----\n%s", tail(filepath.Join(l.dir, "bird.log"), 60))
			}
			if l.peb != nil {
				tb.Logf("---- pebble ----\n%s", tail(l.peb.LogPath, 60))
			}
		}
		if err := lab.Close(); err != nil {
			tb.Errorf("clean up the lab: %v", err)
		}
	})
	must := func(err error) {
		tb.Helper()
		if err != nil {
			tb.Fatal(err)
		}
	}
	host := func(name string, addrs ...string) *netlab.Host {
		tb.Helper()
		h, err := lab.AddHost(name, addrs...)
		must(err)
		return h
	}
	l.router = host("router", "192.0.2.1/24", "2001:db8::1/64")
	l.backend = host("backend", "192.0.2.50/24", "2001:db8::50/64")
	l.client = host("client", "192.0.2.100/24", "2001:db8::100/64")
	for i := range labLBs {
		n := &lbHost{
			id:  fmt.Sprintf("n%d", i+1),
			ip4: netip.MustParseAddr(fmt.Sprintf("192.0.2.%d", 11+i)),
			ip6: netip.MustParseAddr(fmt.Sprintf("2001:db8::%d", 11+i)),
		}
		n.host = host("lb"+n.id[1:], n.ip4.String()+"/24", n.ip6.String()+"/64")
		n.dir = filepath.Join(l.dir, n.id)
		n.logPath = filepath.Join(l.dir, n.id+".log")
		must(n.host.IP("route", "add", "default", "via", "192.0.2.1"))
		must(n.host.IP("-6", "route", "add", "default", "via", "2001:db8::1"))
		l.lbs = append(l.lbs, n)
	}
	l.serveBackend()
	if opt.bgp {
		l.startRouter()
	}
	if !opt.teapot {
		return l
	}
	acme := []string{"--acme-ca", noACME}
	if opt.acme {
		l.peb = pebbletest.Start(tb, pebbletest.Options{
			HTTPPort: 80, TLSPort: 443, Addr: "192.0.2.100",
			Start: func(logPath string, env []string, bin string, args ...string) error {
				_, err := l.client.Start(logPath, env, bin, args...)
				return err
			},
			Dial: l.client.DialContext,
		})
		acme = []string{"--acme-ca", l.peb.Directory, "--acme-ca-root", l.peb.RootsFile, "--acme-email", "ops@lab.example"}
	}
	for _, n := range l.lbs {
		n.bin = opt.bin
		n.args = append([]string{"serve",
			"--data-dir", n.dir, "--node-id", n.id,
			"--raft-addr", n.ip4.String() + ":7300", "--api-addr", n.apiAddr(), "--metrics-addr", n.metricsAddr(),
			"--vip-interface", "eth0", "--heartbeat-addr", n.ip4.String() + ":7946",
			"--heartbeat-interval", labHeartbeat, "--heartbeat-misses", cmp.Or(opt.misses, labMisses),
		}, acme...)
		n.args = append(n.args, opt.args...)
		if opt.hostArgs != nil {
			n.args = append(n.args, opt.hostArgs(n)...)
		}
		if opt.bgp {
			cfg := filepath.Join(l.dir, n.id+".yaml")
			must(os.WriteFile(cfg, []byte(bgpSection(n)), 0o644))
			n.args = append(n.args, "--config", cfg)
		}
	}
	if opt.beforeLB != nil {
		opt.beforeLB(l)
	}
	// The first scenario of the process builds the binary here.
	building := time.Now()
	l.binary()
	formed := time.Now()
	if d := formed.Sub(building); d > time.Second {
		tb.Logf("teapot-lb binary built in %s", d.Round(100*time.Millisecond))
	}
	l.start(l.lbs[0])
	l.waitMember(l.lbs[0])
	for _, n := range l.lbs[1:] {
		token, err := l.cli(l.lbs[0], "cluster", "join-token")
		must(err)
		l.start(n, "--join", l.lbs[0].apiAddr(), "--token", strings.TrimSpace(token))
		l.waitMember(n)
	}
	manifest := filepath.Join(l.dir, "lab.yaml")
	must(os.WriteFile(manifest, []byte(fmt.Sprintf(labManifest, "web4", "l2", arpVIP4, "web6", arpVIP6)+
		fmt.Sprintf(labLB+labLB6, "edge4", "edge", bgpVIP4, "edge6", bgpVIP6)), 0o644))
	if _, err := l.cli(l.lbs[0], "apply", "-f", manifest); err != nil {
		tb.Fatal(err)
	}
	tb.Logf("LB cluster of %d hosts formed, its manifest applied, in %s", len(l.lbs), time.Since(formed).Round(100*time.Millisecond))
	return l
}

// bgpSection is the config file of an LB host in the BGP lab: it peers
// with the router over IPv4 and IPv6, with BFD. The host sends every
// 100ms, so the router finds it dead within 300ms; it gives the router
// 900ms, so that a stall of this process (the race detector, a busy
// machine) does not reset healthy sessions.
func bgpSection(n *lbHost) string {
	return fmt.Sprintf(`bgp:
  asn: %d
  router-id: %s
  interface: lo
  withdraw-grace: 500ms
  peers:
    - { address: 192.0.2.1, asn: %d, bfd: { enabled: true, min-tx: 100ms, min-rx: 300ms, multiplier: 3 } }
    - { address: "2001:db8::1", asn: %d, bfd: { enabled: true, min-tx: 100ms, min-rx: 300ms, multiplier: 3 } }
`, labASN, n.ip4, labRouterASN, labRouterASN)
}

// serveBackend runs an HTTP server on [::]:8080 in the backend host.
func (l *vipLab) serveBackend() {
	var ln net.Listener
	if err := l.backend.Do(func() (err error) { ln, err = net.Listen("tcp", "[::]:8080"); return err }); err != nil {
		l.tb.Fatal(err)
	}
	srv := &http.Server{
		Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			io.WriteString(w, "ok\n")
		}),
		ReadHeaderTimeout: 5 * time.Second,
	}
	go srv.Serve(ln)
	l.tb.Cleanup(func() { srv.Close() })
}

// start runs an LB host's teapot-lb with its arguments plus extra.
func (l *vipLab) start(n *lbHost, extra ...string) {
	l.tb.Helper()
	bin := n.bin
	if bin == "" {
		bin = l.binary()
	}
	p, err := n.host.Start(n.logPath, childEnv(), bin, append(append([]string{}, n.args...), extra...)...)
	if err != nil {
		l.tb.Fatal(err)
	}
	n.proc = p
	n.started = time.Now()
}

func (l *vipLab) binary() string {
	if l.bin == "" {
		l.bin = teapotBinary(l.tb)
	}
	return l.bin
}

// waitMember waits until the host has written its admin credentials.
func (l *vipLab) waitMember(n *lbHost) {
	l.tb.Helper()
	waitFor(l.tb, startTimeout, n.id+" becomes a member", func() error {
		if !n.proc.Running() {
			return errStop(fmt.Errorf("%s exited", n.id))
		}
		_, err := os.Stat(filepath.Join(n.dir, "admin.conf"))
		return err
	})
}

// cli runs a teapot-lb client command inside an LB host against its API.
func (l *vipLab) cli(n *lbHost, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), cliTimeout)
	defer cancel()
	args = append(args, "--config", filepath.Join(l.lbs[0].dir, "admin.conf"), "--server", n.apiAddr())
	cmd := exec.CommandContext(ctx, "ip", append([]string{"netns", "exec", n.host.NS, l.binary()}, args...)...)
	cmd.Env = childEnv()
	var stdout, stderr strings.Builder
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return stdout.String(), fmt.Errorf("teapot-lb %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}
	return stdout.String(), nil
}

// status returns the cluster status as n sees it.
func (l *vipLab) status(n *lbHost) (*pb.ClusterStatusResponse, error) {
	out, err := l.cli(n, "cluster", "status", "-o", "json")
	if err != nil {
		return nil, err
	}
	var st pb.ClusterStatusResponse
	if err := (protojson.UnmarshalOptions{DiscardUnknown: true}).Unmarshal([]byte(out), &st); err != nil {
		return nil, fmt.Errorf("cluster status -o json: %w: %q", err, out)
	}
	return &st, nil
}

// holders returns the LB hosts whose eth0 carries a.
func (l *vipLab) holders(a netip.Addr) ([]*lbHost, error) {
	var out []*lbHost
	for _, n := range l.lbs {
		ok, err := n.host.HasAddr("eth0", a)
		if err != nil {
			return nil, err
		}
		if ok {
			out = append(out, n)
		}
	}
	return out, nil
}

// waitHolder waits until exactly one running LB host holds a and every
// probe from the client reaches it; it returns that host.
func (l *vipLab) waitHolder(a netip.Addr, timeout time.Duration) *lbHost {
	l.tb.Helper()
	var holder *lbHost
	waitFor(l.tb, timeout, "one holder of "+a.String(), func() error {
		hs, err := l.holders(a)
		if err != nil {
			return err
		}
		var live []*lbHost
		for _, h := range hs {
			if h.proc != nil && h.proc.Running() {
				live = append(live, h)
			}
		}
		if len(live) != 1 {
			return fmt.Errorf("%d live holders", len(live))
		}
		holder = live[0]
		return l.get(a)
	})
	return holder
}

// byMAC returns the LB host with the given hardware address, or nil.
func (l *vipLab) byMAC(mac net.HardwareAddr) *lbHost {
	for _, n := range l.lbs {
		if n.host.MAC.String() == mac.String() {
			return n
		}
	}
	return nil
}

// get makes one HTTP request from the client to a:80.
func (l *vipLab) get(a netip.Addr) error {
	return httpGet(l.client, netip.AddrPortFrom(a, 80), labHTTPTimeout)
}

// httpGet makes one HTTP/1.0 request from h, on a new connection.
func httpGet(h *netlab.Host, to netip.AddrPort, timeout time.Duration) error {
	var c net.Conn
	deadline := time.Now().Add(timeout)
	err := h.Do(func() (err error) {
		d := net.Dialer{Deadline: deadline}
		c, err = d.Dial("tcp", to.String())
		return err
	})
	if err != nil {
		return err
	}
	defer c.Close()
	_ = c.SetDeadline(deadline)
	if _, err := io.WriteString(c, "GET / HTTP/1.0\r\nHost: lab\r\n\r\n"); err != nil {
		return err
	}
	b, err := io.ReadAll(c)
	if err != nil {
		return err
	}
	if !strings.HasPrefix(string(b), "HTTP/1.0 200") && !strings.HasPrefix(string(b), "HTTP/1.1 200") {
		return fmt.Errorf("answer %q", firstLine(string(b)))
	}
	return nil
}

func firstLine(s string) string {
	s, _, _ = strings.Cut(s, "\n")
	return strings.TrimSpace(s)
}

// prober sends one request every interval from a host and records the
// outcome of each; it stops after max requests or when stopped.
type prober struct {
	mu      sync.Mutex
	results []probeResult
	stop    chan struct{}
	done    chan struct{}
}

type probeResult struct {
	start, end time.Time
	err        error
}

func startProber(h *netlab.Host, to netip.AddrPort, interval time.Duration, max int) *prober {
	p := &prober{stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(p.done)
		var wg sync.WaitGroup
		defer wg.Wait()
		tick := time.NewTicker(interval)
		defer tick.Stop()
		for range max {
			wg.Go(func() {
				start := time.Now()
				err := httpGet(h, to, labHTTPTimeout)
				p.mu.Lock()
				p.results = append(p.results, probeResult{start: start, end: time.Now(), err: err})
				p.mu.Unlock()
			})
			select {
			case <-p.stop:
				return
			case <-tick.C:
			}
		}
	}()
	return p
}

// finish stops the prober and waits for the requests in flight.
func (p *prober) finish() []probeResult {
	select {
	case <-p.stop:
	default:
		close(p.stop)
	}
	<-p.done
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]probeResult(nil), p.results...)
}

// firstSuccessAfter returns when the first request started at or after t
// succeeded (false if none did).
func (p *prober) firstSuccessAfter(t time.Time) (time.Time, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	var best time.Time
	for _, r := range p.results {
		if r.err == nil && !r.start.Before(t) && (best.IsZero() || r.end.Before(best)) {
			best = r.end
		}
	}
	return best, !best.IsZero()
}

// waitRecovery waits until a request started after t succeeds and returns
// the time from t to its end.
func (p *prober) waitRecovery(tb testing.TB, t time.Time, timeout time.Duration) time.Duration {
	tb.Helper()
	var d time.Duration
	waitFor(tb, timeout, "a successful request after the failure", func() error {
		end, ok := p.firstSuccessAfter(t)
		if !ok {
			return errors.New("none yet")
		}
		d = end.Sub(t)
		return nil
	})
	return d
}

// failed counts the requests that failed.
func failed(rs []probeResult) (n int, first error) {
	for _, r := range rs {
		if r.err != nil {
			if n == 0 {
				first = r.err
			}
			n++
		}
	}
	return n, first
}

// kill ends an LB host's process with SIGKILL and, for a host death,
// unplugs its cable at the same moment. It returns the time by which
// both were done, once the process is gone.
func (l *vipLab) kill(n *lbHost, unplug bool) time.Time {
	l.tb.Helper()
	at := l.killNoWait(n, unplug)
	l.reap(n)
	return at
}

// killNoWait is kill without waiting for the process to be gone: the
// kernel may close its sockets, and the router react, well before the
// whole process is torn down and reaped (tens of milliseconds on a
// loaded machine), so a measurement that starts after the reaping
// cannot see anything sooner. Call reap after the measurement.
func (l *vipLab) killNoWait(n *lbHost, unplug bool) time.Time {
	l.tb.Helper()
	if unplug {
		if err := n.host.SetLink(false); err != nil {
			l.tb.Fatal(err)
		}
	}
	if err := n.proc.Signal(syscall.SIGKILL); err != nil {
		l.tb.Fatal(err)
	}
	// The host is dead from here on: a request that starts later cannot
	// reach it.
	return time.Now()
}

// reap waits for a killed host's process to be gone.
func (l *vipLab) reap(n *lbHost) {
	l.tb.Helper()
	if err := n.proc.Wait(10 * time.Second); err == nil || !strings.Contains(err.Error(), "killed") {
		l.tb.Fatalf("kill %s: %v", n.id, err)
	}
}

// revive plugs a host back in and restarts its process.
func (l *vipLab) revive(n *lbHost) {
	l.tb.Helper()
	if err := n.host.SetLink(true); err != nil {
		l.tb.Fatal(err)
	}
	l.start(n)
}
