package scenarios

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"
)

// block drops, on n's host, every packet matching rule (an nft match such
// as "udp dport 7946") in both directions; unblock removes it again.
func (l *vipLab) block(tb testing.TB, n *lbHost, name string, matches ...string) {
	tb.Helper()
	var b strings.Builder
	fmt.Fprintf(&b, "table inet %s {\n\tchain in { type filter hook input priority 0;\n", name)
	for _, m := range matches {
		fmt.Fprintf(&b, "\t\t%s drop;\n", m)
	}
	b.WriteString("\t}\n\tchain out { type filter hook output priority 0;\n")
	for _, m := range matches {
		fmt.Fprintf(&b, "\t\t%s drop;\n", m)
	}
	b.WriteString("\t}\n}\n")
	rules := filepath.Join(l.dir, n.id+"-"+name+".nft")
	if err := os.WriteFile(rules, []byte(b.String()), 0o644); err != nil {
		tb.Fatal(err)
	}
	if out, err := n.host.Exec(tb.Context(), "nft", "-f", rules); err != nil {
		tb.Fatalf("nft -f %s: %v: %s", rules, err, out)
	}
	tb.Cleanup(func() {
		// Gone already when the test unblocked it.
		_, _ = n.host.Exec(context.Background(), "nft", "delete", "table", "inet", name)
	})
}

func (l *vipLab) unblock(tb testing.TB, n *lbHost, name string) {
	tb.Helper()
	if out, err := n.host.Exec(tb.Context(), "nft", "delete", "table", "inet", name); err != nil {
		tb.Fatalf("nft delete table inet %s: %v: %s", name, err, out)
	}
}

// logMoves returns the lines of the log of n's current process that
// record a VIP move of one of the kinds ("VIP announced", ...).
func logMoves(n *lbHost, kinds ...string) []string {
	data, _ := os.ReadFile(n.logPath)
	var out []string
	for line := range strings.Lines(string(data)) {
		if strings.HasPrefix(line, "==== ") {
			out = out[:0] // a new process starts here
		}
		for _, k := range kinds {
			if strings.Contains(line, "msg=\""+k+"\"") {
				out = append(out, strings.TrimSpace(line))
			}
		}
	}
	return out
}

// holdsAnyARP reports which of the lab's arp VIPs n has on eth0.
func holdsAnyARP(n *lbHost) ([]netip.Addr, error) {
	var out []netip.Addr
	for _, a := range []netip.Addr{arpVIP4, arpVIP6} {
		ok, err := n.host.HasAddr("eth0", a)
		if err != nil {
			return nil, err
		}
		if ok {
			out = append(out, a)
		}
	}
	return out, nil
}

// killClean kills n's process and waits until the VIP addresses it left
// on eth0 have expired (their lifetime is 5s), so that whatever n holds
// afterwards its next process put there.
func (l *vipLab) killClean(t *testing.T, n *lbHost) {
	t.Helper()
	l.kill(n, false)
	waitFor(t, 15*time.Second, n.id+"'s addresses expire", func() error {
		held, err := holdsAnyARP(n)
		if err == nil && len(held) > 0 {
			err = fmt.Errorf("still has %v", held)
		}
		return err
	})
}

// TestVIPRestart covers a host that restarts while part of its network
// is cut: it holds and announces nothing before it has heard the Raft
// leader, and its BGP routes do not depend on the VIP heartbeats.
func TestVIPRestart(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: builds a network lab with a three-host cluster and a BGP router")
	}
	needTools(t, "bird", "birdc", "nft")
	l := newVIPLab(t, labOptions{bgp: true, teapot: true})
	for _, a := range []netip.Addr{bgpVIP4, bgpVIP6} {
		l.waitHops(t, a, l.lbs)
	}
	for _, a := range []netip.Addr{arpVIP4, arpVIP6} {
		l.waitHolder(a, startTimeout)
	}

	t.Run("Raft cut: nothing held or announced until the leader is heard", func(t *testing.T) {
		n := l.lbs[2]
		l.killClean(t, n)
		l.waitHops(t, bgpVIP4, l.lbs[:2])
		l.block(t, n, "raftcut", "tcp dport 7300", "tcp sport 7300")
		l.start(n)
		// Its heartbeats and BGP sessions pass; its state on disk is
		// complete. Without the leader it still may not act on it.
		deadline := time.Now().Add(4 * time.Second)
		for time.Now().Before(deadline) {
			hops, err := l.kernelHops(bgpVIP4)
			if err != nil {
				t.Fatal(err)
			}
			if slices.Contains(hops, hopOf(n, bgpVIP4)) {
				t.Fatalf("the router has a route via %s, which has not heard the Raft leader", n.id)
			}
			held, err := holdsAnyARP(n)
			if err != nil {
				t.Fatal(err)
			}
			if len(held) > 0 {
				t.Fatalf("%s holds %v before it heard the Raft leader", n.id, held)
			}
			time.Sleep(20 * time.Millisecond)
		}
		if moves := logMoves(n, "VIP announced", "VIP taken"); len(moves) > 0 {
			t.Fatalf("%s moved VIPs before it heard the leader:\n%s", n.id, strings.Join(moves, "\n"))
		}
		l.unblock(t, n, "raftcut")
		l.waitHops(t, bgpVIP4, l.lbs)
		l.waitHops(t, bgpVIP6, l.lbs)
	})

	t.Run("heartbeats cut: the BGP routes come back, no arp VIP is taken", func(t *testing.T) {
		n := l.lbs[2]
		l.killClean(t, n)
		l.waitHops(t, bgpVIP4, l.lbs[:2])
		l.block(t, n, "hbcut", "udp dport 7946")
		l.start(n)
		l.waitHops(t, bgpVIP4, l.lbs)
		l.waitHops(t, bgpVIP6, l.lbs)
		// It hears no peer: no majority, so no arp VIP.
		held, err := holdsAnyARP(n)
		if err != nil {
			t.Fatal(err)
		}
		if len(held) > 0 {
			t.Fatalf("%s holds %v while it hears no peer", n.id, held)
		}
		l.unblock(t, n, "hbcut")
		for _, a := range []netip.Addr{arpVIP4, arpVIP6} {
			l.waitHolder(a, settleTimeout)
		}
	})

	t.Run("one host dead, a survivor stalls: nothing moves, no route is withdrawn", func(t *testing.T) {
		dead, stalled, healthy := l.lbs[0], l.lbs[1], l.lbs[2]
		l.kill(dead, true)
		l.waitHops(t, bgpVIP4, []*lbHost{stalled, healthy})
		l.waitHops(t, bgpVIP6, []*lbHost{stalled, healthy})
		// The arp VIPs stay where they are too: the host that holds one
		// keeps it through the other's stall, and the stalled one, if it
		// holds one, keeps it (no one can take it: one host alone is no
		// majority).
		arpHolders := map[netip.Addr]*lbHost{}
		for _, a := range []netip.Addr{arpVIP4, arpVIP6} {
			arpHolders[a] = l.waitHolder(a, settleTimeout)
		}
		time.Sleep(3 * time.Second) // the survivors settle with each other
		before := len(logMoves(healthy, "VIP withdrawn"))
		arpBefore := map[*lbHost]int{}
		for _, n := range []*lbHost{stalled, healthy} {
			arpBefore[n] = len(logMoves(n, "VIP released", "VIP taken"))
		}
		for range 5 {
			if err := stalled.proc.Signal(syscall.SIGSTOP); err != nil {
				t.Fatal(err)
			}
			end := time.Now().Add(200 * time.Millisecond)
			for time.Now().Before(end) {
				hops, err := l.kernelHops(bgpVIP4)
				if err != nil {
					t.Fatal(err)
				}
				if !slices.Contains(hops, hopOf(healthy, bgpVIP4)) {
					t.Errorf("the route via the healthy %s left the router while %s was stalled", healthy.id, stalled.id)
				}
				time.Sleep(5 * time.Millisecond)
			}
			if err := stalled.proc.Signal(syscall.SIGCONT); err != nil {
				t.Fatal(err)
			}
			time.Sleep(time.Second)
		}
		if moves := logMoves(healthy, "VIP withdrawn"); len(moves) > before {
			t.Errorf("the healthy %s withdrew routes:\n%s", healthy.id, strings.Join(moves[before:], "\n"))
		}
		for _, n := range []*lbHost{stalled, healthy} {
			if moves := logMoves(n, "VIP released", "VIP taken"); len(moves) > arpBefore[n] {
				t.Errorf("%s moved arp VIPs:\n%s", n.id, strings.Join(moves[arpBefore[n]:], "\n"))
			}
		}
		for a, h := range arpHolders {
			hs, err := l.holders(a)
			if err != nil {
				t.Fatal(err)
			}
			if len(hs) != 1 || hs[0] != h {
				t.Errorf("%s held by %v after the stalls, want %s still", a, ids(hs), h.id)
			}
		}
		l.revive(dead)
		// A stall that outlasts BFD at the router resets the stalled
		// host's session; it dials again within seconds.
		waitFor(t, time.Minute, "every host's route back on the router", func() error {
			hops, err := l.kernelHops(bgpVIP4)
			if err == nil && len(hops) != len(l.lbs) {
				err = fmt.Errorf("next hops %v", hops)
			}
			return err
		})
	})
}
