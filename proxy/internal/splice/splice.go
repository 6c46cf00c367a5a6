// Package splice moves bytes between two TCP sockets through pipes in the
// kernel (splice(2)), taking a pipe from a bounded pool only while bytes
// move.
package splice

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

// Go's own splice path (io.Copy between two *net.TCPConn) holds a pipe per
// direction for as long as the copy waits for bytes, so an idle
// connection holds four descriptors besides its two sockets, and keeps
// its pipes in a sync.Pool that only a garbage collection empties. Here a
// direction waits for bytes without a pipe, takes one from the host's
// pool only while it moves them, and gives it back empty; the pool holds
// at most its bound of pipes and keeps at most FreePipes idle, and a
// direction that finds none copies through a buffer instead.

// FreePipes bounds the idle pipes a pool keeps open.
const FreePipes = 16

// spliceChunk is what one splice(2) asks for: at most a pipe's capacity
// moves.
const spliceChunk = 1 << 20

// copyBufSize is the buffer of a direction that copies.
const copyBufSize = 32 << 10

var copyBufs = sync.Pool{New: func() any { b := make([]byte, copyBufSize); return &b }}

// ErrQuantum: Move moved its quantum (SetQuantum) and returns so that
// its caller may count the bytes and wait before it moves more; the
// direction goes on at the next Move.
var ErrQuantum = errors.New("splice: quantum moved")

// Pool is a host's splice pipes. A nil Pool has none: splicers copy.
type Pool struct {
	max int
	mu  sync.Mutex
	// open counts the pipes open, free or in use.
	open int
	free []kpipe
}

// kpipe is a pipe's read and write ends.
type kpipe struct{ r, w int }

// NewPool returns a pool of at most max pipes (none when max <= 0).
func NewPool(max int) *Pool { return &Pool{max: max} }

// get returns an empty pipe; false when the pool is spent.
func (pl *Pool) get() (kpipe, bool) {
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
func (pl *Pool) put(p kpipe) {
	pl.mu.Lock()
	if len(pl.free) < FreePipes {
		pl.free = append(pl.free, p)
		pl.mu.Unlock()
		return
	}
	pl.open--
	pl.mu.Unlock()
	closePipe(p)
}

// discard closes a pipe that may hold bytes.
func (pl *Pool) discard(p kpipe) {
	pl.mu.Lock()
	pl.open--
	pl.mu.Unlock()
	closePipe(p)
}

// Close closes the idle pipes.
func (pl *Pool) Close() {
	if pl == nil {
		return
	}
	pl.mu.Lock()
	free := pl.free
	pl.free = nil
	pl.open -= len(free)
	pl.mu.Unlock()
	for _, p := range free {
		closePipe(p)
	}
}

// Open reports the pipes open, idle ones included.
func (pl *Pool) Open() int {
	if pl == nil {
		return 0
	}
	pl.mu.Lock()
	defer pl.mu.Unlock()
	return pl.open
}

func closePipe(p kpipe) {
	_ = unix.Close(p.r)
	_ = unix.Close(p.w)
}

// Splicer moves one direction of a connection, src to dst. Its methods
// are bound once, so that waiting and moving allocate nothing. Close gives
// back a pipe it still holds.
type Splicer struct {
	pl       *Pool
	dst, src *net.TCPConn
	srcRaw   syscall.RawConn
	dstRaw   syscall.RawConn
	// noSplice: the kernel refused to splice these sockets; copy.
	noSplice bool
	// quantum, when not 0, is what one Move moves at most before it
	// returns ErrQuantum (a pipe's worth more at most).
	quantum int64
	// held is a pipe whose bytes a failed write left (holding is set).
	held    kpipe
	holding bool

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

// New returns the splicer of src to dst over pl's pipes.
func New(pl *Pool, dst, src *net.TCPConn) *Splicer {
	sp := &Splicer{pl: pl, dst: dst, src: src, noSplice: pl == nil || pl.max <= 0}
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

// SetQuantum makes each Move return ErrQuantum once it moved n bytes (a
// pipe's capacity more at most), so that its caller counts the bytes as
// they move, not only when the direction pauses; 0 (the default) moves
// until a pause, the end or a failure.
func (sp *Splicer) SetQuantum(n int64) { sp.quantum = n }

// full reports whether total reached the quantum.
func (sp *Splicer) full(total int64) bool { return sp.quantum > 0 && total >= sp.quantum }

// Dst and Src are the splicer's sockets.
func (sp *Splicer) Dst() *net.TCPConn { return sp.dst }
func (sp *Splicer) Src() *net.TCPConn { return sp.src }

// Move moves bytes until src's half ends (nil, as io.Copy), a deadline
// passes (os.ErrDeadlineExceeded), a side fails or, with a quantum, it
// moved the quantum (ErrQuantum). Bytes a write deadline
// left in the pipe go first at the next Move.
func (sp *Splicer) Move() (int64, error) {
	var total int64
	if sp.holding {
		// What a write deadline left in the pipe goes first.
		sp.holding = false
		sp.p = sp.held
		n, err := sp.pumpHeld()
		total += n
		if err != nil {
			return total, err
		}
		sp.pl.put(sp.p)
	}
	for {
		if sp.full(total) {
			return total, ErrQuantum
		}
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
		n, done, err := sp.through(p, total)
		total += n
		if err != nil || done {
			return total, err
		}
	}
}

// through moves what src has through p until src has no more for now
// or, with before bytes moved already, the quantum is reached; done
// reports src's end. p goes back to the pool, stays with the splicer
// when a write deadline left bytes in it, or is closed when another
// failure did.
func (sp *Splicer) through(p kpipe, before int64) (total int64, done bool, err error) {
	sp.p = p
	for {
		if sp.full(before + total) {
			sp.pl.put(p)
			return total, false, nil
		}
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
		n, err := sp.pumpHeld()
		total += n
		if err != nil {
			return total, false, err
		}
	}
}

// pumpHeld splices the bytes of sp.p into dst. On a deadline the pipe and
// its bytes stay with the splicer for the next Move; on another failure
// it is closed; else it stays in sp.p, empty.
func (sp *Splicer) pumpHeld() (int64, error) {
	sp.moved, sp.err = 0, nil
	werr := sp.dstRaw.Write(sp.pumpF)
	if werr == nil {
		werr = sp.err
	}
	if werr == nil {
		return int64(sp.moved), nil
	}
	if errors.Is(werr, os.ErrDeadlineExceeded) && sp.inPipe > 0 {
		sp.held, sp.holding = sp.p, true
	} else {
		sp.pl.discard(sp.p)
	}
	return int64(sp.moved), werr
}

// Close gives back a pipe the splicer still holds (with bytes a write
// deadline left in it: they are dropped).
func (sp *Splicer) Close() {
	if sp.holding {
		sp.holding = false
		sp.pl.discard(sp.held)
	}
}

// peek waits for src to be readable: bytes, the end or an error.
func (sp *Splicer) peek(fd uintptr) bool {
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
func (sp *Splicer) drain(fd uintptr) bool {
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
func (sp *Splicer) pump(fd uintptr) bool {
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
func (sp *Splicer) copyOnce() (int64, error) {
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
