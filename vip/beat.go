package vip

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"hash"
	"net/netip"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"
)

// This file sends the heartbeats. The decision loop plans what they say
// (beatPlan); a goroutine locked to an OS thread of its own, with a
// raised scheduling priority, sends them every interval, filling in the
// sequence number and the ages at the moment of sending. It sleeps in
// clock_nanosleep, so that the kernel, not the Go scheduler's timers,
// wakes it, and it allocates nothing, so that it never waits for the
// garbage collector's assists. A host whose CPUs are saturated by other
// work thus keeps its heartbeats on time.

// beatPlan is what the next heartbeats say, planned by the loop.
type beatPlan struct {
	hb heartbeat
	// heard and since are, for each of hb.Sightings, when the peer was
	// last heard and since when without a gap.
	heard, since []time.Time
	// arrived are the reader's notes of the same peers: a heartbeat
	// newer than heard that the loop has not taken in yet counts.
	arrived []*peerArrival
	to      []beatDest
	key     []byte
	// built: a plan older than stale is not sent: the loop is stuck, and
	// silence is then the truth. A loop that only lags behind on a busy
	// machine keeps its heartbeats going (stale is several detection
	// times): the ages in them come from the reader's notes, and nothing
	// else they say can change without the loop.
	built         time.Time
	stale, settle time.Duration
	// pause: sends this far apart mean the whole process was stopped (a
	// long GC pause, a paused VM, SIGSTOP). A plan built before such a
	// pause is not sent: the peers may have taken this host's VIPs
	// meanwhile, and only the loop can learn it and say so.
	pause time.Duration
}

type beatDest struct {
	id   string
	addr netip.AddrPort
	// withHolding: the peer reads held addresses; withPartly: it reads
	// the partly ready ones too; withTenants: and the tenant sets.
	withHolding, withPartly, withTenants bool
}

// beatSender encodes and sends the planned heartbeats.
type beatSender struct {
	m    *Manager
	plan atomic.Pointer[beatPlan]

	mu sync.Mutex
	// last: the latest send. void: after a pause, plans built up to then
	// (the last send before it plus an interval, the latest the pause can
	// have begun) are not sent.
	last, void time.Time
	seq        uint64
	sights     []sighting
	bufs       [4][]byte
	mac        hash.Hash
	macKey     []byte
	sum        [sha256.Size]byte
	failing    map[string]bool
}

func newBeatSender(m *Manager) *beatSender {
	s := &beatSender{m: m, failing: map[string]bool{}}
	for i := range s.bufs {
		s.bufs[i] = make([]byte, 0, maxDatagram+sha256.Size)
	}
	return s
}

// send sends the current plan to every peer once, with the next sequence
// number. It is safe from any goroutine.
func (s *beatSender) send(now time.Time) {
	p := s.plan.Load()
	if p == nil || len(p.key) == 0 || now.Sub(p.built) > p.stale {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.last.IsZero() && now.Sub(s.last) > p.pause {
		s.void = s.last.Add(s.m.cfg.HeartbeatInterval)
	}
	if now.After(s.last) {
		s.last = now
	}
	if !p.built.After(s.void) {
		return
	}
	s.seq++
	hb := p.hb
	hb.Seq = s.seq
	s.sights = append(s.sights[:0], p.hb.Sightings...)
	for i := range s.sights {
		heard := p.heard[i]
		if at := s.m.heardAt(p.arrived[i]); at.After(heard) { // a newer one, not yet taken in
			heard = at
		}
		alive := now.Sub(p.since[i])
		s.sights[i].Age, s.sights[i].AliveFor, s.sights[i].Settled = now.Sub(heard), alive, alive >= p.settle
	}
	hb.Sightings = s.sights
	if !bytes.Equal(s.macKey, p.key) {
		s.mac, s.macKey = hmac.New(sha256.New, p.key), p.key
	}
	var encoded [4]bool
	for _, d := range p.to {
		i := 0
		switch {
		case d.withHolding && d.withPartly && d.withTenants:
			i = 3
		case d.withHolding && d.withPartly:
			i = 2
		case d.withHolding:
			i = 1
		}
		if !encoded[i] {
			b := hb.appendTo(s.bufs[i][:0], d.withHolding, d.withPartly, i == 3)
			s.mac.Reset()
			s.mac.Write(b)
			s.bufs[i] = append(b, s.mac.Sum(s.sum[:0])[:macSize]...)
			encoded[i] = true
		}
		_, err := s.m.conn.WriteToUDPAddrPort(s.bufs[i], d.addr)
		if failing := err != nil; failing != s.failing[d.id] {
			s.failing[d.id] = failing
			if failing {
				s.m.log.Warn("cannot send heartbeats", "peer", d.id, "addr", d.addr, "err", err)
			} else {
				s.m.log.Info("sending heartbeats again", "peer", d.id)
			}
		}
	}
}

// beatThread sends the heartbeats every interval until stop is closed.
func (m *Manager) beatThread(stop <-chan struct{}) {
	// Never unlocked: when this goroutine returns, its thread, with the
	// raised priority, ends with it.
	runtime.LockOSThread()
	if how, err := raisePriority(); err != nil {
		m.log.Info("heartbeats run on a thread of their own at normal priority", "reason", err)
	} else {
		m.log.Info("heartbeats run on a thread of their own", "priority", how)
	}
	interval := int64(m.cfg.HeartbeatInterval)
	const slice = int64(50 * time.Millisecond) // how often stop is checked
	next := monotonic()
	for {
		next += interval
		if now := monotonic(); next < now {
			next = now // fell behind (paused): no burst
		}
		for {
			now := monotonic()
			if now >= next {
				break
			}
			ts := unix.NsecToTimespec(min(next, now+slice))
			_ = unix.ClockNanosleep(unix.CLOCK_MONOTONIC, unix.TIMER_ABSTIME, &ts, nil)
			select {
			case <-stop:
				return
			default:
			}
		}
		select {
		case <-stop:
			return
		default:
		}
		m.beats.send(time.Now())
	}
}

func monotonic() int64 {
	var ts unix.Timespec
	_ = unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts)
	return ts.Nano()
}

// spareProcs is how many more Go processors than CPUs a process with a
// VIP manager runs: when every processor is held by a goroutine whose
// thread the kernel has descheduled (a saturated machine), the heartbeat
// threads, woken on time by the kernel, would still wait for one. One is
// enough for them, and each more costs: during a collection the runtime
// runs a mark worker on every Go processor with nothing else to do, and
// sizes its own share by GOMAXPROCS, so on a small host spare processors
// turn into threads that mark while the proxy waits for a core (at
// 100,000 load balancers on 2 CPUs a collection took 5.3-5.8 s of CPU with
// four spare, 2.7-3.4 s with one).
const spareProcs = 1

// ensureSpareProcs raises GOMAXPROCS to the CPUs plus spareProcs and
// returns the old and new values (equal when nothing changed).
func ensureSpareProcs() (int, int) {
	old := runtime.GOMAXPROCS(0)
	want := runtime.NumCPU() + spareProcs
	if old >= want {
		return old, old
	}
	runtime.GOMAXPROCS(want)
	return old, want
}

// raisePriority puts the calling thread in the round-robin real-time
// class at a low real-time priority, or failing that (no CAP_SYS_NICE)
// at nice -10, and says which.
func raisePriority() (string, error) {
	attr := unix.SchedAttr{Size: unix.SizeofSchedAttr, Policy: unix.SCHED_RR, Priority: 10}
	if err := unix.SchedSetAttr(0, &attr, 0); err == nil {
		return "SCHED_RR 10", nil
	}
	if err := unix.Setpriority(unix.PRIO_PROCESS, unix.Gettid(), -10); err != nil {
		return "", err
	}
	return "nice -10", nil
}
