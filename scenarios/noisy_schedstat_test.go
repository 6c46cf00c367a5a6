package scenarios

import (
	"fmt"
	"os"
	"path/filepath"
	"time"
)

// schedStat is what the kernel counted for all threads of a process
// (/proc/PID/task/*/schedstat): time on a CPU and time runnable but
// waiting for one. The wait is what the machine's other work (other
// processes) costs the process, whatever it does inside.
type schedStat struct {
	cpu, wait time.Duration
}

func readSchedStat(pid int) (schedStat, error) {
	var s schedStat
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
			s.cpu += time.Duration(run)
			s.wait += time.Duration(wait)
		}
	}
	return s, nil
}

// schedNote says what the host spent and waited for a CPU since before,
// over wall, with the machine's load average.
func schedNote(pid int, before schedStat, wall time.Duration) string {
	after, err := readSchedStat(pid)
	if err != nil {
		return err.Error()
	}
	load, _ := os.ReadFile("/proc/loadavg")
	la := ""
	if f := string(load); len(f) > 0 {
		fmt.Sscan(f, &la)
	}
	return fmt.Sprintf("host: %.2f cores busy, its threads waited %.2f s for a CPU in %.0f s (load average %s)",
		(after.cpu-before.cpu).Seconds()/wall.Seconds(), (after.wait - before.wait).Seconds(), wall.Seconds(), la)
}
