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

// recordDir holds one file per running cluster, named after its cgroup
// root ("teapot-kube-<pid>-<n>") and holding its Dir, so that the next
// Start can clean up after a process that was killed before Close ran.
const recordDir = "/run/teapot-kubecluster"

// staleNetnsAge is how old an unused CNI network namespace must be before
// it counts as left behind (younger ones may be in the middle of a pod's
// start or stop in another cluster).
const staleNetnsAge = 2 * time.Minute

// writeRecord notes the cluster's cgroup root and directory.
func (c *Cluster) writeRecord() error {
	if err := os.MkdirAll(recordDir, 0o755); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(recordDir, c.cgroup), []byte(c.cfg.Dir+"\n"), 0o644)
}

func (c *Cluster) removeRecord() {
	_ = os.Remove(filepath.Join(recordDir, c.cgroup))
}

// ownerAlive reports whether the process that named a cgroup root
// "teapot-kube-<pid>-<n>" still runs; ok is false for other names.
func ownerAlive(name string) (alive, ok bool) {
	rest, found := strings.CutPrefix(name, "teapot-kube-")
	if !found {
		return false, false
	}
	pid, err := strconv.Atoi(strings.SplitN(rest, "-", 2)[0])
	if err != nil || pid <= 1 {
		return false, false
	}
	if pid == os.Getpid() {
		return true, true
	}
	return !errors.Is(syscall.Kill(pid, 0), syscall.ESRCH), true
}

// RemoveStale cleans up what clusters of processes that died without
// Close left behind: their containers and shims (killed through their
// cgroup roots and containerd sockets), their mounts and directories, and
// CNI network namespaces no process uses any more. Start calls it; it
// touches nothing of a cluster whose process still runs.
func RemoveStale() error {
	var errs []error
	roots := map[string]bool{}
	for _, h := range hierarchies() {
		entries, _ := os.ReadDir(h)
		for _, e := range entries {
			if alive, ok := ownerAlive(e.Name()); ok && !alive && e.IsDir() {
				roots[e.Name()] = true
			}
		}
	}
	records, _ := os.ReadDir(recordDir)
	dirs := map[string]string{}
	for _, r := range records {
		if alive, ok := ownerAlive(r.Name()); ok && !alive {
			roots[r.Name()] = true
			if data, err := os.ReadFile(filepath.Join(recordDir, r.Name())); err == nil {
				if d := strings.TrimSpace(string(data)); filepath.IsAbs(d) && d != "/" {
					dirs[r.Name()] = d
				}
			}
		}
	}
	for root := range roots {
		if dir := dirs[root]; dir != "" {
			killShimsUnder(dir)
		}
		if err := removeCgroups(root); err != nil {
			errs = append(errs, err)
		}
		if dir := dirs[root]; dir != "" {
			if err := unmountUnder(dir); err != nil {
				errs = append(errs, err)
			} else if err := os.RemoveAll(dir); err != nil {
				errs = append(errs, fmt.Errorf("remove %s: %w", dir, err))
			}
		}
		_ = os.Remove(filepath.Join(recordDir, root))
	}
	removeUnusedNetns(time.Now().Add(-staleNetnsAge))
	return errors.Join(errs...)
}

// killShimsUnder kills the containerd shims whose arguments name a path
// inside dir (their containerd's socket).
func killShimsUnder(dir string) {
	killShimsWhere(func(args []string) bool {
		return slices.ContainsFunc(args, func(a string) bool { return strings.HasPrefix(a, dir+"/") })
	})
}

// removeUnusedNetns unmounts and removes the CNI network namespaces
// (/run/netns/cni-*) created before before that no process is in.
func removeUnusedNetns(before time.Time) {
	entries, err := os.ReadDir("/run/netns")
	if err != nil {
		return
	}
	inUse := netnsInUse()
	for _, e := range entries {
		if !strings.HasPrefix(e.Name(), "cni-") {
			continue
		}
		path := filepath.Join("/run/netns", e.Name())
		var st syscall.Stat_t
		fi, err := os.Lstat(path)
		if err != nil || !fi.ModTime().Before(before) || syscall.Stat(path, &st) != nil || inUse[st.Ino] {
			continue
		}
		_ = syscall.Unmount(path, syscall.MNT_DETACH)
		_ = os.Remove(path)
	}
}

// netnsInUse returns the inodes of the network namespaces that a live
// process is in.
func netnsInUse() map[uint64]bool {
	inUse := map[uint64]bool{}
	procs, _ := os.ReadDir("/proc")
	for _, e := range procs {
		if _, err := strconv.Atoi(e.Name()); err != nil {
			continue
		}
		var st syscall.Stat_t
		if syscall.Stat(filepath.Join("/proc", e.Name(), "ns", "net"), &st) == nil {
			inUse[st.Ino] = true
		}
	}
	return inUse
}
