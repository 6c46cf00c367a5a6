package cpubudget

import (
	"runtime"
	"time"

	"golang.org/x/sys/unix"
)

// measure runs f on a thread of its own and returns the CPU time that
// thread spent in it, so that a signature is charged what it cost and not
// the time other goroutines ran meanwhile.
func measure(f func() ([]byte, error)) ([]byte, time.Duration, error) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	start, ok := threadCPU()
	t0 := time.Now()
	sig, err := f()
	if end, ok2 := threadCPU(); ok && ok2 && end >= start {
		return sig, end - start, err
	}
	return sig, time.Since(t0), err
}

// checkNice is the niceness of a background signature's thread: beside
// a busy thread of the host's (requests, the admin API, Raft) at the
// default niceness the kernel gives it about a tenth of a core (weights
// 110 and 1024), so a tenant's checks cannot take the CPU a neighbour's
// requests wait for, yet still sign on a busy host (at 19, 1/70 of a
// core, a check's RSA-4096 signature took longer than its timeout on a
// loaded 2-core machine).
const checkNice = 10

// measureLow is measure on a thread of its own at a low priority
// (checkNice), for work no client waits for: a health check's
// signature. The thread ends with the goroutine that lowered it (an
// unprivileged process could not raise it again), so no other goroutine
// runs on it. If the priority cannot be lowered, the work runs as
// measure's.
func measureLow(f func() ([]byte, error)) ([]byte, time.Duration, error) {
	type result struct {
		sig []byte
		d   time.Duration
		err error
	}
	done := make(chan result, 1)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread exits with this goroutine
		_ = unix.Setpriority(unix.PRIO_PROCESS, unix.Gettid(), checkNice)
		sig, d, err := measure(f)
		done <- result{sig, d, err}
	}()
	r := <-done
	return r.sig, r.d, r.err
}

func threadCPU() (time.Duration, bool) {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_THREAD_CPUTIME_ID, &ts); err != nil {
		return 0, false
	}
	return time.Duration(ts.Nano()), true
}

// processCPU is the CPU time the process spent so far, user and system,
// all threads (0 when it cannot be read).
func processCPU() time.Duration {
	var ru unix.Rusage
	if err := unix.Getrusage(unix.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
