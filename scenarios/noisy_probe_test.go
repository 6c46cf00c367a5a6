package scenarios

import (
	"bufio"
	"cmp"
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/teapot-lb/teapot-lb/api"
	"github.com/teapot-lb/teapot-lb/api/client"
	pb "github.com/teapot-lb/teapot-lb/api/proto/teapotv1"
)

// Probing of tenant a and of the admin API while tenant b misbehaves.
const (
	aProbeInterval = 10 * time.Millisecond  // a's HTTP and TCP probes, each
	aProbeTimeout  = 2 * time.Second        // one probe of a
	adminInterval  = 150 * time.Millisecond // one admin call (alternately get lbs and cluster status)
	adminTimeout   = 10 * time.Second       // an admin call slower than this did not answer
)

// sample is one probe: which phase it ran in, how long it took, and why it
// failed (nil when it succeeded).
type probeSample struct {
	phase int
	at    time.Time // when the probe started
	what  string    // which call (admin probes)
	took  time.Duration
	err   error
}

// probes runs a's HTTP and TCP probers and the admin API prober until
// stopped; every sample is tagged with the phase current when it started.
type noisyProbes struct {
	phase atomic.Int64
	stop  chan struct{}
	wg    sync.WaitGroup

	mu    sync.Mutex
	http  []probeSample
	tcp   []probeSample
	admin []probeSample
	// late holds how late the probers' process's own timer woke (a 5 ms
	// sleep, every 20 ms): when the probes and the admin calls are slow
	// and this is too, that process was starved, not the LB host.
	late []probeSample

	// remote is tenant a's process, where the probes run (aSide.probe);
	// nil: they run in this process.
	remote *aSide
}

// probeLocally starts the probes in this process.
func probeLocally(conn *client.Conn) *noisyProbes {
	p := &noisyProbes{stop: make(chan struct{})}
	httpAddr := net.JoinHostPort(noisyVIPA, fmt.Sprint(noisyHTTPPort))
	tcpAddr := net.JoinHostPort(noisyVIPA, fmt.Sprint(noisyTCPPort))
	p.loop(aProbeInterval, &p.http, func() error {
		name, err := httpNameFor(httpAddr, noisyHostA)
		if err == nil && name != "a1" && name != "a2" {
			err = fmt.Errorf("answered by %q", name)
		}
		return err
	})
	p.loop(aProbeInterval, &p.tcp, func() error {
		_, err := tcpProbe(tcpAddr)
		return err
	})
	var turn int
	p.loopNamed(adminInterval, &p.admin, func() (string, error) {
		turn++
		ctx, cancel := context.WithTimeout(context.Background(), adminTimeout)
		defer cancel()
		if turn%2 == 0 {
			_, err := conn.Admin.ClusterStatus(ctx, &pb.ClusterStatusRequest{})
			return "status", err
		}
		_, err := listAll(ctx, conn, api.KindLoadBalancer)
		return "list", err
	})
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		for {
			select {
			case <-p.stop:
				return
			case <-time.After(20 * time.Millisecond):
			}
			phase := int(p.phase.Load())
			start := time.Now()
			time.Sleep(5 * time.Millisecond)
			s := probeSample{phase: phase, at: start, took: time.Since(start) - 5*time.Millisecond}
			p.mu.Lock()
			p.late = append(p.late, s)
			p.mu.Unlock()
		}
	}()
	return p
}

// listAll follows the pages of an admin List, as `get` does.
func listAll(ctx context.Context, conn *client.Conn, kind string) ([]*pb.Object, error) {
	var out []*pb.Object
	token := ""
	for range 10000 {
		resp, err := conn.Admin.List(ctx, &pb.ListRequest{Kind: kind, PageToken: token})
		if err != nil {
			return nil, err
		}
		out = append(out, resp.GetObjects()...)
		if token = resp.GetNextPageToken(); token == "" {
			return out, nil
		}
	}
	return nil, errors.New("more than 10000 pages")
}

func (p *noisyProbes) loop(every time.Duration, into *[]probeSample, probe func() error) {
	p.loopNamed(every, into, func() (string, error) { return "", probe() })
}

func (p *noisyProbes) loopNamed(every time.Duration, into *[]probeSample, probe func() (string, error)) {
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			select {
			case <-p.stop:
				return
			case <-t.C:
			}
			phase := int(p.phase.Load())
			start := time.Now()
			what, err := probe()
			s := probeSample{phase: phase, at: start, what: what, took: time.Since(start), err: err}
			p.mu.Lock()
			*into = append(*into, s)
			p.mu.Unlock()
		}
	}()
}

func (p *noisyProbes) finishLocal() {
	close(p.stop)
	p.wg.Wait()
}

// tcpProbe sends a request through a's TCP listener and reads the status
// line.
func tcpProbe(addr string) (string, error) {
	c, err := net.DialTimeout("tcp", addr, aProbeTimeout)
	if err != nil {
		return "", err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(aProbeTimeout))
	if _, err := fmt.Fprintf(c, "GET / HTTP/1.0\r\nHost: %s\r\n\r\n", noisyHostA); err != nil {
		return "", err
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		return "", fmt.Errorf("read the answer: %w", err)
	}
	if !strings.Contains(line, " 200 ") {
		return "", fmt.Errorf("answered %q", strings.TrimSpace(line))
	}
	return line, nil
}

// stat summarises one prober's samples in one phase.
type probeStat struct {
	ok, total int
	p50, p99  time.Duration
	firstErr  error
}

func (s probeStat) String() string {
	return fmt.Sprintf("%d/%d %6.1f %6.1f", s.ok, s.total, ms(s.p50), ms(s.p99))
}

func summariseProbes(all []probeSample, phase int) probeStat {
	var s probeStat
	var lat latencies
	for _, x := range all {
		if x.phase != phase {
			continue
		}
		s.total++
		lat = append(lat, x.took)
		if x.err == nil {
			s.ok++
		} else if s.firstErr == nil {
			s.firstErr = x.err
		}
	}
	s.p50, s.p99 = lat.percentile(50), lat.percentile(99)
	return s
}

// row is one phase's line of the report.
type noisyRow struct {
	name             string
	http, tcp, admin probeStat
	late             probeStat // the test process's timer lateness
	slowAdmin        string    // the slowest admin calls: which, when in the phase, how long
	notes            []string
	// host is what the host itself measured in the phase (its admin
	// calls, a's requests); empty for the quiet baseline.
	host hostReads
}

// slowest describes the n slowest samples of a phase: which call, when
// (seconds after the phase's first sample) and how long it took.
func slowest(all []probeSample, phase, n int) string {
	var in []probeSample
	for _, x := range all {
		if x.phase == phase {
			in = append(in, x)
		}
	}
	if len(in) == 0 {
		return ""
	}
	first := in[0].at
	slices.SortFunc(in, func(a, b probeSample) int { return cmp.Compare(b.took, a.took) })
	var parts []string
	for _, x := range in[:min(n, len(in))] {
		parts = append(parts, fmt.Sprintf("%s@%.1fs %.0fms", x.what, x.at.Sub(first).Seconds(), ms(x.took)))
	}
	return strings.Join(parts, " ")
}

func (p *noisyProbes) rows(names []string, notes [][]string) []noisyRow {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []noisyRow
	for i, n := range names {
		out = append(out, noisyRow{name: n, http: summariseProbes(p.http, i), tcp: summariseProbes(p.tcp, i), admin: summariseProbes(p.admin, i),
			late: summariseProbes(p.late, i), slowAdmin: slowest(p.admin, i, 3), notes: notes[i]})
	}
	return out
}

// table renders the report.
func noisyTable(rows []noisyRow) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%-22s | %-27s | %-27s | %-20s | %s\n", "phase (b's abuse)", "a HTTP ok/total p50 p99 ms", "a TCP ok/total p50 p99 ms", "admin ok/total p99", "notes")
	for _, r := range rows {
		fmt.Fprintf(&b, "%-22s | %-27s | %-27s | %-20s | %s\n", r.name, r.http, r.tcp,
			fmt.Sprintf("%d/%d %7.1f", r.admin.ok, r.admin.total, ms(r.admin.p99)), strings.Join(r.notes, "; "))
	}
	b.WriteString("slowest admin calls, and how late the probers' own 5 ms timer woke (p50 p99 ms):\n")
	for _, r := range rows {
		fmt.Fprintf(&b, "%-22s | %s | probers late %.1f %.1f\n", r.name, r.slowAdmin, ms(r.late.p50), ms(r.late.p99))
	}
	return b.String()
}

// p99Bound is what a phase's p99 of a's probes may reach: the goal,
// twice the quiet p99 or the quiet p99 and 50 ms, whichever is more
// (under the race detector too; the machine's lateness is allowed for
// where the bound is applied).
func p99Bound(quiet time.Duration) time.Duration {
	return max(2*quiet, quiet+50*time.Millisecond)
}

// p99BoundShared is p99Bound for probers that share the test process
// with the test's other work: under the race detector, which makes that
// work several times slower, the floor is 150 ms.
func p99BoundShared(quiet time.Duration) time.Duration {
	if raceEnabled {
		return max(2*quiet, quiet+150*time.Millisecond)
	}
	return p99Bound(quiet)
}
