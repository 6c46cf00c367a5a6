package l7

import (
	"net"
	"syscall"
	"testing"
	"unsafe"
)

// BenchmarkSockCalls compares a request's system calls made as read(2)
// and write(2) with the same made as recv(2) and send(2) (sockRead,
// sockWrite): 200 bytes one way and back over a loopback TCP pair, four
// calls an iteration.
func BenchmarkSockCalls(b *testing.B) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	defer ln.Close()
	cc, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		b.Fatal(err)
	}
	defer cc.Close()
	sc, err := ln.Accept()
	if err != nil {
		b.Fatal(err)
	}
	defer sc.Close()
	msg, buf := make([]byte, 200), make([]byte, 4096)
	readWrite := func(fd int, out bool, p []byte) {
		nr := uintptr(syscall.SYS_READ)
		if out {
			nr = syscall.SYS_WRITE
		}
		for {
			_, _, e := syscall.RawSyscall(nr, uintptr(fd), uintptr(unsafe.Pointer(&p[0])), uintptr(len(p)))
			if e != syscall.EAGAIN {
				return
			}
		}
	}
	recvSend := func(fd int, out bool, p []byte) {
		for {
			var err error
			if out {
				_, err = sockWrite(fd, p)
			} else {
				_, err = sockRead(fd, p)
			}
			if err != syscall.EAGAIN {
				return
			}
		}
	}
	for _, bc := range []struct {
		name string
		call func(fd int, out bool, p []byte)
	}{{"read-write", readWrite}, {"recv-send", recvSend}} {
		b.Run(bc.name, func(b *testing.B) {
			a := rawConnFD(b, cc.(*net.TCPConn))
			s := rawConnFD(b, sc.(*net.TCPConn))
			for b.Loop() {
				bc.call(a, true, msg)
				bc.call(s, false, buf)
				bc.call(s, true, msg)
				bc.call(a, false, buf)
			}
		})
	}
}

// rawConnFD returns c's descriptor, which stays c's while c is open.
func rawConnFD(tb testing.TB, c *net.TCPConn) int {
	rc, err := c.SyscallConn()
	if err != nil {
		tb.Fatal(err)
	}
	fd := -1
	if err := rc.Control(func(f uintptr) { fd = int(f) }); err != nil {
		tb.Fatal(err)
	}
	return fd
}
