package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"net"
	"os"
	"slices"
	"strconv"
	"sync"
	"time"
)

// loadResult is what the rate-limited load generator reports.
type loadResult struct {
	Rate     float64 `json:"rate"`
	Sent     int     `json:"sent"`
	OK       int     `json:"ok"`
	Errors   int     `json:"errors"`
	P50us    float64 `json:"p50_us"`
	P90us    float64 `json:"p90_us"`
	P99us    float64 `json:"p99_us"`
	P999us   float64 `json:"p999_us"`
	MaxUs    float64 `json:"max_us"`
	Achieved float64 `json:"achieved_rps"`
	// FirstError is the first failure seen, if any.
	FirstError string `json:"first_error,omitempty"`
}

// runLoadgen sends GET requests on keep-alive connections at a fixed total
// rate and measures each latency from the request's scheduled start, so a
// stall counts against every request it delays (no coordinated omission).
// It stops after -duration and never sends more than rate*duration.
func runLoadgen(args []string) error {
	fs := flag.NewFlagSet("loadgen", flag.ContinueOnError)
	addr := fs.String("addr", "127.0.0.1:18090", "target host:port")
	rate := fs.Float64("rate", 10000, "requests per second, all connections together")
	dur := fs.Duration("duration", 10*time.Second, "how long to send")
	conns := fs.Int("connections", 50, "keep-alive connections")
	warm := fs.Duration("warmup", time.Second, "load before measuring (connections open, pools fill)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *rate <= 0 || *conns <= 0 || *dur <= 0 {
		return errors.New("-rate, -connections and -duration must be positive")
	}
	req := []byte("GET / HTTP/1.1\r\nHost: bench.example\r\nUser-Agent: teapot-loadgen\r\n\r\n")
	interval := time.Duration(float64(time.Second) * float64(*conns) / *rate)
	perConn := int(float64(*dur+*warm) / float64(interval))
	start := time.Now().Add(100 * time.Millisecond)
	measureFrom := start.Add(*warm)
	deadline := start.Add(*warm + *dur + 2*time.Second)
	lat := make([][]time.Duration, *conns)
	errs := make([]int, *conns)
	firstErr := make([]error, *conns)
	var wg sync.WaitGroup
	for i := range *conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			lat[i], errs[i], firstErr[i] = connLoad(*addr, req, start.Add(interval*time.Duration(i)/time.Duration(*conns)), measureFrom, interval, perConn, deadline)
		}()
	}
	wg.Wait()
	var all []time.Duration
	res := loadResult{Rate: *rate}
	for i := range lat {
		all = append(all, lat[i]...)
		res.Errors += errs[i]
		if firstErr[i] != nil && res.FirstError == "" {
			res.FirstError = firstErr[i].Error()
		}
	}
	res.OK = len(all)
	res.Sent = res.OK + res.Errors
	slices.Sort(all)
	pct := func(p float64) float64 {
		if len(all) == 0 {
			return 0
		}
		return float64(all[min(len(all)-1, int(p*float64(len(all))))].Microseconds())
	}
	res.P50us, res.P90us, res.P99us, res.P999us = pct(0.50), pct(0.90), pct(0.99), pct(0.999)
	if len(all) > 0 {
		res.MaxUs = float64(all[len(all)-1].Microseconds())
	}
	res.Achieved = float64(res.OK) / dur.Seconds()
	return json.NewEncoder(os.Stdout).Encode(res)
}

// connLoad runs one connection's schedule: n requests, one per interval
// from first.
func connLoad(addr string, req []byte, first, measureFrom time.Time, interval time.Duration, n int, deadline time.Time) ([]time.Duration, int, error) {
	lat := make([]time.Duration, 0, n)
	errs := 0
	var firstErr error
	fail := func(err error) {
		errs++
		if firstErr == nil {
			firstErr = err
		}
	}
	var c net.Conn
	var br *bufio.Reader
	for k := range n {
		due := first.Add(interval * time.Duration(k))
		if due.After(deadline) {
			break
		}
		if d := time.Until(due); d > 0 {
			time.Sleep(d)
		}
		if c == nil {
			var err error
			if c, err = net.DialTimeout("tcp", addr, 2*time.Second); err != nil {
				fail(err)
				continue
			}
			br = bufio.NewReaderSize(c, 16<<10)
		}
		_ = c.SetDeadline(deadline)
		_, err := c.Write(req)
		if err == nil {
			err = readResponse(br)
		}
		if err != nil {
			fail(err)
			c.Close()
			c = nil
			continue
		}
		if !due.Before(measureFrom) {
			lat = append(lat, time.Since(due))
		}
	}
	if c != nil {
		c.Close()
	}
	return lat, errs, firstErr
}

// readResponse reads one response with a Content-Length body.
func readResponse(br *bufio.Reader) error {
	line, err := br.ReadSlice('\n')
	if err != nil {
		return err
	}
	if len(line) < 12 || !bytes.HasPrefix(line, []byte("HTTP/1.")) || line[9] != '2' {
		return fmt.Errorf("status line %q", line)
	}
	cl := -1
	for {
		line, err = br.ReadSlice('\n')
		if err != nil {
			return err
		}
		if len(line) <= 2 {
			break
		}
		if len(line) > 15 && bytes.EqualFold(line[:15], []byte("content-length:")) {
			cl, err = strconv.Atoi(string(bytes.TrimSpace(line[15:])))
			if err != nil {
				return err
			}
		}
	}
	if cl < 0 {
		return errors.New("response without Content-Length")
	}
	_, err = br.Discard(cl)
	return err
}
