// Package uring relays bytes between pairs of TCP sockets through
// io_uring(7), called raw through golang.org/x/sys/unix (no cgo): a ring
// per worker thread, the sockets registered in the ring's descriptor
// table, multishot receives into a ring of provided buffers, and every
// send, shutdown and cancel of a worker's connections batched into the
// one io_uring_enter(2) that also waits for the next completions.
package uring

import (
	"errors"
	"fmt"
	"sync/atomic"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Sentinel errors.
var (
	// ErrUnavailable: the kernel or the process's sandbox does not offer
	// what the relay needs.
	ErrUnavailable = errors.New("io_uring unavailable")
	// ErrClosed: the relay was closed.
	ErrClosed = errors.New("io_uring relay closed")
)

// Opcodes (enum io_uring_op).
const (
	opNop         = 0
	opTimeout     = 11
	opAsyncCancel = 14
	opFilesUpdate = 20
	opRead        = 22
	opSend        = 26
	opRecv        = 27
	opShutdown    = 34
	opLast        = 35 // the opcodes the probe asks about
)

// SQE flags.
const (
	sqeFixedFile    = 1 << 0
	sqeBufferSelect = 1 << 5
)

// Setup flags.
const (
	setupSubmitAll    = 1 << 7
	setupCoopTaskrun  = 1 << 8
	setupSingleIssuer = 1 << 12
	setupDeferTaskrun = 1 << 13
)

// Features.
const (
	featSingleMmap = 1 << 0
	featNoDrop     = 1 << 1
	featFastPoll   = 1 << 5
)

const (
	offSQRing = 0
	offCQRing = 0x8000000
	offSQEs   = 0x10000000

	enterGetEvents = 1

	registerFiles2        = 13
	registerProbe         = 8
	registerPbufRing      = 22
	rsrcRegisterSparse    = 1
	probeOpSupported      = 1
	recvMultishot         = 1 << 1
	cqeFBuffer            = 1 << 0
	cqeFMore              = 1 << 1
	cqeBufferShift        = 16
	asyncCancelAll        = 1 << 0
	asyncCancelFD         = 1 << 1
	asyncCancelFDFixed    = 1 << 3
	fileIndexAllocDisable = 0
)

type sqringOffsets struct {
	head, tail, ringMask, ringEntries, flags, dropped, array, resv1 uint32
	userAddr                                                        uint64
}

type cqringOffsets struct {
	head, tail, ringMask, ringEntries, overflow, cqes, flags, resv1 uint32
	userAddr                                                        uint64
}

type params struct {
	sqEntries, cqEntries, flags, sqThreadCPU, sqThreadIdle, features, wqFD uint32
	resv                                                                   [3]uint32
	sqOff                                                                  sqringOffsets
	cqOff                                                                  cqringOffsets
}

// sqe is struct io_uring_sqe (64 bytes).
type sqe struct {
	opcode      uint8
	flags       uint8
	ioprio      uint16
	fd          int32
	off         uint64
	addr        uint64
	len         uint32
	opFlags     uint32
	userData    uint64
	bufIndex    uint16
	personality uint16
	fileIndex   int32
	addr3       uint64
	pad         uint64
}

// cqe is struct io_uring_cqe (16 bytes).
type cqe struct {
	userData uint64
	res      int32
	flags    uint32
}

// ring is one io_uring instance, used by one thread.
type ring struct {
	fd            int
	sqMem, cqMem  []byte
	sqeMem        []byte
	sqHead        *uint32
	sqTail        *uint32
	sqMask        uint32
	sqArray       unsafe.Pointer
	sqes          unsafe.Pointer
	cqHead        *uint32
	cqTail        *uint32
	cqMask        uint32
	cqes          unsafe.Pointer
	sqEntries     uint32
	tail          uint32 // local SQ tail, published by flush
	pending       uint32 // SQEs written, not yet submitted
	enters        atomic.Int64
	deferTaskrun  bool
	filesCapacity uint32
}

func setup(entries uint32, p *params) (int, error) {
	fd, _, errno := unix.Syscall(unix.SYS_IO_URING_SETUP, uintptr(entries), uintptr(unsafe.Pointer(p)), 0)
	if errno != 0 {
		return -1, errno
	}
	return int(fd), nil
}

func register(fd int, op uint32, arg unsafe.Pointer, n uint32) error {
	_, _, errno := unix.Syscall6(unix.SYS_IO_URING_REGISTER, uintptr(fd), uintptr(op), uintptr(arg), uintptr(n), 0, 0)
	if errno != 0 {
		return errno
	}
	return nil
}

// newRing sets up a ring of entries SQEs with a sparse table of files
// registered descriptors. It must be called by the thread that uses it
// (the ring has a single issuer).
func newRing(entries, files uint32) (*ring, error) {
	var p params
	p.flags = setupSubmitAll | setupCoopTaskrun | setupSingleIssuer | setupDeferTaskrun
	fd, err := setup(entries, &p)
	deferred := true
	if errors.Is(err, unix.EINVAL) {
		// A kernel without DEFER_TASKRUN (before 6.1).
		p = params{flags: setupSubmitAll | setupCoopTaskrun}
		fd, err = setup(entries, &p)
		deferred = false
	}
	if err != nil {
		return nil, fmt.Errorf("io_uring_setup: %w", err)
	}
	r := &ring{fd: fd, deferTaskrun: deferred}
	if p.features&featSingleMmap == 0 || p.features&featNoDrop == 0 || p.features&featFastPoll == 0 {
		unix.Close(fd)
		return nil, fmt.Errorf("%w: the kernel lacks single mmap, no-drop or fast poll", ErrUnavailable)
	}
	sqSize := int(p.sqOff.array + p.sqEntries*4)
	cqSize := int(p.cqOff.cqes + p.cqEntries*uint32(unsafe.Sizeof(cqe{})))
	size := max(sqSize, cqSize)
	mem, err := unix.Mmap(fd, offSQRing, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED|unix.MAP_POPULATE)
	if err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("mmap rings: %w", err)
	}
	r.sqMem, r.cqMem = mem, mem
	sqes, err := unix.Mmap(fd, offSQEs, int(p.sqEntries)*int(unsafe.Sizeof(sqe{})), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED|unix.MAP_POPULATE)
	if err != nil {
		unix.Munmap(mem)
		unix.Close(fd)
		return nil, fmt.Errorf("mmap sqes: %w", err)
	}
	r.sqeMem = sqes
	r.sqHead = (*uint32)(unsafe.Pointer(&mem[p.sqOff.head]))
	r.sqTail = (*uint32)(unsafe.Pointer(&mem[p.sqOff.tail]))
	r.sqMask = *(*uint32)(unsafe.Pointer(&mem[p.sqOff.ringMask]))
	r.sqArray = unsafe.Pointer(&mem[p.sqOff.array])
	r.sqes = unsafe.Pointer(&sqes[0])
	r.cqHead = (*uint32)(unsafe.Pointer(&mem[p.cqOff.head]))
	r.cqTail = (*uint32)(unsafe.Pointer(&mem[p.cqOff.tail]))
	r.cqMask = *(*uint32)(unsafe.Pointer(&mem[p.cqOff.ringMask]))
	r.cqes = unsafe.Pointer(&mem[p.cqOff.cqes])
	r.sqEntries = p.sqEntries
	r.tail = atomic.LoadUint32(r.sqTail)
	if files > 0 {
		reg := struct {
			nr, flags  uint32
			resv2      uint64
			data, tags uint64
		}{nr: files, flags: rsrcRegisterSparse}
		if err := register(fd, registerFiles2, unsafe.Pointer(&reg), uint32(unsafe.Sizeof(reg))); err != nil {
			r.close()
			return nil, fmt.Errorf("register a table of %d descriptors: %w", files, err)
		}
		r.filesCapacity = files
	}
	return r, nil
}

// probe reports whether the kernel supports each opcode of ops.
func (r *ring) probe(ops ...uint8) error {
	type probeOp struct {
		op    uint8
		resv  uint8
		flags uint16
		resv2 uint32
	}
	var pr struct {
		lastOp uint8
		opsLen uint8
		resv   uint16
		resv2  [3]uint32
		ops    [256]probeOp
	}
	if err := register(r.fd, registerProbe, unsafe.Pointer(&pr), 256); err != nil {
		return fmt.Errorf("probe opcodes: %w", err)
	}
	for _, op := range ops {
		if op > pr.lastOp || pr.ops[op].flags&probeOpSupported == 0 {
			return fmt.Errorf("%w: opcode %d not supported", ErrUnavailable, op)
		}
	}
	return nil
}

// get returns the next free SQE, zeroed, or nil when the SQ is full.
func (r *ring) get() *sqe {
	head := atomic.LoadUint32(r.sqHead)
	if r.tail-head >= r.sqEntries {
		return nil
	}
	idx := r.tail & r.sqMask
	s := (*sqe)(unsafe.Add(r.sqes, uintptr(idx)*unsafe.Sizeof(sqe{})))
	*s = sqe{}
	*(*uint32)(unsafe.Add(r.sqArray, uintptr(idx)*4)) = idx
	r.tail++
	r.pending++
	return s
}

// enter publishes the SQEs written and submits them, waiting for at
// least wait completions.
func (r *ring) enter(wait uint32) error {
	atomic.StoreUint32(r.sqTail, r.tail)
	flags := uintptr(0)
	if wait > 0 || r.deferTaskrun {
		flags |= enterGetEvents
	}
	for {
		r.enters.Add(1)
		n, _, errno := unix.Syscall6(unix.SYS_IO_URING_ENTER, uintptr(r.fd), uintptr(r.pending), uintptr(wait), flags, 0, 0)
		if errno == unix.EINTR {
			r.pending -= min(uint32(n), r.pending)
			continue
		}
		if errno != 0 {
			return fmt.Errorf("io_uring_enter: %w", errno)
		}
		r.pending -= min(uint32(n), r.pending)
		return nil
	}
}

// completions calls f for each completion posted, then frees their
// slots.
func (r *ring) completions(f func(c *cqe)) int {
	head := atomic.LoadUint32(r.cqHead)
	tail := atomic.LoadUint32(r.cqTail)
	n := 0
	for ; head != tail; head++ {
		c := (*cqe)(unsafe.Add(r.cqes, uintptr(head&r.cqMask)*unsafe.Sizeof(cqe{})))
		f(c)
		n++
	}
	atomic.StoreUint32(r.cqHead, head)
	return n
}

func (r *ring) close() {
	if r.sqeMem != nil {
		unix.Munmap(r.sqeMem)
	}
	if r.sqMem != nil {
		unix.Munmap(r.sqMem)
	}
	unix.Close(r.fd)
}
