package proxy

import (
	"errors"
	"os"
	"os/exec"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/teapot-lb/teapot-lb/proxy/internal/uring"
)

// seccompChildEnv makes TestAutoPicksEpollUnderSeccomp's child deny
// io_uring_setup(2) and choose.
const seccompChildEnv = "TEAPOT_TEST_DENY_IO_URING"

// denyIOURingSetup installs, on every thread of the process, a seccomp
// filter that fails io_uring_setup(2) with EPERM: what systemd's
// SystemCallFilter= without @aio (SystemCallErrorNumber=EPERM) does.
func denyIOURingSetup(t *testing.T) {
	t.Helper()
	prog := []unix.SockFilter{
		{Code: unix.BPF_LD | unix.BPF_W | unix.BPF_ABS, K: 0}, // seccomp_data.nr
		{Code: unix.BPF_JMP | unix.BPF_JEQ | unix.BPF_K, Jt: 0, Jf: 1, K: unix.SYS_IO_URING_SETUP},
		{Code: unix.BPF_RET | unix.BPF_K, K: unix.SECCOMP_RET_ERRNO | uint32(unix.EPERM)},
		{Code: unix.BPF_RET | unix.BPF_K, K: unix.SECCOMP_RET_ALLOW},
	}
	fprog := unix.SockFprog{Len: uint16(len(prog)), Filter: &prog[0]}
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		t.Fatalf("no_new_privs: %v", err)
	}
	if _, _, errno := unix.Syscall(unix.SYS_SECCOMP, unix.SECCOMP_SET_MODE_FILTER, unix.SECCOMP_FILTER_FLAG_TSYNC, uintptr(unsafe.Pointer(&fprog))); errno != 0 {
		t.Fatalf("seccomp: %v", errno)
	}
}

// TestAutoPicksEpollUnderSeccomp: under a seccomp filter that refuses
// io_uring (a unit's SystemCallFilter without @aio), auto takes epoll
// and io_uring asked for is refused, in a child process of this test
// binary (a filter cannot be taken off again).
func TestAutoPicksEpollUnderSeccomp(t *testing.T) {
	if os.Getenv(seccompChildEnv) == "1" {
		denyIOURingSetup(t)
		if err := uring.Available(); !errors.Is(err, uring.ErrUnavailable) || !errors.Is(err, unix.EPERM) {
			t.Fatalf("Available under the filter: %v", err)
		}
		if got, why, err := ChooseDataPath(DataPathAuto); err != nil || got != DataPathEpoll {
			t.Fatalf("auto under the filter: %s (%s), %v", got, why, err)
		}
		if _, _, err := ChooseDataPath(DataPathIOURing); !errors.Is(err, ErrDataPath) {
			t.Fatalf("io_uring under the filter: %v", err)
		}
		p, _ := newProxy(t, Config{DataPath: DataPathAuto})
		if p.DataPath() != DataPathEpoll {
			t.Fatalf("a proxy configured auto runs %s under the filter", p.DataPath())
		}
		return
	}
	t.Parallel()
	if err := uring.Available(); err != nil {
		t.Skipf("io_uring unavailable even without a filter: %v", err)
	}
	cmd := exec.Command(os.Args[0], "-test.run", "^TestAutoPicksEpollUnderSeccomp$", "-test.count=1", "-test.v")
	cmd.Env = append(os.Environ(), seccompChildEnv+"=1")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("child under the filter: %v\n%s", err, out)
	}
}
