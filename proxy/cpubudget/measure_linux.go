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

func threadCPU() (time.Duration, bool) {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_THREAD_CPUTIME_ID, &ts); err != nil {
		return 0, false
	}
	return time.Duration(ts.Nano()), true
}
