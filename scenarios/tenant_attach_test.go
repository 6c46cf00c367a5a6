package scenarios

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/teapot-lb/teapot-lb/api/porttest"
)

// tenantSide is a tenant's network behind a VXLAN tunnel: a namespace
// joined to the host's namespace by a veth pair (the underlay, in
// 203.0.113.0/24) with a VXLAN device of the tenant's VNI, on which an
// echo member answers with the tenant's name on 10.0.0.10:8080. The
// namespace is also the tenant's node: a pod behind it, 10.0.1.10
// (in the node's pod range 10.0.1.0/24, which nothing routes to until
// the node's BIRD announces it), answers "pod" and the tenant's name on
// port 8080.
type tenantSide struct {
	name, ns         string
	lbVTEP, tVTEP    string // underlay addresses: the LB host's side, the tenant's
	vni, port        int
	mu               sync.Mutex
	checks, serves   int
	checkSrc, reqSrc map[string]bool
}

// newTenantSide makes the tenant's namespace; slot picks its underlay
// addresses. It skips the test where namespaces cannot be made.
func newTenantSide(t *testing.T, tag, name string, slot, vni, port int) *tenantSide {
	t.Helper()
	base := (os.Getpid()%28)*8 + slot*4
	s := &tenantSide{name: name, ns: fmt.Sprintf("h44t%s-%d", tag, os.Getpid()), vni: vni, port: port,
		lbVTEP: fmt.Sprintf("203.0.113.%d", base+1), tVTEP: fmt.Sprintf("203.0.113.%d", base+2),
		checkSrc: map[string]bool{}, reqSrc: map[string]bool{}}
	host, peer := fmt.Sprintf("h44u%s%d", tag, os.Getpid()%100000), "u0"
	_ = exec.Command("ip", "netns", "del", s.ns).Run()
	_ = exec.Command("ip", "link", "del", host).Run()
	t.Cleanup(func() {
		_ = exec.Command("ip", "netns", "del", s.ns).Run()
		_ = exec.Command("ip", "link", "del", host).Run()
	})
	in := func(args ...string) []string { return append([]string{"ip", "-n", s.ns}, args...) }
	steps := [][]string{
		{"ip", "netns", "add", s.ns},
		{"ip", "link", "add", host, "type", "veth", "peer", "name", peer, "netns", s.ns},
		{"ip", "addr", "add", s.lbVTEP + "/30", "dev", host},
		{"ip", "link", "set", host, "up"},
		in("link", "set", "lo", "up"),
		in("addr", "add", s.tVTEP+"/30", "dev", peer),
		in("link", "set", peer, "up"),
		in("link", "add", "vx0", "type", "vxlan", "id", fmt.Sprint(vni), "dstport", fmt.Sprint(port), "local", s.tVTEP, "remote", s.lbVTEP, "dev", peer),
		in("addr", "add", "10.0.0.10/24", "dev", "vx0"),
		in("link", "set", "vx0", "up"),
		in("addr", "add", attachPod+"/32", "dev", "lo"),
	}
	for _, st := range steps {
		if out, err := exec.Command(st[0], st[1:]...).CombinedOutput(); err != nil {
			msg := fmt.Sprintf("%s: %v: %s", strings.Join(st, " "), err, out)
			if os.Getenv("CI") == "true" {
				t.Fatal(msg)
			}
			unavailable(t, "needs network namespaces, veth and VXLAN (root and iproute2): %s", msg)
		}
	}
	ln, err := listenInNetns(s.ns, "10.0.0.10:8080")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(s.serve), ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { srv.Close() })
	pln, err := listenInNetns(s.ns, attachPod+":8080")
	if err != nil {
		t.Fatal(err)
	}
	pod := &http.Server{ReadHeaderTimeout: 5 * time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		io.WriteString(w, "pod "+s.name+"\n")
	})}
	go func() { _ = pod.Serve(pln) }()
	t.Cleanup(func() { pod.Close() })
	return s
}

// The tenant node's pod, its pod range, and the ASNs of the tenants'
// nodes and of the LB host.
const (
	attachPod      = "10.0.1.10"
	attachPodRange = "10.0.1.0/24"
	attachNodeASN  = 64600
	attachHostASN  = 65010
)

// startBird runs BIRD in the tenant's namespace as Calico runs it on a
// node: an eBGP session with the LB host's address in the attachment,
// 10.0.0.2, exporting the node's pod range with next hop itself; the
// session is signed with password when it is set, and has BFD (300ms ×
// 3) with bfd. It returns BIRD's process.
func (s *tenantSide) startBird(t *testing.T, dir, password string, bfd bool) *os.Process {
	t.Helper()
	auth, bfdProto := "", ""
	if password != "" {
		auth = fmt.Sprintf("password %q;", password)
	}
	if bfd {
		auth += " bfd on;"
		bfdProto = `protocol bfd { interface "*" { min rx interval 300 ms; min tx interval 300 ms; multiplier 3; }; }`
	}
	log := filepath.Join(dir, "bird-"+s.name+".log")
	conf := fmt.Sprintf(`log "%s" all;
router id 10.0.0.10;
protocol device { scan time 10; }
protocol static pods { ipv4; route %s blackhole; }
%s
protocol bgp lb {
  local 10.0.0.10 as %d;
  neighbor 10.0.0.2 as %d;
  ipv4 { import none; export all; };
  connect retry time 1; connect delay time 1; error wait time 1, 2;
  %s
}
`, log, attachPodRange, bfdProto, attachNodeASN, attachHostASN, auth)
	path := filepath.Join(dir, "bird-"+s.name+".conf")
	if err := os.WriteFile(path, []byte(conf), 0o644); err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(dir, "bird-"+s.name+".ctl")
	cmd := exec.Command("ip", "netns", "exec", s.ns, "bird", "-f", "-c", path, "-s", sock, "-P", filepath.Join(dir, "bird-"+s.name+".pid"))
	out, err := os.Create(filepath.Join(dir, "bird-"+s.name+".out"))
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdout, cmd.Stderr = out, out
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGCONT)
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		out.Close()
		if t.Failed() {
			t.Logf("---- BIRD log of %s ----\n%s", s.name, tail(log, 30))
		}
	})
	return cmd.Process
}

// attachedRoutes lists the routes of protocol 196 (the tenant BGP
// relay's) in a namespace ("" for this process's own), prefix to next
// hop.
func attachedRoutes(ns string) (map[string]string, error) {
	args := []string{"route", "show", "proto", fmt.Sprint(tenantRouteProto)}
	if ns != "" {
		args = append([]string{"-n", ns}, args...)
	}
	out, err := exec.Command("ip", args...).CombinedOutput()
	if err != nil {
		return nil, fmt.Errorf("ip %s: %v: %s", strings.Join(args, " "), err, out)
	}
	got := map[string]string{}
	for line := range strings.Lines(string(out)) {
		f := strings.Fields(line)
		if len(f) >= 3 && f[1] == "via" {
			got[f[0]] = f[2]
		}
	}
	return got, nil
}

// serve answers with the tenant's name and counts checks and requests
// with their sources.
func (s *tenantSide) serve(w http.ResponseWriter, r *http.Request) {
	src, _, _ := net.SplitHostPort(r.RemoteAddr)
	s.mu.Lock()
	if r.URL.Path == "/healthz" {
		s.checks++
		s.checkSrc[src] = true
	} else {
		s.serves++
		s.reqSrc[src] = true
	}
	s.mu.Unlock()
	io.WriteString(w, "tenant "+s.name+"\n")
}

func (s *tenantSide) counts() (checks, serves int, checkSrc, reqSrc string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	keys := func(m map[string]bool) string {
		var out []string
		for k := range m {
			out = append(out, k)
		}
		return strings.Join(out, ",")
	}
	return s.checks, s.serves, keys(s.checkSrc), keys(s.reqSrc)
}

// netnsInode returns the inode of the namespace bound at path.
func netnsInode(t *testing.T, path string) uint64 {
	t.Helper()
	var st syscall.Stat_t
	if err := syscall.Stat(path, &st); err != nil {
		t.Fatalf("namespace %s: %v", path, err)
	}
	return st.Ino
}

// logLine returns the first line of log holding every one of words ("":
// none).
func logLine(log string, words ...string) string {
	for line := range strings.Lines(log) {
		all := true
		for _, w := range words {
			all = all && strings.Contains(line, w)
		}
		if all {
			return strings.TrimSpace(line)
		}
	}
	return ""
}

// listenInNetns opens a TCP listener inside the named namespace.
func listenInNetns(ns, addr string) (net.Listener, error) {
	type res struct {
		ln  net.Listener
		err error
	}
	ch := make(chan res, 1)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread ends with the goroutine
		f, err := os.Open("/var/run/netns/" + ns)
		if err != nil {
			ch <- res{nil, err}
			return
		}
		defer f.Close()
		if err := unix.Setns(int(f.Fd()), unix.CLONE_NEWNET); err != nil {
			ch <- res{nil, fmt.Errorf("enter %s: %w", ns, err)}
			return
		}
		ln, err := net.Listen("tcp", addr)
		ch <- res{ln, err}
	}()
	r := <-ch
	return r.ln, r.err
}

// freeUDPPort returns a UDP port free on every address of this namespace.
func freeUDPPort(t *testing.T) int {
	t.Helper()
	return porttest.Pick(t, "0.0.0.0")
}

// The two tenants' VIPs (a static pool: the host only binds).
const attachVIPA, attachVIPB = "127.0.0.94", "127.0.0.95"

// TestTenantAttachments: two tenants own the same network 10.0.0.0/24,
// each behind its own VXLAN tunnel (distinct VNIs) with an echo member at
// 10.0.0.10 that answers its tenant's name. One LB host attaches each in
// a namespace of its own: each tenant's load balancer reaches only its
// own echo, and each echo's health checks come through its tenant's
// attachment (from the host's address in it). A third tenant with the
// same network and no attachment is refused; a restart adopts the
// namespaces (the same ones, by inode; none removed as a leftover) and
// removes a leftover of its own; deleting a tenant removes its namespace.
func TestTenantAttachments(t *testing.T) {
	if os.Geteuid() != 0 {
		unavailable(t, "needs root for network namespaces")
	}
	start := time.Now()
	pid := os.Getpid()
	port := freeUDPPort(t)
	vniA, vniB := 100000+pid%100000*2, 100001+pid%100000*2
	ta, tb := fmt.Sprintf("ta%d", pid), fmt.Sprintf("tb%d", pid)
	sa := newTenantSide(t, "a", ta, 0, vniA, port)
	sb := newTenantSide(t, "b", tb, 1, vniB, port)
	// A leftover of this host's from an earlier life: removed at restart.
	ghost := fmt.Sprintf("teapot-att-ghost%d", pid)
	t.Cleanup(func() {
		for _, ns := range []string{ghost, "teapot-att-" + ta, "teapot-att-" + tb} {
			_ = exec.Command("ip", "-n", ns, "link", "del", "tpx0").Run()
			_ = exec.Command("ip", "netns", "del", ns).Run()
		}
	})

	c := newCluster(t)
	start = time.Now() // the lab's time, without the build of the binary
	// The host has a bgp: section (its fabric router a closed loopback
	// port): its relay peers with the tenants' nodes.
	conf := filepath.Join(c.dir, "serve.yaml")
	closed := freeAddrs(t, 1)[0]
	_, closedPort, _ := net.SplitHostPort(closed)
	if err := os.WriteFile(conf, []byte(fmt.Sprintf("bgp:\n  asn: %d\n  router-id: 127.0.0.1\n  peers: [{ address: 127.0.0.1, asn: 65000, port: %s }]\n", attachHostASN, closedPort)), 0o600); err != nil {
		t.Fatal(err)
	}
	n := c.newNode()
	// A node id of its own: a host removes the namespaces its id owns
	// that no tenant of its wants, and other labs on this machine run
	// hosts named n1 with the same namespace directory.
	n.id = fmt.Sprintf("att%d", pid)
	c.start(n, "--config", conf)
	c.waitMember(n)
	webA, webB := freePortOn(t, attachVIPA), freePortOn(t, attachVIPB)
	// Each tenant peers with its node's BIRD (tenant a's session signed
	// with TCP MD5); /pod goes to the pod behind the node.
	// Tenant b's sessions have BFD (the defaults, 300ms × 3).
	password := map[string]string{ta: "att-s3cret"}
	manifest := func(tenant string, side *tenantSide, vip string, webPort int) string {
		auth := ""
		if p := password[tenant]; p != "" {
			auth = ", password: " + p
		}
		if tenant == tb {
			auth += ", bfd: {}"
		}
		return fmt.Sprintf(`
kind: Tenant
name: %[1]s
networks: [10.0.0.0/24, %[10]s]
pools: [att%[5]d]
attachment:
  vxlan: { vni: %[2]d, remotes: [%[3]s], port: %[4]d }
  hosts: { %[7]s: 10.0.0.2/24 }
bgp: { asn: %[9]d, peers: [10.0.0.10]%[11]s }
---
kind: LoadBalancer
name: web
tenant: %[1]s
vip: { pool: att%[5]d, address: %[8]s }
listeners: [{ port: %[6]d, protocol: http }]
routes: [{ path: /pod, pool: pod }, { path: /, pool: echo }]
pools:
  echo:
    members: ["10.0.0.10:8080"]
    healthCheck: { http: { path: /healthz }, interval: 1s }
  pod:
    members: ["%[12]s:8080"]
`, tenant, side.vni, side.tVTEP, port, pid, webPort, n.id, vip, attachNodeASN, attachPodRange, auth, attachPod)
	}
	dir := t.TempDir()
	path := filepath.Join(dir, "m.yaml")
	pool := fmt.Sprintf("kind: VIPPool\nname: att%d\ncidrs: [%s/31]\nmode: static\n", pid, attachVIPA)
	if err := os.WriteFile(path, []byte(pool+"---"+manifest(ta, sa, attachVIPA, webA)+"---"+manifest(tb, sb, attachVIPB, webB)), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := c.cli(n, "apply", "-f", path); err != nil {
		t.Fatalf("apply: %v\n%s", err, out)
	}

	getPath := func(port int, path string) (string, error) {
		vip := attachVIPA
		if port == webB {
			vip = attachVIPB
		}
		cl := http.Client{Timeout: 3 * time.Second}
		resp, err := cl.Get(fmt.Sprintf("http://%s:%d%s", vip, port, path))
		if err != nil {
			return "", err
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != 200 {
			return "", fmt.Errorf("status %d: %s", resp.StatusCode, b)
		}
		return strings.TrimSpace(string(b)), nil
	}
	get := func(port int) (string, error) { return getPath(port, "/") }
	for _, x := range []struct {
		port   int
		tenant string
	}{{webA, ta}, {webB, tb}} {
		waitFor(t, 30*time.Second, "tenant "+x.tenant+"'s echo through its load balancer", func() error {
			got, err := get(x.port)
			if err != nil {
				return err
			}
			if got != "tenant "+x.tenant {
				return errStop(fmt.Errorf("load balancer of %s answered %q: another tenant's member", x.tenant, got))
			}
			return nil
		})
	}
	t.Logf("both tenants served through their attachments %s after the host started", time.Since(start).Round(time.Millisecond))
	for range 20 {
		for _, x := range []struct {
			port   int
			tenant string
		}{{webA, ta}, {webB, tb}} {
			if got, err := get(x.port); err != nil || got != "tenant "+x.tenant {
				t.Fatalf("load balancer of %s: %q, %v", x.tenant, got, err)
			}
		}
	}
	for _, s := range []*tenantSide{sa, sb} {
		waitFor(t, 15*time.Second, "health checks of "+s.name+" through its attachment", func() error {
			checks, serves, checkSrc, reqSrc := s.counts()
			if checks == 0 {
				return errors.New("no check yet")
			}
			if checkSrc != "10.0.0.2" || reqSrc != "10.0.0.2" {
				return errStop(fmt.Errorf("checks from %q and requests from %q, want the host's address in the attachment, 10.0.0.2", checkSrc, reqSrc))
			}
			if serves < 21 {
				return errStop(fmt.Errorf("%d requests served, want 21", serves))
			}
			return nil
		})
	}
	out, err := c.cli(n, "explain", "tenant", ta)
	if err != nil || !strings.Contains(out, "teapot-att-"+ta) || !strings.Contains(out, " up") {
		t.Fatalf("explain tenant shows no attachment up: %v\n%s", err, out)
	}
	t.Logf("explain tenant %s:\n%s", ta, out)
	waitFor(t, 10*time.Second, "the attachment gauge", func() error {
		m, err := scrape(n)
		if err != nil {
			return err
		}
		up := 0
		for _, s := range m["teapot_lb_tenant_attachment_up"] {
			if (s.labels["tenant"] == ta || s.labels["tenant"] == tb) && s.value == 1 {
				up++
			}
		}
		if up != 2 {
			return fmt.Errorf("%d attachments up in /metrics, want 2: %v", up, m["teapot_lb_tenant_attachment_up"])
		}
		return nil
	})

	// Each tenant's node announces the same pod range over BGP: the
	// host's session with each is made from inside that tenant's
	// namespace (10.0.0.10 is in both), each route lands in that
	// tenant's namespace alone, and each load balancer reaches its own
	// pod behind it.
	if got, err := getPath(webA, "/pod"); err == nil {
		t.Fatalf("the pod answered %q before any route to it", got)
	}
	needTools(t, "bird")
	bgpStart := time.Now()
	sa.startBird(t, dir, password[ta], false)
	birdB := sb.startBird(t, dir, "", true)
	pods := func() error {
		for _, x := range []struct {
			port   int
			tenant string
		}{{webA, ta}, {webB, tb}} {
			got, err := getPath(x.port, "/pod")
			if err != nil {
				return err
			}
			if got != "pod "+x.tenant {
				return errStop(fmt.Errorf("load balancer of %s answered %q for its pod: another tenant's", x.tenant, got))
			}
		}
		return nil
	}
	// The routes first: a request to a pod with no route is a connect
	// failure, and three in a row eject the member for 5 s.
	routed := func() error {
		for _, tn := range []string{ta, tb} {
			got, err := attachedRoutes("teapot-att-" + tn)
			if err != nil {
				return err
			}
			if want := map[string]string{attachPodRange: "10.0.0.10"}; !mapsEqual(got, want) {
				return fmt.Errorf("teapot-att-%s has the relay's routes %v, want %v", tn, got, want)
			}
		}
		return nil
	}
	waitFor(t, 30*time.Second, "each tenant's pod range in its namespace", routed)
	t.Logf("both pod ranges installed in their namespaces %s after the BIRDs started", time.Since(bgpStart).Round(time.Millisecond))
	waitFor(t, 30*time.Second, "each tenant's pod through its load balancer, over its BGP route", pods)
	t.Logf("both tenants' pods served over their BGP routes %s after their BIRDs started", time.Since(bgpStart).Round(time.Millisecond))
	if got, err := attachedRoutes(""); err != nil || got[attachPodRange] != "" {
		t.Errorf("the host's own table has the relay's routes %v (%v): an attached tenant's route leaked", got, err)
	}
	out, err = c.cli(n, "explain", "tenant", ta)
	if err != nil || !regexpLine(out, `^\s+`+n.id+`\s+10\.0\.0\.10\s+teapot-att-`+ta+`\s+established\s`) ||
		!regexpLine(out, `10\.0\.1\.0/24\s+10\.0\.0\.10\s+10\.0\.0\.10\s+installed in teapot-att-`+ta) {
		t.Fatalf("explain tenant shows no session from the attachment: %v\n%s", err, out)
	}
	waitFor(t, 10*time.Second, "the tenants' sessions in /metrics", func() error {
		m, err := scrape(n)
		if err != nil {
			return err
		}
		for _, tn := range []string{ta, tb} {
			labels := map[string]string{"tenant": tn, "attachment": "teapot-att-" + tn}
			if got := sum(m, "teapot_lb_tenant_bgp_sessions_established", labels); got != 1 {
				return fmt.Errorf("%s: %v sessions established in /metrics, want 1", tn, got)
			}
			labels["result"] = "accepted"
			if got := sum(m, "teapot_lb_tenant_bgp_routes", labels); got != 1 {
				return fmt.Errorf("%s: %v routes accepted in /metrics, want 1", tn, got)
			}
		}
		return nil
	})
	t.Logf("BGP part of the lab took %s", time.Since(bgpStart).Round(time.Millisecond))

	// BFD: tenant b's session is up with BFD up (its sockets in b's
	// namespace); b's BIRD stopped (SIGSTOP: its TCP session stays open,
	// only BFD can tell) has its route leave b's namespace within the
	// detection time and a little, where the BGP hold time is 90 s;
	// tenant a's route stays.
	waitFor(t, 15*time.Second, "tenant "+tb+"'s BFD up in explain tenant", func() error {
		out, err := c.cli(n, "explain", "tenant", tb)
		if err != nil || !regexpLine(out, `^\s+`+n.id+`\s+10\.0\.0\.10\s+teapot-att-`+tb+`\s+established\s.*\sup since `) {
			return fmt.Errorf("%v\n%s", err, out)
		}
		return nil
	})
	if err := birdB.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	stopped := time.Now()
	waitFor(t, 10*time.Second, "tenant "+tb+"'s route withdrawn after its BIRD stopped", func() error {
		got, err := attachedRoutes("teapot-att-" + tb)
		if err != nil {
			return err
		}
		if len(got) != 0 {
			return fmt.Errorf("teapot-att-%s keeps %v", tb, got)
		}
		return nil
	})
	withdrawn := time.Since(stopped)
	load, _ := os.ReadFile("/proc/loadavg")
	t.Logf("tenant %s's route withdrawn %s after its BIRD stopped (BFD 300ms × 3; load %s)", tb, withdrawn.Round(time.Millisecond), strings.TrimSpace(string(load)))
	if withdrawn > 1500*time.Millisecond {
		t.Errorf("tenant %s's route withdrawn %s after its BIRD stopped, want under 1.5s", tb, withdrawn)
	}
	if got, err := attachedRoutes("teapot-att-" + ta); err != nil || got[attachPodRange] != "10.0.0.10" {
		t.Errorf("tenant %s's routes %v (%v) after %s's BIRD stopped", ta, got, err, tb)
	}
	out, err = c.cli(n, "explain", "tenant", tb)
	if err != nil || !strings.Contains(out, "down (control detection time expired) since") {
		t.Errorf("explain tenant after the BFD went down: %v\n%s", err, out)
	}
	if m, err := scrape(n); err != nil || sum(m, "teapot_lb_tenant_bgp_bfd_down_total", map[string]string{"tenant": tb}) != 1 {
		t.Errorf("BFD downs of %s in /metrics: %v (%v)", tb, m["teapot_lb_tenant_bgp_bfd_down_total"], err)
	}
	// BIRD goes on; the restart below dials it again at once.
	if err := birdB.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}

	// Overlapping networks without an attachment are still refused.
	plain := filepath.Join(dir, "plain.yaml")
	os.WriteFile(plain, []byte(fmt.Sprintf("kind: Tenant\nname: tc%d\nnetworks: [10.0.0.0/25]\n", pid)), 0o644)
	if out, err := c.cli(n, "apply", "-f", plain); err == nil || !strings.Contains(err.Error(), "attach both or narrow one of them") {
		t.Fatalf("a tenant overlapping attached ones without an attachment: %v\n%s", err, out)
	}

	// A restart adopts both namespaces and removes its own leftover.
	for _, st := range [][]string{
		{"ip", "netns", "add", ghost},
		{"ip", "-n", ghost, "link", "add", "tpx0", "type", "vxlan", "id", fmt.Sprint(vniB + 2), "dstport", fmt.Sprint(port)},
		{"ip", "-n", ghost, "link", "set", "tpx0", "alias", "teapot-lb host " + n.id},
	} {
		if out, err := exec.Command(st[0], st[1:]...).CombinedOutput(); err != nil {
			t.Fatalf("%s: %v: %s", strings.Join(st, " "), err, out)
		}
	}
	// The namespaces the host still wants are kept across the restart:
	// the same namespaces (inodes; each held open meanwhile, as a
	// connection in it would, so that a namespace made again cannot
	// take its number), none removed as a leftover.
	inodes, held := map[string]uint64{}, []*os.File{}
	defer func() {
		for _, f := range held {
			f.Close()
		}
	}()
	for _, tenant := range []string{ta, tb} {
		f, err := os.Open("/var/run/netns/teapot-att-" + tenant)
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, f)
		inodes[tenant] = netnsInode(t, f.Name())
	}
	if !c.stop(n) {
		t.Fatal("the host did not stop")
	}
	if _, err := os.Stat("/var/run/netns/teapot-att-" + ta); err != nil {
		t.Fatalf("the namespace did not outlive the process: %v", err)
	}
	restarted := time.Now()
	c.start(n, "--config", conf)
	c.waitMember(n)
	waitFor(t, 30*time.Second, "the leftover namespace removed at restart", func() error {
		if _, err := os.Stat("/var/run/netns/" + ghost); err == nil {
			return errors.New("still there")
		}
		return nil
	})
	waitFor(t, 30*time.Second, "both tenants served again after the restart", func() error {
		for _, x := range []struct {
			port   int
			tenant string
		}{{webA, ta}, {webB, tb}} {
			got, err := get(x.port)
			if err != nil {
				return err
			}
			if got != "tenant "+x.tenant {
				return errStop(fmt.Errorf("load balancer of %s answered %q", x.tenant, got))
			}
		}
		return nil
	})

	t.Logf("served again %s after the restart", time.Since(restarted).Round(time.Millisecond))
	log, err := os.ReadFile(n.logPath)
	if err != nil {
		t.Fatal(err)
	}
	since := string(log[bytes.LastIndex(log, []byte("==== start ")):])
	for _, tenant := range []string{ta, tb} {
		if got := netnsInode(t, "/var/run/netns/teapot-att-"+tenant); got != inodes[tenant] {
			t.Errorf("the restart made tenant %s's namespace again (inode %d, was %d)", tenant, got, inodes[tenant])
		}
		if line := logLine(since, "removed a leftover attachment", "teapot-att-"+tenant); line != "" {
			t.Errorf("the restart removed the namespace of tenant %s, still attached: %s", tenant, line)
		}
	}
	if logLine(since, "removed a leftover attachment", ghost) == "" {
		t.Errorf("no removal of the leftover %s in the log after the restart", ghost)
	}
	for _, f := range held {
		f.Close()
	}
	held = nil
	waitFor(t, 30*time.Second, "both pod ranges in their namespaces again after the restart", routed)
	waitFor(t, 30*time.Second, "both tenants' pods over their BGP routes again after the restart", pods)
	t.Logf("pods served again %s after the restart", time.Since(restarted).Round(time.Millisecond))

	// Deleting a tenant removes its namespace; the other keeps serving.
	if out, err := c.cli(n, "delete", "lb", ta+"/web"); err != nil {
		t.Fatalf("delete lb: %v\n%s", err, out)
	}
	if out, err := c.cli(n, "delete", "tenant", ta); err != nil {
		t.Fatalf("delete tenant: %v\n%s", err, out)
	}
	waitFor(t, 15*time.Second, "tenant "+ta+"'s namespace removed", func() error {
		if _, err := os.Stat("/var/run/netns/teapot-att-" + ta); err == nil {
			return errors.New("still there")
		}
		return nil
	})
	if got, err := get(webB); err != nil || got != "tenant "+tb {
		t.Fatalf("tenant %s after %s left: %q, %v", tb, ta, got, err)
	}

	// An attachment that names a host the cluster does not have is
	// refused at the API (no host would ever attach it), and the one
	// stored keeps working.
	moved := filepath.Join(dir, "moved.yaml")
	if err := os.WriteFile(moved, []byte(pool+"---"+strings.Replace(manifest(tb, sb, attachVIPB, webB), "hosts: { "+n.id+":", "hosts: { elsewhere:", 1)), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := c.cli(n, "apply", "-f", moved); err == nil || !strings.Contains(err.Error()+out, "attachment.hosts.elsewhere: elsewhere is not a host of the cluster (its hosts: "+n.id+")") {
		t.Fatalf("apply of an attachment naming no host of the cluster: %v\n%s", err, out)
	}
	if got, err := get(webB); err != nil || got != "tenant "+tb {
		t.Fatalf("tenant %s after the refused change: %q, %v", tb, got, err)
	}
	t.Logf("lab took %s", time.Since(start).Round(time.Millisecond))
}
