package uring

import (
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"
)

// Bounds of a relay.
const (
	// BufSize is one provided buffer: what one receive completes at most.
	BufSize = 64 << 10
	// Bufs is each worker's provided buffers (Bufs*BufSize bytes of
	// memory a worker maps once).
	Bufs = 256
	// MaxHeld bounds the buffers one direction of a connection holds
	// (received, not yet sent): past it its receive is cancelled until its
	// destination takes them.
	MaxHeld = 8
	// TenantShare bounds the buffers the connections of one tenant hold
	// on a worker together: past it the tenant's receives are cancelled,
	// so that its slow destinations cannot take its neighbours' buffers.
	TenantShare = Bufs / 4
	// ConnsPerWorker bounds a worker's connections: each takes two slots
	// of the worker's registered descriptor table, which the kernel
	// bounds by RLIMIT_NOFILE (a lower limit makes fewer).
	ConnsPerWorker = 4096
	// sqEntries is each worker's submission queue.
	sqEntries = 1024
)

// Spec is one connection to relay: the descriptors of its two sockets,
// which stay open (and owned by the caller) until Wait returns.
type Spec struct {
	// A and B are the sockets (the client's and the member's).
	A, B int
	// Idle ends the relay (gracefully) after this long without a byte
	// either way; 0: never.
	Idle time.Duration
	// Tick is how often Idle and Down are looked at.
	Tick time.Duration
	// Down, when set, ends the relay (gracefully) once it reports true.
	Down func() bool
	// AtoB and BtoA count the bytes sent each way, a buffer at a time
	// once it is sent whole (called on the relay's thread, which they
	// must not block; bytes of a buffer a failure left half sent are in
	// Result only) and return how long that
	// direction should pause before it receives more (0: no pause); at
	// the end of a pause they are asked again with 0 bytes.
	AtoB, BtoA func(int64) time.Duration
	// Tenant is whose buffers these are (TenantShare).
	Tenant string
}

// Result says how a relay ended.
type Result struct {
	// Reset: a side failed (or Stop was called): close both with a reset.
	Reset bool
	// BFailed: a receive from or send to B failed (B may have reset).
	BFailed bool
	// Stopped: Stop ended it (whoever called Stop closes A).
	Stopped bool
	// AtoB and BtoA are the bytes relayed each way.
	AtoB, BtoA int64
}

// Handle is a connection being relayed.
type Handle struct {
	spec Spec
	w    *worker
	id   uint32
	stop atomic.Bool
	done chan struct{}
	// reg is closed once the ring holds the sockets (or failed to).
	reg chan struct{}
	res Result
}

// Registered blocks until the ring holds the sockets (or failed to take
// them): from then on the caller may close its descriptors.
func (h *Handle) Registered() { <-h.reg }

// Wait blocks until the relay ended, both sockets taken out of the
// ring: the caller may then close them.
func (h *Handle) Wait() Result {
	<-h.done
	return h.res
}

// Stop ends the relay with a reset (its sockets are being closed).
func (h *Handle) Stop() {
	if h.stop.CompareAndSwap(false, true) {
		h.w.push(h, true)
	}
}

// Stats are a relay's counters.
type Stats struct {
	// Enters counts io_uring_enter(2) calls, Conns the connections
	// relayed, Live those relaying now.
	Enters, Conns, Live int64
	// Held is the provided buffers held now (received, not yet sent).
	Held int64
}

// Relay is a set of worker threads, each with its own ring.
type Relay struct {
	workers []*worker
	next    atomic.Uint32
	closed  atomic.Bool
	conns   atomic.Int64
	live    atomic.Int64
	held    atomic.Int64
	wg      sync.WaitGroup
}

// New starts a relay of n workers (one thread and ring each).
func New(n int) (*Relay, error) {
	if n < 1 {
		n = 1
	}
	rl := &Relay{}
	for i := range n {
		w, err := startWorker(rl)
		if err != nil {
			rl.Close()
			return nil, fmt.Errorf("start worker %d: %w", i, err)
		}
		rl.workers = append(rl.workers, w)
	}
	return rl, nil
}

// Start begins relaying s on a worker; ErrClosed after Close; an error
// wrapping ErrUnavailable when every worker's table is full (relay that
// connection another way).
func (rl *Relay) Start(s Spec) (*Handle, error) {
	if rl.closed.Load() {
		return nil, ErrClosed
	}
	if s.Tick <= 0 {
		s.Tick = time.Second
	}
	i := rl.next.Add(1)
	for k := range len(rl.workers) {
		w := rl.workers[(int(i)+k)%len(rl.workers)]
		if w.reserve() {
			h := &Handle{spec: s, w: w, done: make(chan struct{}), reg: make(chan struct{})}
			rl.conns.Add(1)
			rl.live.Add(1)
			w.push(h, false)
			return h, nil
		}
	}
	return nil, fmt.Errorf("%w: every worker's descriptor table is full", ErrUnavailable)
}

// Stats returns the relay's counters.
func (rl *Relay) Stats() Stats {
	var s Stats
	for _, w := range rl.workers {
		if w.r != nil {
			s.Enters += w.r.enters.Load()
		}
	}
	s.Conns, s.Live, s.Held = rl.conns.Load(), rl.live.Load(), rl.held.Load()
	return s
}

// Close stops taking connections and ends the workers once the
// connections they relay have ended.
func (rl *Relay) Close() {
	if rl.closed.Swap(true) {
		return
	}
	for _, w := range rl.workers {
		w.wake()
	}
	rl.wg.Wait()
}

// worker is one thread with its ring.
type worker struct {
	rl *Relay
	r  *ring
	br *bufRing
	// efd wakes the worker for new connections and stops.
	efd    int
	efdBuf [8]byte
	ts     unix.Timespec

	mu sync.Mutex
	// dead: the ring failed; connections handed to it end at once.
	dead     bool
	incoming []*Handle
	stops    []*Handle
	sleeping atomic.Bool
	reserved atomic.Int32

	conns     []conn
	freeIDs   []uint32
	live      int
	tickArmed bool
	now       int64
	dirty     bool // buffers given back since the last publish
	starved   []uint32
	// paused lists the directions that wait out a pause (conn.pause);
	// pauseArmed: the pause timer is armed.
	paused, pausedSpare []uint32
	pauseArmed          bool
	pts                 unix.Timespec
	// starvedSpare is the list feedStarved swaps in.
	starvedSpare []uint32
	// bufs follows each buffer a direction holds.
	bufs    [Bufs]bufState
	tenants map[string]*tenantBufs
	// pendingTenants have receives armed since the last submission
	// (tenantBufs.pending); refeed: their reservations were let go, and
	// the starved directions may start again.
	pendingTenants []*tenantBufs
	refeed         bool
	// mshotLimit: the kernel bounds a multishot receive's bytes (6.17).
	mshotLimit bool
	handleF    func(*cqe)
	started    chan error
	batchIn    []*Handle
	batchStop  []*Handle
}

// Reserved user data.
const (
	udWake = ^uint64(0)
	udTick = ^uint64(0) - 1
	// udPause is the timer that ends the pauses of paused directions.
	udPause = ^uint64(0) - 2
)

// pauseTick is how often a worker with paused directions looks at them.
const pauseTick = 5 * time.Millisecond

// Kinds of operation in a connection's user data (id<<8 | kind).
const (
	kRecv0 = iota
	kRecv1
	kSend0
	kSend1
	kShut0
	kShut1
	kCancel
	kRegister
	kUnregister
)

func startWorker(rl *Relay) (*worker, error) {
	w := &worker{rl: rl, started: make(chan error, 1), tenants: map[string]*tenantBufs{}}
	w.handleF = w.handle
	rl.wg.Add(1)
	go w.run()
	if err := <-w.started; err != nil {
		return nil, err
	}
	return w, nil
}

func (w *worker) reserve() bool {
	for {
		n := w.reserved.Load()
		if n >= int32(len(w.conns)) {
			return false
		}
		if w.reserved.CompareAndSwap(n, n+1) {
			return true
		}
	}
}

func (w *worker) push(h *Handle, stop bool) {
	w.mu.Lock()
	if w.dead {
		w.mu.Unlock()
		if !stop {
			h.res.Reset = true
			close(h.reg)
			close(h.done)
			w.rl.live.Add(-1)
		}
		return
	}
	if stop {
		w.stops = append(w.stops, h)
	} else {
		w.incoming = append(w.incoming, h)
	}
	w.mu.Unlock()
	if w.sleeping.Load() {
		w.wake()
	}
}

func (w *worker) wake() {
	one := [8]byte{1}
	_, _ = unix.Write(w.efd, one[:])
}

func (w *worker) run() {
	defer w.rl.wg.Done()
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	if err := w.init(); err != nil {
		w.started <- err
		return
	}
	w.started <- nil
	defer w.free()
	for {
		w.now = time.Now().UnixNano()
		w.mu.Lock()
		w.batchIn, w.incoming = w.incoming, w.batchIn[:0]
		w.batchStop, w.stops = w.stops, w.batchStop[:0]
		w.mu.Unlock()
		for _, h := range w.batchIn {
			w.add(h)
		}
		for _, h := range w.batchStop {
			if c := w.connOf(h); c != nil {
				h.res.Stopped = true
				c.end(w, true)
			}
		}
		clear(w.batchIn)
		clear(w.batchStop)
		w.feedStarved()
		if w.dirty {
			w.br.publish()
			w.dirty = false
		}
		if w.rl.closed.Load() && w.live == 0 && w.reserved.Load() == 0 {
			return
		}
		w.sleeping.Store(true)
		w.mu.Lock()
		pending := len(w.incoming) + len(w.stops)
		w.mu.Unlock()
		wait := uint32(1)
		if pending > 0 || w.rl.closed.Load() && w.live == 0 {
			wait = 0
		}
		err := w.r.enter(wait)
		w.sleeping.Store(false)
		for _, t := range w.pendingTenants {
			t.pending = 0
			w.refeed = true
		}
		clear(w.pendingTenants)
		w.pendingTenants = w.pendingTenants[:0]
		if err != nil {
			// Nothing recovers a ring that cannot be entered: end every
			// connection (their callers reset them).
			w.failAll()
			return
		}
		w.now = time.Now().UnixNano()
		w.r.completions(w.handleF)
	}
}

func (w *worker) init() error {
	capacity := ConnsPerWorker
	var lim unix.Rlimit
	if unix.Getrlimit(unix.RLIMIT_NOFILE, &lim) == nil && lim.Cur/2 < uint64(capacity) {
		capacity = max(int(lim.Cur/2), 1)
	}
	r, err := newRing(sqEntries, uint32(2*capacity))
	if err != nil {
		return err
	}
	if err := r.probe(opRecv, opSend, opShutdown, opFilesUpdate, opAsyncCancel, opTimeout, opRead); err != nil {
		r.close()
		return err
	}
	br, err := newBufRing(r, 0, Bufs, BufSize)
	if err != nil {
		r.close()
		return err
	}
	efd, err := unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK)
	if err != nil {
		br.free()
		r.close()
		return fmt.Errorf("eventfd: %w", err)
	}
	w.r, w.br, w.efd = r, br, efd
	w.mshotLimit = mshotLimit()
	w.conns = make([]conn, capacity)
	w.freeIDs = make([]uint32, 0, capacity)
	for i := capacity - 1; i >= 0; i-- {
		w.freeIDs = append(w.freeIDs, uint32(i))
	}
	w.armWake()
	return nil
}

func (w *worker) free() {
	w.r.close()
	w.br.free()
	unix.Close(w.efd)
}

// sqe returns a free SQE, submitting what is queued when the SQ is full.
func (w *worker) sqe() *sqe {
	for {
		if s := w.r.get(); s != nil {
			return s
		}
		_ = w.r.enter(0)
	}
}

func (w *worker) armWake() {
	s := w.sqe()
	s.opcode = opRead
	s.fd = int32(w.efd)
	s.addr = uint64(uintptrOf(&w.efdBuf[0]))
	s.len = 8
	s.userData = udWake
}

func (w *worker) armTick() {
	if w.tickArmed || w.live == 0 {
		return
	}
	tick := time.Second
	for i := range w.conns {
		c := &w.conns[i]
		if c.h != nil && c.h.spec.Tick < tick {
			tick = c.h.spec.Tick
		}
	}
	w.ts = unix.NsecToTimespec(int64(tick))
	s := w.sqe()
	s.opcode = opTimeout
	s.addr = uint64(uintptrOf(&w.ts))
	s.len = 1
	s.userData = udTick
	w.tickArmed = true
}

func (w *worker) handle(e *cqe) {
	switch e.userData {
	case udWake:
		w.armWake()
		return
	case udTick:
		w.tickArmed = false
		w.tick()
		w.armTick()
		return
	case udPause:
		w.pauseArmed = false
		w.resume()
		w.armPause()
		return
	}
	id, kind := uint32(e.userData>>8), int(e.userData&0xff)
	c := &w.conns[id]
	if c.h == nil {
		return
	}
	c.complete(w, kind, e.res, e.flags)
}

// armPause arms the pause timer while directions are paused.
func (w *worker) armPause() {
	if w.pauseArmed || len(w.paused) == 0 {
		return
	}
	w.pts = unix.NsecToTimespec(int64(pauseTick))
	s := w.sqe()
	s.opcode = opTimeout
	s.addr = uint64(uintptrOf(&w.pts))
	s.len = 1
	s.userData = udPause
	w.pauseArmed = true
}

// resume starts again the paused directions whose pause is over and
// whose count asks for no more.
func (w *worker) resume() {
	list := w.paused
	w.paused = w.pausedSpare[:0]
	for _, v := range list {
		c, d := &w.conns[v>>1], int(v&1)
		dir := &c.dir[d]
		if c.h == nil || c.ending || !dir.pauseListed {
			continue
		}
		if dir.paused(w.now) {
			w.paused = append(w.paused, v)
			continue
		}
		count := c.h.spec.AtoB
		if d == 1 {
			count = c.h.spec.BtoA
		}
		if hold := count(0); hold > 0 {
			dir.pausedUntil = w.now + int64(hold)
			w.paused = append(w.paused, v)
			continue
		}
		dir.pauseListed = false
		c.last = w.now // a pause is not silence
		c.arm(w, d)
	}
	w.pausedSpare = list[:0]
}

// tick ends the connections idle too long, whose member is down, or
// stopped.
func (w *worker) tick() {
	for i := range w.conns {
		c := &w.conns[i]
		if c.h == nil || c.ending {
			continue
		}
		sp := &c.h.spec
		switch {
		case c.h.stop.Load():
			c.h.res.Stopped = true
			c.end(w, true)
		case sp.Down != nil && sp.Down():
			c.end(w, false)
		case sp.Idle > 0 && time.Duration(w.now-c.last) >= sp.Idle && !c.dir[0].pauseListed && !c.dir[1].pauseListed:
			c.end(w, false)
		}
	}
}

func (w *worker) connOf(h *Handle) *conn {
	c := &w.conns[h.id]
	if c.h != h {
		return nil
	}
	return c
}

// add registers a new connection's sockets.
func (w *worker) add(h *Handle) {
	id := w.freeIDs[len(w.freeIDs)-1]
	w.freeIDs = w.freeIDs[:len(w.freeIDs)-1]
	h.id = id
	c := &w.conns[id]
	t, ok := w.tenants[h.spec.Tenant]
	if !ok {
		t = &tenantBufs{}
		w.tenants[h.spec.Tenant] = t
	}
	*c = conn{h: h, id: id, last: w.now, tenant: t}
	t.conns++
	c.fds = [2]int32{int32(h.spec.A), int32(h.spec.B)}
	w.live++
	s := w.sqe()
	s.opcode = opFilesUpdate
	s.fd = -1
	s.off = uint64(2 * id)
	s.addr = uint64(uintptrOf(&c.fds[0]))
	s.len = 2
	s.userData = uint64(id)<<8 | kRegister
	c.inflight++
	if h.stop.Load() {
		h.res.Stopped = true
		c.end(w, true)
	}
	w.armTick()
}

// release frees a connection whose sockets left the ring.
func (w *worker) release(c *conn) {
	h := c.h
	for d := range c.dir {
		dir := &c.dir[d]
		for dir.n > 0 {
			w.giveBack(c, dir.pop(w))
		}
	}
	t := c.tenant
	if t.conns--; t.conns == 0 && t.held == 0 && t.pending == 0 {
		delete(w.tenants, h.spec.Tenant)
	}
	c.h, c.tenant = nil, nil
	w.freeIDs = append(w.freeIDs, c.id)
	w.live--
	w.reserved.Add(-1)
	w.rl.live.Add(-1)
	close(h.done)
}

// giveBack returns a buffer to the ring.
func (w *worker) giveBack(c *conn, id uint16) {
	w.br.add(id)
	w.dirty = true
	c.tenant.held--
	w.rl.held.Add(-1)
}

// feedStarved re-arms the receives that ran out of buffers, now that
// some came back.
func (w *worker) feedStarved() {
	if len(w.starved) == 0 || !w.dirty && !w.refeed {
		return
	}
	w.refeed = false
	list := w.starved
	w.starved = w.starvedSpare[:0]
	for _, v := range list {
		c := &w.conns[v>>1]
		if c.h != nil {
			c.dir[v&1].listed = false
			c.arm(w, int(v&1)) // lists it again if it still cannot start
		}
	}
	w.starvedSpare = list[:0]
}

func (w *worker) failAll() {
	for i := range w.conns {
		c := &w.conns[i]
		if c.h != nil {
			c.h.res.Reset = true
			h := c.h
			c.h = nil
			if !c.regDone {
				close(h.reg)
			}
			close(h.done)
		}
	}
	w.rl.live.Add(-int64(w.live))
	// And those handed to it and not taken yet; none is taken after.
	w.mu.Lock()
	w.dead = true
	in := w.incoming
	w.incoming = nil
	w.mu.Unlock()
	for _, h := range in {
		h.res.Reset = true
		close(h.reg)
		close(h.done)
		w.rl.live.Add(-1)
	}
}
