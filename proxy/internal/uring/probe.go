package uring

import (
	"errors"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// disabledFile says whether the kernel lets processes create rings: 0
// all, 1 only members of kernel.io_uring_group, 2 none.
const disabledFile = "/proc/sys/kernel/io_uring_disabled"

// minKernel is the oldest kernel with everything the relay uses:
// multishot receive (6.0), provided buffer rings (5.19), sparse
// registered descriptor tables (5.19) and DEFER_TASKRUN (6.1).
var minKernel = [2]int{6, 1}

// Available reports whether this process can relay through io_uring: the
// kernel is new enough, io_uring is not disabled and no sandbox (seccomp,
// as a systemd SystemCallFilter without @aio sets up) refuses it. A nil
// error means a ring with a buffer ring and a descriptor table was set up
// and torn down on this thread.
func Available() error {
	var u unix.Utsname
	if err := unix.Uname(&u); err == nil {
		rel := unix.ByteSliceToString(u.Release[:])
		if !kernelAtLeast(rel, minKernel) {
			return fmt.Errorf("%w: kernel %s is older than %d.%d", ErrUnavailable, rel, minKernel[0], minKernel[1])
		}
	}
	if b, err := os.ReadFile(disabledFile); err == nil {
		if v := strings.TrimSpace(string(b)); v == "2" {
			return fmt.Errorf("%w: %s is 2", ErrUnavailable, disabledFile)
		}
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	r, err := newRing(8, 2)
	if err != nil {
		if errors.Is(err, unix.EPERM) || errors.Is(err, unix.ENOSYS) || errors.Is(err, unix.EACCES) {
			return fmt.Errorf("%w: %w (io_uring is disabled for this process: %s, a seccomp filter)", ErrUnavailable, err, disabledFile)
		}
		return fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
	defer r.close()
	if err := r.probe(opRecv, opSend, opShutdown, opFilesUpdate, opAsyncCancel, opTimeout, opRead); err != nil {
		return err
	}
	br, err := newBufRing(r, 0, 2, 64)
	if err != nil {
		return fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
	br.free()
	return nil
}

// mshotLimit reports whether the kernel bounds a multishot receive's
// total bytes (sqe->optlen, 6.17); before, the relay cancels a receive
// that holds too much, and a few more buffers may arrive meanwhile.
func mshotLimit() bool {
	var u unix.Utsname
	if err := unix.Uname(&u); err != nil {
		return false
	}
	return kernelAtLeast(unix.ByteSliceToString(u.Release[:]), [2]int{6, 17})
}

// kernelAtLeast reports whether release (as uname -r prints it) is at
// least want (major, minor).
func kernelAtLeast(release string, want [2]int) bool {
	parts := strings.SplitN(release, ".", 3)
	if len(parts) < 2 {
		return true
	}
	major, err1 := strconv.Atoi(parts[0])
	minorStr := parts[1]
	if i := strings.IndexFunc(minorStr, func(r rune) bool { return r < '0' || r > '9' }); i >= 0 {
		minorStr = minorStr[:i]
	}
	minor, err2 := strconv.Atoi(minorStr)
	if err1 != nil || err2 != nil {
		return true
	}
	return major > want[0] || major == want[0] && minor >= want[1]
}
