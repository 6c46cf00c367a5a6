// Command scalebench measures what teapot-lb's proxy costs at scale: it
// gives proxy.New(...).Update 1,000 and then 10,000 load balancers of one
// tcp listener and ten members each, every size in a fresh child process
// so that the resident set is that of the proxy alone, and prints the
// time of the first Update (compile, bind every listener, swap), the time
// of a change to one load balancer, and the process's resident set.
//
//	go run ./proxy/scalebench -sizes 1000,10000
//
// The listeners bind VIPs spread over 127.16.0.0/12 on one port, so each
// child needs as many file descriptors as load balancers: it raises its
// soft limit to the hard one.
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
	// Change is an Update that changes one member of one load balancer.
	Change time.Duration `json:"change"`
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
	if err := fs.Parse(args); err != nil {
		return err
	}
	var ns []int
	for _, s := range strings.Split(*sizes, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil || n < 1 || n > 60000 {
			return fmt.Errorf("-sizes: %q is not a count in [1, 60000]", s)
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
		cmd := exec.Command(self, "child", "-lbs", strconv.Itoa(n))
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
		fmt.Printf("  %6d LBs: first Update %v, one change %v, RSS %.1f MiB\n", n,
			pt.First.Round(time.Millisecond), pt.Change.Round(time.Microsecond), mib(pt.RSSKiB))
	}
	printTable(pts)
	return nil
}

func mib(kib int64) float64 { return float64(kib) / 1024 }

func printTable(pts []point) {
	fmt.Println()
	fmt.Println("| LBs × 10 members | first Update (compile + bind + swap) | one-LB change | RSS before objects | RSS with objects | RSS after Update | peak RSS | Go heap in use | RSS growth vs first size |")
	fmt.Println("|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
	for _, pt := range pts {
		growth := "-"
		if len(pts) > 0 && pts[0].RSSKiB > 0 && pt.LBs != pts[0].LBs {
			growth = fmt.Sprintf("%.1f× RSS for %.0f× LBs (%.1f KiB per LB over %d)",
				float64(pt.RSSKiB)/float64(pts[0].RSSKiB), float64(pt.LBs)/float64(pts[0].LBs),
				float64(pt.RSSKiB-pts[0].RSSKiB)/float64(pt.LBs-pts[0].LBs), pts[0].LBs)
		}
		fmt.Printf("| %d | %v | %v | %.1f MiB | %.1f MiB | %.1f MiB | %.1f MiB | %.1f MiB | %s |\n",
			pt.LBs, pt.First.Round(time.Millisecond), pt.Change.Round(time.Microsecond),
			mib(pt.BaseKiB), mib(pt.ObjectsKiB), mib(pt.RSSKiB), mib(pt.PeakKiB), mib(pt.HeapKiB), growth)
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
