package uring

import (
	"fmt"
	"sync/atomic"
	"unsafe"

	"golang.org/x/sys/unix"
)

// bufRing is a ring of provided buffers (IORING_REGISTER_PBUF_RING): the
// kernel takes one for each receive a multishot recv completes, and the
// relay gives it back once its bytes are sent.
type bufRing struct {
	gid     uint16
	entries uint32 // a power of two
	size    uint32 // bytes per buffer
	mask    uint32
	ring    []byte // entries * 16 bytes, the tail in the first entry
	mem     []byte // entries * size bytes
	tail    uint16
	tailPtr *uint16
}

func newBufRing(r *ring, gid uint16, entries, size uint32) (*bufRing, error) {
	b := &bufRing{gid: gid, entries: entries, size: size, mask: entries - 1}
	var err error
	if b.ring, err = unix.Mmap(-1, 0, int(entries*16), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS|unix.MAP_POPULATE); err != nil {
		return nil, fmt.Errorf("mmap buffer ring: %w", err)
	}
	if b.mem, err = unix.Mmap(-1, 0, int(entries*size), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS); err != nil {
		unix.Munmap(b.ring)
		return nil, fmt.Errorf("mmap buffers: %w", err)
	}
	reg := struct {
		ringAddr uint64
		entries  uint32
		bgid     uint16
		flags    uint16
		resv     [3]uint64
	}{ringAddr: uint64(uintptr(unsafe.Pointer(&b.ring[0]))), entries: entries, bgid: gid}
	if err := register(r.fd, registerPbufRing, unsafe.Pointer(&reg), 1); err != nil {
		b.free()
		return nil, fmt.Errorf("register buffer ring: %w", err)
	}
	b.tailPtr = (*uint16)(unsafe.Pointer(&b.ring[14]))
	for i := range entries {
		b.add(uint16(i))
	}
	b.publish()
	return b, nil
}

// add queues buffer id to be given back at the next publish.
func (b *bufRing) add(id uint16) {
	e := unsafe.Pointer(&b.ring[uint32(b.tail)&b.mask*16])
	*(*uint64)(e) = uint64(uintptr(unsafe.Pointer(&b.mem[uint32(id)*b.size])))
	*(*uint32)(unsafe.Add(e, 8)) = b.size
	*(*uint16)(unsafe.Add(e, 12)) = id
	b.tail++
}

// publish hands the buffers added to the kernel.
func (b *bufRing) publish() {
	// The kernel reads the tail with acquire semantics.
	atomic.StoreUint32((*uint32)(unsafe.Pointer(&b.ring[12])), uint32(b.tail)<<16|uint32(*(*uint16)(unsafe.Pointer(&b.ring[12]))))
}

// buf returns buffer id's first n bytes.
func (b *bufRing) buf(id uint16, n int) []byte {
	off := int(id) * int(b.size)
	return b.mem[off : off+n : off+int(b.size)]
}

func (b *bufRing) free() {
	unix.Munmap(b.ring)
	unix.Munmap(b.mem)
}
