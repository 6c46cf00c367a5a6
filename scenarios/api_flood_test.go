package scenarios

import (
	"context"
	"fmt"
	"net"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/teapot-lb/teapot-lb/api/client"
	"github.com/teapot-lb/teapot-lb/api/connguard"
	pb "github.com/teapot-lb/teapot-lb/api/proto/teapotv1"
)

// Bounds of the API port flood.
const (
	apiFloodNofile  = 2048 // the serve process's descriptors
	apiFloodConns   = 3000 // idle connections the attacker keeps trying to hold
	apiFloodSources = 32   // loopback source addresses they come from (more than the total bound over the per-source one)
	apiFloodRate    = 2000 // connections opened per second, at most (paced: see phaseIdleConns)
	apiFloodRedial  = 200 * time.Millisecond
	apiFloodCalls   = 30
	apiFloodEvery   = 100 * time.Millisecond // between two admin calls
)

// apiFlood keeps up to apiFloodConns idle TCP connections to an API port,
// opening a new one apiFloodRedial after the server closed one, until
// stop.
type apiFlood struct {
	cancel context.CancelFunc
	wg     sync.WaitGroup
	opened atomic.Int64
}

func startAPIFlood(addr string) *apiFlood {
	ctx, cancel := context.WithCancel(context.Background())
	f := &apiFlood{cancel: cancel}
	// Every dial takes a tick: the attacker shares the two cores with
	// serve, and an unpaced storm measures the CPU, not the bounds.
	tick := time.NewTicker(time.Second / apiFloodRate)
	f.wg.Add(1)
	go func() {
		defer f.wg.Done()
		<-ctx.Done()
		tick.Stop()
	}()
	for i := range apiFloodConns {
		f.wg.Add(1)
		go func() {
			defer f.wg.Done()
			d := net.Dialer{Timeout: time.Second, LocalAddr: &net.TCPAddr{IP: net.IPv4(127, 0, 70, byte(1+i%apiFloodSources))}}
			for {
				select {
				case <-tick.C:
				case <-ctx.Done():
					return
				}
				if c, err := d.DialContext(ctx, "tcp", addr); err == nil {
					f.opened.Add(1)
					stop := context.AfterFunc(ctx, func() { c.Close() })
					_, _ = c.Read(make([]byte, 1)) // until the server closes it
					stop()
					c.Close()
				}
				select {
				case <-time.After(apiFloodRedial):
				case <-ctx.Done():
					return
				}
			}
		}()
	}
	return f
}

func (f *apiFlood) stop() int64 {
	f.cancel()
	f.wg.Wait()
	return f.opened.Load()
}

// adminCall makes one admin call on a new connection, as the CLI does.
func adminCall(cfg *client.Config, addr string) (time.Duration, error) {
	start := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), cliTimeout)
	defer cancel()
	conn, err := client.Dial(ctx, cfg, addr)
	if err != nil {
		return time.Since(start), err
	}
	defer conn.Close()
	_, err = conn.Admin.ClusterStatus(ctx, &pb.ClusterStatusRequest{})
	return time.Since(start), err
}

// adminCalls makes n admin calls, each on a new connection, one every
// apiFloodEvery, and returns their p50 and p99.
func adminCalls(tb testing.TB, cfg *client.Config, addr string, n int) (p50, p99 time.Duration) {
	tb.Helper()
	var took []time.Duration
	for i := range n {
		if i > 0 {
			time.Sleep(apiFloodEvery)
		}
		d, err := adminCall(cfg, addr)
		if err != nil {
			tb.Fatalf("admin call after %v: %v", d, err)
		}
		took = append(took, d)
	}
	slices.Sort(took)
	return took[len(took)/2], took[len(took)*99/100]
}

// phaseAPIFlood: idle connections to the LB host's API port (which b's
// agent must reach) from apiFloodSources addresses, for minPhase, while
// the admin API is also called on a new connection every apiFloodEvery.
func phaseAPIFlood(tb testing.TB, l *noisyLab, _ *tenantAgent) []string {
	cfg, err := client.LoadConfig(l.c.adminConf())
	if err != nil {
		tb.Fatal(err)
	}
	f := startAPIFlood(l.n.apiAddr)
	var took []time.Duration
	failed := 0
	for start := time.Now(); time.Since(start) < minPhase; time.Sleep(apiFloodEvery) {
		d, err := adminCall(cfg, l.n.apiAddr)
		if err != nil {
			failed++
			tb.Errorf("admin call on a new connection during the API port flood: %v", err)
			continue
		}
		took = append(took, d)
	}
	// a's agent, like the admin, connects through the flood.
	welcome := time.Now()
	agentNote := ""
	if st, err := dialTenant(tb, "a-agent-flood", l.credsA).open(true); err != nil {
		tb.Errorf("a's agent during the API port flood: %v", err)
		agentNote = "a's agent refused: " + shorten(err.Error())
	} else {
		st.close()
		agentNote = fmt.Sprintf("a's agent welcomed in %.0fms", ms(time.Since(welcome)))
	}
	opened := f.stop()
	note := fmt.Sprintf("%d connections opened; %s; admin on a new connection: %d calls, %d failed", opened, agentNote, len(took)+failed, failed)
	if len(took) > 0 {
		slices.Sort(took)
		note += fmt.Sprintf(", p50 %.0fms p99 %.0fms", ms(took[len(took)/2]), ms(took[len(took)*99/100]))
	}
	return []string{note}
}

// descriptors counts the open descriptors of process pid.
func descriptors(tb testing.TB, pid int) int {
	tb.Helper()
	fds, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	if err != nil {
		tb.Fatal(err)
	}
	return len(fds)
}

// TestAPIPortFlood floods the API port of a serve process with
// apiFloodNofile descriptors with idle TCP connections (more than it has
// descriptors), from apiFloodSources loopback addresses, as a tenant
// network that must reach the port could: the process holds no more
// than its bound of unauthenticated connections, and the admin API
// answers every call on a new connection, and `cluster status`.
func TestAPIPortFlood(t *testing.T) {
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil || lim.Cur < apiFloodConns+1024 {
		unavailable(t, "the test holds %d connections: it needs a descriptor limit of %d, it has %d", apiFloodConns, apiFloodConns+1024, lim.Cur)
	}
	c := newCluster(t)
	c.nofile = apiFloodNofile
	n := c.bootstrap()
	cfg, err := client.LoadConfig(c.adminConf())
	if err != nil {
		t.Fatal(err)
	}
	pid := n.cmd.Process.Pid
	quiet50, quiet99 := adminCalls(t, cfg, n.apiAddr, apiFloodCalls)
	quietFDs := descriptors(t, pid)

	f := startAPIFlood(n.apiAddr)
	defer f.stop()
	bound := 0
	waitFor(t, 30*time.Second, "the flood at the API port's bounds", func() error {
		m, err := scrape(n)
		if err != nil {
			return err
		}
		bound = int(sum(m, "teapot_lb_api_connection_limit", map[string]string{"bound": "unauthenticated"}))
		if f.opened.Load() < apiFloodNofile {
			return fmt.Errorf("%d connections opened", f.opened.Load())
		}
		if bound == 0 || sum(m, "teapot_lb_api_connections_refused_total", map[string]string{"reason": "unauthenticated"}) == 0 ||
			sum(m, "teapot_lb_api_connections", map[string]string{"state": "handshake"}) < float64(bound) {
			return fmt.Errorf("not yet (%v handshakes, bound %d)", sum(m, "teapot_lb_api_connections", map[string]string{"state": "handshake"}), bound)
		}
		return nil
	})
	// Sample the process's descriptors while the admin calls.
	sampled := make(chan int)
	done := make(chan struct{})
	go func() {
		peak := 0
		for {
			peak = max(peak, descriptors(t, pid))
			select {
			case <-done:
				sampled <- peak
				return
			case <-time.After(20 * time.Millisecond):
			}
		}
	}()
	p50, p99 := adminCalls(t, cfg, n.apiAddr, apiFloodCalls)
	if _, err := c.cli(n, "cluster", "status"); err != nil {
		t.Fatalf("cluster status during the flood: %v", err)
	}
	close(done)
	peakFDs := <-sampled
	m, err := scrape(n)
	if err != nil {
		t.Fatal(err)
	}
	opened := f.stop()
	refused := map[string]float64{}
	for _, s := range m["teapot_lb_api_connections_refused_total"] {
		refused[s.labels["reason"]] = s.value
	}
	t.Logf("flood opened %d connections; serve (%d descriptors) held %d quiet, at most %d flooded (unauthenticated bound %d); admin call on a new connection p50/p99 quiet %v/%v, flooded %v/%v; refused %v",
		opened, apiFloodNofile, quietFDs, peakFDs, bound, quiet50, quiet99, p50, p99, refused)
	// Over the bound: the admin's own connection and evicted connections
	// still closing (at most connguard.MaxClosing).
	if peakFDs > quietFDs+bound+connguard.MaxClosing+4 {
		t.Errorf("serve held %d descriptors during the flood, %d quiet and an unauthenticated bound of %d", peakFDs, quietFDs, bound)
	}
	// The test's flood shares two cores with serve; an admin call that
	// waited for a descriptor would wait seconds or forever.
	if b := max(time.Second, 4*quiet99); p99 > b {
		t.Errorf("admin call p99 %v during the flood, want at most %v (quiet %v)", p99, b, quiet99)
	}
}
