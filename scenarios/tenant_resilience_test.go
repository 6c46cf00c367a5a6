package scenarios

import (
	"fmt"
	"os"
	"strings"
	"testing"
	"time"
)

// memberSets cycles through subsets of the pod addresses, so that every
// update is a change.
func memberSets(addrs []string, port int32, i int) []string {
	var out []string
	for j, a := range addrs {
		if (i+1)&(1<<j) != 0 {
			out = append(out, fmt.Sprintf("%s:%d", a, port))
		}
	}
	return out
}

func addrsOf(members []string) []string {
	out := make([]string, len(members))
	for i, m := range members {
		out[i] = m[:strings.LastIndex(m, ":")]
	}
	return out
}

// waitLogged waits until a process's log holds text.
func waitLogged(t testing.TB, p *proc, text string) {
	t.Helper()
	waitFor(t, syncTimeout, fmt.Sprintf("%s to log %q", p.name, text), func() error {
		data, err := os.ReadFile(p.logPath)
		if err != nil {
			return err
		}
		if !strings.Contains(string(data), text) {
			return fmt.Errorf("not yet")
		}
		return nil
	})
}

func TestTenantSyncResilience(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: starts etcd, kube-apiserver and a three-node cluster")
	}
	parallelScenarioTaking(t, 30*time.Second)
	raceHosts(t) // the agent's streams through reconnects
	l := newTenantLab(t, resilienceLab)
	pods := newPodNet(t, 4)
	creds := l.seedTenant("acme", "acme.example", pods.network())
	agent := l.agent("agent-1", creds)
	const port = 8080
	addrs := []string{pods.addr(0), pods.addr(1), pods.addr(2), pods.addr(3)}
	for i, a := range addrs {
		startPodBackend(t, pods, fmt.Sprintf("backend-%d", i), a, port)
	}
	l.createService(lbService("shop", "web", "teapot-lb.io/lb", 8080, nil))
	l.putSlice(endpointSlice("shop", "web-1", "web", port, addrs[0]))
	vip, _ := l.waitServiceVIP("shop", "web")
	waitReaches(t, vip+":8080", "backend-0")

	// Kill the LB leader while the agent streams: no update is lost. The
	// updates cycle through the subsets of the first three pods; the last
	// one names the fourth alone, a set no earlier update had, so that the
	// load balancer holding it means the agent's every change is written
	// (the stream writes one object's changes in order) and not that it
	// reached an earlier update of the same set while still behind.
	const updates = 30
	var last []string
	var killed *node
	for i := range updates {
		last = memberSets(addrs[:3], port, i%7)
		if i == updates-1 {
			last = []string{fmt.Sprintf("%s:%d", addrs[3], port)}
		}
		l.putSlice(endpointSlice("shop", "web-1", "web", port, addrsOf(last)...))
		if i == updates/3 {
			killed = l.c.waitLeader()
			l.c.kill(killed)
			t.Logf("update %d: killed leader %s", i, killed.id)
			// Started again at once: its ports were picked free, and
			// one left closed for long could become another
			// scenario's pick. The updates go on while it starts and
			// the others elect a leader.
			l.c.restart(killed)
		}
		time.Sleep(20 * time.Millisecond)
	}
	lb := l.waitLB("acme", "svc-shop-web", "the last of the updates", hasMembers("web", last...))
	t.Logf("after %d updates and a leader kill the members are the last set %v", updates, last)
	l.c.waitCaughtUp(killed, 3) // the killed leader is back

	// Restart the agent: nothing is deleted, and a change made while it
	// was away arrives.
	gen, addr := lb.GetMeta().GetGeneration(), lb.GetStatus().GetAddress()
	agent.stop()
	l.putSlice(endpointSlice("shop", "web-1", "web", port, addrs[2]))
	time.Sleep(time.Second)
	if got, err := l.lb("acme", "svc-shop-web"); err != nil || got == nil || got.GetMeta().GetGeneration() != gen {
		t.Fatalf("while the agent was stopped: %v %v, want the load balancer unchanged at generation %d", got, err, gen)
	}
	restarted := l.agent("agent-2", creds)
	waitLogged(t, restarted, "connected to the LB cluster")
	lb = l.waitLB("acme", "svc-shop-web", "the change made while the agent was away", hasMembers("web", fmt.Sprintf("%s:%d", addrs[2], port)))
	if lb.GetStatus().GetAddress() != addr || lb.GetMeta().GetGeneration() != gen+1 {
		t.Errorf("after the agent's restart: VIP %s generation %d, want VIP %s generation %d (one change, nothing recreated)",
			lb.GetStatus().GetAddress(), lb.GetMeta().GetGeneration(), addr, gen+1)
	}
	if got, _, _ := l.serviceVIP("shop", "web"); got != vip {
		t.Errorf("Service status after the agent's restart: %q, want %s", got, vip)
	}

	// Stop the tenant's API server: the LB keeps serving the last config,
	// also after the agent gives up its lease and exits (in a cluster it
	// restarts and waits for the API server).
	waitReaches(t, vip+":8080", "backend-2")
	l.k.apiserver.kill()
	down := time.Now()
	var exited time.Duration
	for i := 0; exited == 0 || time.Since(down) < exited+time.Second; i++ {
		// Each answer may take a loaded machine's time: what counts is
		// that it comes, from the last config.
		if name, err := httpNameWithin(vip+":8080", "", 10*time.Second); err != nil || name != "backend-2" {
			t.Fatalf("request %d, %s after the API server stopped: %q %v", i, time.Since(down).Round(time.Millisecond), name, err)
		}
		if exited == 0 && !restarted.running() {
			exited = time.Since(down)
		}
		if time.Since(down) > syncTimeout {
			t.Fatal("the agent kept its lease with the API server down")
		}
		time.Sleep(200 * time.Millisecond)
	}
	if got, err := l.lb("acme", "svc-shop-web"); err != nil || got == nil || got.GetMeta().GetGeneration() != gen+1 {
		t.Errorf("load balancer with the API server down: %v %v, want it unchanged", got, err)
	}
	t.Logf("API server down: the agent gave up its lease and exited after %s; the LB kept serving %s for %s",
		exited.Round(time.Millisecond), vip, time.Since(down).Round(time.Millisecond))
}
