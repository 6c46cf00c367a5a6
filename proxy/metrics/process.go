package metrics

import (
	"bytes"
	"os"
	"runtime"
	"strconv"
	"sync"
	"syscall"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	pb "github.com/teapot-lb/teapot-lb/api/proto/teapotv1"
)

// clockTicks is the unit of /proc/self/stat's CPU times (USER_HZ, 100 on
// every Linux architecture Go supports).
const clockTicks = 100

// resourcesMaxAge is how long a reading of the process's resources is
// reused: counting the open descriptors reads a directory as long as
// they are many, so dashboards refreshing every second read it at most
// once a second between them.
const resourcesMaxAge = time.Second

// procReader reads the process's CPU time, memory and descriptors from
// /proc (Linux; elsewhere the values stay zero).
type procReader struct {
	mu sync.Mutex
	// cpuAt and cpuSecs are the last sample's CPU time and when.
	cpuAt   time.Time
	cpuSecs float64
	// rate is the CPU seconds per second between the last two samples.
	rate float64
	// cached is the last reading, reused for resourcesMaxAge.
	cached *pb.HostResources
}

func newProcReader() *procReader { return &procReader{} }

// cpuSeconds is the process's user and system CPU time.
func cpuSeconds() float64 {
	b, err := os.ReadFile("/proc/self/stat")
	if err != nil {
		return 0
	}
	// The command name may hold spaces; the fields follow its ")".
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0
	}
	f := bytes.Fields(b[i+1:])
	// utime and stime are fields 14 and 15 of the line, 12 and 13 after ")".
	if len(f) < 13 {
		return 0
	}
	u, _ := strconv.ParseUint(string(f[11]), 10, 64)
	s, _ := strconv.ParseUint(string(f[12]), 10, 64)
	return float64(u+s) / clockTicks
}

// residentBytes is the process's resident memory.
func residentBytes() uint64 {
	b, err := os.ReadFile("/proc/self/statm")
	if err != nil {
		return 0
	}
	f := bytes.Fields(b)
	if len(f) < 2 {
		return 0
	}
	pages, _ := strconv.ParseUint(string(f[1]), 10, 64)
	return pages * uint64(os.Getpagesize())
}

func openDescriptors() uint64 {
	d, err := os.Open("/proc/self/fd")
	if err != nil {
		return 0
	}
	defer d.Close()
	var n uint64
	for {
		names, err := d.Readdirnames(4096)
		n += uint64(len(names))
		if err != nil {
			break
		}
	}
	return max(n, 1) - 1 // the directory itself
}

func descriptorLimit() uint64 {
	var l syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &l); err != nil {
		return 0
	}
	return l.Cur
}

// sample records the CPU time at now and returns the CPU used per second
// since the previous sample, and the resident memory.
func (p *procReader) sample(now time.Time) (cpu float64, mem uint64) {
	secs := cpuSeconds()
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.cpuAt.IsZero() && now.After(p.cpuAt) {
		p.rate = max(0, secs-p.cpuSecs) / now.Sub(p.cpuAt).Seconds()
	}
	p.cpuAt, p.cpuSecs = now, secs
	return p.rate, residentBytes()
}

// resources reads the process's resources now (at most once per
// resourcesMaxAge; the CPU is that of the last sample interval).
func (p *procReader) resources() *pb.HostResources {
	p.mu.Lock()
	defer p.mu.Unlock()
	if c := p.cached; c != nil && time.Since(c.GetTime().AsTime()) < resourcesMaxAge {
		return c
	}
	p.cached = &pb.HostResources{Time: timestamppb.Now(), Cpu: p.rate, Cpus: uint32(runtime.NumCPU()), MemoryBytes: residentBytes(),
		OpenDescriptors: openDescriptors(), DescriptorLimit: descriptorLimit(), Goroutines: int64(runtime.NumGoroutine())}
	return p.cached
}
