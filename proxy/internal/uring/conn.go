package uring

import (
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// direction is one way of a connection: d 0 receives from A and sends to
// B, d 1 the other way. The buffers it holds (received, not yet sent)
// are a list threaded through the worker's per-buffer arrays, so that a
// direction can hold any number of the worker's buffers without a queue
// of its own.
type direction struct {
	head, tail uint16
	n          int
	recvArmed  bool // a multishot receive is outstanding
	cancelSent bool
	listed     bool // in the worker's list of receives to start again
	eof        bool
	sending    bool
	shutSent   bool
	shutDone   bool
	bytes      int64
	// pausedUntil (the worker's clock, ns): the direction receives
	// nothing before then (Spec's count asked for a pause); pauseListed:
	// it is in the worker's list of paused directions.
	pausedUntil int64
	pauseListed bool
}

// paused reports whether the direction waits out a pause at now.
func (d *direction) paused(now int64) bool { return d.pausedUntil > now }

// bufState is what a worker knows of one of its buffers while a
// direction holds it.
type bufState struct {
	next    uint16
	n, sent int32
}

func (d *direction) push(w *worker, id uint16, n int32) {
	w.bufs[id] = bufState{n: n}
	if d.n == 0 {
		d.head = id
	} else {
		w.bufs[d.tail].next = id
	}
	d.tail = id
	d.n++
}

func (d *direction) pop(w *worker) uint16 {
	id := d.head
	d.head = w.bufs[id].next
	d.n--
	return id
}

// conn is a connection on a worker; its id names its two slots in the
// ring's descriptor table (2*id for A, 2*id+1 for B).
type conn struct {
	h          *Handle
	id         uint32
	fds        [2]int32
	dir        [2]direction
	inflight   int
	registered bool
	regDone    bool // h.reg is closed
	ending     bool
	unreg      bool
	last       int64
	tenant     *tenantBufs
}

// tenantBufs is what one tenant's connections on a worker hold together
// (TenantShare), and how many they are.
type tenantBufs struct {
	held int
	// pending is what the receives armed since the last submission may
	// take (with the kernel's multishot bound): reserved until the ring
	// is entered, when a receive whose bytes wait takes them at once.
	pending int
	conns   int
}

func (c *conn) ud(kind int) uint64 { return uint64(c.id)<<8 | uint64(kind) }

// slot is the fixed descriptor of side 0 (A) or 1 (B).
func (c *conn) slot(side int) int32 { return int32(2*c.id) + int32(side) }

// arm starts direction d's multishot receive unless it runs, ended or
// holds enough.
func (c *conn) arm(w *worker, d int) {
	dir := &c.dir[d]
	t := c.tenant
	free := TenantShare - t.held - t.pending
	if c.ending || !c.registered || dir.recvArmed || dir.eof || dir.paused(w.now) ||
		dir.n >= MaxHeld/2 || free <= 0 {
		if !c.ending && !dir.recvArmed && !dir.eof && !dir.paused(w.now) && dir.n == 0 && !dir.sending && !dir.listed {
			// Nothing of its own would start it again: the worker does
			// once buffers come back.
			dir.listed = true
			w.starved = append(w.starved, c.id<<1|uint32(d))
		}
		return
	}
	s := w.sqe()
	s.opcode = opRecv
	s.flags = sqeFixedFile | sqeBufferSelect
	s.ioprio = recvMultishot
	s.fd = c.slot(d)
	s.bufIndex = w.br.gid
	if w.mshotLimit {
		// The receive ends by itself once it has taken what this
		// direction and its tenant may still hold. What it may take is
		// reserved until the submission, so that the tenant's receives
		// armed together cannot take more than it has left between them.
		lim := min(MaxHeld-dir.n, free)
		s.fileIndex = int32(lim * BufSize)
		if t.pending == 0 {
			w.pendingTenants = append(w.pendingTenants, t)
		}
		t.pending += lim
	}
	s.userData = c.ud(kRecv0 + d)
	dir.recvArmed = true
	dir.cancelSent = false
	c.inflight++
}

// pump sends direction d's next buffer, or passes its end on once all
// is sent, or cancels its receive when it holds too much.
func (c *conn) pump(w *worker, d int) {
	dir := &c.dir[d]
	if c.ending {
		return
	}
	if !dir.sending && dir.n > 0 {
		f := &w.bufs[dir.head]
		buf := w.br.buf(dir.head, int(f.n))[f.sent:]
		s := w.sqe()
		s.opcode = opSend
		s.flags = sqeFixedFile
		s.fd = c.slot(1 - d)
		s.addr = uint64(uintptrOf(&buf[0]))
		s.len = uint32(len(buf))
		s.opFlags = unix.MSG_NOSIGNAL
		s.userData = c.ud(kSend0 + d)
		dir.sending = true
		c.inflight++
	}
	if dir.recvArmed && !dir.cancelSent && (dir.n >= MaxHeld || c.tenant.held >= TenantShare) {
		c.cancel(w, c.ud(kRecv0+d))
		dir.cancelSent = true
	}
	if dir.eof && dir.n == 0 && !dir.sending && !dir.recvArmed && !dir.shutSent {
		s := w.sqe()
		s.opcode = opShutdown
		s.flags = sqeFixedFile
		s.fd = c.slot(1 - d)
		s.len = unix.SHUT_WR
		s.userData = c.ud(kShut0 + d)
		dir.shutSent = true
		c.inflight++
	}
	c.arm(w, d)
}

// cancel cancels the operation of user data ud.
func (c *conn) cancel(w *worker, ud uint64) {
	s := w.sqe()
	s.opcode = opAsyncCancel
	s.fd = -1
	s.addr = ud
	s.userData = c.ud(kCancel)
	c.inflight++
}

// cancelFD cancels every operation on side's socket.
func (c *conn) cancelFD(w *worker, side int) {
	s := w.sqe()
	s.opcode = opAsyncCancel
	s.fd = c.slot(side)
	s.opFlags = asyncCancelAll | asyncCancelFD | asyncCancelFDFixed
	s.userData = c.ud(kCancel)
	c.inflight++
}

// end ends the connection: its operations are cancelled, then its
// sockets leave the ring, then its caller is told.
func (c *conn) end(w *worker, reset bool) {
	if reset {
		c.h.res.Reset = true
	}
	if c.ending {
		return
	}
	c.ending = true
	if c.registered {
		c.cancelFD(w, 0)
		c.cancelFD(w, 1)
	}
	c.maybeUnregister(w)
}

// maybeUnregister takes the sockets out of the ring once no operation
// of the connection is in flight.
func (c *conn) maybeUnregister(w *worker) {
	if !c.ending || c.inflight > 0 {
		return
	}
	if !c.registered {
		c.h.res.AtoB, c.h.res.BtoA = c.dir[0].bytes, c.dir[1].bytes
		w.release(c)
		return
	}
	if c.unreg {
		return
	}
	c.unreg = true
	c.fds = [2]int32{-1, -1}
	s := w.sqe()
	s.opcode = opFilesUpdate
	s.fd = -1
	s.off = uint64(2 * c.id)
	s.addr = uint64(uintptrOf(&c.fds[0]))
	s.len = 2
	s.userData = c.ud(kUnregister)
	c.inflight++
}

// complete handles a completion of the connection's operation kind.
func (c *conn) complete(w *worker, kind int, res int32, flags uint32) {
	switch kind {
	case kRegister:
		c.inflight--
		c.regDone = true
		close(c.h.reg)
		if res == 2 {
			c.registered = true
		} else if res > 0 {
			// One slot taken: treat as registered so that it is cleared.
			c.registered = true
			c.h.res.Reset = true
			c.ending = true
		} else {
			c.h.res.Reset = true
			c.ending = true
		}
		if !c.ending {
			c.arm(w, 0)
			c.arm(w, 1)
		}
	case kUnregister:
		c.inflight--
		c.registered = false
	case kCancel:
		c.inflight--
	case kRecv0, kRecv1:
		c.received(w, kind-kRecv0, res, flags)
	case kSend0, kSend1:
		c.sent(w, kind-kSend0, res)
	case kShut0, kShut1:
		c.inflight--
		d := &c.dir[kind-kShut0]
		d.shutDone = true
		if c.dir[0].shutDone && c.dir[1].shutDone {
			c.end(w, false)
		}
	}
	c.maybeUnregister(w)
}

func (c *conn) received(w *worker, d int, res int32, flags uint32) {
	dir := &c.dir[d]
	if flags&cqeFMore == 0 {
		dir.recvArmed = false
		c.inflight--
	}
	if flags&cqeFBuffer != 0 {
		id := uint16(flags >> cqeBufferShift)
		c.tenant.held++
		w.rl.held.Add(1)
		if res <= 0 || c.ending {
			w.giveBack(c, id)
		} else {
			dir.push(w, id, res)
			c.last = w.now
		}
	}
	switch {
	case res == 0:
		dir.eof = true
	case res == -int32(unix.ENOBUFS), res == -int32(unix.ECANCELED):
		// Out of buffers, or held too many: arm (by pump) lists it
		// until buffers come back.
	case res < 0:
		if d == 1 {
			c.h.res.BFailed = true
		}
		c.end(w, true)
		return
	}
	c.pump(w, d)
}

func (c *conn) sent(w *worker, d int, res int32) {
	dir := &c.dir[d]
	c.inflight--
	dir.sending = false
	if res < 0 {
		if res != -int32(unix.ECANCELED) {
			if d == 0 {
				c.h.res.BFailed = true
			}
			c.end(w, true)
		}
		return
	}
	f := &w.bufs[dir.head]
	f.sent += res
	dir.bytes += int64(res)
	c.last = w.now
	if f.sent >= f.n {
		// Counted once sent whole: a buffer is a receive, however many
		// sends it took (the tenant's CPU budget charges it as one).
		count := c.h.spec.AtoB
		if d == 1 {
			count = c.h.spec.BtoA
		}
		if count != nil {
			if hold := count(int64(f.n)); hold > 0 {
				c.pause(w, d, hold)
			}
		}
		w.giveBack(c, dir.pop(w))
	}
	c.pump(w, d)
}

// pause stops direction d's receives for hold (its count asked for it:
// the tenant's CPU budget); what it holds is still sent. The worker
// starts it again once the pause is over and its count, asked with 0
// bytes, asks for no more.
func (c *conn) pause(w *worker, d int, hold time.Duration) {
	dir := &c.dir[d]
	dir.pausedUntil = w.now + int64(hold)
	if dir.recvArmed && !dir.cancelSent {
		c.cancel(w, c.ud(kRecv0+d))
		dir.cancelSent = true
	}
	if !dir.pauseListed {
		dir.pauseListed = true
		w.paused = append(w.paused, c.id<<1|uint32(d))
	}
	w.armPause()
}

func uintptrOf[T any](p *T) uintptr { return uintptr(unsafe.Pointer(p)) }
