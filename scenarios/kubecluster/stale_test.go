package kubecluster

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"
)

// TestRemoveStale leaves behind what a killed test leaves (a record, a
// process in the dead cluster's cgroup root, a mount under its directory)
// and checks that RemoveStale clears it all, and that a cluster of a live
// process is left alone.
func TestRemoveStale(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: it creates cgroups and mounts")
	}
	// A pid that no longer runs: a child that exited.
	gone := exec.Command("true")
	if err := gone.Run(); err != nil {
		t.Fatal(err)
	}
	dead := fmt.Sprintf("teapot-kube-%d-1", gone.Process.Pid)
	live := fmt.Sprintf("teapot-kube-%d-2", os.Getpid())
	dir := filepath.Join(t.TempDir(), "kube")
	liveDir := filepath.Join(t.TempDir(), "kube")
	for _, d := range []string{dir, liveDir} {
		if err := os.MkdirAll(filepath.Join(d, "node1", "mnt"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for root, d := range map[string]string{dead: dir, live: liveDir} {
		c := &Cluster{cfg: Config{Dir: d}, cgroup: root}
		if err := c.writeRecord(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(c.removeRecord)
		if err := makeCgroup("/" + root + "/node1"); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = removeCgroups(root) })
	}
	if err := syscall.Mount("tmpfs", filepath.Join(dir, "node1", "mnt"), "tmpfs", 0, "size=1m"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = unmountUnder(dir) })
	// A container left running: a process in the dead cluster's cgroup.
	orphan := exec.Command("sleep", "600")
	if err := orphan.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- orphan.Wait() }()
	t.Cleanup(func() { _ = orphan.Process.Kill() })
	for _, h := range hierarchies() {
		procs := filepath.Join(h, dead, "node1", "cgroup.procs")
		if err := os.WriteFile(procs, []byte(strconv.Itoa(orphan.Process.Pid)), 0o644); err != nil {
			t.Fatalf("put the orphan into %s: %v", procs, err)
		}
	}

	if err := RemoveStale(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-exited:
	case <-time.After(10 * time.Second):
		t.Error("the process in the dead cluster's cgroup still runs")
	}
	for _, h := range hierarchies() {
		if _, err := os.Stat(filepath.Join(h, dead)); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("the dead cluster's cgroup %s is left (%v)", filepath.Join(h, dead), err)
		}
		if _, err := os.Stat(filepath.Join(h, live, "node1")); err != nil {
			t.Errorf("the live cluster's cgroup was removed: %v", err)
		}
	}
	if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the dead cluster's directory is left (%v)", err)
	}
	if _, err := os.Stat(filepath.Join(recordDir, dead)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the dead cluster's record is left (%v)", err)
	}
	if _, err := os.Stat(filepath.Join(liveDir, "node1")); err != nil {
		t.Errorf("the live cluster's directory was touched: %v", err)
	}
	if _, err := os.Stat(filepath.Join(recordDir, live)); err != nil {
		t.Errorf("the live cluster's record was removed: %v", err)
	}
}
