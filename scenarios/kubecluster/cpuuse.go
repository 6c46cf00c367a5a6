package kubecluster

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// CPUUse returns the CPU time spent so far by every tenant cluster of
// this machine (every cgroup named like a Cluster's, this process's or
// another's), by pod: the key is the cgroup's path below the cluster's,
// cut to the node and the pod ("teapot-kube-1-2/node1/…/pod<uid>"). A
// diagnostic for requests that time out: it tells which pods took the
// machine while they did. Empty when the cgroup file system does not
// count CPU time.
func CPUUse() map[string]time.Duration {
	out := map[string]time.Duration{}
	for _, h := range hierarchies() {
		roots, _ := filepath.Glob(filepath.Join(h, "teapot-kube-*"))
		for _, root := range roots {
			_ = filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
				if err != nil || !d.IsDir() {
					return nil
				}
				rel, _ := filepath.Rel(h, p)
				if !strings.HasPrefix(filepath.Base(p), "pod") && strings.Count(rel, "/") != 1 {
					return nil
				}
				if use, ok := cgroupCPU(p); ok {
					out[rel] = use
				}
				if strings.HasPrefix(filepath.Base(p), "pod") {
					return filepath.SkipDir
				}
				return nil
			})
		}
	}
	return out
}

// cgroupCPU reads the CPU time spent under the cgroup directory dir:
// cpuacct.usage (v1, nanoseconds) or cpu.stat's usage_usec (v2).
func cgroupCPU(dir string) (time.Duration, bool) {
	if b, err := os.ReadFile(filepath.Join(dir, "cpuacct.usage")); err == nil {
		ns, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
		return time.Duration(ns), err == nil
	}
	b, err := os.ReadFile(filepath.Join(dir, "cpu.stat"))
	if err != nil {
		return 0, false
	}
	for line := range strings.SplitSeq(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "usage_usec "); ok {
			us, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
			return time.Duration(us) * time.Microsecond, err == nil
		}
	}
	return 0, false
}
