// Command scalebench measures what teapot-lb's proxy costs at scale: it
// gives proxy.New(...).Update 1,000, 10,000 and 100,000 load balancers of
// one listener and ten members each, every size in a fresh child process
// so that the resident set is that of the proxy alone, and prints the
// time of the first Update (compile, bind every listener, swap), of a
// change to one load balancer through Update (the whole state) and through
// ApplyChange (the change alone; p50 and p99 over 200 changes of random
// load balancers), of a revision that changes no load balancer, and the
// process's resident set.
//
//	go run ./proxy/scalebench -sizes 1000,10000,100000
//
// With -memprofile heap.pprof each child also writes its heap profile,
// after its changes, to heap.pprof.SIZE (go tool pprof).
//
// The listeners are tcp and bind VIPs spread over 127.16.0.0/12 on one
// port, so each child needs as many file descriptors as load balancers: it
// raises its soft limit to the hard one. When that is not enough the
// listeners are http and the proxy has no L7 handler: everything is
// compiled and served in the snapshot but no socket is opened (the table
// says so).
package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"time"

	"github.com/teapot-lb/teapot-lb/proxy/internal/benchproc"
)

func main() {
	benchproc.Main("scalebench", run, map[string]func([]string) error{"child": child})
}

// point is what a child measured for one size.
type point struct {
	LBs int `json:"lbs"`
	// First is the first Update: compile, bind, swap.
	First time.Duration `json:"first"`
	// Bound: the listeners are tcp and bound; otherwise http listeners
	// that a proxy without an L7 handler does not open (the descriptor
	// limit is below the size).
	Bound bool `json:"bound"`
	// Change is an Update (whole state) that changes one member of one
	// load balancer.
	Change time.Duration `json:"change"`
	// DeltaP50 and DeltaP99 time ApplyChange of one member of a random
	// load balancer.
	DeltaP50 time.Duration `json:"delta_p50"`
	DeltaP99 time.Duration `json:"delta_p99"`
	// Quiet is an ApplyChange that changes no load balancer.
	Quiet time.Duration `json:"quiet"`
	// BaseKiB is the resident set before the objects were built.
	BaseKiB int64 `json:"base_kib"`
	// ObjectsKiB is the resident set with the objects built, before Update.
	ObjectsKiB int64 `json:"objects_kib"`
	// RSSKiB is the resident set after both Updates.
	RSSKiB int64 `json:"rss_kib"`
	// PeakKiB is the highest resident set of the process.
	PeakKiB int64 `json:"peak_kib"`
	// HeapKiB is the Go heap in use after both Updates and a GC.
	HeapKiB int64 `json:"heap_kib"`
}

func run(args []string) error {
	fs := flag.NewFlagSet("scalebench", flag.ContinueOnError)
	sizes := fs.String("sizes", "1000,10000", "comma-separated numbers of load balancers, each measured in its own process")
	memprofile := fs.String("memprofile", "", "write each size's heap profile, after its changes, to this path with the size appended (\"heap.pprof\" gives heap.pprof.10000)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	var ns []int
	for _, s := range strings.Split(*sizes, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil || n < 2 || n > 200000 {
			return fmt.Errorf("-sizes: %q is not a count in [2, 200000]", s)
		}
		ns = append(ns, n)
	}
	self, err := os.Executable()
	if err != nil {
		return err
	}
	fmt.Printf("teapot-lb scale: load balancers of one tcp listener and 10 members, one process per size\n")
	var pts []point
	for _, n := range ns {
		args := []string{"child", "-lbs", strconv.Itoa(n)}
		if *memprofile != "" {
			args = append(args, "-memprofile", *memprofile+"."+strconv.Itoa(n))
		}
		cmd := exec.Command(self, args...)
		cmd.Stderr = os.Stderr
		out, err := cmd.Output()
		if err != nil {
			return fmt.Errorf("%d load balancers: %w", n, err)
		}
		var pt point
		if err := json.Unmarshal(out, &pt); err != nil {
			return fmt.Errorf("%d load balancers: child output: %w", n, err)
		}
		pts = append(pts, pt)
		fmt.Printf("  %6d LBs: first Update %v, one change %v (whole state), ApplyChange p50 %v p99 %v, RSS %.1f MiB\n", n,
			pt.First.Round(time.Millisecond), pt.Change.Round(time.Microsecond), pt.DeltaP50.Round(time.Microsecond),
			pt.DeltaP99.Round(time.Microsecond), mib(pt.RSSKiB))
	}
	printTable(pts)
	return nil
}

func mib(kib int64) float64 { return float64(kib) / 1024 }

func printTable(pts []point) {
	fmt.Println()
	fmt.Println("| LBs × 10 members | sockets | first Update (compile + bind + swap) | one change, whole state (Update) | one change alone (ApplyChange) p50 | p99 | a revision touching no LB | RSS before objects | RSS with objects | RSS after | peak RSS | Go heap in use | KiB per LB (RSS after − with objects) |")
	fmt.Println("|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
	for _, pt := range pts {
		bound := "bound"
		if !pt.Bound {
			bound = "not opened (descriptor limit)"
		}
		fmt.Printf("| %d | %s | %v | %v | %v | %v | %v | %.1f MiB | %.1f MiB | %.1f MiB | %.1f MiB | %.1f MiB | %.1f |\n",
			pt.LBs, bound, pt.First.Round(time.Millisecond), pt.Change.Round(time.Microsecond),
			pt.DeltaP50.Round(time.Microsecond), pt.DeltaP99.Round(time.Microsecond), pt.Quiet.Round(time.Microsecond),
			mib(pt.BaseKiB), mib(pt.ObjectsKiB), mib(pt.RSSKiB), mib(pt.PeakKiB), mib(pt.HeapKiB),
			float64(pt.RSSKiB-pt.ObjectsKiB)/float64(pt.LBs))
	}
}

// procStatus reads a "kB" field of /proc/self/status in KiB.
func procStatus(field string) (int64, error) {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(b), "\n") {
		v, ok := strings.CutPrefix(line, field+":")
		if !ok {
			continue
		}
		f := strings.Fields(v)
		if len(f) != 2 || f[1] != "kB" {
			break
		}
		return strconv.ParseInt(f[0], 10, 64)
	}
	return 0, errors.New("/proc/self/status has no " + field)
}
