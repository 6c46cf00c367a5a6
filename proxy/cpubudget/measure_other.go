//go:build !linux

package cpubudget

import "time"

// measure runs f and returns the time it took.
func measure(f func() ([]byte, error)) ([]byte, time.Duration, error) {
	t0 := time.Now()
	sig, err := f()
	return sig, time.Since(t0), err
}

// measureLow is measure: lowering one thread's priority is Linux's.
func measureLow(f func() ([]byte, error)) ([]byte, time.Duration, error) { return measure(f) }

// threadCPU is the wall clock where a thread's CPU time is not known.
func threadCPU() (time.Duration, bool) { return time.Duration(time.Now().UnixNano()), true }

// processCPU is not known here: the accountant charges what was measured
// directly only.
func processCPU() time.Duration { return 0 }
