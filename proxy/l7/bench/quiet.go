package main

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"
)

// cpuTimes reads the busy and total jiffies of all CPUs from /proc/stat.
func cpuTimes() (busy, total uint64, ok bool) {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0, 0, false
	}
	line, _, _ := strings.Cut(string(b), "\n")
	f := strings.Fields(line)
	if len(f) < 5 || f[0] != "cpu" {
		return 0, 0, false
	}
	for i, v := range f[1:] {
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			return 0, 0, false
		}
		total += n
		if i != 3 && i != 4 { // idle, iowait
			busy += n
		}
	}
	return busy, total, true
}

// otherLoad is the share of all CPUs busy over d, while nothing of ours
// runs load.
func otherLoad(d time.Duration) float64 {
	b0, t0, ok0 := cpuTimes()
	time.Sleep(d)
	b1, t1, ok1 := cpuTimes()
	if !ok0 || !ok1 || t1 == t0 {
		return 0
	}
	return float64(b1-b0) / float64(t1-t0)
}

// quietThreshold is the CPU share other processes may use during a run.
const quietThreshold = 0.10

// waitQuiet waits, up to max, until the machine is idle, and reports
// whether it is: another process's load skews every figure.
func waitQuiet(max time.Duration) bool {
	deadline := time.Now().Add(max)
	announced := false
	for {
		load := otherLoad(500 * time.Millisecond)
		if load < quietThreshold {
			return true
		}
		if time.Now().After(deadline) {
			fmt.Printf("    (machine still %.0f%% busy with other work: this run is marked noisy)\n", 100*load)
			return false
		}
		if !announced {
			fmt.Printf("    (waiting for other work to finish: CPUs %.0f%% busy)\n", 100*load)
			announced = true
		}
		time.Sleep(time.Second)
	}
}
