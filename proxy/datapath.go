package proxy

import (
	"errors"
	"fmt"
	"net"
	"runtime"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/teapot-lb/teapot-lb/proxy/health"
	"github.com/teapot-lb/teapot-lb/proxy/internal/uring"
)

// DataPath is how TCP and TLS passthrough connections move their bytes
// between client and member.
type DataPath string

// Data paths.
const (
	// DataPathAuto takes io_uring when this host offers it, else epoll.
	DataPathAuto DataPath = "auto"
	// DataPathEpoll moves bytes with splice(2) (or copies) on Go's
	// netpoller (epoll): a goroutine per direction.
	DataPathEpoll DataPath = "epoll"
	// DataPathIOURing relays them through io_uring rings, a thread each
	// (proxy/internal/uring): no system call per read or write.
	DataPathIOURing DataPath = "io_uring"
)

// ErrDataPath: the data path asked for cannot be used here.
var ErrDataPath = errors.New("data path unavailable")

// ParseDataPath parses a data path's name ("" is auto).
func ParseDataPath(s string) (DataPath, error) {
	switch DataPath(s) {
	case "", DataPathAuto:
		return DataPathAuto, nil
	case DataPathEpoll, DataPathIOURing:
		return DataPath(s), nil
	}
	return "", fmt.Errorf("data path %q: want auto, epoll or io_uring", s)
}

// ChooseDataPath resolves want to the path this host will use, and why:
// auto takes io_uring when the kernel offers it (new enough, not
// disabled by /proc/sys/kernel/io_uring_disabled, not refused by a
// seccomp filter) and epoll otherwise; io_uring asked for where it is
// unavailable is an error wrapping ErrDataPath.
func ChooseDataPath(want DataPath) (DataPath, string, error) {
	switch want {
	case DataPathEpoll:
		return DataPathEpoll, "configured", nil
	case DataPathIOURing:
		if err := uring.Available(); err != nil {
			return "", "", fmt.Errorf("%w: data-path io_uring: %w (set data-path to auto or epoll)", ErrDataPath, err)
		}
		return DataPathIOURing, "configured", nil
	case "", DataPathAuto:
		if err := uring.Available(); err != nil {
			return DataPathEpoll, err.Error(), nil
		}
		return DataPathIOURing, "auto: io_uring available", nil
	}
	return "", "", fmt.Errorf("%w: unknown data path %q", ErrDataPath, want)
}

// DataPath returns the path the proxy's TCP connections take.
func (p *Proxy) DataPath() DataPath {
	if p.relay != nil {
		return DataPathIOURing
	}
	return DataPathEpoll
}

// RingStats are the io_uring relay's counters (zero on epoll).
type RingStats = uring.Stats

// RingStats returns the io_uring relay's counters.
func (p *Proxy) RingStats() RingStats {
	if p.relay == nil {
		return RingStats{}
	}
	return p.relay.Stats()
}

// startRelay starts the io_uring relay for cfg.DataPath io_uring, or
// auto where ChooseDataPath takes io_uring (a worker thread and ring per
// processor). A relay that cannot start
// leaves the proxy on epoll, logged: ChooseDataPath has checked that
// rings can be set up, so this is the rare host that ran out of memory
// for them in between.
func (p *Proxy) startRelay() {
	want := p.cfg.DataPath
	if want == DataPathAuto {
		want, _, _ = ChooseDataPath(want)
	}
	if want != DataPathIOURing {
		return
	}
	rl, err := uring.New(runtime.GOMAXPROCS(0))
	if err != nil {
		p.log.Error("io_uring relay not started: TCP connections take epoll", "error", err)
		return
	}
	p.relay = rl
}

// rawFD returns c's descriptor.
func rawFD(c *net.TCPConn) (int, bool) {
	rc, err := c.SyscallConn()
	if err != nil {
		return 0, false
	}
	fd := -1
	if rc.Control(func(f uintptr) { fd = int(f) }) != nil {
		return 0, false
	}
	return fd, fd >= 0
}

// pipeRing relays client and up through the io_uring relay, as pipe does
// on epoll: an end (EOF) half-closes the other side, a failure resets
// both, IdleTimeout of silence or a member the pool's check takes down
// (downWatch) closes both. A connection closed from outside (drain,
// handover, an edge rule) is taken out of its ring first (tracked.close).
// false: the relay could not take it (its tables are full), nothing was
// done and the caller pipes it on epoll.
func (p *Proxy) pipeRing(l *ListenerSnapshot, client, up *net.TCPConn, member, downWatch *health.Target, t *tracked) bool {
	idle := l.Limits.IdleTimeout
	// Each direction's bytes count in the tenant's host CPU budget as
	// they are sent, each buffer sent at least a unit (a small message
	// costs its receive and send whatever its size); while the tenant is in debt (or paced), the ring
	// pauses that direction's receives instead of waiting: its thread
	// relays other tenants' connections too.
	var in, out byteMeter
	spec := uring.Spec{
		Idle:   idle,
		Tick:   max(idle/4, 10*time.Millisecond),
		Tenant: l.Tenant,
		AtoB: func(n int64) time.Duration {
			if n > 0 {
				p.metrics.BytesIn(l.LB, l.Name, n)
			}
			return l.cpu.Hold(in.message(n))
		},
		BtoA: func(n int64) time.Duration {
			if n > 0 {
				p.metrics.BytesOut(l.LB, l.Name, n)
			}
			return l.cpu.Hold(out.message(n))
		},
	}
	if downWatch != nil {
		spec.Tick = min(spec.Tick, downPoll)
		spec.Down = downWatch.CheckedDown
	}
	crc, err := client.SyscallConn()
	if err != nil {
		return false
	}
	urc, err := up.SyscallConn()
	if err != nil {
		return false
	}
	var h *uring.Handle
	started := false
	// The descriptors stay open (a Close waits for Control to return)
	// until the ring holds the sockets: a Close from outside in between
	// cannot let the ring register a descriptor number reused by another
	// socket.
	cerr := crc.Control(func(a uintptr) {
		_ = urc.Control(func(b uintptr) {
			spec.A, spec.B = int(a), int(b)
			if h, err = p.relay.Start(spec); err != nil {
				return
			}
			started = true
			if t != nil {
				t.relay.Store(h)
				if t.closing.Load() {
					h.Stop() // closed while the relay started
				}
			}
			h.Registered()
		})
	})
	if !started {
		if cerr != nil {
			// The client is closed already.
			refuse(up)
			return true
		}
		return false
	}
	res := h.Wait()
	if t != nil {
		t.relay.Store(nil)
	}
	if res.BFailed && member != nil && peerReset(up) {
		member.RecordFailure(health.OutcomeReset)
	}
	if res.Reset {
		// Stopped: closed from outside, and that close is graceful, as on
		// epoll, where the member alone is reset.
		if !res.Stopped {
			client.SetLinger(0)
		}
		up.SetLinger(0)
	}
	client.Close()
	up.Close()
	return true
}

// DataPathCollector returns the Prometheus collector of the data path:
// which one the host's TCP connections take, on io_uring the relay's
// counters, and the datagrams steered UDP sockets dropped.
func (p *Proxy) DataPathCollector() prometheus.Collector { return dataPathCollector{p} }

var (
	dataPathDesc = prometheus.NewDesc("teapot_lb_data_path",
		"The data path of the host's TCP and TLS passthrough connections (1 for the one taken): epoll or io_uring.", []string{"path"}, nil)
	ringEntersDesc = prometheus.NewDesc("teapot_lb_io_uring_enters_total",
		"io_uring_enter(2) calls of the io_uring relay's workers: their only system call per batch of sends, receives and completions.", nil, nil)
	ringConnsDesc = prometheus.NewDesc("teapot_lb_io_uring_connections_total",
		"Connections relayed through io_uring.", nil, nil)
	ringLiveDesc = prometheus.NewDesc("teapot_lb_io_uring_connections",
		"Connections in the io_uring relay now.", nil, nil)
	ringHeldDesc = prometheus.NewDesc("teapot_lb_io_uring_buffers_held",
		"Provided buffers of the io_uring relay holding bytes received and not yet sent.", nil, nil)
)

type dataPathCollector struct{ p *Proxy }

var _ prometheus.Collector = dataPathCollector{}

func (c dataPathCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- dataPathDesc
	ch <- ringEntersDesc
	ch <- ringConnsDesc
	ch <- ringLiveDesc
	ch <- ringHeldDesc
	ch <- steeredDropsDesc
}

func (c dataPathCollector) Collect(ch chan<- prometheus.Metric) {
	c.p.collectSteeredDrops(ch)
	taken := c.p.DataPath()
	for _, path := range []DataPath{DataPathEpoll, DataPathIOURing} {
		v := 0.0
		if path == taken {
			v = 1
		}
		ch <- prometheus.MustNewConstMetric(dataPathDesc, prometheus.GaugeValue, v, string(path))
	}
	if taken != DataPathIOURing {
		return
	}
	s := c.p.RingStats()
	ch <- prometheus.MustNewConstMetric(ringEntersDesc, prometheus.CounterValue, float64(s.Enters))
	ch <- prometheus.MustNewConstMetric(ringConnsDesc, prometheus.CounterValue, float64(s.Conns))
	ch <- prometheus.MustNewConstMetric(ringLiveDesc, prometheus.GaugeValue, float64(s.Live))
	ch <- prometheus.MustNewConstMetric(ringHeldDesc, prometheus.GaugeValue, float64(s.Held))
}
