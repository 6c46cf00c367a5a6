package main

import (
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"sort"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/teapot-lb/teapot-lb/proxy/internal/benchproc"
)

// exchangeSample is one measured run of kept-alive exchanges through a
// target.
type exchangeSample struct {
	exchanges int64
	secs      float64 // wall time of the measured window
	cpu       float64 // proxy CPU seconds in it; 0 for direct
	syscalls  int64   // -1: not counted
	load      string
}

func (s exchangeSample) rate() float64 { return float64(s.exchanges) / s.secs }

// perCPU is exchanges per proxy CPU-second, 0 when there is no proxy.
func (s exchangeSample) perCPU() float64 {
	if s.cpu <= 0 {
		return 0
	}
	return float64(s.exchanges) / s.cpu
}

// exchangePhase measures small messages on kept-alive connections, the
// traffic of an HTTP/1.1 keep-alive client, where a proxy's cost is its
// system calls and wake-ups rather than its copies: o.exchangeConns
// connections through each target, each writing o.exchangeBytes to the
// echo member and reading them back, one exchange after another, for
// o.duration; o.rounds interleaved rounds, medians. The client and the
// member run in this process, moved to the load core first.
func exchangePhase(dir string, targets []target, o options) error {
	if out, err := exec.Command("taskset", "-a", "-cp", o.loadCPU, strconv.Itoa(os.Getpid())).CombinedOutput(); err != nil {
		return fmt.Errorf("taskset: %v: %s", err, out)
	}
	ln, err := sink()
	if err != nil {
		return err
	}
	defer ln.Close()
	fmt.Printf("\n%d kept-alive connections per target, each echoing %d bytes at a time through the proxy to a member, %s a run, %d round(s), load average %s:\n",
		o.exchangeConns, o.exchangeBytes, o.duration, o.rounds, loadAvg())
	samples := map[string][]exchangeSample{}
	for round := 1; round <= o.rounds; round++ {
		for _, t := range targets {
			s, err := exchanges(dir, t, ln.Addr().String(), o)
			if err != nil {
				return fmt.Errorf("%s: %w", t.name, err)
			}
			samples[t.name] = append(samples[t.name], s)
			fmt.Printf("  round %d %-16s %9.0f exchanges/s  per proxy CPU-s %9.0f  syscalls/exchange %s  load %s\n",
				round, t.name, s.rate(), s.perCPU(), perExchange(s), s.load)
		}
	}
	median := func(name string) exchangeSample {
		s := append([]exchangeSample(nil), samples[name]...)
		sort.Slice(s, func(i, j int) bool { return s[i].perCPU() < s[j].perCPU() })
		return s[len(s)/2]
	}
	ratio := func(a exchangeSample, b string) string {
		if len(samples[b]) == 0 || median(b).perCPU() <= 0 || a.perCPU() <= 0 {
			return "-"
		}
		return fmt.Sprintf("%.2f×", a.perCPU()/median(b).perCPU())
	}
	fmt.Println()
	fmt.Println("| target | exchanges/s (median) | per proxy CPU-second | syscalls/exchange | per CPU-s vs haproxy | per CPU-s vs teapot-epoll |")
	fmt.Println("|---|---:|---:|---:|---:|---:|")
	for _, t := range targets {
		m := median(t.name)
		per := "-"
		if m.perCPU() > 0 {
			per = fmt.Sprintf("%.0f", m.perCPU())
		}
		fmt.Printf("| %s | %.0f | %s | %s | %s | %s |\n", t.name, m.rate(), per, perExchange(m), ratio(m, "haproxy"), ratio(m, "teapot-epoll"))
	}
	return nil
}

// perExchange is a sample's proxy system calls per exchange ("-" when
// not counted).
func perExchange(s exchangeSample) string {
	if s.syscalls < 0 || s.exchanges == 0 {
		return "-"
	}
	return fmt.Sprintf("%.2f", float64(s.syscalls)/float64(s.exchanges))
}

// exchanges starts t's proxy to member, opens the connections, makes one
// exchange on each, then counts the exchanges, the proxy's CPU and
// system calls over o.duration.
func exchanges(dir string, t target, member string, o options) (exchangeSample, error) {
	addr := member
	var p *benchproc.Proc
	if t.start != nil {
		var err error
		if p, err = t.start(member); err != nil {
			return exchangeSample{}, err
		}
		defer p.Stop()
		if err := waitListening(t.addr); err != nil {
			return exchangeSample{}, fmt.Errorf("%w; its output: %s", err, p.Output())
		}
		addr = t.addr
	}
	conns := make([]net.Conn, 0, o.exchangeConns)
	defer func() {
		for _, c := range conns {
			_ = c.Close()
		}
	}()
	msg := make([]byte, o.exchangeBytes)
	for i := range msg {
		msg[i] = byte('a' + i%26)
	}
	exchange := func(c net.Conn, buf []byte) error {
		if _, err := c.Write(msg); err != nil {
			return err
		}
		_, err := io.ReadFull(c, buf)
		return err
	}
	for range o.exchangeConns {
		c, err := net.DialTimeout("tcp", addr, 5*time.Second)
		if err != nil {
			return exchangeSample{}, err
		}
		conns = append(conns, c)
		_ = c.SetDeadline(time.Now().Add(o.duration + time.Minute))
		if err := exchange(c, make([]byte, len(msg))); err != nil {
			return exchangeSample{}, fmt.Errorf("first exchange: %w", err)
		}
	}
	counter := countSyscalls(dir, p.Pid())
	var cpu0 time.Duration
	if p != nil {
		cpu0 = p.CPUTime()
	}
	var (
		n        atomic.Int64
		stop     atomic.Bool
		wg       sync.WaitGroup
		mu       sync.Mutex
		firstErr error
	)
	start := time.Now()
	for _, c := range conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			buf := make([]byte, len(msg))
			for !stop.Load() {
				if err := exchange(c, buf); err != nil {
					mu.Lock()
					if firstErr == nil {
						firstErr = err
					}
					mu.Unlock()
					return
				}
				n.Add(1)
			}
		}()
	}
	time.Sleep(o.duration)
	stop.Store(true)
	wg.Wait()
	s := exchangeSample{exchanges: n.Load(), secs: time.Since(start).Seconds(), syscalls: counter.stop(), load: loadAvg()}
	if p != nil {
		s.cpu = (p.CPUTime() - cpu0).Seconds()
	}
	if firstErr != nil {
		return s, firstErr
	}
	if s.exchanges == 0 {
		return s, fmt.Errorf("no exchange in %s", o.duration)
	}
	return s, nil
}
