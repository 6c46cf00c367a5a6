package l7

import (
	"net"
	"os"
	"syscall"
	"unsafe"
)

// sockRead and sockWrite are read(2) and write(2) on a non-blocking
// socket, made without telling the scheduler (syscall.RawSyscall): such a
// call never blocks, and entering and leaving a blocking system call
// costs as much as parsing a request head. They are called only from a
// RawConn callback, which holds a reference to fd. They return n >= 0
// and the errno.
func sockRead(fd int, b []byte) (int, error) {
	if len(b) == 0 {
		return 0, nil
	}
	n, _, e := syscall.RawSyscall(syscall.SYS_READ, uintptr(fd), uintptr(unsafe.Pointer(&b[0])), uintptr(len(b)))
	if e != 0 {
		return 0, e
	}
	return int(n), nil
}

func sockWrite(fd int, b []byte) (int, error) {
	if len(b) == 0 {
		return 0, nil
	}
	n, _, e := syscall.RawSyscall(syscall.SYS_WRITE, uintptr(fd), uintptr(unsafe.Pointer(&b[0])), uintptr(len(b)))
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
