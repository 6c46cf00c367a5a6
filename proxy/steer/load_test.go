package steer

import (
	"errors"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/teapot-lb/teapot-lb/proxy/internal/netnstest"
)

// TestLoadRetriesAnInterruptedVerifier: the verifier answers EAGAIN when
// a signal is pending (the Go runtime's preemption signals), and Open
// loads the program again, a bounded number of times; other errors are
// not retried.
func TestLoadRetriesAnInterruptedVerifier(t *testing.T) {
	loads, interrupted := 0, 0
	sysBPF = func(cmd int, attr unsafe.Pointer, size uintptr) (int, error) {
		if cmd == unix.BPF_PROG_LOAD {
			loads++
			if loads <= interrupted {
				return -1, unix.EAGAIN
			}
		}
		return bpf(cmd, attr, size)
	}
	t.Cleanup(func() { sysBPF = bpf })
	netnstest.Run(t, []string{"192.0.2.10/32"}, func() {
		interrupted = 3
		s, err := Open(16)
		if err != nil {
			t.Fatalf("Open with the first %d loads interrupted: %v", interrupted, err)
		}
		s.Close()
		if loads != 4 {
			t.Errorf("loads: %d, want 4 (3 interrupted, then one through)", loads)
		}

		loads, interrupted = 0, progLoadTries
		if _, err := Open(16); !errors.Is(err, unix.EAGAIN) {
			t.Errorf("Open with every load interrupted: %v, want EAGAIN", err)
		}
		if loads != progLoadTries {
			t.Errorf("loads: %d, want %d", loads, progLoadTries)
		}
	})
}
