package scenarios

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
)

// Bounds of the control-plane scenario (loose: it runs under the race
// detector beside other packages on a small machine; the log has the
// figures). Checks run every second and two failures take a member out.
const (
	cpTakeOutBound  = 20 * time.Second // fault to member out, as the VIP holder sees it
	cpRequestGrace  = 2 * time.Second  // requests in flight when a member is taken out
	cpFailoverBound = 10 * time.Second // VIP holder killed to a request served again
	cpRequestTime   = 5 * time.Second  // one request through the VIP
)

// TestControlPlaneBehindVIP puts three real kube-apiservers sharing one
// etcd behind one VIP on three LB hosts, with HTTPS /readyz checks that
// present a client certificate, and runs client-go lists, creates and a
// watch through the VIP, and the tenant's own agent against the VIP,
// while an API server dies, another turns unready, and the LB host holding
// the VIP dies.
func TestControlPlaneBehindVIP(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: builds a network lab with a three-host cluster and three kube-apiservers")
	}
	needTools(t)
	parallelScenarioTaking(t, 45*time.Second)
	bins := kubeBinaries(t)
	// Three API servers and etcd share the cores with the LB hosts: as in
	// the tenant cluster lab, a host is taken for dead after 500ms of
	// silence, not 200ms, so their bursts do not move the VIP.
	l := newVIPLab(t, labOptions{teapot: true, misses: kubeLabMisses})
	cp := startControlPlane(t, l, bins)
	n1 := l.lbs[0]

	tenant := filepath.Join(cp.dir, "tenant.yaml")
	if err := os.WriteFile(tenant, []byte(cpTenantManifest), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := l.cli(n1, "apply", "-f", tenant); err != nil {
		t.Fatal(err)
	}
	members := make([]string, len(cpAPIIPs))
	for i, ip := range cpAPIIPs {
		members[i] = netip.AddrPortFrom(ip, cpPort).String()
	}
	applied, err := l.cli(n1, "lb", "control-plane", "kube", "cp", "--pool", "l2", "--address", cpVIP.String(),
		"--members", strings.Join(members, ","), "--ca-file", cp.caFile,
		"--client-cert", cp.hcCert, "--client-key", cp.hcKey,
		"--check-interval", "1s", "--check-timeout", "800ms", "-o", "yaml")
	if err != nil {
		t.Fatal(err)
	}
	// The checks' client key is stored but never shown: not in Apply's
	// answer, Get or List.
	for what, args := range map[string][]string{"get": {"get", "lb", "kube/cp", "-o", "yaml"}, "list": {"get", "lbs", "-o", "yaml"}} {
		shown, err := l.cli(n1, args...)
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(shown, "PRIVATE KEY") || !strings.Contains(shown, "BEGIN CERTIFICATE") {
			t.Errorf("%s shows the client key, or not the certificates:\n%s", what, shown)
		}
	}
	if strings.Contains(applied, "PRIVATE KEY") || !strings.Contains(applied, "BEGIN CERTIFICATE") {
		t.Errorf("apply's answer shows the client key, or not the certificates:\n%s", applied)
	}

	// Every member up on every host, and client-go served through the VIP.
	for _, m := range members {
		waitMemberOnAll(t, cp, netip.MustParseAddrPort(m), true, startTimeout)
	}
	admin := cp.clientset()
	waitFor(t, startTimeout, "a list through the VIP", func() error {
		ctx, cancel := context.WithTimeout(context.Background(), cpRequestTime)
		defer cancel()
		_, err := admin.CoreV1().Namespaces().List(ctx, metav1.ListOptions{})
		return err
	})

	// The tenant's agent reaches its own API servers through the VIP.
	agent := cp.startAgent(n1)
	t.Logf("the agent, through the VIP, wrote a Service's VIP into its status %s after it was created",
		cp.waitServiceVIP("before-faults").Round(10*time.Millisecond))

	load := startKubeLoad(t, cp, 4)
	time.Sleep(2 * time.Second)

	t.Run("stopped apiserver is taken out", func(t *testing.T) {
		dead := netip.AddrPortFrom(cpAPIIPs[0], cpPort)
		at := time.Now()
		if err := cp.apiservers[0].Signal(syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		out := waitMemberOnAll(t, cp, dead, false, cpTakeOutBound)
		time.Sleep(5 * time.Second)
		during, after := load.failures(at, out.Add(cpRequestGrace)), load.failures(out.Add(cpRequestGrace), time.Now())
		t.Logf("kube-apiserver 1 killed: out on every LB host after %s; %d of %d client requests failed until then (first: %v), %d of %d after",
			out.Sub(at).Round(10*time.Millisecond), len(during), load.count(at, out.Add(cpRequestGrace)), first(during),
			len(after), load.count(out.Add(cpRequestGrace), time.Now()))
		if len(after) > 0 {
			t.Errorf("%d requests failed after the dead member was taken out: %v", len(after), after[0])
		}
	})

	t.Run("unready apiserver is taken out while its port accepts", func(t *testing.T) {
		unready := netip.AddrPortFrom(cpAPIIPs[2], cpPort)
		at := time.Now()
		cp.relay.setCut(true)
		var notReady time.Time
		waitFor(t, cpTakeOutBound, "kube-apiserver 3's /readyz to fail", func() error {
			code, err := cp.readyz(2)
			if err != nil {
				return err
			}
			if code == http.StatusOK {
				return errors.New("still ready")
			}
			notReady = time.Now()
			return nil
		})
		out := waitMemberOnAll(t, cp, unready, false, cpTakeOutBound)
		var c net.Conn
		if err := l.client.Do(func() (err error) { c, err = net.DialTimeout("tcp", unready.String(), 2*time.Second); return err }); err != nil {
			t.Fatalf("the unready apiserver's port does not accept: %v", err)
		}
		c.Close()
		// New connections go to the ready member only.
		for i := range 6 {
			ctx, cancel := context.WithTimeout(context.Background(), cpRequestTime)
			_, err := cp.clientset().CoreV1().ConfigMaps("default").List(ctx, metav1.ListOptions{Limit: 1})
			cancel()
			if err != nil {
				t.Errorf("list %d on a new connection after the unready member was taken out: %v", i, err)
			}
		}
		time.Sleep(3 * time.Second)
		// closeOnDown closed the connections clients had to it: they
		// reconnected to the ready member.
		after := load.failures(out.Add(cpRequestGrace), time.Now())
		t.Logf("kube-apiserver 3 lost etcd: /readyz failing after %s, out on every LB host after %s (%s after /readyz); "+
			"%d of %d client requests failed since the cut (first: %v), %d of %d after it was out",
			notReady.Sub(at).Round(10*time.Millisecond), out.Sub(at).Round(10*time.Millisecond), out.Sub(notReady).Round(10*time.Millisecond),
			len(load.failures(at, time.Now())), load.count(at, time.Now()), first(load.failures(at, time.Now())),
			len(after), load.count(out.Add(cpRequestGrace), time.Now()))
		if len(after) > 0 {
			t.Errorf("%d requests failed after the unready member was taken out (connections to it are closed): %v", len(after), after[0])
		}

		cp.relay.setCut(false)
		back := waitMemberOnAll(t, cp, unready, true, startTimeout)
		t.Logf("kube-apiserver 3 reached etcd again: back in after %s", back.Sub(at).Round(10*time.Millisecond))
	})

	t.Run("VIP holder killed: watches resume without losing events", func(t *testing.T) {
		holder := cpHolder(t, l)
		time.Sleep(2 * time.Second)
		at := l.kill(holder, true)
		var served time.Time
		waitFor(t, cpFailoverBound+cpRequestTime, "a list through the VIP after the holder died", func() error {
			ctx, cancel := context.WithTimeout(context.Background(), cpRequestTime)
			defer cancel()
			_, err := cp.clientset().CoreV1().ConfigMaps("default").List(ctx, metav1.ListOptions{Limit: 1})
			served = time.Now()
			return err
		})
		reconnects := load.watchReconnects()
		waitFor(t, 2*cpFailoverBound, "the watch to reconnect", func() error {
			if load.watchReconnects() == reconnects && load.lastWatchStart().Before(at) {
				return errors.New("the watch has not reconnected")
			}
			return nil
		})
		time.Sleep(3 * time.Second)
		next := cpHolder(t, l)
		fails := load.failures(at, time.Now())
		t.Logf("%s (holding %s) killed: %s holds it; the clients' first request started after the kill was served %s after it; "+
			"%d of %d client requests failed (first: %v); watch reconnected %d times in all",
			holder.id, cpVIP, next.id, load.firstSuccessAfter(at).Sub(at).Round(10*time.Millisecond), len(fails), load.count(at, time.Now()), first(fails), load.watchReconnects())
		if d := served.Sub(at); d > cpFailoverBound {
			t.Errorf("served again %s after the holder died, want under %s", d, cpFailoverBound)
		}
	})

	t.Run("the agent keeps syncing through the VIP", func(t *testing.T) {
		if !agent.Running() {
			t.Fatal("the agent exited")
		}
		t.Logf("after the faults, the agent wrote a new Service's VIP %s after it was created",
			cp.waitServiceVIP("after-faults").Round(10*time.Millisecond))
	})

	// Every object created through the VIP reached the watch, once, in
	// resourceVersion order, across every fault above.
	created := load.stop()
	load.checkWatch(t, created)
}

// waitMemberOnAll waits until every running LB host sees member m as
// healthy (or not) and returns when that was seen.
func waitMemberOnAll(t *testing.T, cp *controlPlane, m netip.AddrPort, healthy bool, timeout time.Duration) time.Time {
	t.Helper()
	var live *lbHost
	for _, n := range cp.lab.lbs {
		if n.proc != nil && n.proc.Running() {
			live = n
			break
		}
	}
	state := map[bool]string{true: "healthy", false: "out"}[healthy]
	waitFor(t, timeout, fmt.Sprintf("%s %s on every LB host", m, state), func() error {
		seen, err := cp.memberHealth(live, m)
		if err != nil {
			return err
		}
		running := 0
		for _, n := range cp.lab.lbs {
			if n.proc == nil || !n.proc.Running() {
				continue
			}
			running++
			if h, ok := seen[n.id]; !ok || h != healthy {
				return fmt.Errorf("%s sees it %v (%v)", n.id, map[bool]string{true: "healthy", false: "out"}[h], seen)
			}
		}
		if running == 0 {
			return errStop(errors.New("no LB host runs"))
		}
		return nil
	})
	return time.Now()
}

// cpHolder returns the one running LB host holding the control plane's VIP.
func cpHolder(t *testing.T, l *vipLab) *lbHost {
	t.Helper()
	var holder *lbHost
	waitFor(t, settleTimeout, "one holder of "+cpVIP.String(), func() error {
		hs, err := l.holders(cpVIP)
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
		return nil
	})
	return holder
}

func first(rs []probeResult) error {
	if len(rs) == 0 {
		return nil
	}
	return rs[0].err
}

// kubeLoad is client-go traffic through the VIP: listers, each on a
// connection of its own, a writer creating ConfigMaps, and a watch of them
// on the writer's connection.
type kubeLoad struct {
	tb          testing.TB
	cancel      context.CancelFunc // the listers and the writer
	wg          sync.WaitGroup
	watchCancel context.CancelFunc
	watchWG     sync.WaitGroup

	mu         sync.Mutex
	results    []probeResult
	created    []string
	events     []watchEvent
	reconnects int
	watchStart time.Time
	watchErr   error
}

type watchEvent struct {
	name string
	rv   uint64
}

func startKubeLoad(tb testing.TB, cp *controlPlane, listers int) *kubeLoad {
	tb.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	wctx, wcancel := context.WithCancel(context.Background())
	ld := &kubeLoad{tb: tb, cancel: cancel, watchCancel: wcancel}
	tb.Cleanup(func() {
		ld.stop()
		wcancel()
		ld.watchWG.Wait()
	})
	writer := cp.clientset()
	cms := writer.CoreV1().ConfigMaps("default")
	lctx, lcancel := context.WithTimeout(ctx, cpRequestTime)
	list, err := cms.List(lctx, metav1.ListOptions{})
	lcancel()
	if err != nil {
		tb.Fatal(err)
	}
	rv := list.ResourceVersion
	for range listers {
		c := cp.clientset()
		ld.wg.Go(func() {
			for ctx.Err() == nil {
				start := time.Now()
				rctx, rcancel := context.WithTimeout(ctx, cpRequestTime)
				_, err := c.CoreV1().ConfigMaps("default").List(rctx, metav1.ListOptions{Limit: 5})
				rcancel()
				ld.record(ctx, start, err)
				sleepCtx(ctx, 100*time.Millisecond)
			}
		})
	}
	ld.wg.Go(func() { ld.write(ctx, writer) })
	ld.watchWG.Go(func() { ld.watch(wctx, writer, rv) })
	return ld
}

func sleepCtx(ctx context.Context, d time.Duration) {
	select {
	case <-ctx.Done():
	case <-time.After(d):
	}
}

// record keeps a request's outcome, unless the load was stopping.
func (ld *kubeLoad) record(ctx context.Context, start time.Time, err error) {
	if ctx.Err() != nil {
		return
	}
	ld.mu.Lock()
	defer ld.mu.Unlock()
	ld.results = append(ld.results, probeResult{start: start, end: time.Now(), err: err})
}

// write creates cm-00000, cm-00001, ... every 100ms, retrying a name until
// it exists.
func (ld *kubeLoad) write(ctx context.Context, c kubernetes.Interface) {
	for i := 0; ctx.Err() == nil; i++ {
		name := fmt.Sprintf("cm-%05d", i)
		for ctx.Err() == nil {
			start := time.Now()
			rctx, cancel := context.WithTimeout(ctx, cpRequestTime)
			_, err := c.CoreV1().ConfigMaps("default").Create(rctx, &corev1.ConfigMap{
				ObjectMeta: metav1.ObjectMeta{Name: name}, Data: map[string]string{"i": strconv.Itoa(i)}}, metav1.CreateOptions{})
			cancel()
			if apierrors.IsAlreadyExists(err) {
				err = nil // an earlier try went through
			}
			ld.record(ctx, start, err)
			if err == nil {
				ld.mu.Lock()
				ld.created = append(ld.created, name)
				ld.mu.Unlock()
				break
			}
			sleepCtx(ctx, 100*time.Millisecond)
		}
		sleepCtx(ctx, 100*time.Millisecond)
	}
}

// watch watches ConfigMaps from rv and, whenever the watch ends, watches
// again from the last resourceVersion it saw, as client-go's informers do.
func (ld *kubeLoad) watch(ctx context.Context, c kubernetes.Interface, rv string) {
	for ctx.Err() == nil {
		ld.mu.Lock()
		ld.watchStart = time.Now()
		ld.mu.Unlock()
		w, err := c.CoreV1().ConfigMaps("default").Watch(ctx, metav1.ListOptions{ResourceVersion: rv, AllowWatchBookmarks: true})
		if err != nil {
			sleepCtx(ctx, 100*time.Millisecond)
			continue
		}
		for ev := range w.ResultChan() {
			switch ev.Type {
			case watch.Added, watch.Modified, watch.Deleted:
				cm, ok := ev.Object.(*corev1.ConfigMap)
				if !ok {
					continue
				}
				rv = cm.ResourceVersion
				n, _ := strconv.ParseUint(rv, 10, 64)
				if ev.Type == watch.Added {
					ld.mu.Lock()
					ld.events = append(ld.events, watchEvent{name: cm.Name, rv: n})
					ld.mu.Unlock()
				}
			case watch.Bookmark:
				if o, ok := ev.Object.(metav1.Object); ok {
					rv = o.GetResourceVersion()
				}
			case watch.Error:
				err := apierrors.FromObject(ev.Object)
				if apierrors.IsResourceExpired(err) || apierrors.IsGone(err) {
					ld.mu.Lock()
					ld.watchErr = fmt.Errorf("watch from resourceVersion %s: %w (events were lost)", rv, err)
					ld.mu.Unlock()
					w.Stop()
					return
				}
			}
		}
		w.Stop()
		if ctx.Err() == nil {
			ld.mu.Lock()
			ld.reconnects++
			ld.mu.Unlock()
		}
	}
}

func (ld *kubeLoad) watchReconnects() int {
	ld.mu.Lock()
	defer ld.mu.Unlock()
	return ld.reconnects
}

func (ld *kubeLoad) lastWatchStart() time.Time {
	ld.mu.Lock()
	defer ld.mu.Unlock()
	return ld.watchStart
}

// failures returns the failed requests that started in [from, to).
func (ld *kubeLoad) failures(from, to time.Time) []probeResult {
	ld.mu.Lock()
	defer ld.mu.Unlock()
	var out []probeResult
	for _, r := range ld.results {
		if r.err != nil && !r.start.Before(from) && r.start.Before(to) {
			out = append(out, r)
		}
	}
	return out
}

// firstSuccessAfter returns the earliest end of a successful request
// that started at or after t.
func (ld *kubeLoad) firstSuccessAfter(t time.Time) time.Time {
	ld.mu.Lock()
	defer ld.mu.Unlock()
	var best time.Time
	for _, r := range ld.results {
		if r.err == nil && !r.start.Before(t) && (best.IsZero() || r.end.Before(best)) {
			best = r.end
		}
	}
	return best
}

// count returns the requests that started in [from, to).
func (ld *kubeLoad) count(from, to time.Time) int {
	ld.mu.Lock()
	defer ld.mu.Unlock()
	n := 0
	for _, r := range ld.results {
		if !r.start.Before(from) && r.start.Before(to) {
			n++
		}
	}
	return n
}

// stop ends the writer and listers (the watch goes on until checkWatch)
// and returns the names created.
func (ld *kubeLoad) stop() []string {
	ld.cancel()
	ld.wg.Wait()
	ld.mu.Lock()
	defer ld.mu.Unlock()
	return slices.Clone(ld.created)
}

// checkWatch requires every created name among the watch's Added events,
// once each, with resourceVersions increasing.
func (ld *kubeLoad) checkWatch(t *testing.T, created []string) {
	t.Helper()
	last := ""
	if len(created) > 0 {
		last = created[len(created)-1]
	}
	waitFor(t, 30*time.Second, "the watch to see the last ConfigMap created", func() error {
		ld.mu.Lock()
		defer ld.mu.Unlock()
		if ld.watchErr != nil {
			return errStop(ld.watchErr)
		}
		for _, ev := range ld.events {
			if ev.name == last {
				return nil
			}
		}
		return fmt.Errorf("%s not seen; %d events", last, len(ld.events))
	})
	ld.watchCancel()
	ld.watchWG.Wait()
	ld.mu.Lock()
	defer ld.mu.Unlock()
	if ld.watchErr != nil {
		t.Fatal(ld.watchErr)
	}
	seen := map[string]int{}
	for i, ev := range ld.events {
		seen[ev.name]++
		if i > 0 && ev.rv <= ld.events[i-1].rv {
			t.Errorf("watch event %d (%s at resourceVersion %d) after %s at %d: out of order", i, ev.name, ev.rv, ld.events[i-1].name, ld.events[i-1].rv)
		}
	}
	var missing, twice []string
	for _, name := range created {
		switch seen[name] {
		case 0:
			missing = append(missing, name)
		case 1:
		default:
			twice = append(twice, name)
		}
	}
	t.Logf("%d ConfigMaps created through the VIP, %d Added events watched across %d reconnects", len(created), len(ld.events), ld.reconnects)
	if len(created) < 50 {
		t.Errorf("only %d ConfigMaps created: the writer did not run through the faults", len(created))
	}
	if len(missing) > 0 {
		t.Errorf("%d created ConfigMaps never reached the watch (lost events): %v", len(missing), missing)
	}
	if len(twice) > 0 {
		t.Errorf("%d ConfigMaps reached the watch more than once: %v", len(twice), twice)
	}
}
