package steer

import (
	"bytes"
	"errors"
	"fmt"
	"unsafe"

	"golang.org/x/sys/unix"
)

// insn is one BPF instruction.
type insn struct {
	code uint8
	regs uint8 // dst in the low nibble, src in the high one
	off  int16
	imm  int32
}

func ins(code uint8, dst, src uint8, off int16, imm int32) insn {
	return insn{code: code, regs: dst | src<<4, off: off, imm: imm}
}

// Opcodes used by the program.
const (
	opMovReg   = 0xbf // r_dst = r_src (64 bits)
	opMovImm   = 0xb7 // r_dst = imm
	opAddImm   = 0x07 // r_dst += imm
	opLdxW     = 0x61 // r_dst = *(u32 *)(r_src + off)
	opStxW     = 0x63 // *(u32 *)(r_dst + off) = r_src
	opLdImm64  = 0x18 // r_dst = imm64 (two instructions)
	opJeqImm   = 0x15 // if r_dst == imm goto pc + off
	opCall     = 0x85
	opExit     = 0x95
	pseudoMap  = 1   // src of ld_imm64: imm is a map fd
	fnLookup   = 1   // bpf_map_lookup_elem
	fnRelease  = 86  // bpf_sk_release
	fnAssign   = 124 // bpf_sk_assign
	skPass     = 1
	fReplace   = 1 // BPF_SK_LOOKUP_F_REPLACE: a later program's choice wins
	r0, r1, r2 = 0, 1, 2
	r3, r6, r7 = 3, 6, 7
	fp         = 10
)

// Offsets in struct bpf_sk_lookup.
const (
	ctxFamily    = 8
	ctxProtocol  = 12
	ctxLocalIP4  = 40
	ctxLocalIP6  = 44
	ctxLocalPort = 60
)

// program is the sk_lookup program: for a TCP or UDP lookup, it builds
// the destination key (the protocol is part of it), finds its slot and
// the socket in it, and assigns that
// socket (replacing what an earlier program chose, so that a process
// started later takes over from one still running). Anything it does not
// find passes to the kernel's own lookup.
func program(dests, sockets int) []insn {
	p := []insn{
		ins(opMovReg, r6, r1, 0, 0),
	}
	var jumps []int
	for i, off := range []int16{ctxFamily, ctxProtocol, ctxLocalPort, ctxLocalIP4, ctxLocalIP6, ctxLocalIP6 + 4, ctxLocalIP6 + 8, ctxLocalIP6 + 12} {
		p = append(p,
			ins(opLdxW, r2, r6, off, 0),
			ins(opStxW, fp, r2, int16(-keySize+4*i), 0))
	}
	p = append(p,
		ins(opMovReg, r2, fp, 0, 0),
		ins(opAddImm, r2, 0, 0, -keySize),
		ins(opLdImm64, r1, pseudoMap, 0, int32(dests)), insn{},
		ins(opCall, 0, 0, 0, fnLookup),
		ins(opJeqImm, r0, 0, 0, 0))
	jumps = append(jumps, len(p)-1)
	p = append(p,
		ins(opLdxW, r2, r0, 0, 0),
		ins(opStxW, fp, r2, -keySize-4, 0),
		ins(opMovReg, r2, fp, 0, 0),
		ins(opAddImm, r2, 0, 0, -keySize-4),
		ins(opLdImm64, r1, pseudoMap, 0, int32(sockets)), insn{},
		ins(opCall, 0, 0, 0, fnLookup),
		ins(opJeqImm, r0, 0, 0, 0))
	jumps = append(jumps, len(p)-1)
	p = append(p,
		ins(opMovReg, r7, r0, 0, 0),
		ins(opMovReg, r1, r6, 0, 0),
		ins(opMovReg, r2, r7, 0, 0),
		ins(opMovImm, r3, 0, 0, fReplace),
		ins(opCall, 0, 0, 0, fnAssign),
		ins(opMovReg, r1, r7, 0, 0),
		ins(opCall, 0, 0, 0, fnRelease))
	pass := len(p)
	p = append(p,
		ins(opMovImm, r0, 0, 0, skPass),
		ins(opExit, 0, 0, 0, 0))
	for _, j := range jumps {
		p[j].off = int16(pass - j - 1)
	}
	return p
}

func bpf(cmd int, attr unsafe.Pointer, size uintptr) (int, error) {
	r, _, errno := unix.Syscall(unix.SYS_BPF, uintptr(cmd), uintptr(attr), size)
	if errno != 0 {
		return -1, errno
	}
	return int(r), nil
}

// noPrealloc (BPF_F_NO_PREALLOC) allocates a hash map's entries as they
// are added, not all of maxEntries at once.
const noPrealloc = 1

func mapCreate(typ, keySize, valueSize, maxEntries, flags uint32) (int, error) {
	attr := struct {
		typ, keySize, valueSize, maxEntries, flags uint32
	}{typ, keySize, valueSize, maxEntries, flags}
	return bpf(unix.BPF_MAP_CREATE, unsafe.Pointer(&attr), unsafe.Sizeof(attr))
}

// The attributes' pointers are unsafe.Pointer, not integers, so that the
// runtime keeps what they point to (and adjusts them if a stack moves)
// until the system call has read them.
type elemAttr struct {
	fd    uint32
	_     uint32
	key   unsafe.Pointer
	value unsafe.Pointer
	flags uint64
}

func mapUpdate(fd int, key, value unsafe.Pointer, flags uint64) error {
	attr := elemAttr{fd: uint32(fd), key: key, value: value, flags: flags}
	_, err := bpf(unix.BPF_MAP_UPDATE_ELEM, unsafe.Pointer(&attr), unsafe.Sizeof(attr))
	return err
}

func mapLookup(fd int, key, value unsafe.Pointer) error {
	attr := elemAttr{fd: uint32(fd), key: key, value: value}
	_, err := bpf(unix.BPF_MAP_LOOKUP_ELEM, unsafe.Pointer(&attr), unsafe.Sizeof(attr))
	return err
}

func mapDelete(fd int, key unsafe.Pointer) error {
	attr := elemAttr{fd: uint32(fd), key: key}
	_, err := bpf(unix.BPF_MAP_DELETE_ELEM, unsafe.Pointer(&attr), unsafe.Sizeof(attr))
	return err
}

type progAttr struct {
	typ, insnCnt       uint32
	insns, license     unsafe.Pointer
	logLevel, logSize  uint32
	logBuf             unsafe.Pointer
	kernVersion, flags uint32
	name               [16]byte
	ifindex            uint32
	expectedAttachType uint32
}

// progLoadTries bounds the loads of one program that a signal
// interrupts.
const progLoadTries = 10

// sysBPF is the bpf(2) call progLoad makes (tests replace it).
var sysBPF = bpf

// loadProg is BPF_PROG_LOAD, again while it fails with EAGAIN: the
// verifier gives up with EAGAIN when a signal is pending, and the Go
// runtime signals its threads to preempt goroutines (a host started under
// systemd failed to start on it once).
func loadProg(attr unsafe.Pointer, size uintptr) (fd int, err error) {
	for range progLoadTries {
		if fd, err = sysBPF(unix.BPF_PROG_LOAD, attr, size); !errors.Is(err, unix.EAGAIN) {
			return fd, err
		}
	}
	return fd, err
}

func progLoad(p []insn) (int, error) {
	license := []byte("Apache-2.0\x00")
	attr := progAttr{
		typ:                unix.BPF_PROG_TYPE_SK_LOOKUP,
		insnCnt:            uint32(len(p)),
		insns:              unsafe.Pointer(&p[0]),
		license:            unsafe.Pointer(&license[0]),
		expectedAttachType: unix.BPF_SK_LOOKUP,
	}
	copy(attr.name[:], "teapot_steer")
	fd, err := loadProg(unsafe.Pointer(&attr), unsafe.Sizeof(attr))
	if err == nil || !errors.Is(err, unix.EACCES) && !errors.Is(err, unix.EINVAL) {
		return fd, err
	}
	// The verifier refused it: load again for its reasons.
	log := make([]byte, 1<<16)
	attr.logLevel, attr.logSize, attr.logBuf = 1, uint32(len(log)), unsafe.Pointer(&log[0])
	if fd, err2 := loadProg(unsafe.Pointer(&attr), unsafe.Sizeof(attr)); err2 == nil {
		return fd, nil
	}
	if i := bytes.IndexByte(log, 0); i >= 0 {
		log = log[:i]
	}
	return -1, fmt.Errorf("%w: %s", err, bytes.TrimSpace(log))
}

func linkCreate(prog, target int, attachType uint32) (int, error) {
	attr := struct {
		prog, target, attachType, flags uint32
	}{uint32(prog), uint32(target), attachType, 0}
	return bpf(unix.BPF_LINK_CREATE, unsafe.Pointer(&attr), unsafe.Sizeof(attr))
}
