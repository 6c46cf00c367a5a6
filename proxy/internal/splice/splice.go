// Package splice moves bytes between two TCP sockets through pipes in the
// kernel (splice(2)), taking a pipe from a bounded pool only while bytes
// move.
package splice

import (
	"errors"
	"fmt"
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
// direction waits for bytes without a pipe or a buffer, takes a pipe from
// the host's pool only while it moves a burst, and gives it back empty;
// the pool holds at most its bound of pipes and keeps at most FreePipes
// idle, and a direction that finds none copies through a buffer instead.
//
// Small messages are copied, not spliced: a direction reads what came into
// a pooled buffer of copyBufSize (in a syscall.RawConn.Read callback, whose
// empty read waits there for the next bytes, their readiness kept), then
// writes it outside the callback. A message costs a read, a write and the
// empty read; spliced, it cost a peek, two splices and the empty splice
// and peek that find nothing more. A read that fills the buffer means a
// burst: the rest of it is spliced.

// FreePipes bounds the idle pipes a pool keeps open.
const FreePipes = 16

// spliceChunk is what one splice(2) asks for: at most a pipe's capacity
// moves.
const spliceChunk = 1 << 20

// copyBufSize is the buffer a direction copies through. A read that fills
// it is taken for a burst, spliced from then on. It is held only while its
// bytes are written, never while the direction waits for bytes: a
// destination that reads nothing holds at most this much of the direction
// besides what the kernel buffers.
const copyBufSize = 8 << 10

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
	// quantum, when not 0, is the weight one Move moves at most before
	// it returns ErrQuantum (a pipe's worth more at most).
	quantum int64
	// readCost is the least weight of a copied read (SetReadCost); mw is
	// the weight the current Move moved, weight what moved since
	// TakeWeight.
	readCost, mw, weight int64
	// held is a pipe whose bytes a failed write left (holding is set).
	held    kpipe
	holding bool
	// buf holds bytes read and not yet written; wbuf is what is left to
	// write of them. A write deadline leaves them (pending) for the next
	// Move.
	buf     *[]byte
	wbuf    []byte
	pending bool
	// burst: the last read filled buf; the next bytes are spliced.
	burst bool

	// State of the callbacks.
	p      kpipe
	inPipe int
	moved  int
	eof    bool
	err    error
	werr   error
	copyF  func(uintptr) bool
	writeF func(uintptr) bool
	drainF func(uintptr) bool
	pumpF  func(uintptr) bool
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
	sp.copyF, sp.writeF, sp.drainF, sp.pumpF = sp.copy, sp.write, sp.drain, sp.pump
	return sp
}

// SetQuantum makes each Move return ErrQuantum once it moved a weight of
// n (a pipe's capacity more at most), so that its caller counts the bytes
// as they move, not only when the direction pauses; 0 (the default) moves
// until a pause, the end or a failure. The weight is the bytes moved,
// each copied read counting at least its read cost (SetReadCost).
func (sp *Splicer) SetQuantum(n int64) { sp.quantum = n }

// SetReadCost makes each copied read weigh at least n bytes, in the
// quantum and in TakeWeight: a message costs its system calls whatever
// its size, so a stream of small ones weighs what it costs, not its few
// bytes.
func (sp *Splicer) SetReadCost(n int64) { sp.readCost = n }

// TakeWeight returns the weight moved since it was last called.
func (sp *Splicer) TakeWeight() int64 {
	w := sp.weight
	sp.weight = 0
	return w
}

// add counts w of weight moved.
func (sp *Splicer) add(w int64) {
	sp.mw += w
	sp.weight += w
}

// full reports whether the current Move reached the quantum.
func (sp *Splicer) full() bool { return sp.quantum > 0 && sp.mw >= sp.quantum }

// Dst and Src are the splicer's sockets.
func (sp *Splicer) Dst() *net.TCPConn { return sp.dst }
func (sp *Splicer) Src() *net.TCPConn { return sp.src }

// Move moves bytes until src's half ends (nil, as io.Copy), a deadline
// passes (os.ErrDeadlineExceeded), a side fails or, with a quantum, it
// moved the quantum (ErrQuantum). Bytes a write deadline
// left in the pipe or the buffer go first at the next Move.
func (sp *Splicer) Move() (int64, error) {
	if sp.srcRaw == nil || sp.dstRaw == nil {
		return 0, syscall.EINVAL // a socket New could not reach
	}
	var total int64
	sp.mw = 0
	if sp.holding {
		// What a write deadline left in the pipe goes first.
		sp.holding = false
		sp.p = sp.held
		n, err := sp.pumpHeld()
		sp.add(n)
		total += n
		if err != nil {
			return total, err
		}
		sp.pl.put(sp.p)
	}
	if sp.pending {
		// And what it left in the buffer.
		sp.pending = false
		n, err := sp.flush()
		total += n
		if err != nil {
			return total, err
		}
	}
	for {
		if sp.full() {
			return total, ErrQuantum
		}
		if !sp.burst || sp.noSplice {
			// Wait for bytes, read them and write them. A read that
			// left bytes in src is not a sign that src is empty: an end
			// (or reset) that came with the bytes waits behind them, and
			// its readiness may have been taken with theirs. So the
			// next read comes before any wait.
			sp.eof, sp.err = false, nil
			rerr := sp.srcRaw.Read(sp.copyF)
			switch {
			case sp.err != nil:
				return total, sp.err
			case rerr != nil:
				return total, rerr
			case sp.eof:
				return total, nil
			}
			n, err := sp.flush()
			total += n
			if err != nil {
				return total, err
			}
			continue
		}
		sp.burst = false
		p, ok := sp.pl.get()
		if !ok {
			continue // the pool is spent: copy
		}
		n, done, err := sp.through(p)
		total += n
		if err != nil || done {
			return total, err
		}
	}
}

// through moves what src has through p until src has no more for now
// or the quantum is reached; done reports src's end. p goes back to the
// pool, stays with the splicer when a write deadline left bytes in it, or
// is closed when another failure did.
func (sp *Splicer) through(p kpipe) (total int64, done bool, err error) {
	sp.p = p
	for {
		if sp.full() {
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
		sp.add(n)
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

// Close gives back a pipe or buffer the splicer still holds (with bytes a
// write deadline left in it: they are dropped).
func (sp *Splicer) Close() {
	if sp.holding {
		sp.holding = false
		sp.pl.discard(sp.held)
	}
	if sp.pending {
		sp.pending = false
		sp.putBuf()
	}
}

// copy is the callback of src's RawConn.Read that copies: it reads what
// src has into buf and returns true with it in wbuf, for Move to write
// outside the callback: a write that waits for dst must not hold src's
// read lock, which a Close of src waits for (evicting src's poller wakes
// nothing waiting on dst). A read that fills buf marks a burst. An empty
// read (EAGAIN) returns false: Read waits for the next bytes, whose
// readiness is kept from the callback's start. It returns true too at
// src's end or a failure (sp.err).
func (sp *Splicer) copy(fd uintptr) bool {
	for {
		if sp.buf == nil {
			sp.buf = copyBufs.Get().(*[]byte)
		}
		n, err := unix.Read(int(fd), *sp.buf)
		switch {
		case err == unix.EINTR:
			continue
		case err == unix.EAGAIN:
			sp.putBuf()
			return false
		case err != nil:
			sp.putBuf()
			sp.err = os.NewSyscallError("read", err)
			return true
		case n == 0:
			sp.putBuf()
			sp.eof = true
			return true
		}
		sp.add(max(int64(n), sp.readCost))
		sp.wbuf = (*sp.buf)[:n]
		sp.burst = n == len(*sp.buf) && !sp.noSplice
		return true
	}
}

// flush writes wbuf to dst, waiting while dst is full, and gives buf
// back once it is all written. On a write deadline the rest stays for the
// next Move (pending); another failure drops it.
func (sp *Splicer) flush() (int64, error) {
	before := len(sp.wbuf)
	err := sp.dstRaw.Write(sp.writeF)
	written := int64(before - len(sp.wbuf))
	if err == nil && len(sp.wbuf) > 0 {
		err = sp.werr
	}
	switch {
	case err == nil:
		sp.putBuf()
		return written, nil
	case errors.Is(err, os.ErrDeadlineExceeded):
		sp.pending = true
	default:
		sp.putBuf()
	}
	return written, fmt.Errorf("write: %w", err)
}

// write is dst's RawConn.Write callback: it writes wbuf, returning false
// to wait while dst is full.
func (sp *Splicer) write(fd uintptr) bool {
	sp.werr = nil
	for len(sp.wbuf) > 0 {
		n, err := unix.Write(int(fd), sp.wbuf)
		switch {
		case err == unix.EINTR:
			continue
		case err == unix.EAGAIN:
			return false
		case err != nil:
			sp.werr = os.NewSyscallError("write", err)
			return true
		}
		sp.wbuf = sp.wbuf[n:]
	}
	return true
}

// putBuf gives buf back to the pool.
func (sp *Splicer) putBuf() {
	if sp.buf != nil {
		copyBufs.Put(sp.buf)
		sp.buf, sp.wbuf = nil, nil
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
