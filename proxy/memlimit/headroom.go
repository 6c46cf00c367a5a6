package memlimit

import (
	"context"
	"fmt"
	"log/slog"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"strings"
	"syscall"
	"time"
)

// DefaultHeadroom is serve's --gc-headroom when none is given.
const DefaultHeadroom = "512MiB"

// MinPercent is the least collector target a headroom sets: however large
// the live heap, it may grow by a quarter of it between collections, so
// that the collector never runs without pause.
const MinPercent = 25

// MinHeadroom is the smallest headroom accepted.
const MinHeadroom = 16 << 20

// ParseHeadroom returns the bytes of a headroom: a size as Parse takes
// it, at least MinHeadroom, or "none" (0: GOGC alone).
func ParseHeadroom(s string) (int64, error) {
	s = strings.TrimSpace(s)
	if s == "none" {
		return 0, nil
	}
	n, err := parseSize(s)
	if err != nil {
		return 0, fmt.Errorf("%q is not a headroom: give a size in B, KiB, MiB, GiB or TiB (512MiB) or none", s)
	}
	if n < MinHeadroom {
		return 0, fmt.Errorf("%q is below %d MiB: the collector would run almost without pause on a small heap", s, MinHeadroom>>20)
	}
	return int64(n), nil
}

// CheckHeadroom reports whether ParseHeadroom accepts s.
func CheckHeadroom(s string) error {
	_, err := ParseHeadroom(s)
	return err
}

// percentFor is the collector target (GOGC) that lets a heap of live
// bytes grow by at most room before the next collection: base (the
// target without a headroom) when that stays within room, else
// room/live, but never below MinPercent.
func percentFor(live, room uint64, base int) int {
	if live == 0 || room == 0 || base <= MinPercent || live*uint64(base) <= room*100 {
		return base
	}
	return max(int(room*100/live), MinPercent)
}

// Headroom keeps the Go heap from growing more than a fixed number of
// bytes past what the last collection found live.
//
// The runtime's target (GOGC, 100 by default) lets the heap grow by a
// share of what is live: to twice it. A host's heap is mostly its
// long-lived state (the replicated objects, the compiled load balancers,
// the health targets), so on a large host that share is garbage the
// size of the whole state: at 100,000 load balancers, a gigabyte. Under a
// headroom the heap grows by GOGC's share or by the headroom, whichever
// is less (never by less than MinPercent of what is live): a host whose
// live heap is below the headroom collects as GOGC says; above it, it
// collects more often, and its resident set stays near live plus the
// headroom. A soft memory limit (--memory-limit), when set, still
// applies on top.
//
// Such a host also collects when it goes quiet after a burst (a bulk
// load, a tenant's resync): when it allocated at least a quarter of the
// headroom in the last burstWindow, half of the headroom is garbage now,
// and it used less than a quarter of a CPU since the last look. The
// garbage of the burst is then collected while nothing waits, not later
// while changes are being served; a collection of a gigabyte of live heap
// takes one to two seconds. A host that allocates slowly (scrapes, its
// own heartbeats) or never goes quiet collects as the target says.
type Headroom struct {
	max  uint64
	base int
	log  *slog.Logger
	// every is how often it reads the runtime's statistics.
	every   time.Duration
	samples []metrics.Sample
	cycles  uint64
	percent int

	// cpu is the process's CPU time so far.
	cpu     func() time.Duration
	lastCPU time.Duration
	lastAt  time.Time
	// allocs are the bytes allocated so far at each look of the last
	// burstWindow, oldest first.
	allocs    []allocsAt
	lastQuiet time.Time
	// quietGCs counts the collections it started.
	quietGCs int
}

type allocsAt struct {
	at    time.Time
	bytes uint64
}

const (
	// burstWindow is how recent the allocation of a burst must be.
	burstWindow = 5 * time.Second
	// quietGap is the least time between two collections after bursts.
	quietGap = 30 * time.Second
)

// NewHeadroom returns a headroom of max bytes over the runtime's current
// target (GOGC). It returns nil when there is nothing to do: max is 0,
// or the collector is off (GOGC=off).
func NewHeadroom(max int64, log *slog.Logger) *Headroom {
	h := &Headroom{max: uint64(max), log: log, every: 250 * time.Millisecond, cpu: processCPU, samples: []metrics.Sample{
		{Name: "/gc/gogc:percent"}, {Name: "/gc/heap/live:bytes"}, {Name: "/gc/cycles/total:gc-cycles"},
		{Name: "/gc/heap/allocs:bytes"}, {Name: "/memory/classes/heap/objects:bytes"},
	}}
	metrics.Read(h.samples)
	if max <= 0 || h.samples[0].Value.Kind() != metrics.KindUint64 {
		return nil
	}
	h.base = int(h.samples[0].Value.Uint64())
	h.percent = h.base
	if h.base <= 0 {
		return nil
	}
	return h
}

// Run sets the collector's target after each collection until ctx ends,
// then gives the runtime back the target it had.
func (h *Headroom) Run(ctx context.Context) {
	t := time.NewTicker(h.every)
	defer t.Stop()
	defer debug.SetGCPercent(h.base)
	for {
		h.update()
		h.afterBurst(time.Now())
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// update reads what the last collection found live and, when that
// collection is new, sets the target for the next one.
func (h *Headroom) update() {
	metrics.Read(h.samples)
	cycles := h.samples[2].Value.Uint64()
	if cycles == h.cycles {
		return
	}
	h.cycles = cycles
	live := h.samples[1].Value.Uint64()
	p := percentFor(live, h.max, h.base)
	if p == h.percent {
		return
	}
	debug.SetGCPercent(p)
	if h.log != nil {
		h.log.Debug("collector target", "component", "serve", "gogc", p, "live_MiB", live>>20, "headroom_MiB", h.max>>20)
	}
	h.percent = p
}

// afterBurst collects when the host went quiet after a burst (see
// Headroom), once the headroom binds: on a heap small enough for GOGC's
// share, a collection is short and this does nothing.
func (h *Headroom) afterBurst(now time.Time) {
	cpu := h.cpu()
	used, elapsed := cpu-h.lastCPU, now.Sub(h.lastAt)
	h.lastCPU, h.lastAt = cpu, now
	allocs := h.samples[3].Value.Uint64()
	h.allocs = append(h.allocs, allocsAt{now, allocs})
	i := 0
	for i < len(h.allocs)-1 && now.Sub(h.allocs[i].at) > burstWindow {
		i++
	}
	h.allocs = h.allocs[i:]
	if h.percent >= h.base || elapsed <= 0 || elapsed > 4*h.every {
		return
	}
	live, objects := h.samples[1].Value.Uint64(), h.samples[4].Value.Uint64()
	burst := allocs - h.allocs[0].bytes
	quiet := used < elapsed/4
	if objects < live+h.max/2 || burst < h.max/4 || !quiet || now.Sub(h.lastQuiet) < quietGap {
		return
	}
	h.lastQuiet = now
	h.quietGCs++
	runtime.GC()
	if h.log != nil {
		h.log.Debug("collected after a burst", "component", "serve", "garbage_MiB", (objects-live)>>20, "burst_MiB", burst>>20, "took", time.Since(now).Round(time.Millisecond))
	}
}

// processCPU is the CPU time this process has used (user and system).
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
