package scenarios

import (
	"bufio"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"os"
	"os/exec"
	"regexp"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"
)

// The VIP soak: the BGP lab (arp and bgp pools at once) with every core
// kept busy and a 200ms SIGSTOP of a random LB host every 10s, first
// with all hosts alive, then with one dead. TEAPOT_SOAK sets the length
// of each phase (make soak: 5m each, 10 minutes per mode, both modes at
// once); the default is the short version make test runs: two stalls per
// phase, each of a random host, 5s apart (make soak's phases have thirty).
const (
	soakStall      = 200 * time.Millisecond
	soakEvery      = 10 * time.Second
	soakShortEvery = 5 * time.Second                // still past a stall's aftermath
	soakShortPhase = 2*soakShortEvery + time.Second // the second stall starts a little after 5 s
	// soakAftermath: a move or a failed request this soon after a stall
	// ends is the stall's doing.
	soakAftermath = 3 * time.Second
)

// soakPhase is the length of each phase and how often a host stalls in
// it.
func soakPhase(tb testing.TB) (phase, every time.Duration) {
	v := os.Getenv("TEAPOT_SOAK")
	if v == "" {
		return soakShortPhase, soakShortEvery
	}
	d, err := time.ParseDuration(v)
	if err != nil || d < soakEvery {
		tb.Fatalf("TEAPOT_SOAK=%q: want the length of each phase, at least %s (for example 5m)", v, soakEvery)
	}
	return d, soakEvery
}

// stall is one SIGSTOP of an LB host, with the arp holders at its start.
type stall struct {
	host       *lbHost
	start, end time.Time
	held       map[netip.Addr]bool // arp VIPs the host held when stopped
}

// covers reports whether t falls within the stall or its aftermath.
func (s stall) covers(t time.Time) bool {
	return !t.Before(s.start) && !t.After(s.end.Add(soakAftermath))
}

// vipEvent is one VIP move in a host's log.
type vipEvent struct {
	host *lbHost
	at   time.Time
	msg  string // VIP taken, released, announced, withdrawn; BGP session (down)
	addr netip.Addr
	line string
}

var moveLine = regexp.MustCompile(`^time=(\S+) .*msg="(VIP taken|VIP released|VIP announced|VIP withdrawn|BGP session)".* (?:addr|peer)=(\S+)`)

// vipEvents returns the VIP moves the hosts logged in [from, to).
func (l *vipLab) vipEvents(tb testing.TB, from, to time.Time) []vipEvent {
	tb.Helper()
	var out []vipEvent
	for _, n := range l.lbs {
		f, err := os.Open(n.logPath)
		if err != nil {
			tb.Fatal(err)
		}
		sc := bufio.NewScanner(f)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			m := moveLine.FindStringSubmatch(sc.Text())
			if m == nil || m[2] == "BGP session" && !strings.Contains(sc.Text(), "state=IDLE") {
				continue
			}
			at, err := time.Parse(time.RFC3339Nano, m[1])
			a, aerr := netip.ParseAddr(m[3])
			if err != nil || aerr != nil || at.Before(from) || !at.Before(to) {
				continue
			}
			out = append(out, vipEvent{host: n, at: at, msg: m[2], addr: a, line: sc.Text()})
		}
		f.Close()
	}
	return out
}

// soakCounts are the figures of one phase.
type soakCounts struct {
	stalls, arpMoves, arpExplained, bgpWithdrawals, healthyDrops int
	sessionDrops, sessionDropsHealthy                            int
	requests, failed, failedInStall                              map[string]int
	unexplained                                                  []string
}

func (c soakCounts) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%d stalls; arp moves %d (%d by a stalled holder or in its aftermath); bgp withdrawals %d; releases or withdrawals by healthy unstalled hosts %d; BGP sessions lost %d (%d by hosts not stalled)",
		c.stalls, c.arpMoves, c.arpExplained, c.bgpWithdrawals, c.healthyDrops, c.sessionDrops, c.sessionDropsHealthy)
	for _, k := range []string{"arp", "bgp"} {
		fmt.Fprintf(&b, "; %s requests %d, failed %d (%d during a stall or its aftermath)", k, c.requests[k], c.failed[k], c.failedInStall[k])
	}
	return b.String()
}

// count attributes the phase's VIP moves and failed requests to the stalls.
func (l *vipLab) soakCount(tb testing.TB, from, to time.Time, stalls []stall, probes map[string][]probeResult) soakCounts {
	c := soakCounts{stalls: len(stalls), requests: map[string]int{}, failed: map[string]int{}, failedInStall: map[string]int{}}
	inStall := func(t time.Time, host *lbHost, addr netip.Addr) bool {
		for _, s := range stalls {
			if s.covers(t) && (host == nil || s.host == host || s.held[addr]) {
				return true
			}
		}
		return false
	}
	for _, e := range l.vipEvents(tb, from, to) {
		stalledSelf := inStall(e.at, e.host, netip.Addr{})
		switch e.msg {
		case "VIP taken", "VIP released":
			c.arpMoves++
			if inStall(e.at, e.host, e.addr) {
				c.arpExplained++
			} else {
				c.unexplained = append(c.unexplained, e.line)
			}
			if e.msg == "VIP released" && !stalledSelf {
				c.healthyDrops++
			}
		case "BGP session":
			c.sessionDrops++
			if !stalledSelf {
				c.sessionDropsHealthy++
			}
		case "VIP withdrawn":
			c.bgpWithdrawals++
			if !stalledSelf {
				c.healthyDrops++
				c.unexplained = append(c.unexplained, e.line)
			}
		}
	}
	for k, rs := range probes {
		for _, r := range rs {
			c.requests[k]++
			if r.err == nil {
				continue
			}
			c.failed[k]++
			if inStall(r.start, nil, netip.Addr{}) || inStall(r.end, nil, netip.Addr{}) {
				c.failedInStall[k]++
			}
		}
	}
	return c
}

// burnCPUs keeps every core busy until the test ends.
func burnCPUs(tb testing.TB) {
	for range runtime.NumCPU() {
		cmd := exec.Command("sh", "-c", "while :; do :; done")
		if err := cmd.Start(); err != nil {
			tb.Fatal(err)
		}
		tb.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	}
}

// soakRun stalls a random running host once each every, for phase, with
// probers on an arp and a bgp VIP, and returns the phase's figures.
func (l *vipLab) soakRun(tb testing.TB, phase, every time.Duration, rng *rand.Rand) soakCounts {
	tb.Helper()
	const interval = 20 * time.Millisecond
	max := int(phase/interval) + 100
	probes := map[string]*prober{
		"arp": startProber(l.client, netip.AddrPortFrom(arpVIP4, 80), interval, max),
		"bgp": startProber(l.outside, netip.AddrPortFrom(bgpVIP4, 80), interval, max),
	}
	from := time.Now()
	var stalls []stall
	for time.Since(from)+every <= phase {
		time.Sleep(every - soakStall)
		var live []*lbHost
		for _, n := range l.lbs {
			if n.proc != nil && n.proc.Running() {
				live = append(live, n)
			}
		}
		n := live[rng.IntN(len(live))]
		s := stall{host: n, held: map[netip.Addr]bool{}}
		for _, a := range []netip.Addr{arpVIP4, arpVIP6} {
			if ok, err := n.host.HasAddr("eth0", a); err == nil && ok {
				s.held[a] = true
			}
		}
		s.start = time.Now()
		if err := n.proc.Signal(syscall.SIGSTOP); err != nil {
			tb.Fatal(err)
		}
		time.Sleep(soakStall)
		if err := n.proc.Signal(syscall.SIGCONT); err != nil {
			tb.Fatal(err)
		}
		s.end = time.Now()
		stalls = append(stalls, s)
	}
	time.Sleep(soakAftermath)
	to := time.Now()
	results := map[string][]probeResult{}
	for k, p := range probes {
		results[k] = p.finish()
	}
	return l.soakCount(tb, from, to, stalls, results)
}

// TestVIPSoak: no VIP moves and no host withdraws because another host
// stalls, on saturated CPUs, with all hosts alive and with one dead.
func TestVIPSoak(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: a soak of the network lab")
	}
	needTools(t, "bird", "birdc")
	phase, every := soakPhase(t)
	l := newVIPLab(t, labOptions{bgp: true, teapot: true})
	for _, a := range []netip.Addr{bgpVIP4, bgpVIP6} {
		l.waitHops(t, a, l.lbs)
	}
	for _, a := range []netip.Addr{arpVIP4, arpVIP6} {
		l.waitHolder(a, startTimeout)
	}
	burnCPUs(t)
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 18))
	check := func(t *testing.T, c soakCounts) {
		t.Logf("machine shared with other work; %s", c)
		if c.healthyDrops > 0 || len(c.unexplained) > 0 {
			t.Errorf("%d releases or withdrawals by healthy unstalled hosts; moves not caused by a stalled holder:\n%s",
				c.healthyDrops, strings.Join(c.unexplained, "\n"))
		}
	}
	t.Run("all hosts alive", func(t *testing.T) {
		check(t, l.soakRun(t, phase, every, rng))
	})
	t.Run("one host dead", func(t *testing.T) {
		dead := l.lbs[rng.IntN(len(l.lbs))]
		l.kill(dead, true)
		var rest []*lbHost
		for _, n := range l.lbs {
			if n != dead {
				rest = append(rest, n)
			}
		}
		l.waitHops(t, bgpVIP4, rest)
		for _, a := range []netip.Addr{arpVIP4, arpVIP6} {
			l.waitHolder(a, settleTimeout)
		}
		time.Sleep(3 * time.Second) // the survivors settle
		check(t, l.soakRun(t, phase, every, rng))
	})
}
