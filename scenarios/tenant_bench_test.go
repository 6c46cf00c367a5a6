package scenarios

import (
	"bufio"
	"context"
	"fmt"
	"net/netip"
	"os"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/teapot-lb/teapot-lb/api"
	pb "github.com/teapot-lb/teapot-lb/api/proto/teapotv1"
)

// Sizes of the tenant sync benchmarks.
const (
	endpointChanges  = 200
	initialEndpoints = 10
	initialTimeout   = 5 * time.Minute
)

// appliedLine is the data plane's log line for a configuration it serves;
// stageAttr one of its stage times (waited_ms, compile_ms, serve_ms).
var (
	appliedLine = regexp.MustCompile(`^time=(\S+) .*msg="configuration applied".* revision=(\d+)`)
	stageAttr   = regexp.MustCompile(` (waited|compile|serve)_ms=([0-9.]+)`)
)

// planeLog follows one node's log for the revisions its data plane serves.
type planeLog struct {
	path   string
	offset int64
	// applied maps a served revision to when it was served.
	applied []planeEntry
}

type planeEntry struct {
	rev uint64
	at  time.Time
	// The change's way through the host, when the line says: from its
	// commit on the host to the data plane, compiling, serving.
	waited, compile, serve time.Duration
}

// committed is when the host committed the revision (at, when the line
// does not say).
func (e planeEntry) committed() time.Time {
	return e.at.Add(-e.waited - e.compile - e.serve)
}

// read takes the lines written since the last read.
func (p *planeLog) read() error {
	f, err := os.Open(p.path)
	if err != nil {
		return err
	}
	defer f.Close()
	if _, err := f.Seek(p.offset, 0); err != nil {
		return err
	}
	r := bufio.NewReader(f)
	for {
		line, err := r.ReadString('\n')
		if err != nil {
			return nil // a partial line is read again next time
		}
		p.offset += int64(len(line))
		m := appliedLine.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		at, terr := time.Parse(time.RFC3339Nano, m[1])
		rev, rerr := strconv.ParseUint(m[2], 10, 64)
		if terr == nil && rerr == nil {
			e := planeEntry{rev: rev, at: at}
			for _, s := range stageAttr.FindAllStringSubmatch(line, -1) {
				v, err := strconv.ParseFloat(s[2], 64)
				if err != nil {
					continue
				}
				d := time.Duration(v * float64(time.Millisecond))
				switch s[1] {
				case "waited":
					e.waited = d
				case "compile":
					e.compile = d
				case "serve":
					e.serve = d
				}
			}
			p.applied = append(p.applied, e)
		}
	}
}

// stages sums the data plane's stage times of the revisions served after
// start: how many, and how long they waited for it, compiled and took to
// serve (binding listeners).
func (p *planeLog) stages(start time.Time) string {
	var revs int
	var waited, compile, serve, maxServe time.Duration
	for _, e := range p.applied {
		if e.at.Before(start) {
			continue
		}
		revs++
		waited += e.waited
		compile += e.compile
		serve += e.serve
		maxServe = max(maxServe, e.serve)
	}
	return fmt.Sprintf("%d revisions served; waited %s, compiled %s, served %s in all (longest serve %s)", revs,
		waited.Round(time.Millisecond), compile.Round(time.Millisecond), serve.Round(time.Millisecond), maxServe.Round(time.Millisecond))
}

// servedAt returns when the node first served revision rev or later.
func (p *planeLog) servedAt(rev uint64) (time.Time, bool) {
	e, ok := p.servedEntry(rev)
	return e.at, ok
}

// servedEntry returns the line of the first revision at or after rev the
// node served.
func (p *planeLog) servedEntry(rev uint64) (planeEntry, bool) {
	for _, e := range p.applied {
		if e.rev >= rev {
			return e, true
		}
	}
	return planeEntry{}, false
}

// everyPlane waits until every node's data plane serves rev and returns
// when the last one did.
func everyPlane(tb testing.TB, logs []*planeLog, rev uint64) time.Time {
	tb.Helper()
	var last time.Time
	waitFor(tb, syncTimeout, fmt.Sprintf("revision %d live in every data plane", rev), func() error {
		last = time.Time{}
		for _, l := range logs {
			if err := l.read(); err != nil {
				return err
			}
			at, ok := l.servedAt(rev)
			if !ok {
				return fmt.Errorf("%s does not serve it yet", l.path)
			}
			if at.After(last) {
				last = at
			}
		}
		return nil
	})
	return last
}

func (l *tenantLab) planeLogs() []*planeLog {
	var out []*planeLog
	for _, n := range l.c.nodes {
		out = append(out, &planeLog{path: n.logPath})
	}
	return out
}

// BenchmarkTenantEndpointChange measures an EndpointSlice change, from the
// API server accepting it to the new member set live in the data plane of
// every LB host.
func BenchmarkTenantEndpointChange(b *testing.B) {
	l := newTenantLab(b, benchLab)
	pods := newPodNet(b, 4)
	creds := l.seedTenant("acme", "acme.example", pods.network())
	l.agent("agent-1", creds)
	const port = 8080
	addrs := []string{pods.addr(0), pods.addr(1), pods.addr(2), pods.addr(3)}
	l.createService(lbService("shop", "web", "teapot-lb.io/lb", 8080, nil))
	l.putSlice(endpointSlice("shop", "web-1", "web", port, addrs[0]))
	l.waitServiceVIP("shop", "web")
	logs := l.planeLogs()

	b.ResetTimer()
	lat := make(latencies, 0, endpointChanges)
	prev := memberSets(addrs, port, 0)
	for i := range endpointChanges {
		set := memberSets(addrs, port, 1+i%14)
		if fmt.Sprint(set) == fmt.Sprint(prev) {
			set = memberSets(addrs, port, 0)
		}
		prev = set
		start := time.Now()
		l.putSlice(endpointSlice("shop", "web-1", "web", port, addrsOf(set)...))
		var rev uint64
		deadline := time.Now().Add(syncTimeout)
		for {
			lb, err := l.lb("acme", "svc-shop-web")
			if err == nil && hasMembers("web", set...)(lb) == nil {
				rev = lb.GetMeta().GetRevision()
				break
			}
			if time.Now().After(deadline) {
				b.Fatalf("change %d: members %v never stored (%v)", i, set, err)
			}
			// The latency comes from the hosts' logs; polling gently keeps
			// the 2 cores for the system under test.
			time.Sleep(5 * time.Millisecond)
		}
		lat = append(lat, everyPlane(b, logs, rev).Sub(start))
	}
	b.StopTimer()
	fmt.Printf("\nEndpointSlice change -> new members live in every data plane (%d changes, 3 LB hosts, one agent)\n", endpointChanges)
	fmt.Printf("%10s %10s %10s\n", "p50 ms", "p99 ms", "max ms")
	fmt.Printf("%10.1f %10.1f %10.1f\n", ms(lat.percentile(50)), ms(lat.percentile(99)), ms(lat.percentile(100)))
	b.ReportMetric(ms(lat.percentile(50)), "p50-ms")
	b.ReportMetric(ms(lat.percentile(99)), "p99-ms")
	b.ReportMetric(0, "ns/op")
}

// BenchmarkTenantInitialSync measures an agent's first sync of Services
// with 10 endpoints each (TEAPOT_TENANT_SYNC_SIZES, default 1000,10000):
// from the agent's start to every load balancer stored, to the last one
// live in every data plane, and to every Service's status.
func BenchmarkTenantInitialSync(b *testing.B) {
	sizes := []int{1000, 10000}
	if env := os.Getenv("TEAPOT_TENANT_SYNC_SIZES"); env != "" {
		sizes = nil
		for _, f := range strings.Split(env, ",") {
			n, err := strconv.Atoi(strings.TrimSpace(f))
			if err != nil || n < 1 || n > 16000 {
				b.Fatalf("TEAPOT_TENANT_SYNC_SIZES: %q is not a number from 1 to 16000", f)
			}
			sizes = append(sizes, n)
		}
	}
	type row struct {
		services               int
		stored, live, statuses time.Duration
	}
	var rows []row
	for _, n := range sizes {
		b.Run(strconv.Itoa(n), func(b *testing.B) {
			stored, live, statuses := tenantInitialSync(b, n)
			rows = append(rows, row{n, stored, live, statuses})
		})
	}
	fmt.Printf("\ninitial sync of Services x %d endpoints from one agent (agent start -> ...; 3 LB hosts)\n", initialEndpoints)
	fmt.Printf("%10s %14s %14s %14s\n", "Services", "stored s", "every plane s", "statuses s")
	for _, r := range rows {
		fmt.Printf("%10d %14.2f %14.2f %14.2f\n", r.services, r.stored.Seconds(), r.live.Seconds(), r.statuses.Seconds())
	}
	b.ReportMetric(0, "ns/op")
}

// tenantInitialSync creates n Services with their EndpointSlices in a
// fresh lab, starts the agent and times its first sync.
func tenantInitialSync(b *testing.B, n int) (stored, live, statuses time.Duration) {
	raiseNoFile(b, uint64(n)+2000)
	// A /18 of loopback addresses: 16,384 VIPs.
	l := newTenantLab(b, tenantLabAddrs{netip.MustParsePrefix("127.0.128.0/18"), "127.0.111.6"})
	l.cliOK("pool", "create", "bulk", "--cidr", l.vips.String(), "--mode", "static")
	quota := func(k int) string { return strconv.Itoa(max(2000, k)) }
	l.cliOK("tenant", "create", "acme", "--domains", "acme.example", "--networks", "10.0.0.0/8", "--pools", "bulk", "--pods-routable",
		"--max-lbs", quota(2*n), "--max-addresses", quota(2*n), "--max-listeners", quota(2*n), "--max-members", quota(2*n*initialEndpoints))
	creds := l.credentials("acme")
	l.createNamespace("bulk")

	created := time.Now()
	var wg sync.WaitGroup
	work := make(chan int)
	errs := make(chan error, 16)
	for range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range work {
				var err error
				// A loaded API server may time out a create; try again.
				for try := 0; try < 3; try++ {
					if err = l.createBulkService(i); err == nil {
						break
					}
				}
				if err != nil {
					select {
					case errs <- err:
					default:
					}
				}
			}
		}()
	}
	for i := range n {
		work <- i
	}
	close(work)
	wg.Wait()
	select {
	case err := <-errs:
		b.Fatalf("create the Services: %v", err)
	default:
	}
	b.Logf("created %d Services and EndpointSlices in %s", n, time.Since(created).Round(time.Millisecond))
	logs := l.planeLogs()

	b.ResetTimer()
	start := time.Now()
	agent := l.agent("agent-1", creds)
	var rev uint64
	deadline := time.Now().Add(initialTimeout)
	for stored == 0 {
		got, r, err := l.storedWith(initialEndpoints)
		if err == nil && got == n {
			stored, rev = time.Since(start), r
		}
		if time.Now().After(deadline) {
			b.Fatalf("%d of %d load balancers stored after %s (%v)", got, n, initialTimeout, err)
		}
		// Each poll reads every load balancer: gently, so as not to
		// slow what it measures.
		time.Sleep(max(20*time.Millisecond, time.Duration(n)*20*time.Microsecond))
	}
	b.Logf("%d Services: every load balancer stored %s after the agent started; %s", n, stored.Round(time.Millisecond),
		milestones(agent.logPath, start, "caches synced", "leading", "connected to the LB cluster", "resync sent"))
	live = everyPlane(b, logs, rev).Sub(start)
	// The poll above finds the last write up to a poll's length late;
	// the hosts' logs say when each committed it.
	var committed time.Time
	for i, pl := range logs {
		b.Logf("%d Services: host %d: %s", n, i+1, pl.stages(start))
		if e, ok := pl.servedEntry(rev); ok && (committed.IsZero() || e.committed().Before(committed)) {
			committed = e.committed()
		}
	}
	b.Logf("%d Services: the last write committed on a host %s after the agent started", n, committed.Sub(start).Round(time.Millisecond))
	// The agent writes statuses through a rate-limited queue: at 10,000
	// Services that takes minutes. Counted, not required, past the
	// deadline.
	got := 0
	for deadline := time.Now().Add(initialTimeout); ; time.Sleep(time.Second) {
		ctx, cancel := l.ctx()
		list, err := l.k.client.CoreV1().Services("bulk").List(ctx, metav1.ListOptions{})
		cancel()
		if err == nil {
			got = 0
			for _, s := range list.Items {
				if len(s.Status.LoadBalancer.Ingress) > 0 {
					got++
				}
			}
		}
		if got == n {
			statuses = time.Since(start)
			break
		}
		if time.Now().After(deadline) {
			b.Logf("%d of %d Services have their status %s after the agent started", got, n, time.Since(start).Round(time.Second))
			break
		}
	}
	b.StopTimer()
	b.Logf("%d Services: stored %s, live in every data plane %s, every status %s (0: not within %s) after the agent started", n,
		stored.Round(time.Millisecond), live.Round(time.Millisecond), statuses.Round(time.Millisecond), initialTimeout)
	return stored, live, statuses
}

// milestones says when each of msgs was first logged in the log at path,
// from start.
func milestones(path string, start time.Time, msgs ...string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return err.Error()
	}
	var out []string
	for _, msg := range msgs {
		at := "not logged"
		for _, line := range strings.Split(string(b), "\n") {
			if !strings.Contains(line, `msg="`+msg+`"`) && !strings.Contains(line, "msg="+msg+" ") {
				continue
			}
			f := strings.Fields(line)
			if len(f) == 0 {
				continue
			}
			if t, err := time.Parse(time.RFC3339Nano, strings.TrimPrefix(f[0], "time=")); err == nil {
				at = t.Sub(start).Round(time.Millisecond).String()
				break
			}
		}
		out = append(out, msg+" "+at)
	}
	return strings.Join(out, ", ")
}

// storedWith pages through the tenant acme's load balancers and counts
// those stored with the given number of members and an address; it also
// returns the latest revision among them.
func (l *tenantLab) storedWith(members int) (n int, rev uint64, err error) {
	token := ""
	for {
		ctx, cancel := context.WithTimeout(context.Background(), cliTimeout)
		resp, err := l.conn.Admin.List(ctx, &pb.ListRequest{Kind: api.KindLoadBalancer, Tenant: "acme", PageToken: token})
		cancel()
		if err != nil {
			return n, rev, err
		}
		for _, o := range resp.GetObjects() {
			if len(o.GetLoadBalancer().GetPools()["web"].GetMembers()) == members && o.GetLoadBalancer().GetStatus().GetAddress() != "" {
				n++
			}
			rev = max(rev, o.GetLoadBalancer().GetMeta().GetRevision())
		}
		if token = resp.GetNextPageToken(); token == "" {
			return n, rev, nil
		}
	}
}

// createBulkService creates Service svc-NNNNN of the initial sync
// benchmark and its EndpointSlice; an object that exists already counts
// as created.
func (l *tenantLab) createBulkService(i int) error {
	ctx, cancel := l.ctx()
	defer cancel()
	name := fmt.Sprintf("svc-%05d", i)
	svc := lbService("bulk", name, "teapot-lb.io/lb", 80, nil)
	// The members are pods: no node ports (the range holds 2,768).
	svc.Spec.AllocateLoadBalancerNodePorts = ptrTo(false)
	if _, err := l.k.client.CoreV1().Services("bulk").Create(ctx, svc, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return err
	}
	var eps []string
	for j := range initialEndpoints {
		a := i*initialEndpoints + j + 1
		eps = append(eps, fmt.Sprintf("10.%d.%d.%d", 100+a>>16, a>>8&255, a&255))
	}
	_, err := l.k.client.DiscoveryV1().EndpointSlices("bulk").Create(ctx, endpointSlice("bulk", name+"-1", name, 8080, eps...), metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		return nil
	}
	return err
}
