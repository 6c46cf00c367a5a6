package scenarios

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
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
	aProbeInterval = 15 * time.Millisecond  // a's HTTP and TCP probes, each
	aProbeTimeout  = 2 * time.Second        // one probe of a
	adminInterval  = 250 * time.Millisecond // one admin call (alternately get lbs and cluster status)
	adminTimeout   = 10 * time.Second       // an admin call slower than this did not answer
)

// sample is one probe: which phase it ran in, how long it took, and why it
// failed (nil when it succeeded).
type probeSample struct {
	phase int
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
}

func startProbes(conn *client.Conn) *noisyProbes {
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
	p.loop(adminInterval, &p.admin, func() error {
		turn++
		ctx, cancel := context.WithTimeout(context.Background(), adminTimeout)
		defer cancel()
		if turn%2 == 0 {
			_, err := conn.Admin.ClusterStatus(ctx, &pb.ClusterStatusRequest{})
			return err
		}
		_, err := listAll(ctx, conn, api.KindLoadBalancer)
		return err
	})
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
			err := probe()
			s := probeSample{phase: phase, took: time.Since(start), err: err}
			p.mu.Lock()
			*into = append(*into, s)
			p.mu.Unlock()
		}
	}()
}

func (p *noisyProbes) finish() {
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
	notes            []string
}

func (p *noisyProbes) rows(names []string, notes [][]string) []noisyRow {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []noisyRow
	for i, n := range names {
		out = append(out, noisyRow{name: n, http: summariseProbes(p.http, i), tcp: summariseProbes(p.tcp, i), admin: summariseProbes(p.admin, i), notes: notes[i]})
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
	return b.String()
}

// p99Bound is what a phase's p99 may reach: twice the quiet p99, with a
// floor so that scheduling noise is not a failure. The attacker, a's
// probers and the LB host share two cores (with whatever else the CI
// machine runs): phases that load nothing, such as a few TLS handshakes,
// were seen at 41-45 ms against a quiet 7 ms, so the floor is quiet+50ms;
// under the race detector everything runs several times slower and it is
// quiet+150ms. Starvation (a's probes waiting seconds) stays far above it.
func p99Bound(quiet time.Duration) time.Duration {
	floor := 50 * time.Millisecond
	if raceEnabled {
		floor = 150 * time.Millisecond
	}
	return max(2*quiet, quiet+floor)
}
