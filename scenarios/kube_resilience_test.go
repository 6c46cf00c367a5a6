package scenarios

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"net"
	"net/netip"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/teapot-lb/teapot-lb/scenarios/kubecluster"
	"github.com/teapot-lb/teapot-lb/scenarios/netlab"
)

// echoProber asks an echo Service over and over from the client and
// records who answered when.
type echoProber struct {
	mu       sync.Mutex
	sent     int
	failures []probeFailure
	firstBy  map[string]time.Time
	stop     chan struct{}
	done     chan struct{}
}

func startEchoProber(h *netlab.Host, to netip.AddrPort, interval time.Duration) *echoProber {
	p := &echoProber{firstBy: map[string]time.Time{}, stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(p.done)
		var wg sync.WaitGroup
		defer wg.Wait()
		tick := time.NewTicker(interval)
		defer tick.Stop()
		for {
			wg.Go(func() {
				sent := time.Now()
				a, err := echoHTTP(h, to, 3*time.Second)
				now := time.Now()
				p.mu.Lock()
				defer p.mu.Unlock()
				p.sent++
				if err != nil {
					p.failures = append(p.failures, probeFailure{sent, now, err})
					return
				}
				if _, ok := p.firstBy[a.pod]; !ok {
					p.firstBy[a.pod] = now
				}
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

// reportFailures fails t when any request failed, naming the first few.
func reportFailures(t *testing.T, when string, failures []probeFailure) {
	t.Helper()
	for i, f := range failures {
		if i == 5 {
			t.Errorf("... %d more", len(failures)-5)
			break
		}
		t.Errorf("a request failed %s, at %s", when, f)
	}
}

// probeFailure is a request that failed: when it was sent, when it
// failed, and why.
type probeFailure struct {
	sent, at time.Time
	err      error
}

func (f probeFailure) String() string {
	return f.at.Format("15:04:05.000") + " (sent " + f.sent.Format("15:04:05.000") + "): " + f.err.Error()
}

func (p *echoProber) finish() (sent int, failures []probeFailure) {
	close(p.stop)
	<-p.done
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.sent, p.failures
}

func (p *echoProber) first(pod string) (time.Time, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	t, ok := p.firstBy[pod]
	return t, ok
}

// percentiles returns the p50 and p99 of ds.
func percentiles(ds []time.Duration) (time.Duration, time.Duration) {
	if len(ds) == 0 {
		return 0, 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	at := func(q float64) time.Duration { return s[min(len(s)-1, int(q*float64(len(s))))] }
	return at(0.50), at(0.99)
}

// scaleEcho sets the replicas of the echo Deployment.
func (l *kubeLab) scaleEcho(t *testing.T, replicas int32) {
	t.Helper()
	ctx, cancel := l.ctx()
	defer cancel()
	patch := fmt.Appendf(nil, `{"spec":{"replicas":%d}}`, replicas)
	if _, err := l.k.Client.AppsV1().Deployments("shop").Patch(ctx, "echo", types.StrategicMergePatchType, patch, metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
}

// testScale scales the echo Deployment 2 -> 10 -> 1 while the client
// sends a request every 20ms to its LoadBalancer Service: every new pod
// must get traffic; it reports the time from a pod's Ready to its first
// answer and the requests that failed.
func (l *kubeLab) testScale(t *testing.T, vip netip.Addr) {
	before := l.podNodes("shop", "echo")
	counted := l.sideStats()
	cpu := l.sampleCPU()
	p := startEchoProber(l.client, netip.AddrPortFrom(vip, 80), 20*time.Millisecond)
	l.scaleEcho(t, 10)
	l.waitDeployment("shop", "echo", 10)
	var lags []time.Duration
	waitFor(t, kubeLabTimeout, "traffic on all 10 pods", func() error {
		ctx, cancel := l.ctx()
		defer cancel()
		pods, err := l.k.Client.CoreV1().Pods("shop").List(ctx, metav1.ListOptions{LabelSelector: "app=echo"})
		if err != nil {
			return err
		}
		lags = lags[:0]
		for _, pod := range pods.Items {
			if pod.DeletionTimestamp != nil {
				continue
			}
			_, old := before[pod.Name]
			var ready time.Time
			for _, c := range pod.Status.Conditions {
				if c.Type == corev1.PodReady && c.Status == corev1.ConditionTrue {
					ready = c.LastTransitionTime.Time
				}
			}
			first, ok := p.first(pod.Name)
			if ready.IsZero() || !ok {
				return fmt.Errorf("no traffic yet on %s", pod.Name)
			}
			// Ready is stamped in whole seconds; a pod that answered
			// before its Ready second ended counts as 0.
			if !old {
				lags = append(lags, max(0, first.Sub(ready.Add(time.Second))))
			}
		}
		return nil
	})
	p50, p99 := percentiles(lags)
	t.Logf("scaled 2 -> 10: from a pod's Ready (second resolution) to its first answer: p50 %s, p99 %s over %d new pods",
		p50.Round(time.Millisecond), p99.Round(time.Millisecond), len(lags))
	down := time.Now()
	l.scaleEcho(t, 1)
	l.waitDeployment("shop", "echo", 1)
	waitFor(t, kubeLabTimeout, "the terminating pods gone", func() error {
		if n := len(l.podNodes("shop", "echo")); n != 1 {
			return fmt.Errorf("%d pods", n)
		}
		return nil
	})
	sent, failures := p.finish()
	var upFailed, downFailed []probeFailure
	for _, f := range failures {
		if f.at.Before(down) {
			upFailed = append(upFailed, f)
		} else {
			downFailed = append(downFailed, f)
		}
	}
	t.Logf("scaled 2 -> 10 -> 1 under %d requests: %d failed while scaling up, %d while scaling down", sent, len(upFailed), len(downFailed))
	cpu.finish(t, failures)
	if len(failures) > 0 {
		l.logLBSide(t, counted)
	}
	reportFailures(t, "while scaling", failures)
	l.waitEcho("an answer after scaling to 1", func() (echoAnswer, error) {
		return echoHTTP(l.client, netip.AddrPortFrom(vip, 80), 2*time.Second)
	})
}

// testManyServices creates 20 LoadBalancer Services at once and measures,
// for each, the time from create to a VIP in its status and to the first
// good answer through that VIP.
func (l *kubeLab) testManyServices(t *testing.T) {
	const n = 20
	type result struct{ vip, answer time.Duration }
	results := make([]result, n)
	var wg sync.WaitGroup
	errs := make(chan error, n)
	began := time.Now()
	for i := range n {
		wg.Go(func() {
			svc := lbServiceFor("shop", fmt.Sprintf("many-%02d", i), "echo", corev1.ProtocolTCP, 80)
			ctx, cancel := l.ctx()
			defer cancel()
			start := time.Now()
			if _, err := l.k.Client.CoreV1().Services("shop").Create(ctx, svc, metav1.CreateOptions{}); err != nil {
				errs <- err
				return
			}
			deadline := start.Add(kubeLabTimeout)
			var vip netip.Addr
			for !vip.IsValid() {
				if time.Now().After(deadline) {
					errs <- fmt.Errorf("%s: no VIP after %s", svc.Name, kubeLabTimeout)
					return
				}
				got, err := l.k.Client.CoreV1().Services("shop").Get(ctx, svc.Name, metav1.GetOptions{})
				if err == nil && len(got.Status.LoadBalancer.Ingress) > 0 {
					vip, _ = netip.ParseAddr(got.Status.LoadBalancer.Ingress[0].IP)
				}
				if !vip.IsValid() {
					time.Sleep(20 * time.Millisecond)
				}
			}
			results[i].vip = time.Since(start)
			for {
				if _, err := echoHTTP(l.client, netip.AddrPortFrom(vip, 80), time.Second); err == nil {
					break
				}
				if time.Now().After(deadline) {
					errs <- fmt.Errorf("%s: no answer through %s after %s", svc.Name, vip, kubeLabTimeout)
					return
				}
				time.Sleep(20 * time.Millisecond)
			}
			results[i].answer = time.Since(start)
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	var vips, answers []time.Duration
	for _, r := range results {
		vips, answers = append(vips, r.vip), append(answers, r.answer)
	}
	v50, v99 := percentiles(vips)
	a50, a99 := percentiles(answers)
	t.Logf("%d Services created at once: create -> VIP in status p50 %s p99 %s; create -> first good answer p50 %s p99 %s; all served after %s",
		n, v50.Round(time.Millisecond), v99.Round(time.Millisecond), a50.Round(time.Millisecond), a99.Round(time.Millisecond), time.Since(began).Round(time.Millisecond))
}

// testDelete deletes every Service of the namespace: the LB cluster frees
// their VIPs (no host holds one) and no NodePort Service of the agent is
// left.
func (l *kubeLab) testDelete(t *testing.T) {
	ctx, cancel := l.ctx()
	defer cancel()
	svcs, err := l.k.Client.CoreV1().Services("shop").List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var vips []netip.Addr
	for _, s := range svcs.Items {
		for _, in := range s.Status.LoadBalancer.Ingress {
			if a, err := netip.ParseAddr(in.IP); err == nil {
				vips = append(vips, a)
			}
		}
		if err := l.k.Client.CoreV1().Services("shop").Delete(ctx, s.Name, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	if len(vips) < 20 {
		t.Fatalf("only %d Services had a VIP before the delete", len(vips))
	}
	began := time.Now()
	waitFor(t, kubeLabTimeout, "every VIP of the deleted Services released", func() error {
		for _, v := range vips {
			hs, err := l.holders(v)
			if err != nil {
				return err
			}
			if len(hs) > 0 {
				return fmt.Errorf("%s still held by %s", v, hs[0].id)
			}
		}
		return nil
	})
	t.Logf("%d Services deleted: every VIP released %s later", len(vips), time.Since(began).Round(time.Millisecond))
	// The wait may outlast ctx (cliTimeout), made before the deletes.
	ctx, cancel = l.ctx()
	defer cancel()
	left, err := l.k.Client.CoreV1().Services("").List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/managed-by=teapot-lb-agent"})
	if err != nil {
		t.Fatal(err)
	}
	if len(left.Items) > 0 {
		t.Errorf("the agent's NodePort Services are left: %s/%s ...", left.Items[0].Namespace, left.Items[0].Name)
	}
}

// leaseHolder returns the agent replica holding the Lease.
func (l *kubeLab) leaseHolder() (string, error) {
	ctx, cancel := l.ctx()
	defer cancel()
	lease, err := l.k.Client.CoordinationV1().Leases("teapot-lb-system").Get(ctx, "teapot-lb-agent", metav1.GetOptions{})
	if err != nil {
		return "", err
	}
	if lease.Spec.HolderIdentity == nil || *lease.Spec.HolderIdentity == "" {
		return "", errors.New("no holder")
	}
	return *lease.Spec.HolderIdentity, nil
}

// testKillAgent deletes the active agent pod at once (no grace) while the
// client is served: the data plane does not depend on the agent, so no
// request fails, and the other replica takes the Lease.
func (l *kubeLab) testKillAgent(t *testing.T, vip netip.Addr) {
	old, err := l.leaseHolder()
	if err != nil {
		t.Fatal(err)
	}
	counted := l.sideStats()
	cpu := l.sampleCPU()
	p := startEchoProber(l.client, netip.AddrPortFrom(vip, 80), 20*time.Millisecond)
	ctx, cancel := l.ctx()
	defer cancel()
	began := time.Now()
	if err := l.k.Client.CoreV1().Pods("teapot-lb-system").Delete(ctx, old, metav1.DeleteOptions{GracePeriodSeconds: ptrTo(int64(0))}); err != nil {
		t.Fatal(err)
	}
	var next string
	waitFor(t, kubeLabTimeout, "another agent replica takes the Lease", func() error {
		h, err := l.leaseHolder()
		if err != nil {
			return err
		}
		if h == old {
			return fmt.Errorf("%s still holds it", h)
		}
		next = h
		return nil
	})
	took := time.Since(began)
	time.Sleep(2 * time.Second)
	sent, failures := p.finish()
	t.Logf("active agent pod %s deleted: %s leads after %s; %d requests, %d failed", old, next, took.Round(time.Millisecond), sent, len(failures))
	cpu.finish(t, failures)
	if len(failures) > 0 {
		l.logLBSide(t, counted)
	}
	reportFailures(t, "while the agent failed over", failures)
	l.waitDeployment("teapot-lb-system", "teapot-lb-agent", 2)
}

// testStopAPIServer stops the tenant's kube-apiserver for 10s while the
// client is served: nothing on the LB side depends on it, so no request
// fails; the cluster carries on once it is back.
func (l *kubeLab) testStopAPIServer(t *testing.T, vip netip.Addr) {
	counted := l.sideStats()
	cpu := l.sampleCPU()
	p := startEchoProber(l.client, netip.AddrPortFrom(vip, 80), 20*time.Millisecond)
	began := time.Now()
	l.k.StopAPIServer()
	stopped := time.Now()
	time.Sleep(10 * time.Second)
	if err := l.k.StartAPIServer(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), kubeLabTimeout)
	defer cancel()
	if err := l.k.WaitAPI(ctx); err != nil {
		t.Fatal(err)
	}
	sent, failures := p.finish()
	t.Logf("tenant kube-apiserver stopped for 10s: %d requests, %d failed; first request %s, stop began then and took %s",
		sent, len(failures), began.Format("15:04:05.000"), stopped.Sub(began).Round(time.Millisecond))
	cpu.finish(t, failures)
	if len(failures) > 0 {
		l.logLBSide(t, counted)
	}
	reportFailures(t, "while the tenant's apiserver was stopped", failures)
	if err := l.k.WaitNodesReady(ctx, kubeLabTimeout); err != nil {
		t.Fatal(err)
	}
	l.waitKubeProxies(t)
}

// kubeProxyResumeTimeout bounds the time every kube-proxy takes to follow a
// restarted API server: its watches resume with backoff, and each one
// (Services, EndpointSlices) on its own.
const kubeProxyResumeTimeout = 5 * time.Minute

// waitKubeProxies waits until the kube-proxy of every node follows the
// API server again, after a restart: until it does, a new pod gets no
// traffic through that node's NodePorts, whatever the LB sends there. A
// Service created now must show in each kube-proxy's counts of Service and
// EndpointSlice changes.
func (l *kubeLab) waitKubeProxies(t *testing.T) {
	t.Helper()
	changes := func(n *kubecluster.Node) (services, endpoints float64, err error) {
		s, err := scrapeAddr("127.0.0.1:10249", func(ctx context.Context, network, addr string) (c net.Conn, err error) {
			err = n.Host.Do(func() (err error) {
				var d net.Dialer
				c, err = d.DialContext(ctx, network, addr)
				return err
			})
			return c, err
		})
		if err != nil {
			return 0, 0, err
		}
		return sum(s, "kubeproxy_sync_proxy_rules_service_changes_total", nil), sum(s, "kubeproxy_sync_proxy_rules_endpoint_changes_total", nil), nil
	}
	type counts struct{ services, endpoints float64 }
	var before []counts
	for _, n := range l.k.Nodes {
		s, e, err := changes(n)
		if err != nil {
			t.Fatalf("kube-proxy metrics on %s: %v", n.Name, err)
		}
		before = append(before, counts{s, e})
	}
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "kube-proxy-probe"},
		Spec: corev1.ServiceSpec{
			Selector: map[string]string{"app": "echo"},
			Ports:    []corev1.ServicePort{{Name: "http", Protocol: corev1.ProtocolTCP, Port: 80, TargetPort: intstr.FromString("http")}},
		},
	}
	ctx, cancel := l.ctx()
	_, err := l.k.Client.CoreV1().Services("shop").Create(ctx, svc, metav1.CreateOptions{})
	cancel()
	if err != nil {
		t.Fatalf("create Service shop/kube-proxy-probe: %v", err)
	}
	began := time.Now()
	waitFor(t, kubeProxyResumeTimeout, "every kube-proxy following the restarted API server", func() error {
		for i, n := range l.k.Nodes {
			s, e, err := changes(n)
			if err != nil {
				return err
			}
			if s <= before[i].services || e <= before[i].endpoints {
				return fmt.Errorf("kube-proxy on %s has not seen a new Service and its EndpointSlice", n.Name)
			}
		}
		return nil
	})
	t.Logf("every kube-proxy saw a new Service and its endpoints %s after it was created", time.Since(began).Round(time.Millisecond))
	ctx, cancel = l.ctx()
	defer cancel()
	if err := l.k.Client.CoreV1().Services("shop").Delete(ctx, "kube-proxy-probe", metav1.DeleteOptions{}); err != nil {
		t.Fatalf("delete Service shop/kube-proxy-probe: %v", err)
	}
}

// holderBudget bounds the failover of a killed VIP holder as the client
// sees it: requests in flight when it died time out after 3s, and the
// takeover takes ~100ms, with room for a loaded machine.
const holderBudget = 4 * time.Second

// testKillHolder kills the LB host holding the Service's VIP and unplugs
// it: another host takes the VIP and the client is served again; the
// failed requests are those of the failover.
func (l *kubeLab) testKillHolder(t *testing.T, vip netip.Addr) {
	holder := l.waitHolder(vip, kubeLabTimeout)
	p := startEchoProber(l.client, netip.AddrPortFrom(vip, 80), 20*time.Millisecond)
	time.Sleep(time.Second)
	at := l.kill(holder, true)
	next := l.waitHolder(vip, kubeLabTimeout)
	took := time.Since(at)
	time.Sleep(2 * time.Second)
	sent, failures := p.finish()
	var window time.Duration
	for _, f := range failures {
		window = max(window, f.at.Sub(at))
		if f.at.Before(at) {
			t.Errorf("a request failed before the kill, at %s", f)
		}
	}
	t.Logf("VIP holder %s killed and unplugged: %s holds %s after %s; %d requests, %d failed (the failover), the last %s after the kill",
		holder.id, next.id, vip, took.Round(time.Millisecond), sent, len(failures), window.Round(time.Millisecond))
	if next == holder {
		t.Fatal("the dead host still holds the VIP")
	}
	// The failover budget: the takeover is ~100ms (vip/DESIGN.md); a
	// request that failed later than holderBudget after the kill is not
	// the failover's.
	if window > holderBudget {
		t.Errorf("requests failed until %s after the kill; the failover budget is %s", window.Round(time.Millisecond), holderBudget)
	}
	l.revive(holder)
	l.waitMember(holder)
}

// sideStats is what the LB hosts and the nodes counted, for logLBSide
// to show what changed: by host, the LB's counters that explain a failed
// request (metrics) and the kernel's TCP and conntrack counters (netStats).
type sideStats map[string]map[string]float64

// lbCounters are the LB's metrics that explain a failed request: member
// connects that failed or timed out, passive ejections, members down, and
// the tenant's time held at its CPU budget.
var lbCounters = []string{"teapot_lb_member_requests_total", "teapot_lb_member_failures_total", "teapot_lb_member_ejections_total", "teapot_lb_tenant_cpu_throttled_seconds_total"}

// sideStats reads every LB host's and node's counters now.
func (l *kubeLab) sideStats() sideStats {
	st := sideStats{}
	for _, n := range l.lbs {
		m := map[string]float64{}
		if s, err := l.scrape(n); err != nil {
			m["/metrics failed: "+err.Error()] = 1
		} else {
			for _, name := range lbCounters {
				for _, x := range s[name] {
					m[fmt.Sprintf("%s%v", name, x.labels)] = x.value
				}
			}
			for _, x := range s["teapot_lb_member_up"] {
				if x.value == 0 {
					m[fmt.Sprintf("teapot_lb_member_up%v == 0", x.labels)] = 1
				}
			}
		}
		for k, v := range netStats(n.host) {
			m[k] = v
		}
		st["LB host "+n.id] = m
	}
	for _, nd := range l.k.Nodes {
		st["node "+nd.Name] = netStats(nd.Host)
	}
	st["CPU seconds"] = l.cpuSeconds()
	return st
}

// cpuSeconds is the CPU time spent so far by each LB host's process, by
// the tests' own process (the client), by the machine (every CPU, busy
// or not), and by every tenant cluster's nodes and pods on it: beside a
// request that timed out, it tells who had the CPUs meanwhile.
func (l *kubeLab) cpuSeconds() map[string]float64 {
	m := map[string]float64{}
	for _, n := range l.lbs {
		if n.proc != nil {
			if u, err := procUsage(n.proc.Pid()); err == nil {
				m["LB host "+n.id] = u.cpu.Seconds()
			}
		}
	}
	if u, err := procUsage(os.Getpid()); err == nil {
		m["tests (client)"] = u.cpu.Seconds()
	}
	if b, err := os.ReadFile("/proc/stat"); err == nil {
		if f := strings.Fields(strings.SplitN(string(b), "\n", 2)[0]); len(f) > 4 && f[0] == "cpu" {
			var busy, all float64
			for i, v := range f[1:min(len(f), 9)] { // to steal: guest time is in user's
				x, _ := strconv.ParseFloat(v, 64)
				all += x
				if i != 3 && i != 4 { // idle, iowait
					busy += x
				}
			}
			m["machine busy"], m["machine all"] = busy/100, all/100
		}
	}
	for k, v := range kubecluster.CPUUse() {
		m["cgroup "+k] = v.Seconds()
	}
	return m
}

// cpuSampler takes cpuSeconds every cpuSampleEvery while a prober runs,
// so that a request that failed can be set beside who had the CPUs in
// the seconds it waited.
type cpuSampler struct {
	mu      sync.Mutex
	samples []cpuSample
	stop    chan struct{}
	done    chan struct{}
}

type cpuSample struct {
	at  time.Time
	use map[string]float64
}

const cpuSampleEvery = 250 * time.Millisecond

func (l *kubeLab) sampleCPU() *cpuSampler {
	c := &cpuSampler{stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(c.done)
		tick := time.NewTicker(cpuSampleEvery)
		defer tick.Stop()
		for {
			s := cpuSample{time.Now(), l.cpuSeconds()}
			c.mu.Lock()
			c.samples = append(c.samples, s)
			c.mu.Unlock()
			select {
			case <-c.stop:
				return
			case <-tick.C:
			}
		}
	}()
	return c
}

// finish stops the sampler and, when requests failed, logs the CPU time
// each process and pod took from the last sample before the first
// failed request was sent to the first sample after it failed: the ten
// that took the most.
func (c *cpuSampler) finish(t *testing.T, failures []probeFailure) {
	t.Helper()
	close(c.stop)
	<-c.done
	if len(failures) == 0 {
		return
	}
	f := failures[0]
	c.mu.Lock()
	defer c.mu.Unlock()
	from, to := -1, -1
	for i, s := range c.samples {
		if !s.at.After(f.sent) {
			from = i
		}
		if to < 0 && s.at.After(f.at) {
			to = i
		}
	}
	if from < 0 || to < 0 {
		t.Logf("CPU use: no samples around the first failed request (%d samples)", len(c.samples))
		return
	}
	a, b := c.samples[from], c.samples[to]
	type use struct {
		who string
		s   float64
	}
	var uses []use
	for k, v := range b.use {
		if k == "machine all" {
			continue
		}
		if d := v - a.use[k]; d > 0 {
			uses = append(uses, use{k, d})
		}
	}
	slices.SortFunc(uses, func(x, y use) int { return cmp.Compare(y.s, x.s) })
	var parts []string
	for i, u := range uses {
		if i == 10 {
			break
		}
		parts = append(parts, fmt.Sprintf("%s %.2fs", u.who, u.s))
	}
	t.Logf("CPU use from %s to %s (%.2fs of %d CPUs' %.2fs): %s", a.at.Format("15:04:05.000"), b.at.Format("15:04:05.000"),
		b.at.Sub(a.at).Seconds(), runtime.NumCPU(), b.use["machine all"]-a.use["machine all"], strings.Join(parts, "; "))
}

// netStats reads, inside h's network namespace, the kernel's counters of
// what delays or drops a TCP connection: SYNs sent again, listen queue
// drops, connects that failed, resets, and conntrack entries that could
// not be inserted (a SYN dropped) or were dropped.
func netStats(h *netlab.Host) map[string]float64 {
	out := map[string]float64{}
	_ = h.Do(func() error {
		for _, f := range []string{"/proc/thread-self/net/netstat", "/proc/thread-self/net/snmp"} {
			b, err := os.ReadFile(f)
			if err != nil {
				continue
			}
			lines := strings.Split(string(b), "\n")
			for i := 0; i+1 < len(lines); i += 2 {
				names, values := strings.Fields(lines[i]), strings.Fields(lines[i+1])
				if len(names) != len(values) || len(names) == 0 || names[0] != values[0] {
					continue
				}
				for j := 1; j < len(names); j++ {
					key := strings.TrimSuffix(names[0], ":") + "." + names[j]
					switch key {
					case "TcpExt.TCPSynRetrans", "TcpExt.ListenDrops", "TcpExt.ListenOverflows", "TcpExt.TCPTimeouts",
						"Tcp.AttemptFails", "Tcp.OutRsts", "Tcp.RetransSegs", "Tcp.EstabResets":
						v, _ := strconv.ParseFloat(values[j], 64)
						out["kernel "+key] = v
					}
				}
			}
		}
		// One line of hexadecimal counters a CPU, under a line of names.
		b, err := os.ReadFile("/proc/thread-self/net/stat/nf_conntrack")
		if err != nil {
			return nil
		}
		lines := strings.Split(strings.TrimSpace(string(b)), "\n")
		names := strings.Fields(lines[0])
		for _, line := range lines[1:] {
			for j, f := range strings.Fields(line) {
				if j >= len(names) {
					break
				}
				switch names[j] {
				case "insert_failed", "drop", "early_drop", "invalid":
					v, _ := strconv.ParseUint(f, 16, 64)
					out["kernel conntrack."+names[j]] += float64(v)
				}
			}
		}
		return nil
	})
	return out
}

// logLBSide logs, for each LB host and node, the counters that changed
// since before: what the LB counted that explains a failed request, and
// what each kernel counted that delays or drops a connection.
func (l *kubeLab) logLBSide(t *testing.T, before sideStats) {
	t.Helper()
	after := l.sideStats()
	for _, id := range slices.Sorted(maps.Keys(after)) {
		var lines []string
		keys := map[string]float64{}
		maps.Copy(keys, after[id])
		maps.Copy(keys, before[id])
		for _, k := range slices.Sorted(maps.Keys(keys)) {
			// A scrape that failed is a key of its own, before (-1) or
			// after (+1): it explains counters that seem to jump.
			if d := after[id][k] - before[id][k]; d != 0 {
				lines = append(lines, fmt.Sprintf("%s %+g", k, d))
			}
		}
		t.Logf("%s: %d counters changed: %s", id, len(lines), strings.Join(lines, "; "))
	}
}
