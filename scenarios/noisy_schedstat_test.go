package scenarios

import (
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// schedStat is what the kernel counted for a process: time on a CPU (all
// its threads, ended ones too: /proc/PID/stat) and time its threads were
// runnable but waiting for one (/proc/PID/task/*/schedstat, so the
// threads alive at the reading: a thread that ended, such as one of a
// health check's signatures, takes its wait with it, so a difference of
// two readings sums each thread's own: byTask). The wait is what
// the machine's other work (other processes) costs the process, whatever
// it does inside.
type schedStat struct {
	cpu, wait time.Duration
	byTask    map[string]time.Duration // each thread's wait
}

// waitSince is the time the threads alive now waited since before: a
// thread that was not alive then counts its whole wait, one that ended
// meanwhile counts nothing (a plain difference of the sums could fall
// below zero when threads that had waited long ended).
func (s schedStat) waitSince(before schedStat) time.Duration {
	var d time.Duration
	for task, w := range s.byTask {
		d += max(0, w-before.byTask[task])
	}
	return d
}

// clockTick is the unit of utime and stime in /proc/PID/stat (USER_HZ,
// 100 on Linux).
const clockTick = 10 * time.Millisecond

func readSchedStat(pid int) (schedStat, error) {
	var s schedStat
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return s, fmt.Errorf("stat of %d: %v", pid, err)
	}
	// The fields after the command's closing parenthesis, from the
	// state (field 3): utime and stime are fields 14 and 15.
	rest := string(stat)
	if i := strings.LastIndexByte(rest, ')'); i >= 0 {
		rest = rest[i+1:]
	}
	if f := strings.Fields(rest); len(f) > 12 {
		utime, _ := strconv.ParseInt(f[11], 10, 64)
		stime, _ := strconv.ParseInt(f[12], 10, 64)
		s.cpu = time.Duration(utime+stime) * clockTick
	}
	tasks, err := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/schedstat", pid))
	if err != nil || len(tasks) == 0 {
		return s, fmt.Errorf("schedstat of %d: %v", pid, err)
	}
	for _, f := range tasks {
		b, err := os.ReadFile(f)
		if err != nil {
			continue // the thread ended
		}
		var run, wait, slices int64
		if _, err := fmt.Sscan(string(b), &run, &wait, &slices); err == nil {
			s.wait += time.Duration(wait)
			if s.byTask == nil {
				s.byTask = map[string]time.Duration{}
			}
			s.byTask[filepath.Base(filepath.Dir(f))] = time.Duration(wait)
		}
	}
	return s, nil
}

// schedNote says what the host spent and waited for a CPU since before,
// over wall, with the machine's load average.
func schedNote(pid int, before schedStat, wall time.Duration) string {
	return procNote("host", pid, before, wall)
}

// procNote is schedNote for the process named who.
func procNote(who string, pid int, before schedStat, wall time.Duration) string {
	after, err := readSchedStat(pid)
	if err != nil {
		return err.Error()
	}
	load, _ := os.ReadFile("/proc/loadavg")
	la := ""
	if f := string(load); len(f) > 0 {
		fmt.Sscan(f, &la)
	}
	return fmt.Sprintf("%s: %.2f cores busy, its threads waited %.2f s for a CPU in %.0f s (load average %s)",
		who, (after.cpu-before.cpu).Seconds()/wall.Seconds(), after.waitSince(before).Seconds(), wall.Seconds(), la)
}

// hostHist is one of the host's histograms, summed over its labels:
// the count, the sum and the cumulative count of each bucket (by its
// upper bound, "le").
type hostHist struct {
	count, sum float64
	buckets    map[string]float64
}

// scrapeHist reads the histogram name of the samples whose tenant label
// is tenant (any, when "").
func scrapeHist(ss map[string][]sample, name, tenant string) hostHist {
	h := hostHist{buckets: map[string]float64{}}
	mine := func(s sample) bool { return tenant == "" || s.labels["tenant"] == tenant }
	for _, s := range ss[name+"_count"] {
		if mine(s) {
			h.count += s.value
		}
	}
	for _, s := range ss[name+"_sum"] {
		if mine(s) {
			h.sum += s.value
		}
	}
	for _, s := range ss[name+"_bucket"] {
		if mine(s) {
			h.buckets[s.labels["le"]] += s.value
		}
	}
	return h
}

// since is what h counted after before.
func (h hostHist) since(before hostHist) hostHist {
	d := hostHist{count: h.count - before.count, sum: h.sum - before.sum, buckets: map[string]float64{}}
	for le, v := range h.buckets {
		d.buckets[le] = v - before.buckets[le]
	}
	return d
}

// over is how many observations exceeded the bucket bound le.
func (h hostHist) over(le string) float64 { return h.count - h.buckets[le] }

// p99 is the upper bound of the bucket the 99th percentile falls in
// (seconds; +Inf past the last).
func (h hostHist) p99() float64 {
	best := math.Inf(1)
	for le, v := range h.buckets {
		b, err := strconv.ParseFloat(le, 64)
		if err == nil && v >= 0.99*h.count && b < best {
			best = b
		}
	}
	return best
}

// hostReads is what the phase's linearizable reads waited before they
// could read the host's state (the Raft read index and the apply up to
// it), the host's own time for the admin calls (headers to answer
// written) and for a's HTTP requests (request head to end of response):
// what the probers saw beyond those is their machine's.
type hostReads struct{ barrier, admin, httpA hostHist }

func scrapeHostReads(n *node) hostReads {
	ss, err := scrape(n)
	if err != nil {
		return hostReads{}
	}
	return hostReads{barrier: scrapeHist(ss, "teapot_lb_read_barrier_seconds", ""), admin: scrapeHist(ss, "teapot_lb_admin_call_seconds", ""),
		httpA: scrapeHist(ss, "teapot_lb_http_request_duration_seconds", "a")}
}

// since is what the host measured after before (nothing when either
// scrape failed).
func (r hostReads) since(before hostReads) hostReads {
	if r.admin.buckets == nil || before.admin.buckets == nil {
		return hostReads{}
	}
	return hostReads{barrier: r.barrier.since(before.barrier), admin: r.admin.since(before.admin), httpA: r.httpA.since(before.httpA)}
}

func hostReadsNote(d hostReads) string {
	if d.admin.buckets == nil {
		return "the host's histograms: not scraped"
	}
	b, a, h := d.barrier, d.admin, d.httpA
	return fmt.Sprintf("read barrier: %.0f reads waited %.1f ms in all, %.0f over 10 ms; on the host: %.0f admin calls, p99 <= %.0f ms, %.0f over 250 ms; %.0f of a's HTTP requests, p99 <= %.0f ms",
		b.count, b.sum*1000, b.over("0.01"), a.count, a.p99()*1000, a.over("0.25"), h.count, h.p99()*1000)
}
