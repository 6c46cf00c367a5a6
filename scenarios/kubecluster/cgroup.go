package kubecluster

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// cgroupMount is where the cgroup file systems are mounted.
const cgroupMount = "/sys/fs/cgroup"

// hierarchies lists the mounted cgroup hierarchies (v1: one directory per
// controller; v2: the mount itself).
func hierarchies() []string {
	if _, err := os.Stat(filepath.Join(cgroupMount, "cgroup.controllers")); err == nil {
		return []string{cgroupMount}
	}
	entries, _ := os.ReadDir(cgroupMount)
	var hs []string
	for _, e := range entries {
		p := filepath.Join(cgroupMount, e.Name())
		if fi, err := os.Lstat(p); err == nil && fi.IsDir() {
			hs = append(hs, p)
		}
	}
	return hs
}

// makeCgroup creates path (like "/teapot-kube-1/node1") in every
// hierarchy. The kubelet wants its cgroup root to exist; cpuset
// directories get their parent's CPUs and memory nodes, without which no
// task could join them.
func makeCgroup(path string) error {
	for _, h := range hierarchies() {
		parts := strings.Split(strings.Trim(path, "/"), "/")
		dir := h
		for _, part := range parts {
			parent := dir
			dir = filepath.Join(dir, part)
			if err := os.Mkdir(dir, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
				return fmt.Errorf("create cgroup %s: %w", dir, err)
			}
			for _, f := range []string{"cpuset.cpus", "cpuset.mems"} {
				v, err := os.ReadFile(filepath.Join(parent, f))
				if err != nil {
					continue
				}
				if cur, _ := os.ReadFile(filepath.Join(dir, f)); strings.TrimSpace(string(cur)) == "" {
					if err := os.WriteFile(filepath.Join(dir, f), v, 0o644); err != nil {
						return fmt.Errorf("%s: %w", filepath.Join(dir, f), err)
					}
				}
			}
		}
	}
	return nil
}

// Pods' CPU weight: what the cluster's cgroup weighs against each busy
// thread outside it, a nice-0 thread weighing 1024 (v1 cpu.shares) or
// 100 (v2 cpu.weight).
const (
	podSharesV1 = 100 * 1024
	podWeightV2 = 100 * 100
)

// weighCgroup gives path (the cluster's cgroup, under which every node's
// pods run) the CPU weight of 100 busy threads. The nodes stand for
// machines of their own, but their pods share this one with the LB hosts,
// the tests and, in CI, every other package's tests, and a cgroup weighs
// as one thread of the cgroup above it by default: under that load, the
// whole cluster's pods got a thread's share between them, an echo pod
// (BestEffort, the least weight inside) did not answer for seconds, and
// requests through the LB timed out whatever it did. The pods are mostly
// idle: the weight lets them answer when asked, as on their own machines.
func weighCgroup(path string) error {
	if _, err := os.Stat(filepath.Join(cgroupMount, "cgroup.controllers")); err == nil {
		// v2: cpu.weight exists only where the parent hands the cpu
		// controller down (the kubelet does that too, but later).
		_ = os.WriteFile(filepath.Join(cgroupMount, filepath.Dir(path), "cgroup.subtree_control"), []byte("+cpu"), 0o644)
	}
	written := false
	for _, h := range hierarchies() {
		for file, v := range map[string]int{"cpu.shares": podSharesV1, "cpu.weight": podWeightV2} {
			f := filepath.Join(h, path, file)
			if _, err := os.Stat(f); err != nil {
				continue
			}
			if err := os.WriteFile(f, []byte(strconv.Itoa(v)), 0o644); err != nil {
				return fmt.Errorf("weigh the pods' cgroup: %w", err)
			}
			written = true
		}
	}
	if !written {
		return fmt.Errorf("weigh the pods' cgroup: no cpu.shares or cpu.weight for %s (the cpu controller, which the kubelet needs too, is not there)", path)
	}
	return nil
}

// killCgroup kills every task under path in every hierarchy.
func killCgroup(path string) {
	for range 20 {
		found := false
		for _, h := range hierarchies() {
			_ = filepath.WalkDir(filepath.Join(h, path), func(p string, d os.DirEntry, err error) error {
				if err != nil || d.IsDir() || d.Name() != "cgroup.procs" {
					return nil
				}
				data, _ := os.ReadFile(p)
				for _, f := range strings.Fields(string(data)) {
					if pid, err := strconv.Atoi(f); err == nil && pid > 1 {
						found = true
						_ = syscall.Kill(pid, syscall.SIGKILL)
					}
				}
				return nil
			})
		}
		if !found {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// removeCgroups kills what is left under root and removes its
// directories, deepest first.
func removeCgroups(root string) error {
	killCgroup("/" + root)
	var errs []error
	for _, h := range hierarchies() {
		var dirs []string
		_ = filepath.WalkDir(filepath.Join(h, root), func(p string, d os.DirEntry, err error) error {
			if err == nil && d.IsDir() {
				dirs = append(dirs, p)
			}
			return nil
		})
		slices.SortFunc(dirs, func(a, b string) int { return len(b) - len(a) })
		for _, d := range dirs {
			var err error
			for range 20 {
				if err = syscall.Rmdir(d); err == nil || errors.Is(err, syscall.ENOENT) {
					err = nil
					break
				}
				time.Sleep(100 * time.Millisecond)
			}
			if err != nil {
				errs = append(errs, fmt.Errorf("remove cgroup %s: %w", d, err))
			}
		}
	}
	return errors.Join(errs...)
}
