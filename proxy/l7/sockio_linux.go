package l7

import (
	"net"
	"os"
	"sync/atomic"
	"syscall"
	"unsafe"
)

// sockCounts, set by the tests before any connection is made, counts
// the calls of sockRead and sockWrite: /proc/self/io's syscr and syscw
// count read(2) and write(2) only, not recv(2) and send(2).
var sockCounts *sockCounter

type sockCounter struct{ reads, writes atomic.Int64 }

// sockRead and sockWrite are recv(2) and send(2) on a non-blocking
// socket, made without telling the scheduler (syscall.RawSyscall6): such a
// call never blocks, and entering and leaving a blocking system call
// costs as much as parsing a request head. They are called only from a
// RawConn callback, which holds a reference to fd. They return n >= 0
// and the errno. recvfrom and sendto, as HAProxy uses, not read and
// write: those pass through the file layer first (a position lock, the
// security and notification hooks of a file write) before they reach
// the socket, and a read and a write cost 5-6% more CPU than a recv and a
// send of the same bytes (BenchmarkSockCalls).
func sockRead(fd int, b []byte) (int, error) {
	if len(b) == 0 {
		return 0, nil
	}
	if sockCounts != nil {
		sockCounts.reads.Add(1)
	}
	n, _, e := syscall.RawSyscall6(syscall.SYS_RECVFROM, uintptr(fd), uintptr(unsafe.Pointer(&b[0])), uintptr(len(b)), 0, 0, 0)
	if e != 0 {
		return 0, e
	}
	return int(n), nil
}

func sockWrite(fd int, b []byte) (int, error) {
	if len(b) == 0 {
		return 0, nil
	}
	if sockCounts != nil {
		sockCounts.writes.Add(1)
	}
	n, _, e := syscall.RawSyscall6(syscall.SYS_SENDTO, uintptr(fd), uintptr(unsafe.Pointer(&b[0])), uintptr(len(b)), 0, 0, 0)
	if e != 0 {
		return 0, e
	}
	return int(n), nil
}

// writeRawClient writes b to the client socket fd from inside its read
// callback. It returns what a full socket buffer left unwritten, for
// net.Conn's Write to finish under the write deadline.
func writeRawClient(fd int, b []byte) ([]byte, error) {
	for len(b) > 0 {
		n, err := sockWrite(fd, b)
		b = b[n:]
		switch err {
		case nil:
		case syscall.EINTR:
		case syscall.EAGAIN:
			return b, nil
		default:
			return b, err
		}
	}
	return nil, nil
}

// rawWriteError is err as net.Conn's Write would report it.
func rawWriteError(err error) error {
	if err == nil {
		return nil
	}
	return &net.OpError{Op: "write", Net: "tcp", Err: os.NewSyscallError("write", err)}
}
