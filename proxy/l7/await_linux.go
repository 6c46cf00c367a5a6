package l7

import (
	"io"
	"net"
	"os"
	"syscall"
)

// Writing a message and then reading the answer with net.Conn costs a
// read(2) that nearly always fails with EAGAIN (the peer had no time to
// answer), a wait in the poller, and the read that succeeds. The runtime
// clears a socket's readiness when a read waits (internal/poll's
// prepareRead), so a read must come first unless the wait was armed
// before the bytes that make the socket readable could arrive. A
// rawAwait arms it, writes, then waits: what the peer sends after the
// write always wakes it, and no read is attempted before. Used for a
// request to a member and its response head on bare TCP connections.
// A response and the client's next request need more: a client may
// send its next request before the response (pipelining), and a wait
// armed after that arrival would never see it (rawclient.go).

// ioWrite, ioWait and ioDone are the steps of rawAwait.run.
const (
	ioWrite uint8 = iota
	ioWait
	ioDone
)

// rawAwait is the state of one write-then-read on a bare TCP connection.
// It is made once per connection and reused.
type rawAwait struct {
	rc    syscall.RawConn
	run   func(uintptr) bool // step as a method value, made once
	out   []byte             // bytes still to write
	in    []byte             // where the answer is read
	n     int                // bytes read
	phase uint8
	err   error
}

// newRawAwait returns a rawAwait for tc, or nil where none can be made.
func newRawAwait(tc *net.TCPConn) *rawAwait {
	if tc == nil {
		return nil
	}
	rc, err := tc.SyscallConn()
	if err != nil {
		return nil
	}
	a := &rawAwait{rc: rc}
	a.run = a.step
	return a
}

// writeRead writes out and reads what the peer sends next into in.
// werr is a failure to write; rest is what could not be written without
// blocking (the caller writes it and reads the usual way: nothing was
// read). When all was written, n bytes were read, or rerr says why none
// were: the read deadline already set, an EOF, a reset.
func (a *rawAwait) writeRead(out, in []byte) (n int, rest []byte, rerr, werr error) {
	a.out, a.in, a.n, a.phase, a.err = out, in, 0, ioWrite, nil
	err := a.rc.Read(a.run)
	rest, n = a.out, a.n
	a.out, a.in = nil, nil
	switch a.phase {
	case ioWrite:
		if a.err != nil {
			return 0, nil, nil, a.err
		}
		if err != nil {
			return 0, nil, nil, err
		}
		return 0, rest, nil, nil
	case ioWait:
		return 0, nil, err, nil // the wait ended without a read: deadline or close
	}
	return n, nil, a.err, nil
}

// step is called by the poller with the socket: first to write, then,
// once the socket is readable, to read. It returns true when done.
func (a *rawAwait) step(fd uintptr) bool {
	if a.phase == ioWrite {
		for len(a.out) > 0 {
			n, err := sockWrite(int(fd), a.out)
			if n > 0 {
				a.out = a.out[n:]
			}
			switch {
			case err == nil:
			case err == syscall.EINTR:
			case err == syscall.EAGAIN:
				return true // the socket buffer is full: the caller writes the rest
			default:
				a.err = os.NewSyscallError("write", err)
				return true
			}
		}
		a.phase = ioWait
		return false
	}
	for {
		n, err := sockRead(int(fd), a.in)
		switch {
		case err == syscall.EINTR:
			continue
		case err == syscall.EAGAIN:
			return false
		case err != nil:
			a.err = os.NewSyscallError("read", err)
		case n == 0:
			a.err = io.EOF
		default:
			a.n = n
		}
		a.phase = ioDone
		return true
	}
}
