package scenarios

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/net/websocket"
)

// The rolling upgrade in the ARP lab: one load balancer on an arp VIP with
// an HTTP listener (kept-alive requests and WebSockets), a TCP and a UDP
// listener, all to the lab's backend host.
var upgradeVIP = netip.MustParseAddr("192.0.2.201")

const upgradeLB = `
---
kind: LoadBalancer
name: up
tenant: acme
vip: { pool: l2, address: "%s" }
listeners:
  - { port: 80, protocol: http }
  - { port: 9000, protocol: tcp, pool: echo }
  - { port: 9001, protocol: udp, pool: udpecho }
routes: [{ path: /, pool: web }]
pools:
  web: { members: ["192.0.2.50:8081"] }
  echo: { members: ["192.0.2.50:9000"] }
  udpecho: { members: ["192.0.2.50:9001"] }
`

// Traffic kinds of the upgrade scenario.
const (
	kindKeepAlive = "http keep-alive"
	kindWS        = "websocket"
	kindTCP       = "tcp"
	kindUDP       = "udp"
)

var trafficKinds = []string{kindKeepAlive, kindWS, kindTCP, kindUDP}

// trafficEvent is one failed exchange; lost marks an established
// connection (keep-alive, WebSocket) that broke after it had worked.
type trafficEvent struct {
	at   time.Time
	kind string
	lost bool
	err  error
}

// upgradeTraffic is the client's steady traffic through the VIP: 4
// kept-alive HTTP connections and 4 WebSockets with one exchange each
// every 50ms, a new TCP connection every 50ms and a UDP datagram every
// 50ms. A broken connection is counted and dialled again.
type upgradeTraffic struct {
	mu     sync.Mutex
	ok     map[string]int
	failed []trafficEvent
	stop   chan struct{}
	wg     sync.WaitGroup
}

const trafficEvery = 50 * time.Millisecond

// serveUpgradeBackend runs, in the lab's backend host, an HTTP server with
// a WebSocket echo on /ws (port 8081), a TCP echo (9000) and a UDP echo
// (9001).
func (l *vipLab) serveUpgradeBackend(t *testing.T) {
	t.Helper()
	var hl, tl net.Listener
	var uc net.PacketConn
	err := l.backend.Do(func() (err error) {
		if hl, err = net.Listen("tcp", "192.0.2.50:8081"); err != nil {
			return err
		}
		if tl, err = net.Listen("tcp", "192.0.2.50:9000"); err != nil {
			return err
		}
		uc, err = net.ListenPacket("udp", "192.0.2.50:9001")
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.Handle("/ws", websocket.Handler(func(ws *websocket.Conn) {
		for {
			var msg string
			if websocket.Message.Receive(ws, &msg) != nil || websocket.Message.Send(ws, msg) != nil {
				return
			}
		}
	}))
	mux.HandleFunc("/", func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "ok\n") })
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go srv.Serve(hl)
	go func() {
		for {
			c, err := tl.Accept()
			if err != nil {
				return
			}
			go func() { defer c.Close(); io.Copy(c, c) }()
		}
	}()
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
	t.Cleanup(func() { srv.Close(); tl.Close(); uc.Close() })
}

func startUpgradeTraffic(l *vipLab, vip netip.Addr) *upgradeTraffic {
	tr := &upgradeTraffic{ok: map[string]int{}, stop: make(chan struct{})}
	for i := range 4 {
		tr.loop(func() (func() error, func(), error) { return l.keepAlive(vip) }, kindKeepAlive)
		tr.loop(func() (func() error, func(), error) { return l.webSocket(vip, i) }, kindWS)
	}
	tr.loop(func() (func() error, func(), error) {
		return func() error { return l.tcpEcho(netip.AddrPortFrom(vip, 9000)) }, func() {}, nil
	}, kindTCP)
	tr.loop(func() (func() error, func(), error) { return l.udpEcho(netip.AddrPortFrom(vip, 9001)) }, kindUDP)
	return tr
}

// loop runs exchanges every trafficEvery: open returns one exchange and
// its close; an exchange that fails after one worked on the same open
// counts as a lost connection, and the loop opens again.
func (tr *upgradeTraffic) loop(open func() (func() error, func(), error), kind string) {
	tr.wg.Go(func() {
		tick := time.NewTicker(trafficEvery)
		defer tick.Stop()
		var exchange func() error
		var closeFn func()
		worked := false
		for {
			select {
			case <-tr.stop:
				if closeFn != nil {
					closeFn()
				}
				return
			case <-tick.C:
			}
			if exchange == nil {
				var err error
				if exchange, closeFn, err = open(); err != nil {
					exchange = nil
					tr.record(kind, false, err)
					continue
				}
				worked = false
			}
			if err := exchange(); err != nil {
				closeFn()
				exchange, closeFn = nil, nil
				tr.record(kind, worked, err)
				continue
			}
			worked = true
			tr.record(kind, false, nil)
		}
	})
}

func (tr *upgradeTraffic) record(kind string, lost bool, err error) {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	if err == nil {
		tr.ok[kind]++
		return
	}
	tr.failed = append(tr.failed, trafficEvent{at: time.Now(), kind: kind, lost: lost, err: err})
}

func (tr *upgradeTraffic) finish() {
	close(tr.stop)
	tr.wg.Wait()
}

// between returns, per kind, the failed exchanges and the lost
// connections in [from, to), and the events themselves.
func (tr *upgradeTraffic) between(from, to time.Time) (failed, lost map[string]int, events []trafficEvent) {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	failed, lost = map[string]int{}, map[string]int{}
	for _, e := range tr.failed {
		if e.at.Before(from) || !e.at.Before(to) {
			continue
		}
		events = append(events, e)
		if e.lost {
			lost[e.kind]++
		} else {
			failed[e.kind]++
		}
	}
	return failed, lost, events
}

const exchangeTimeout = 2 * time.Second

var reasonAttr = regexp.MustCompile(`reason="([^"]*)"`)

// keepAlive opens one HTTP/1.1 connection to vip:80; each exchange is one
// request on it.
func (l *vipLab) keepAlive(vip netip.Addr) (func() error, func(), error) {
	ctx, cancel := context.WithTimeout(context.Background(), exchangeTimeout)
	defer cancel()
	c, err := l.client.DialContext(ctx, "tcp", netip.AddrPortFrom(vip, 80).String())
	if err != nil {
		return nil, nil, err
	}
	br := bufio.NewReader(c)
	return func() error {
		_ = c.SetDeadline(time.Now().Add(exchangeTimeout))
		if _, err := io.WriteString(c, "GET / HTTP/1.1\r\nHost: up.lab\r\n\r\n"); err != nil {
			return err
		}
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			return err
		}
		body, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil {
			return err
		}
		if resp.StatusCode != http.StatusOK || string(body) != "ok\n" || resp.Close {
			return fmt.Errorf("answer %s %q (close %v)", resp.Status, body, resp.Close)
		}
		return nil
	}, func() { c.Close() }, nil
}

// webSocket opens one WebSocket to vip:80/ws; each exchange is one
// message echoed.
func (l *vipLab) webSocket(vip netip.Addr, worker int) (func() error, func(), error) {
	ctx, cancel := context.WithTimeout(context.Background(), exchangeTimeout)
	defer cancel()
	c, err := l.client.DialContext(ctx, "tcp", netip.AddrPortFrom(vip, 80).String())
	if err != nil {
		return nil, nil, err
	}
	cfg, err := websocket.NewConfig("ws://up.lab/ws", "http://up.lab/")
	if err != nil {
		c.Close()
		return nil, nil, err
	}
	_ = c.SetDeadline(time.Now().Add(exchangeTimeout))
	ws, err := websocket.NewClient(cfg, c)
	if err != nil {
		c.Close()
		return nil, nil, fmt.Errorf("websocket handshake: %w", err)
	}
	seq := 0
	return func() error {
		seq++
		msg := fmt.Sprintf("w%d-%d", worker, seq)
		_ = c.SetDeadline(time.Now().Add(exchangeTimeout))
		if err := websocket.Message.Send(ws, msg); err != nil {
			return err
		}
		var got string
		if err := websocket.Message.Receive(ws, &got); err != nil {
			return err
		}
		if got != msg {
			return fmt.Errorf("echo %q, want %q", got, msg)
		}
		return nil
	}, func() { ws.Close() }, nil
}

// tcpEcho sends a line on a new TCP connection and reads it back.
func (l *vipLab) tcpEcho(to netip.AddrPort) error {
	ctx, cancel := context.WithTimeout(context.Background(), exchangeTimeout)
	defer cancel()
	c, err := l.client.DialContext(ctx, "tcp", to.String())
	if err != nil {
		return err
	}
	defer c.Close()
	return echoOn(c, "upgrade\n")
}

// udpEcho opens one UDP socket to the VIP; each exchange is one datagram
// echoed (a datagram not back within 1s is lost).
func (l *vipLab) udpEcho(to netip.AddrPort) (func() error, func(), error) {
	var c net.Conn
	if err := l.client.Do(func() (err error) { c, err = net.Dial("udp", to.String()); return err }); err != nil {
		return nil, nil, err
	}
	seq := 0
	buf := make([]byte, 64)
	return func() error {
		seq++
		msg := fmt.Sprintf("d%d", seq)
		if _, err := io.WriteString(c, msg); err != nil {
			return err
		}
		_ = c.SetReadDeadline(time.Now().Add(time.Second))
		for {
			n, err := c.Read(buf)
			if err != nil {
				return fmt.Errorf("datagram %s: %w", msg, err)
			}
			if string(buf[:n]) == msg {
				return nil
			}
			// A late echo of an earlier datagram: keep reading.
		}
	}, func() { c.Close() }, nil
}

// upgradePhase is one host's drain, restart on another release and
// undrain, with what the traffic saw meanwhile.
type upgradePhase struct {
	name         string
	host         *lbHost
	from, to     time.Time
	held         bool // the host held the VIP when the phase began
	moves        []vipEvent
	failed, lost map[string]int
	unexplained  []trafficEvent
}

// runPhase drains n through another host, stops it (SIGTERM: it hands
// over and drains), starts bin in its place, waits until cluster status
// shows it healthy with version, undrains it and waits for the VIPs to
// settle.
func (l *vipLab) runPhase(t *testing.T, tr *upgradeTraffic, name string, n *lbHost, bin, version string) *upgradePhase {
	t.Helper()
	other := l.lbs[0]
	if other == n {
		other = l.lbs[1]
	}
	holder := l.waitHolder(upgradeVIP, settleTimeout)
	ph := &upgradePhase{name: name, host: n, from: time.Now(), held: holder == n}
	if out, err := l.cli(other, "cluster", "drain", n.id); err != nil {
		t.Fatalf("%s: cluster drain %s: %v: %s", name, n.id, err, out)
	}
	if ph.held {
		l.waitHolderOther(t, upgradeVIP, n)
	}
	if err := n.proc.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := n.proc.Wait(90 * time.Second); err != nil && !strings.Contains(err.Error(), "exit status") {
		t.Fatalf("%s: %s did not stop after SIGTERM: %v", name, n.id, err)
	}
	n.bin = bin
	l.start(n)
	waitFor(t, startTimeout, n.id+" healthy on "+version, func() error {
		if !n.proc.Running() {
			return errStop(fmt.Errorf("%s exited", n.id))
		}
		st, err := l.status(other)
		if err != nil {
			return err
		}
		for _, ns := range st.GetNodes() {
			if ns.GetId() == n.id && ns.GetHealthy() && ns.GetVersion() == version {
				return nil
			}
		}
		return fmt.Errorf("not yet: %v", st.GetNodes())
	})
	if out, err := l.cli(other, "cluster", "drain", "--undo", n.id); err != nil {
		t.Fatalf("%s: cluster drain --undo %s: %v: %s", name, n.id, err, out)
	}
	// A restarted host takes back, within 3s of being able to hold it, a
	// VIP it ranks first for; after that the VIP stays.
	settleRestart()
	l.waitHolder(upgradeVIP, settleTimeout)
	ph.to = time.Now()
	l.account(t, tr, ph)
	return ph
}

// account fills in the phase's VIP moves and the traffic's failures, and
// marks the failures that no VIP move explains: a move breaks the
// connections on the VIP (their next packets reach the new holder, which
// never saw them) and the exchanges in flight, and nothing else may.
func (l *vipLab) account(t *testing.T, tr *upgradeTraffic, ph *upgradePhase) {
	t.Helper()
	for _, e := range l.vipEvents(t, ph.from, ph.to) {
		if e.addr == upgradeVIP && (e.msg == "VIP taken" || e.msg == "VIP released") {
			ph.moves = append(ph.moves, e)
		}
	}
	var events []trafficEvent
	ph.failed, ph.lost, events = tr.between(ph.from, ph.to)
	for _, e := range events {
		explained := false
		for _, m := range ph.moves {
			if !e.at.Before(m.at.Add(-time.Second)) && e.at.Before(m.at.Add(exchangeTimeout+time.Second)) {
				explained = true
			}
		}
		if !explained {
			ph.unexplained = append(ph.unexplained, e)
		}
	}
}

func (ph *upgradePhase) String() string {
	var b strings.Builder
	taken := 0
	for _, m := range ph.moves {
		if m.msg == "VIP taken" {
			taken++
		}
	}
	fmt.Fprintf(&b, "%s %s (held the VIP: %v): %s, VIP taken %d times", ph.name, ph.host.id, ph.held, ph.to.Sub(ph.from).Round(time.Millisecond), taken)
	for _, k := range trafficKinds {
		fmt.Fprintf(&b, "; %s failed %d, connections lost %d", k, ph.failed[k], ph.lost[k])
	}
	for _, m := range ph.moves {
		reason := ""
		if r := reasonAttr.FindStringSubmatch(m.line); r != nil {
			reason = r[1]
		}
		fmt.Fprintf(&b, "\n\t%s %s %s: %s", m.at.Format("15:04:05.000"), m.host.id, m.msg, reason)
	}
	return b.String()
}

// A cluster of the previous release in the ARP lab serves one arp VIP
// under steady traffic (kept-alive HTTP requests, WebSockets, new TCP
// connections, UDP datagrams); each host in turn is drained, restarted on
// this release and undrained, the VIP's holder last; then one host goes
// back to the previous release. Mixed versions exchange both heartbeat
// formats. No exchange may fail and no connection may break except
// around a VIP move of its address (the holder's drain and its restart move it);
// writes of level-2 fields are refused while an old host runs and
// accepted once none does.
func TestRollingUpgradeInARPLab(t *testing.T) {
	if os.Getenv("TEAPOT_SCENARIO_UPGRADE") == "" {
		t.Skip("runs with make upgrade-test (TEAPOT_SCENARIO_UPGRADE=1): building the previous release takes longer than make test's 3-minute budget per scenario")
	}
	needTools(t, "nft")
	oldVersion := previousRelease[:7]
	old := buildRelease(t, oldVersion)
	newBin := teapotBinary(t)
	newVersion := binaryVersion(t, newBin)
	l := newVIPLab(t, labOptions{teapot: true, bin: old})
	l.serveUpgradeBackend(t)
	manifest := filepath.Join(l.dir, "up.yaml")
	if err := os.WriteFile(manifest, []byte(fmt.Sprintf(upgradeLB, upgradeVIP)), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := l.cli(l.lbs[0], "apply", "-f", manifest); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	holder := l.waitHolder(upgradeVIP, settleTimeout)
	st, err := l.status(l.lbs[0])
	if err != nil {
		t.Fatal(err)
	}
	for _, ns := range st.GetNodes() {
		if ns.GetVersion() != oldVersion || !ns.GetHealthy() {
			t.Fatalf("before the upgrade: %s runs %q (healthy %v), want %s", ns.GetId(), ns.GetVersion(), ns.GetHealthy(), oldVersion)
		}
	}
	// Every kind of traffic works before anything changes.
	if err := l.tcpEcho(netip.AddrPortFrom(upgradeVIP, 9000)); err != nil {
		t.Fatalf("tcp through the VIP: %v", err)
	}
	tr := startUpgradeTraffic(l, upgradeVIP)
	defer func() {
		select {
		case <-tr.stop:
		default:
			tr.finish()
		}
	}()
	waitFor(t, startTimeout, "every kind of traffic through the VIP", func() error {
		tr.mu.Lock()
		defer tr.mu.Unlock()
		for _, k := range trafficKinds {
			if tr.ok[k] < 5 {
				return fmt.Errorf("%s: %d exchanges so far", k, tr.ok[k])
			}
		}
		return nil
	})
	tr.mu.Lock()
	tr.failed = nil // the connections' start-up, before the first phase
	tr.mu.Unlock()

	gated := gatedLB(t, "198.51.100.77/32", netip.MustParseAddr("192.0.2.50"))
	apply := func(via *lbHost) func(string) (string, error) {
		return func(path string) (string, error) { return l.cli(via, "apply", "-f", path) }
	}
	var order []*lbHost
	for _, n := range l.lbs {
		if n != holder {
			order = append(order, n)
		}
	}
	order = append(order, holder)
	var phases []*upgradePhase
	for i, n := range order {
		phases = append(phases, l.runPhase(t, tr, "upgrade", n, newBin, newVersion))
		t.Log(phases[len(phases)-1])
		if i < len(order)-1 {
			oldHost := order[len(order)-1]
			want := oldHost.id + " (version " + oldVersion + ") is at level 1"
			gated.refused(t, apply(n), want)
			gated.refused(t, apply(oldHost), want)
		}
	}
	st, err = l.status(order[0])
	if err != nil {
		t.Fatal(err)
	}
	if st.GetFeatureLevel() != 2 {
		t.Fatalf("feature level %d after the upgrade, want 2", st.GetFeatureLevel())
	}
	gated.accepted(t, apply(order[0]), func(args ...string) (string, error) { return l.cli(order[1], args...) })

	// A host just upgraded goes back to the previous release.
	down := order[0]
	phases = append(phases, l.runPhase(t, tr, "downgrade", down, old, oldVersion))
	t.Log(phases[len(phases)-1])
	gated.refused(t, apply(order[1]), down.id+" (version "+oldVersion+") is at level 1")
	tr.finish()

	total := map[string]int{}
	var lost, failedN, moves int
	for _, ph := range phases {
		for _, k := range trafficKinds {
			lost += ph.lost[k]
			failedN += ph.failed[k]
		}
		for _, m := range ph.moves {
			if m.msg == "VIP taken" {
				moves++
			}
		}
		for _, e := range ph.unexplained {
			t.Errorf("%s %s: a %s exchange failed at %s with no VIP move near it: %v", ph.name, ph.host.id, e.kind, e.at.Format(time.StampMilli), e.err)
		}
	}
	tr.mu.Lock()
	for k, v := range tr.ok {
		total[k] = v
	}
	tr.mu.Unlock()
	t.Logf("rolling upgrade %s → %s and one downgrade in the ARP lab: exchanges that worked %v; %d failed, %d established connections lost, VIP taken %d times",
		oldVersion, newVersion, total, failedN, lost, moves)
}

// binaryVersion returns the version bin reports (teapot-lb version).
func binaryVersion(t *testing.T, bin string) string {
	t.Helper()
	out, err := exec.Command(bin, "version", "-o", "json").Output()
	if err != nil {
		t.Fatalf("%s version: %v", bin, err)
	}
	var v struct {
		Version string `json:"version"`
	}
	if err := json.Unmarshal(out, &v); err != nil || v.Version == "" {
		t.Fatalf("%s version -o json: %q (%v)", bin, out, err)
	}
	return v.Version
}
