package scenarios

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/teapot-lb/teapot-lb/api/porttest"
)

// lifeLB is a load balancer of the lifecycle scenarios: a TCP echo
// listener and an HTTPS listener with an uploaded certificate, on a VIP
// allocated from a static loopback pool (every host binds it; on one
// machine the first host to bind a port serves it).
type lifeLB struct {
	vipCIDR  string // the pool
	echoPort int
	tlsPort  int
	udpPort  int
	udpEcho  string
	echo     string // backend addresses
	web      string
	cert     *x509.Certificate
	certFile string
	keyFile  string
}

func newLifeLB(t *testing.T, vipCIDR string) *lifeLB {
	t.Helper()
	l := &lifeLB{vipCIDR: vipCIDR}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() { defer c.Close(); io.Copy(c, c) }()
		}
	}()
	l.echo = ln.Addr().String()
	hl, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "restored-ok") })}
	go srv.Serve(hl)
	t.Cleanup(func() { srv.Close() })
	l.web = hl.Addr().String()
	l.echoPort, l.tlsPort, l.udpPort = freePort(t), freePort(t), freePort(t)
	uc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { uc.Close() })
	go func() {
		buf := make([]byte, 2048)
		for {
			n, from, err := uc.ReadFrom(buf)
			if err != nil {
				return
			}
			uc.WriteTo(buf[:n], from)
		}
	}()
	l.udpEcho = uc.LocalAddr().String()
	l.certFile, l.keyFile = selfSignedFiles(t, t.TempDir(), "www.life.example")
	data, err := os.ReadFile(l.certFile)
	if err != nil {
		t.Fatal(err)
	}
	block, _ := pem.Decode(data)
	if l.cert, err = x509.ParseCertificate(block.Bytes); err != nil {
		t.Fatal(err)
	}
	return l
}

func freePort(t *testing.T) int {
	t.Helper()
	return porttest.Pick(t)
}

// setup writes the pool, the tenant, the certificate and the load balancer.
func (l *lifeLB) setup(t *testing.T, c *cluster, via *node) {
	t.Helper()
	base := fmt.Sprintf(`
kind: VIPPool
name: life
cidrs: [%s]
mode: static
---
kind: Tenant
name: life
domains: [life.example]
networks: [127.0.0.1/32]
pools: [life]
`, l.vipCIDR)
	lb := fmt.Sprintf(`
kind: LoadBalancer
name: web
tenant: life
vip: { pool: life }
listeners:
  - { port: %d, protocol: tcp, pool: echo }
  - { port: %d, protocol: https, tls: { certificates: [web] } }
  - { port: %d, protocol: udp, pool: udpecho }
routes: [{ host: www.life.example, path: /, pool: web }]
pools:
  echo: { members: ["%s"] }
  web: { members: ["%s"] }
  udpecho: { members: ["%s"] }
`, l.echoPort, l.tlsPort, l.udpPort, l.echo, l.web, l.udpEcho)
	dir := t.TempDir()
	for i, doc := range []string{base, lb} {
		path := filepath.Join(dir, fmt.Sprintf("%d.yaml", i))
		if err := os.WriteFile(path, []byte(doc), 0o644); err != nil {
			t.Fatal(err)
		}
		if i == 1 {
			if _, err := c.cli(via, "cert", "upload", "web", "--tenant", "life", "--cert", l.certFile, "--key", l.keyFile); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := c.cli(via, "apply", "-f", path); err != nil {
			t.Fatal(err)
		}
	}
}

// vip returns the load balancer's allocated address.
func (l *lifeLB) vip(t *testing.T, c *cluster, via *node) string {
	t.Helper()
	var addr string
	waitFor(t, startTimeout, "the load balancer's VIP", func() error {
		out, err := c.cli(via, "get", "lb", "life/web", "-o", "json")
		if err != nil {
			return err
		}
		var doc struct {
			Status struct {
				Address string `json:"address"`
			} `json:"status"`
		}
		if err := json.Unmarshal([]byte(out), &doc); err != nil {
			return fmt.Errorf("%w: %s", err, out)
		}
		if doc.Status.Address == "" {
			return fmt.Errorf("no address yet: %s", out)
		}
		addr = doc.Status.Address
		return nil
	})
	return addr
}

// echoOnce sends a line through the VIP's TCP listener and reads it back.
func (l *lifeLB) echoOnce(vip string) error {
	conn, err := net.DialTimeout("tcp", net.JoinHostPort(vip, fmt.Sprint(l.echoPort)), 2*time.Second)
	if err != nil {
		return err
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(3 * time.Second))
	msg := []byte("ping " + time.Now().String() + "\n")
	if _, err := conn.Write(msg); err != nil {
		return err
	}
	got := make([]byte, len(msg))
	if _, err := io.ReadFull(conn, got); err != nil {
		return err
	}
	if !bytes.Equal(got, msg) {
		return fmt.Errorf("echo returned %q", got)
	}
	return nil
}

// udpOnce sends a datagram through the VIP's UDP listener and waits for
// its echo (one retry: UDP may drop a datagram).
func (l *lifeLB) udpOnce(vip string) error {
	conn, err := net.Dial("udp", net.JoinHostPort(vip, fmt.Sprint(l.udpPort)))
	if err != nil {
		return err
	}
	defer conn.Close()
	msg := []byte("udp " + time.Now().String())
	buf := make([]byte, 2048)
	for range 2 {
		conn.SetDeadline(time.Now().Add(time.Second))
		if _, err = conn.Write(msg); err != nil {
			continue
		}
		var n int
		if n, err = conn.Read(buf); err == nil {
			if !bytes.Equal(buf[:n], msg) {
				return fmt.Errorf("udp echo returned %q", buf[:n])
			}
			return nil
		}
	}
	return fmt.Errorf("udp: %w", err)
}

// httpsOnce fetches / over the VIP's HTTPS listener and checks that the
// uploaded certificate is the one served.
func (l *lifeLB) httpsOnce(vip string) error {
	pool := x509.NewCertPool()
	pool.AddCert(l.cert)
	tr := &http.Transport{
		TLSClientConfig: &tls.Config{ServerName: "www.life.example", RootCAs: pool},
		DialContext: func(ctx context.Context, network, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, network, net.JoinHostPort(vip, fmt.Sprint(l.tlsPort)))
		},
	}
	defer tr.CloseIdleConnections()
	cl := &http.Client{Transport: tr, Timeout: 5 * time.Second}
	resp, err := cl.Get("https://www.life.example/")
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 || string(body) != "restored-ok" {
		return fmt.Errorf("status %d body %q", resp.StatusCode, body)
	}
	return nil
}

// cliConf runs the CLI against n with the admin config conf.
func (c *cluster) cliConf(conf string, n *node, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), cliTimeout)
	defer cancel()
	args = append(args, "--config", conf, "--server", n.apiAddr)
	cmd := exec.CommandContext(ctx, c.bin, args...)
	cmd.Env = childEnv()
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return stdout.String(), fmt.Errorf("teapot-lb %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}
	return stdout.String(), nil
}

// A backup taken through a follower while writes go on holds every write
// acknowledged before it; restored into fresh hosts, the new cluster has
// every object, the certificate and the CA (old admin credentials work),
// and serves the same VIP with the same certificate.
func TestBackupUnderWritesAndRestoreIntoFreshHosts(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: starts teapot-lb processes")
	}
	parallelScenario(t)
	raceHosts(t) // a backup under writes
	c := newCluster(t)
	c.start3()
	lb := newLifeLB(t, "127.0.0.90/31")
	leader := c.waitLeader()
	lb.setup(t, c, leader)
	vip := lb.vip(t, c, leader)
	waitFor(t, startTimeout, "traffic through the VIP", func() error { return lb.echoOnce(vip) })
	if _, err := c.cli(leader, "tenant", "revoke-credentials", "life", "0a1b2c"); err != nil {
		t.Fatal(err)
	}
	var follower *node
	for _, n := range c.nodes {
		if n != leader {
			follower = n
		}
	}

	w := startWriter(c, 1, []*node{leader})
	start := time.Now()
	w.waitAcks(t, 5, start)
	w.mu.Lock()
	ackedBefore := append([]string{}, w.acked...)
	w.mu.Unlock()
	dir := t.TempDir()
	file, pass := filepath.Join(dir, "cluster.backup"), filepath.Join(dir, "pass")
	if err := os.WriteFile(pass, []byte("a long passphrase\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	began := time.Now()
	out, err := c.cli(follower, "cluster", "backup", "-f", file, "--passphrase-file", pass)
	if err != nil {
		t.Fatal(err)
	}
	took := time.Since(began)
	w.waitAcks(t, 3, time.Now()) // writes go on after the backup
	w.stop()
	t.Logf("backup through follower %s under writes: %s in %s", follower.id, strings.TrimSpace(out), took.Round(time.Millisecond))
	fi, err := os.Stat(file)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o600 {
		t.Fatalf("backup file mode %v, want 0600", fi.Mode().Perm())
	}
	if data, _ := os.ReadFile(file); bytes.Contains(data, []byte("life.example")) || bytes.Contains(data, []byte("PRIVATE KEY")) {
		t.Fatal("the encrypted backup shows its contents")
	}
	wantObjects := map[string]string{}
	for _, kind := range []string{"pool", "tenant", "lb"} {
		o, err := c.cli(leader, "get", kind, "-o", "json")
		if err != nil {
			t.Fatal(err)
		}
		wantObjects[kind] = o
	}
	oldConf := filepath.Join(dir, "old-admin.conf")
	conf, err := os.ReadFile(c.adminConf())
	if err != nil {
		t.Fatal(err)
	}
	os.WriteFile(oldConf, conf, 0o600)

	// The old cluster is gone for good.
	for _, n := range c.nodes {
		c.stop(n)
	}

	r := newCluster(t)
	r1 := r.newNode()
	// Without the passphrase, the restore is refused with a clear message.
	noPassCtx, cancelNoPass := context.WithTimeout(context.Background(), time.Minute)
	defer cancelNoPass()
	noPass := exec.CommandContext(noPassCtx, r.bin, "serve", "--data-dir", r1.dir, "--node-id", r1.id, "--raft-addr", r1.raftAddr, "--api-addr", r1.apiAddr, "--restore", file)
	if msg, err := noPass.CombinedOutput(); err == nil || !strings.Contains(string(msg), "--restore-passphrase-file") {
		t.Fatalf("restore without the passphrase: %v\n%s", err, msg)
	}
	restoreAt := time.Now()
	r.start(r1, "--restore", file, "--restore-passphrase-file", pass)
	r.waitMember(r1)
	t.Logf("restored host serving %s after start", time.Since(restoreAt).Round(time.Millisecond))
	r.join(r1)
	r.join(r1)
	r.waitHealthy(r1, 3)

	// Every tenant acknowledged before the backup is back.
	have, err := r.tenantNames(r1)
	if err != nil {
		t.Fatal(err)
	}
	if lacking := missing(ackedBefore, have); len(lacking) > 0 {
		t.Fatalf("restored cluster lacks %d tenants acknowledged before the backup: %v", len(lacking), lacking)
	}
	// The objects as they were (tenants written after the backup aside).
	for kind, want := range wantObjects {
		got, err := r.cli(r1, "get", kind, "-o", "json")
		if err != nil {
			t.Fatal(err)
		}
		if kind != "tenant" && withoutStatus(t, got) != withoutStatus(t, want) {
			t.Errorf("get %s after restore:\n%s\nbefore:\n%s", kind, got, want)
		}
	}
	tn, err := r.cli(r1, "get", "tenant", "life", "-o", "json")
	if err != nil || !strings.Contains(tn, "0a1b2c") {
		t.Errorf("the revoked credential is not restored: %v\n%s", err, tn)
	}
	certs, err := r.cli(r1, "cert", "list", "--tenant", "life")
	if err != nil || !strings.Contains(certs, "web") {
		t.Errorf("cert list after restore: %v\n%s", err, certs)
	}
	// Credentials signed by the old cluster's CA work against the new one.
	if _, err := r.cliConf(oldConf, r.nodes[1], "get", "pool"); err != nil {
		t.Errorf("the old admin credentials do not work on the restored cluster: %v", err)
	}
	if got := lb.vip(t, r, r1); got != vip {
		t.Errorf("restored VIP %s, was %s", got, vip)
	}
	waitFor(t, startTimeout, "TCP through the restored VIP", func() error { return lb.echoOnce(vip) })
	waitFor(t, startTimeout, "HTTPS with the restored certificate", func() error { return lb.httpsOnce(vip) })
	// And the restored cluster takes writes.
	if _, err := r.cli(r.nodes[2], "tenant", "create", "after-restore"); err != nil {
		t.Fatal(err)
	}
}

// withoutStatus drops what hosts observe (status) from a JSON list of
// objects, leaving the desired state and its meta.
func withoutStatus(t *testing.T, list string) string {
	t.Helper()
	var objs []map[string]any
	if err := json.Unmarshal([]byte(list), &objs); err != nil {
		t.Fatalf("%v: %s", err, list)
	}
	for _, o := range objs {
		if st, ok := o["status"].(map[string]any); ok {
			o["status"] = map[string]any{"address": st["address"]}
		}
	}
	out, _ := json.Marshal(objs)
	return string(out)
}

// vipProber checks the VIP every interval with a new TCP connection, a UDP
// datagram and a request on a kept-alive HTTPS connection, and records the
// failures.
type vipProber struct {
	quit chan struct{}
	done chan struct{}
	mu   sync.Mutex
	ok   int
	fail []time.Time
	last error
}

func startVIPProber(t *testing.T, lb *lifeLB, vip string, every time.Duration) *vipProber {
	p := &vipProber{quit: make(chan struct{}), done: make(chan struct{})}
	// One HTTPS client whose keep-alive connection lives across probes.
	pool := x509.NewCertPool()
	pool.AddCert(lb.cert)
	tr := &http.Transport{
		TLSClientConfig: &tls.Config{ServerName: "www.life.example", RootCAs: pool},
		DialContext: func(ctx context.Context, network, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, network, net.JoinHostPort(vip, fmt.Sprint(lb.tlsPort)))
		},
	}
	keepAlive := &http.Client{Transport: tr, Timeout: 5 * time.Second}
	get := func() error {
		resp, err := keepAlive.Get("https://www.life.example/")
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != 200 || string(body) != "restored-ok" {
			return fmt.Errorf("https status %d body %q", resp.StatusCode, body)
		}
		return nil
	}
	go func() {
		defer close(p.done)
		defer tr.CloseIdleConnections()
		for {
			select {
			case <-p.quit:
				return
			case <-time.After(every):
			}
			for _, probe := range []func() error{func() error { return lb.echoOnce(vip) }, func() error { return lb.udpOnce(vip) }, get} {
				err := probe()
				p.mu.Lock()
				if err != nil {
					p.fail = append(p.fail, time.Now())
					p.last = err
				} else {
					p.ok++
				}
				p.mu.Unlock()
			}
		}
	}()
	t.Cleanup(p.stop)
	return p
}

func (p *vipProber) stop() {
	select {
	case <-p.quit:
	default:
		close(p.quit)
	}
	<-p.done
}

// failures returns the failures between from and to, and the successes so far.
func (p *vipProber) failures(from, to time.Time) (int, int, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := 0
	for _, at := range p.fail {
		if !at.Before(from) && !at.After(to) {
			n++
		}
	}
	return n, p.ok, p.last
}

// Two of three hosts die for good. The survivor's data plane keeps serving
// the last committed state while no write can commit; `cluster recover`
// makes it a one-host cluster while it runs (not one probe through it may
// fail), two new hosts join, and writes resume. Reports the time from the
// recover start to the first write.
func TestLostMajorityRecoverAndRejoin(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: starts teapot-lb processes")
	}
	c := newCluster(t)
	survivor := c.bootstrap()
	lb := newLifeLB(t, "127.0.0.92/31")
	// The load balancer exists before the other hosts join, so the
	// survivor is the host that binds the VIP's ports on this machine.
	lb.setup(t, c, survivor)
	vip := lb.vip(t, c, survivor)
	waitFor(t, startTimeout, "traffic through the VIP", func() error { return lb.echoOnce(vip) })
	lost := []*node{c.join(survivor), c.join(survivor)}
	c.waitHealthy(survivor, 3)
	if _, err := c.cli(lost[0], "tenant", "create", "before-loss"); err != nil {
		t.Fatal(err)
	}
	c.waitCaughtUp(survivor, 3)

	p := startVIPProber(t, lb, vip, 20*time.Millisecond)
	killedAt := time.Now()
	for _, n := range lost {
		c.kill(n)
	}
	// No quorum: writes fail, reads of the local state and traffic go on.
	waitFor(t, startTimeout, "writes to fail without a majority", func() error {
		_, err := c.cli(survivor, "tenant", "create", "during-loss", "--timeout", "2s")
		if err == nil {
			return errors.New("a write committed with two of three voters dead")
		}
		return nil
	})
	time.Sleep(3 * time.Second)
	lostFor := time.Since(killedAt)
	if n, ok, last := p.failures(killedAt, time.Now()); n > 0 || ok == 0 {
		t.Fatalf("traffic on the survivor while the majority was lost: %d failures, %d successes (last error %v)", n, ok, last)
	}
	_, okLost, _ := p.failures(killedAt, time.Now())
	t.Logf("majority lost for %s: %d probes through the survivor (TCP, UDP, HTTPS keep-alive), 0 failed", lostFor.Round(time.Millisecond), okLost)

	// Recover: the survivor becomes a one-host cluster while it runs.
	recoverAt := time.Now()
	out, err := c.cli(survivor, "cluster", "recover", "--yes")
	if err != nil {
		t.Fatalf("cluster recover: %v: %s", err, out)
	}
	t.Logf("%s (%s)", strings.TrimSpace(out), time.Since(recoverAt).Round(time.Millisecond))
	var firstWrite time.Time
	waitFor(t, startTimeout, "the first write after --recover", func() error {
		if !survivor.running() {
			return errStop(errors.New("the survivor exited"))
		}
		if _, err := c.cli(survivor, "tenant", "create", "after-recover", "--timeout", "2s"); err != nil {
			return err
		}
		firstWrite = time.Now()
		return nil
	})
	servingAgain := time.Now()
	gap, okAll, last := p.failures(recoverAt, servingAgain)
	t.Logf("recover → first acknowledged write: %s; %d probes through the survivor failed meanwhile (%d worked since the prober started)",
		firstWrite.Sub(recoverAt).Round(time.Millisecond), gap, okAll)
	if gap > 0 {
		t.Fatalf("%d probes through the survivor failed during the recovery (last error %v); its data plane must not stop", gap, last)
	}

	st := c.waitHealthy(survivor, 1)
	if st.GetLeaderId() != survivor.id {
		t.Fatalf("leader %q after recovery", st.GetLeaderId())
	}
	fresh := []*node{c.join(survivor), c.join(survivor)}
	c.waitHealthy(survivor, 3)
	if _, err := c.cli(fresh[1], "tenant", "create", "after-rejoin"); err != nil {
		t.Fatal(err)
	}
	have, err := c.tenantNames(fresh[0])
	if err != nil {
		t.Fatal(err)
	}
	if lacking := missing([]string{"life", "before-loss", "after-recover", "after-rejoin"}, have); len(lacking) > 0 {
		t.Fatalf("%s lacks %v", fresh[0].id, lacking)
	}
	// A write that timed out while the majority was lost had an unknown
	// outcome: the survivor keeps its whole log, so it may exist now.
	t.Logf("the write that timed out during the loss exists after the recovery: %v", have["during-loss"])
	if n, _, last := p.failures(servingAgain, time.Now()); n > 0 {
		t.Fatalf("%d failures through the VIP after the recovery (last %v)", n, last)
	}
}

// terminate sends SIGTERM to n (as systemctl stop does) and returns a
// channel closed when it has exited.
func (c *cluster) terminate(t *testing.T, n *node) <-chan struct{} {
	t.Helper()
	n.mu.Lock()
	cmd, exited := n.cmd, n.exited
	n.mu.Unlock()
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	return exited
}

// echoOn writes a line on an open connection and reads it back.
func echoOn(conn net.Conn, line string) error {
	conn.SetDeadline(time.Now().Add(3 * time.Second))
	if _, err := io.WriteString(conn, line); err != nil {
		return err
	}
	got := make([]byte, len(line))
	if _, err := io.ReadFull(conn, got); err != nil {
		return err
	}
	if string(got) != line {
		return fmt.Errorf("echo returned %q", got)
	}
	return nil
}

// A stopping host (SIGTERM, as the unit's stop sends) closes its listeners
// but lets open connections run to their end, up to --drain-timeout, and
// exits as soon as they are done; connections still open at the timeout
// are closed.
func TestStopDrainsOpenConnections(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: starts teapot-lb processes")
	}
	parallelScenarioTaking(t, 6*time.Second)
	raceHosts(t) // a drain with connections open
	// The host listens on a loopback address of its own and the load
	// balancer's VIP is another (ownaddr_test.go): both bind their ports
	// again when the host starts again.
	c := newCluster(t)
	n, _ := c.newNodeOn(drainHost, 0)
	c.start(n, "--drain-timeout", "20s")
	c.waitMember(n)
	lb := newLifeLB(t, drainVIP+"/32")
	lb.setup(t, c, n)
	vip := lb.vip(t, c, n)
	waitFor(t, startTimeout, "traffic through the VIP", func() error { return lb.echoOnce(vip) })
	conn, err := net.DialTimeout("tcp", net.JoinHostPort(vip, fmt.Sprint(lb.echoPort)), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if err := echoOn(conn, "before the stop\n"); err != nil {
		t.Fatal(err)
	}
	stopAt := time.Now()
	exited := c.terminate(t, n)
	// New connections are refused once the listener is closed; the open
	// one keeps working.
	waitFor(t, 15*time.Second, "the listener to close", func() error {
		if err := lb.echoOnce(vip); err == nil {
			return errors.New("a new connection was still served")
		}
		return nil
	})
	for i := range 3 {
		time.Sleep(500 * time.Millisecond)
		if err := echoOn(conn, fmt.Sprintf("during the drain %d\n", i)); err != nil {
			t.Fatalf("the open connection broke %s after SIGTERM: %v", time.Since(stopAt).Round(time.Millisecond), err)
		}
	}
	select {
	case <-exited:
		t.Fatal("the host exited while a connection was open, before the drain timeout")
	default:
	}
	conn.Close()
	closedAt := time.Now()
	select {
	case <-exited:
	case <-time.After(15 * time.Second):
		t.Fatal("the host did not exit after its last connection closed")
	}
	t.Logf("SIGTERM → exit %s; last connection closed → exit %s (drain timeout 20s)",
		time.Since(stopAt).Round(time.Millisecond), time.Since(closedAt).Round(time.Millisecond))

	// A connection that never ends is closed at the drain timeout.
	c.start(n, "--drain-timeout", "2s")
	waitFor(t, startTimeout, "traffic after the restart", func() error { return lb.echoOnce(vip) })
	stuck, err := net.DialTimeout("tcp", net.JoinHostPort(vip, fmt.Sprint(lb.echoPort)), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer stuck.Close()
	if err := echoOn(stuck, "hello\n"); err != nil {
		t.Fatal(err)
	}
	stopAt = time.Now()
	exited = c.terminate(t, n)
	select {
	case <-exited:
	case <-time.After(30 * time.Second):
		t.Fatal("the host did not exit after its drain timeout")
	}
	took := time.Since(stopAt)
	if took < 2*time.Second {
		t.Fatalf("exited %s after SIGTERM, before the 2s drain timeout", took)
	}
	stuck.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := stuck.Read(make([]byte, 1)); err == nil {
		t.Fatal("the connection still reads after the host exited")
	}
	t.Logf("a connection left open: exit %s after SIGTERM (drain timeout 2s)", took.Round(time.Millisecond))
}
