// Package memlimit sets the Go runtime's soft memory limit from serve's
// --memory-limit: a size ("1536MiB", "2GiB") or a share of the memory the
// process may use ("80%": of its cgroup's memory.max when one is set,
// else of the host's memory). Under the limit the collector runs more
// often instead of letting the heap grow to twice what is live, so a
// host's resident set stays near its live heap.
package memlimit

import (
	"bufio"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"runtime/debug"
	"strconv"
	"strings"
)

// Min is the smallest limit accepted: below it the collector would run
// almost without pause on a host of any size.
const Min = 64 << 20

// units are the suffixes of a size, as GOMEMLIMIT writes them.
var units = []struct {
	suffix string
	bytes  uint64
}{{"TiB", 1 << 40}, {"GiB", 1 << 30}, {"MiB", 1 << 20}, {"KiB", 1 << 10}, {"B", 1}}

// ErrInvalid is returned for a value that is neither a size nor a share.
var ErrInvalid = errors.New("not a memory limit")

// Parse returns the limit in bytes that s asks for. available is the
// memory the process may use, called only for a share.
func Parse(s string, available func() (uint64, error)) (int64, error) {
	s = strings.TrimSpace(s)
	if pct, ok := strings.CutSuffix(s, "%"); ok {
		p, err := strconv.ParseFloat(strings.TrimSpace(pct), 64)
		if err != nil || math.IsNaN(p) || p <= 0 || p > 100 {
			return 0, fmt.Errorf("%w: %q: a share is a percentage above 0 and at most 100 (80%%)", ErrInvalid, s)
		}
		total, err := available()
		if err != nil {
			return 0, fmt.Errorf("%q: the memory available is unknown (%v): give a size (1536MiB)", s, err)
		}
		return check(s, uint64(float64(total)*p/100))
	}
	if n, err := parseSize(s); err == nil {
		return check(s, n)
	}
	return 0, fmt.Errorf("%w: %q: give a size in B, KiB, MiB, GiB or TiB (1536MiB) or a percentage of the memory available (80%%)", ErrInvalid, s)
}

// parseSize reads a size: a whole number of bytes with or without one of
// units' suffixes, up to math.MaxInt64 bytes.
func parseSize(s string) (uint64, error) {
	for _, u := range units {
		num, ok := strings.CutSuffix(s, u.suffix)
		if !ok {
			continue
		}
		n, err := strconv.ParseUint(strings.TrimSpace(num), 10, 64)
		if err != nil || n > math.MaxInt64/u.bytes {
			break
		}
		return n * u.bytes, nil
	}
	if n, err := strconv.ParseUint(s, 10, 64); err == nil && n <= math.MaxInt64 {
		return n, nil
	}
	return 0, ErrInvalid
}

func check(s string, n uint64) (int64, error) {
	if n < Min {
		return 0, fmt.Errorf("%q is %d MiB: a limit below %d MiB would keep the collector running", s, n>>20, Min>>20)
	}
	return int64(n), nil
}

// Check reports whether Set would accept s: "" (the runtime's), a size
// or a share of the memory available.
func Check(s string) error {
	if strings.TrimSpace(s) == "" {
		return nil
	}
	_, err := Parse(s, Available)
	return err
}

// Set applies s as the runtime's soft memory limit and returns the limit
// in force. An empty s leaves the runtime's (GOMEMLIMIT, else none:
// math.MaxInt64).
func Set(s string) (int64, error) {
	if strings.TrimSpace(s) == "" {
		return debug.SetMemoryLimit(-1), nil
	}
	n, err := Parse(s, Available)
	if err != nil {
		return 0, err
	}
	debug.SetMemoryLimit(n)
	return n, nil
}

// Available is the memory this process may use: its cgroup's (v2)
// memory.max when that is set, else the host's MemTotal.
func Available() (uint64, error) {
	total, err := memTotal("/proc/meminfo")
	if err != nil {
		return 0, err
	}
	if limit, ok := cgroupMax("/proc/self/cgroup", "/sys/fs/cgroup"); ok && limit < total {
		return limit, nil
	}
	return total, nil
}

// memTotal reads MemTotal from a meminfo file.
func memTotal(path string) (uint64, error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		v, ok := strings.CutPrefix(sc.Text(), "MemTotal:")
		if !ok {
			continue
		}
		fs := strings.Fields(v)
		if len(fs) != 2 || fs[1] != "kB" {
			break
		}
		n, err := strconv.ParseUint(fs[0], 10, 64)
		if err != nil {
			break
		}
		return n << 10, nil
	}
	return 0, fmt.Errorf("%s has no MemTotal in kB", path)
}

// cgroupMax reads the memory.max of the process's cgroup v2 ("0::/path"
// in cgroupFile, under root); false when there is none or it is "max".
func cgroupMax(cgroupFile, root string) (uint64, bool) {
	b, err := os.ReadFile(cgroupFile)
	if err != nil {
		return 0, false
	}
	for _, line := range strings.Split(string(b), "\n") {
		p, ok := strings.CutPrefix(line, "0::")
		if !ok {
			continue
		}
		v, err := os.ReadFile(filepath.Join(root, filepath.Clean("/"+p), "memory.max"))
		if err != nil {
			return 0, false
		}
		n, err := strconv.ParseUint(strings.TrimSpace(string(v)), 10, 64)
		return n, err == nil
	}
	return 0, false
}
