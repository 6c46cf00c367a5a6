package scenarios

import (
	"fmt"
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
// health check's signatures, takes its wait with it). The wait is what
// the machine's other work (other processes) costs the process, whatever
// it does inside.
type schedStat struct {
	cpu, wait time.Duration
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
		who, (after.cpu-before.cpu).Seconds()/wall.Seconds(), max(0, after.wait-before.wait).Seconds(), wall.Seconds(), la)
}

// readBarrier is the host's teapot_lb_read_barrier_seconds: how many
// linearizable reads it served, how long they waited in all, and how
// many waited over 10 ms.
type readBarrier struct{ count, sum, over10ms float64 }

func scrapeReadBarrier(n *node) (readBarrier, error) {
	ss, err := scrape(n)
	if err != nil {
		return readBarrier{}, err
	}
	var r readBarrier
	for _, s := range ss["teapot_lb_read_barrier_seconds_count"] {
		r.count = s.value
	}
	for _, s := range ss["teapot_lb_read_barrier_seconds_sum"] {
		r.sum = s.value
	}
	for _, s := range ss["teapot_lb_read_barrier_seconds_bucket"] {
		if s.labels["le"] == "0.01" {
			r.over10ms = r.count - s.value
		}
	}
	return r, nil
}

// readBarrierNote says how long the phase's linearizable reads waited
// before they could read the host's state (the Raft read index and the
// apply up to it).
func readBarrierNote(n *node, before readBarrier) string {
	now, err := scrapeReadBarrier(n)
	if err != nil {
		return "read barrier: " + err.Error()
	}
	return fmt.Sprintf("read barrier: %.0f reads waited %.1f ms in all, %.0f over 10 ms",
		now.count-before.count, (now.sum-before.sum)*1000, now.over10ms-before.over10ms)
}
