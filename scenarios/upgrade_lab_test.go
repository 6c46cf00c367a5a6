package scenarios

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
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

	"github.com/teapot-lb/teapot-lb/api"
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
// connection (keep-alive, WebSocket) that broke after it had worked
// (reset, or no answer), closed one that the host closed cleanly (FIN)
// at a message boundary, for its client to reconnect.
type trafficEvent struct {
	at     time.Time
	kind   string
	lost   bool
	closed bool
	err    error
}

// errClosedByHost: the host closed the connection cleanly before the
// client sent on it again (it is handing its clients over); the client
// opens a new one, as HTTP and WebSocket clients do.
var errClosedByHost = errors.New("closed cleanly by the host")

// errLastExchange: the exchange worked and the answer said Connection:
// close; the next exchange opens a new connection.
var errLastExchange = errors.New("the answer said Connection: close")

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
				switch {
				case errors.Is(err, errLastExchange):
					tr.record(kind, false, nil)
				case errors.Is(err, errClosedByHost) && worked:
					tr.closedByHost(kind, err)
				default:
					tr.record(kind, worked, err)
				}
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

func (tr *upgradeTraffic) closedByHost(kind string, err error) {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	tr.failed = append(tr.failed, trafficEvent{at: time.Now(), kind: kind, closed: true, err: err})
}

func (tr *upgradeTraffic) finish() {
	close(tr.stop)
	tr.wg.Wait()
}

// between returns, per kind, the failed exchanges, the lost connections
// and those closed cleanly by the host in [from, to), and the failures
// and losses themselves.
func (tr *upgradeTraffic) between(from, to time.Time) (failed, lost, closed map[string]int, events []trafficEvent) {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	failed, lost, closed = map[string]int{}, map[string]int{}, map[string]int{}
	for _, e := range tr.failed {
		if e.at.Before(from) || !e.at.Before(to) {
			continue
		}
		switch {
		case e.closed:
			closed[e.kind]++
			continue
		case e.lost:
			lost[e.kind]++
		default:
			failed[e.kind]++
		}
		events = append(events, e)
	}
	return failed, lost, closed, events
}

// hostClosed reports whether the host closed c cleanly while the client
// was not using it: a read that finds EOF within a millisecond. Data or
// another error is left for the exchange to find.
func hostClosed(c net.Conn, br *bufio.Reader) bool {
	_ = c.SetReadDeadline(time.Now().Add(time.Millisecond))
	_, err := br.Peek(1)
	_ = c.SetReadDeadline(time.Time{})
	return errors.Is(err, io.EOF)
}

const exchangeTimeout = 2 * time.Second

var reasonAttr = regexp.MustCompile(`reason="([^"]*)"`)

// keepAlive opens one HTTP/1.1 connection to vip:80; each exchange is one
// request on it. An answer that says Connection: close ends it after the
// exchange, and one the host closed cleanly since the last exchange is
// not used again (as an HTTP client does).
func (l *vipLab) keepAlive(vip netip.Addr) (func() error, func(), error) {
	ctx, cancel := context.WithTimeout(context.Background(), exchangeTimeout)
	defer cancel()
	c, err := l.client.DialContext(ctx, "tcp", netip.AddrPortFrom(vip, 80).String())
	if err != nil {
		return nil, nil, err
	}
	br := bufio.NewReader(c)
	used := false
	return func() error {
		if used && hostClosed(c, br) {
			return errClosedByHost
		}
		used = true
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
		if resp.StatusCode != http.StatusOK || string(body) != "ok\n" {
			return fmt.Errorf("answer %s %q", resp.Status, body)
		}
		if resp.Close {
			return errLastExchange
		}
		return nil
	}, func() { c.Close() }, nil
}

// bufConn reads through br, which wraps its connection.
type bufConn struct {
	net.Conn
	br *bufio.Reader
}

func (b bufConn) Read(p []byte) (int, error) { return b.br.Read(p) }

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
	br := bufio.NewReader(c)
	ws, err := websocket.NewClient(cfg, bufConn{c, br})
	if err != nil {
		c.Close()
		return nil, nil, fmt.Errorf("websocket handshake: %w", err)
	}
	seq := 0
	return func() error {
		if hostClosed(c, br) {
			return errClosedByHost
		}
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
	name       string
	host       *lbHost
	from, to   time.Time
	held       bool // the host held the VIP when the phase began
	startsThis bool // the host restarted on this release
	// drainedThis: the holder drained runs this release.
	drainedThis          bool
	moves                []vipEvent
	failed, lost, closed map[string]int
	// events are the failed exchanges and lost connections.
	events      []trafficEvent
	unexplained []trafficEvent
}

// runPhase drains n through another host, stops it (SIGTERM: it hands
// over and drains), starts bin in its place with extra, waits until
// cluster status shows it healthy with version, undrains it and waits for
// the VIPs to settle. previous says n ran the previous release until
// then.
func (l *vipLab) runPhase(t *testing.T, tr *upgradeTraffic, name string, n *lbHost, previous bool, bin, version string, extra ...string) *upgradePhase {
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
	switch {
	case ph.held && previous:
		l.waitHolderOtherOrCrash(t, upgradeVIP, n)
	case ph.held:
		l.waitHolderOther(t, upgradeVIP, n)
	}
	if err := n.proc.Signal(syscall.SIGTERM); err != nil && n.proc.Running() {
		t.Fatal(err)
	}
	if err := n.proc.Wait(90 * time.Second); err != nil && !strings.Contains(err.Error(), "exit status") {
		t.Fatalf("%s: %s did not stop after SIGTERM: %v", name, n.id, err)
	}
	if previous {
		l.setAsidePreviousLog(t, n)
	}
	n.bin = bin
	l.start(n, extra...)
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
	// A restarted host of this release takes a VIP back, within 3s of
	// being able to hold it, only from a holder of more than its share:
	// the lab's one VIP stays where it moved. One of the previous release
	// takes back what it ranks first for.
	time.Sleep(restartSettle)
	l.waitHolder(upgradeVIP, settleTimeout)
	ph.to = time.Now()
	l.account(t, tr, ph)
	return ph
}

// waitHolderOtherOrCrash waits for a to move off n, a holder of the
// previous release being drained. That release's holders may crash as
// they drain (see setAsidePreviousLog): a crashed process leaves its
// address on the interface, which n's next start removes, so a VIP held
// by one other host besides a crashed n has moved.
func (l *vipLab) waitHolderOtherOrCrash(t *testing.T, a netip.Addr, n *lbHost) {
	t.Helper()
	crashed := false
	waitFor(t, settleTimeout, fmt.Sprintf("%s to move off %s", a, n.id), func() error {
		hs, err := l.holders(a)
		if err != nil {
			return err
		}
		crashed = !n.proc.Running()
		var others []*lbHost
		for _, h := range hs {
			if h != n {
				others = append(others, h)
			}
		}
		if len(others) != 1 || (len(hs) > 1 && !crashed) {
			return fmt.Errorf("held by %v", ids(hs))
		}
		return l.get(a)
	})
	if crashed {
		t.Logf("%s (previous release) exited while it drained; its address stays on its interface until it starts again", n.id)
	}
}

// setAsidePreviousLog keeps what n logged while it ran the previous
// release out of the lab's final check for data races and panics, which
// fails a test on those of this release: the previous release's are
// defects of that release (its holders crash when drained under HTTP
// traffic, a race in its l7 engine that this release fixes), logged here
// and seen in the phase's report.
func (l *vipLab) setAsidePreviousLog(t *testing.T, n *lbHost) {
	t.Helper()
	if bad := alarming(n.logPath); bad != "" {
		t.Logf("%s logged %q while it ran the previous release", n.id, bad)
	}
	err := os.Rename(n.logPath, fmt.Sprintf("%s.previous-%d", n.logPath, time.Now().UnixNano()))
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		t.Fatal(err)
	}
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
	ph.failed, ph.lost, ph.closed, ph.events = tr.between(ph.from, ph.to)
	events := ph.events
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
		fmt.Fprintf(&b, "; %s failed %d, connections lost %d, closed cleanly by the host %d", k, ph.failed[k], ph.lost[k], ph.closed[k])
	}
	for _, m := range ph.moves {
		reason := ""
		if r := reasonAttr.FindStringSubmatch(m.line); r != nil {
			reason = r[1]
		}
		fmt.Fprintf(&b, "\n\t%s %s %s: %s", m.at.Format("15:04:05.000"), m.host.id, m.msg, reason)
	}
	for _, e := range ph.events {
		fmt.Fprintf(&b, "\n\t%s %s (lost %v): %v", e.at.Format("15:04:05.000"), e.kind, e.lost, e.err)
	}
	return b.String()
}

// A cluster of the previous release (the one operators run now, which
// hands its clients over before its VIPs move) in the ARP lab serves one
// arp VIP under steady traffic (kept-alive HTTP requests, WebSockets, new
// TCP connections, UDP datagrams); each host in turn is drained,
// restarted on this release (with a 5s drain timeout) and undrained, the
// VIP's holder last; then the holder, on this release, is drained and
// undrained; then a host that neither holds the VIP nor ranks first for
// it goes back to the previous release, and finally the two others are
// drained so that the downgraded host serves the VIP. Mixed versions
// exchange both heartbeat formats. No exchange may fail and no connection
// may break except around a VIP move of its address; a drained holder
// hands its clients over before the VIP moves, so that no kept-alive HTTP
// connection or WebSocket is lost (they end cleanly between messages and
// reconnect); the drain of a holder moves the VIP once, and the restart
// of a host that does not hold it moves it not at all (a restarted host
// takes a VIP back only from a holder of more than its share, and none
// while its state is behind its peers'; a downgraded one that does not
// rank first takes nothing); writes of level-3 fields are refused while a
// host of the previous release runs and accepted once none does, and the
// downgraded host serves with the load balancer that carries one stored,
// ignoring it.
func TestRollingUpgradeInARPLab(t *testing.T) {
	if os.Getenv("TEAPOT_SCENARIO_UPGRADE") == "" {
		t.Skip("runs with make upgrade-test (TEAPOT_SCENARIO_UPGRADE=1): building the previous release takes longer than make test's 3-minute budget per scenario")
	}
	raceHosts(t) // mixed releases under traffic
	needTools(t, "nft")
	oldVersion := previousRelease.version()
	old := buildRelease(t, previousRelease)
	newBin := teapotBinary(t)
	newVersion := binaryVersion(t, newBin)
	newArgs := []string{"--drain-timeout", "5s"}
	l := newVIPLab(t, labOptions{teapot: true, bin: old})
	l.serveUpgradeBackend(t)
	// The lab's other arp VIPs go: with one VIP on three hosts, a holder's
	// return takes nothing back (it takes from a holder of more than its
	// fair share plus one only).
	for _, lb := range []string{"acme/web4", "acme/web6"} {
		if out, err := l.cli(l.lbs[0], "delete", "lb", lb); err != nil {
			t.Fatalf("delete lb %s: %v: %s", lb, err, out)
		}
	}
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

	gated := sniGatedLB(t, "198.51.100.77/32", netip.MustParseAddr("192.0.2.51")) // a member of its own: tenants may not share networks
	apply := func(via *lbHost) func(string) (string, error) {
		return func(path string) (string, error) { return l.cli(via, "apply", "-f", path) }
	}
	// The first holder ranks first for the VIP: every host ran the
	// previous release, which ranks alone.
	first := holder
	var order []*lbHost
	for _, n := range l.lbs {
		if n != holder {
			order = append(order, n)
		}
	}
	order = append(order, holder)
	var phases []*upgradePhase
	for i, n := range order {
		phases = append(phases, l.runPhase(t, tr, "upgrade", n, true, newBin, newVersion, newArgs...))
		phases[len(phases)-1].startsThis = true // drained on the previous release
		t.Log(phases[len(phases)-1])
		if i < len(order)-1 {
			oldHost := order[len(order)-1]
			want := fmt.Sprintf("%s (version %s) is at level %d", oldHost.id, oldVersion, previousRelease.level)
			gated.refused(t, apply(n), want)
			gated.refused(t, apply(oldHost), want)
		}
	}
	// Each host records its level in the state once it runs: the last
	// one's record may follow its first healthy status by a moment.
	waitFor(t, startTimeout, fmt.Sprintf("feature level %d after the upgrade", api.FeatureLevel), func() error {
		st, err := l.status(order[0])
		if err != nil {
			return err
		}
		if st.GetFeatureLevel() != api.FeatureLevel {
			return fmt.Errorf("feature level %d", st.GetFeatureLevel())
		}
		return nil
	})
	// The load balancer with a level-3 field stays stored through the
	// downgrade.
	gated.accepted(t, apply(order[0]), func(args ...string) (string, error) { return l.cli(order[1], args...) }, true)

	// Maintenance of the VIP's holder on this release: it hands its
	// clients over, then the VIP moves, once.
	phases = append(phases, l.maintain(t, tr, l.waitHolder(upgradeVIP, settleTimeout)))
	t.Log(phases[len(phases)-1])

	// A host that neither holds the VIP nor ranks first for it goes back
	// to the previous release: the VIP stays where it is.
	cur := l.waitHolder(upgradeVIP, settleTimeout)
	var down *lbHost
	for _, n := range l.lbs {
		if n != cur && n != first {
			down = n
		}
	}
	phases = append(phases, l.runPhase(t, tr, "downgrade", down, false, old, oldVersion))
	t.Log(phases[len(phases)-1])
	var others []*lbHost
	for _, n := range l.lbs {
		if n != down {
			others = append(others, n)
		}
	}
	gated.refused(t, apply(others[0]), fmt.Sprintf("%s (version %s) is at level %d", down.id, oldVersion, previousRelease.level))

	// The downgraded host serves: the two others are drained and the VIP
	// goes to it, with the level-3 field stored (and ignored there).
	ph := &upgradePhase{name: "serve on the downgraded host", host: down, from: time.Now(), held: true, drainedThis: true}
	for _, n := range others {
		if out, err := l.cli(down, "cluster", "drain", n.id); err != nil {
			t.Fatalf("cluster drain %s: %v: %s", n.id, err, out)
		}
	}
	waitFor(t, settleTimeout+10*time.Second, "the VIP on the downgraded host "+down.id, func() error {
		if h := l.waitHolder(upgradeVIP, settleTimeout); h != down {
			return fmt.Errorf("held by %s", h.id)
		}
		return nil
	})
	tr.mu.Lock()
	okBefore := map[string]int{}
	for k, v := range tr.ok {
		okBefore[k] = v
	}
	tr.mu.Unlock()
	waitFor(t, settleTimeout, "every kind of traffic through the downgraded host", func() error {
		tr.mu.Lock()
		defer tr.mu.Unlock()
		for _, k := range trafficKinds {
			if tr.ok[k]-okBefore[k] < 20 {
				return fmt.Errorf("%s: %d exchanges so far", k, tr.ok[k]-okBefore[k])
			}
		}
		return nil
	})
	if h := l.waitHolder(upgradeVIP, settleTimeout); h != down {
		t.Fatalf("the VIP moved to %s while only %s could hold it", h.id, down.id)
	}
	ph.to = time.Now()
	l.account(t, tr, ph)
	phases = append(phases, ph)
	t.Log(ph)
	tr.finish()

	total := map[string]int{}
	var lost, failedN, closed, moves int
	for _, ph := range phases {
		for _, k := range trafficKinds {
			lost += ph.lost[k]
			failedN += ph.failed[k]
			closed += ph.closed[k]
		}
		taken := 0
		for _, m := range ph.moves {
			if m.msg == "VIP taken" {
				taken++
			}
		}
		moves += taken
		for _, e := range ph.unexplained {
			t.Errorf("%s %s: a %s exchange failed at %s with no VIP move near it: %v", ph.name, ph.host.id, e.kind, e.at.Format(time.StampMilli), e.err)
		}
		// A holder drained on this release hands its clients over and
		// moves the VIP once. (One drained on the previous release
		// crashed when a drain met a cleartext connection as it ended, a
		// bug of its l7 engine; its phases are reported, not checked.)
		if ph.held && ph.drainedThis {
			if taken != 1 {
				t.Errorf("%s %s: the VIP was taken %d times, want once", ph.name, ph.host.id, taken)
			}
			for _, k := range []string{kindKeepAlive, kindWS} {
				if ph.lost[k] > 0 {
					t.Errorf("%s %s: %d %s connections lost; a holder on this release hands them over before the VIP moves", ph.name, ph.host.id, ph.lost[k], k)
				}
			}
		}
		// A host restarted on this release takes no VIP it did not hold.
		// The VIP may still move around a stall of its holder on a loaded
		// machine (the holder's heartbeats stopped for a detection time,
		// and the holder let it go as it lost its majority): a failover,
		// which the restarted host may win as any host would; that move
		// is reported, and its failures are explained by it.
		if !ph.held && ph.startsThis {
			for _, m := range ph.moves {
				if m.msg == "VIP taken" && m.host == ph.host && !failover(m.line) {
					t.Errorf("%s %s: the restarted host took the VIP at %s: %s", ph.name, ph.host.id, m.at.Format("15:04:05.000"), m.line)
				}
			}
		}
	}
	tr.mu.Lock()
	for k, v := range tr.ok {
		total[k] = v
	}
	tr.mu.Unlock()
	t.Logf("rolling upgrade %s → %s, maintenance of the holder, one downgrade and the downgraded host serving, in the ARP lab: exchanges that worked %v; %d failed, %d established connections lost, %d closed cleanly by a host handing them over; VIP taken %d times",
		oldVersion, newVersion, total, failedN, lost, closed, moves)
}

// failover reports whether a "VIP taken" line took the VIP from a holder
// that stalled: this host heard nothing from it for a detection time, or
// it heard it again after it had heard nobody for one and let its VIPs go
// (it lost its majority).
func failover(line string) bool {
	return strings.Contains(line, `reason="took over: no heartbeat from `) ||
		strings.Contains(line, ` lost its majority or its interface"`)
}

// maintain drains n, the VIP's holder on this release, through another
// host, waits for the VIP to move, undrains it and waits for the VIPs to
// settle: the holder hands its clients over first.
func (l *vipLab) maintain(t *testing.T, tr *upgradeTraffic, n *lbHost) *upgradePhase {
	t.Helper()
	other := l.lbs[0]
	if other == n {
		other = l.lbs[1]
	}
	ph := &upgradePhase{name: "drain and undrain", host: n, from: time.Now(), held: true, drainedThis: true}
	if out, err := l.cli(other, "cluster", "drain", n.id); err != nil {
		t.Fatalf("cluster drain %s: %v: %s", n.id, err, out)
	}
	l.waitHolderOther(t, upgradeVIP, n)
	if out, err := l.cli(other, "cluster", "drain", "--undo", n.id); err != nil {
		t.Fatalf("cluster drain --undo %s: %v: %s", n.id, err, out)
	}
	// The undrained host may take back what it ranks first for, as a
	// started one may.
	time.Sleep(restartSettle)
	l.waitHolder(upgradeVIP, settleTimeout)
	ph.to = time.Now()
	l.account(t, tr, ph)
	return ph
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
