package steer

import (
	"os"
	"os/exec"
	"strings"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"
)

func TestDeniedCause(t *testing.T) {
	t.Parallel()
	const (
		unitCaps = "0000008000003000" // CAP_NET_ADMIN CAP_NET_RAW CAP_BPF
		noBPF    = "0000000000003000"
		root     = "000001ffffffffff"
	)
	for _, tc := range []struct {
		capEff, seccomp string
		want, not       string
	}{
		{noBPF, "0", "lacks CAP_BPF", "seccomp"},
		{noBPF, "2", "lacks CAP_BPF", "holds"},
		{unitCaps, "2", "holds CAP_BPF, so a seccomp syscall filter refuses bpf(2): under systemd, allow it with SystemCallFilter=@system-service bpf", "lacks"},
		{root, "2", "a seccomp syscall filter refuses bpf(2)", "lacks"},
		{unitCaps, "0", "the kernel's policy refuses bpf(2)", "lacks"},
	} {
		got := deniedCause("Name:\tteapot-lb\nCapEff:\t" + tc.capEff + "\nSeccomp:\t" + tc.seccomp + "\nSeccomp_filters:\t1\n")
		if !strings.Contains(got, tc.want) || strings.Contains(got, tc.not) {
			t.Errorf("CapEff %s Seccomp %s: %q, want %q and not %q", tc.capEff, tc.seccomp, got, tc.want, tc.not)
		}
	}
}

// TestOpenUnderASyscallFilter: a process that holds CAP_BPF but runs
// under a seccomp filter refusing bpf(2) with EPERM (what systemd's
// SystemCallFilter=@system-service does) is told the filter is the
// cause, not a capability or the kernel.
func TestOpenUnderASyscallFilter(t *testing.T) {
	if os.Getenv("STEER_HELPER") == "seccomp" {
		helperSeccomp()
		return
	}
	if uid := os.Geteuid(); uid != 0 {
		t.Skipf("runs as uid %d: the helper process needs root for CAP_BPF (bpf(2) must fail only because of the seccomp filter it installs)", uid)
	}
	t.Parallel()
	cmd := exec.Command(os.Args[0], "-test.run=^TestOpenUnderASyscallFilter$")
	cmd.Env = append(os.Environ(), "STEER_HELPER=seccomp")
	out, err := cmd.CombinedOutput()
	if err == nil || !strings.Contains(string(out), "operation not permitted: this process holds CAP_BPF, so a seccomp syscall filter refuses bpf(2)") {
		t.Errorf("under a filter refusing bpf(2): %v\n%s", err, out)
	}
}

// helperSeccomp installs a filter on every thread that answers bpf(2)
// with EPERM, then opens a Steer.
func helperSeccomp() {
	const (
		retErrno = 0x00050000
		retAllow = 0x7fff0000
	)
	filter := []unix.SockFilter{
		{Code: unix.BPF_LD | unix.BPF_W | unix.BPF_ABS, K: 0}, // seccomp_data.nr
		{Code: unix.BPF_JMP | unix.BPF_JEQ | unix.BPF_K, Jt: 0, Jf: 1, K: unix.SYS_BPF},
		{Code: unix.BPF_RET | unix.BPF_K, K: retErrno | uint32(unix.EPERM)},
		{Code: unix.BPF_RET | unix.BPF_K, K: retAllow},
	}
	prog := unix.SockFprog{Len: uint16(len(filter)), Filter: &filter[0]}
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		println("no_new_privs:", err.Error())
		os.Exit(3)
	}
	if _, _, errno := unix.Syscall(unix.SYS_SECCOMP, unix.SECCOMP_SET_MODE_FILTER, unix.SECCOMP_FILTER_FLAG_TSYNC, uintptr(unsafe.Pointer(&prog))); errno != 0 {
		println("seccomp:", errno.Error())
		os.Exit(3)
	}
	s, err := Open(16)
	if err != nil {
		println("open:", err.Error())
		os.Exit(1)
	}
	s.Close()
	println("opened under the filter")
	os.Exit(0)
}
