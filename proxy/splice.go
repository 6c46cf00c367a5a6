package proxy

import (
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"
)

// Splicing moves a TCP connection's bytes through a pipe in the kernel.
// Go's own splice path (io.Copy between two *net.TCPConn) holds a pipe per
// direction for as long as the copy waits for bytes, so an idle
// connection holds four descriptors besides its two sockets, and keeps
// its pipes in a sync.Pool that only a garbage collection empties. Here a
// direction waits for bytes without a pipe, takes one from the host's
// pool only while it moves them, and gives it back empty; the pool holds
// at most Limits.SplicePipes pipes and keeps at most freePipes idle, and a
// direction that finds none copies through a buffer instead.

// freePipes bounds the idle pipes the pool keeps open.
const freePipes = 16

// spliceChunk is what one splice(2) asks for: at most a pipe's capacity
// moves.
const spliceChunk = 1 << 20

// copyBufSize is the buffer of a direction that copies.
const copyBufSize = 32 << 10

var copyBufs = sync.Pool{New: func() any { b := make([]byte, copyBufSize); return &b }}

// pipePool is the host's splice pipes.
type pipePool struct {
	max int
	mu  sync.Mutex
	// open counts the pipes open, free or in use.
	open int
	free []kpipe
}

// kpipe is a pipe's read and write ends.
type kpipe struct{ r, w int }

func newPipePool(max int) *pipePool { return &pipePool{max: max} }

// get returns an empty pipe; false when the pool is spent.
func (pl *pipePool) get() (kpipe, bool) {
	pl.mu.Lock()
	defer pl.mu.Unlock()
	if n := len(pl.free); n > 0 {
		p := pl.free[n-1]
		pl.free = pl.free[:n-1]
		return p, true
	}
	if pl.open >= pl.max {
		return kpipe{}, false
	}
	var fds [2]int
	if err := unix.Pipe2(fds[:], unix.O_CLOEXEC|unix.O_NONBLOCK); err != nil {
		return kpipe{}, false
	}
	pl.open++
	return kpipe{r: fds[0], w: fds[1]}, true
}

// put gives back an empty pipe.
func (pl *pipePool) put(p kpipe) {
	pl.mu.Lock()
	if len(pl.free) < freePipes {
		pl.free = append(pl.free, p)
		pl.mu.Unlock()
		return
	}
	pl.open--
	pl.mu.Unlock()
	closePipe(p)
}

// discard closes a pipe that may hold bytes.
func (pl *pipePool) discard(p kpipe) {
	pl.mu.Lock()
	pl.open--
	pl.mu.Unlock()
	closePipe(p)
}

// close closes the idle pipes.
func (pl *pipePool) close() {
	pl.mu.Lock()
	free := pl.free
	pl.free = nil
	pl.open -= len(free)
	pl.mu.Unlock()
	for _, p := range free {
		closePipe(p)
	}
}

// inUse reports the pipes open, idle ones included.
func (pl *pipePool) inUse() int {
	pl.mu.Lock()
	defer pl.mu.Unlock()
	return pl.open
}

func closePipe(p kpipe) {
	_ = unix.Close(p.r)
	_ = unix.Close(p.w)
}

// splicer moves one direction of a connection, src to dst. Its methods
// are bound once, so that waiting and moving allocate nothing.
type splicer struct {
	pl       *pipePool
	dst, src *net.TCPConn
	srcRaw   syscall.RawConn
	dstRaw   syscall.RawConn
	// noSplice: the kernel refused to splice these sockets; copy.
	noSplice bool

	// State of the callbacks.
	p        kpipe
	inPipe   int
	moved    int
	eof      bool
	err      error
	peekF    func(uintptr) bool
	drainF   func(uintptr) bool
	pumpF    func(uintptr) bool
	peekByte [1]byte
}

func newSplicer(pl *pipePool, dst, src *net.TCPConn) *splicer {
	sp := &splicer{pl: pl, dst: dst, src: src, noSplice: pl == nil || pl.max <= 0}
	var err error
	if sp.srcRaw, err = src.SyscallConn(); err != nil {
		sp.noSplice = true
	}
	if sp.dstRaw, err = dst.SyscallConn(); err != nil {
		sp.noSplice = true
	}
	sp.peekF, sp.drainF, sp.pumpF = sp.peek, sp.drain, sp.pump
	return sp
}

// move moves bytes until src's half ends (nil, as io.Copy), the read
// deadline of src passes (os.ErrDeadlineExceeded) or a side fails.
func (sp *splicer) move() (int64, error) {
	var total int64
	for {
		if sp.noSplice {
			n, err := sp.copyOnce()
			total += n
			if err != nil || n == 0 {
				return total, err
			}
			continue
		}
		// Wait for bytes (or the end) without holding a pipe.
		sp.eof, sp.err = false, nil
		if err := sp.srcRaw.Read(sp.peekF); err != nil {
			return total, err
		}
		if sp.err != nil {
			return total, sp.err
		}
		if sp.eof {
			return total, nil
		}
		p, ok := sp.pl.get()
		if !ok {
			n, err := sp.copyOnce()
			total += n
			if err != nil || n == 0 {
				return total, err
			}
			continue
		}
		n, done, err := sp.through(p)
		total += n
		if err != nil || done {
			return total, err
		}
	}
}

// through moves what src has through p until src has no more for now;
// done reports src's end. p goes back to the pool, or is closed when a
// failure left bytes in it.
func (sp *splicer) through(p kpipe) (total int64, done bool, err error) {
	sp.p = p
	for {
		sp.inPipe, sp.eof, sp.err = 0, false, nil
		if err := sp.srcRaw.Read(sp.drainF); err != nil {
			sp.pl.put(p)
			return total, false, err
		}
		if sp.err != nil {
			if errors.Is(sp.err, unix.EINVAL) && total == 0 {
				// These sockets cannot be spliced; nothing was moved.
				sp.noSplice = true
				sp.pl.put(p)
				return 0, false, nil
			}
			sp.pl.put(p)
			return total, false, sp.err
		}
		if sp.eof {
			sp.pl.put(p)
			return total, true, nil
		}
		if sp.inPipe == 0 { // nothing more for now
			sp.pl.put(p)
			return total, false, nil
		}
		sp.moved, sp.err = 0, nil
		werr := sp.dstRaw.Write(sp.pumpF)
		total += int64(sp.moved)
		if werr == nil {
			werr = sp.err
		}
		if werr != nil {
			sp.pl.discard(p)
			return total, false, werr
		}
	}
}

// peek waits for src to be readable: bytes, the end or an error.
func (sp *splicer) peek(fd uintptr) bool {
	for {
		n, _, err := unix.Recvfrom(int(fd), sp.peekByte[:], unix.MSG_PEEK|unix.MSG_DONTWAIT)
		switch {
		case err == unix.EINTR:
			continue
		case err == unix.EAGAIN:
			return false
		case err != nil:
			sp.err = os.NewSyscallError("recvfrom", err)
		case n == 0:
			sp.eof = true
		}
		return true
	}
}

// drain splices what src has into the pipe, up to its capacity.
func (sp *splicer) drain(fd uintptr) bool {
	for {
		n, err := unix.Splice(int(fd), nil, sp.p.w, nil, spliceChunk, unix.SPLICE_F_MOVE|unix.SPLICE_F_NONBLOCK)
		switch {
		case err == unix.EINTR:
			continue
		case err == unix.EAGAIN:
			// Nothing more in the socket, or the pipe is full.
		case err != nil:
			sp.err = os.NewSyscallError("splice", err)
		case n == 0:
			sp.eof = true
		default:
			sp.inPipe = int(n)
		}
		return true
	}
}

// pump splices the pipe's bytes into dst, waiting while dst is full.
func (sp *splicer) pump(fd uintptr) bool {
	for sp.inPipe > 0 {
		n, err := unix.Splice(sp.p.r, nil, int(fd), nil, sp.inPipe, unix.SPLICE_F_MOVE|unix.SPLICE_F_NONBLOCK)
		switch {
		case err == unix.EINTR:
			continue
		case err == unix.EAGAIN:
			return false
		case err != nil:
			sp.err = os.NewSyscallError("splice", err)
			return true
		}
		sp.inPipe -= int(n)
		sp.moved += int(n)
	}
	return true
}

// copyOnce copies what one read of src returns; 0 bytes and no error is
// the end of src.
func (sp *splicer) copyOnce() (int64, error) {
	bp := copyBufs.Get().(*[]byte)
	defer copyBufs.Put(bp)
	n, err := sp.src.Read(*bp)
	if n > 0 {
		if _, werr := sp.dst.Write((*bp)[:n]); werr != nil {
			return 0, fmt.Errorf("write: %w", werr)
		}
	}
	if errors.Is(err, io.EOF) {
		if n > 0 {
			return int64(n), nil // the end comes with the next read
		}
		return 0, nil
	}
	return int64(n), err
}
