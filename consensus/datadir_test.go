package consensus

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// A host whose Raft log or snapshot is damaged or gone stops with what to
// do; it never starts with an empty state.
func TestDamagedDataDirStopsWithWhatToDo(t *testing.T) {
	t.Parallel() // hosts of its own, in temporary directories on free ports
	tests := []struct {
		name   string
		damage func(t *testing.T, raftDir string)
		want   string
	}{
		{"log overwritten", func(t *testing.T, dir string) {
			writeFile(t, filepath.Join(dir, "raft.db"), []byte(strings.Repeat("garbage!", 4096)))
		}, "raft log"},
		{"log truncated", func(t *testing.T, dir string) {
			if err := os.Truncate(filepath.Join(dir, "raft.db"), 100); err != nil {
				t.Fatal(err)
			}
		}, "raft log"},
		{"log unreadable", func(t *testing.T, dir string) {
			db := filepath.Join(dir, "raft.db")
			if err := os.Remove(db); err != nil {
				t.Fatal(err)
			}
			if err := os.Mkdir(db, 0o700); err != nil { // a read fails with EISDIR
				t.Fatal(err)
			}
		}, "raft log"},
		{"log gone", func(t *testing.T, dir string) {
			if err := os.Remove(filepath.Join(dir, "raft.db")); err != nil {
				t.Fatal(err)
			}
		}, "raft log"},
		{"snapshot damaged", func(t *testing.T, dir string) {
			snaps, _ := filepath.Glob(filepath.Join(dir, "snapshots", "*", "state.bin"))
			if len(snaps) == 0 {
				t.Fatal("no snapshot to damage")
			}
			for _, s := range snaps {
				writeFile(t, s, []byte("not a snapshot"))
			}
		}, "raft state"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := startHost(t, Config{NodeID: "n1"})
			apply(t, h.node, pool("public", "192.0.2.0/28"))
			if err := h.node.r().Snapshot().Error(); err != nil {
				t.Fatal(err)
			}
			cfg := h.cfg
			h.stop()
			tt.damage(t, filepath.Join(cfg.DataDir, "raft"))
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			n, err := Open(ctx, cfg)
			if err == nil {
				n.Close()
				t.Fatal("a host with a damaged data dir started")
			}
			for _, want := range []string{tt.want, "will not start empty", "cluster remove", "--restore"} {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("error %q does not say %q", err, want)
				}
			}
		})
	}
}

func TestDataDirThatIsAFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "file")
	writeFile(t, path, []byte("x"))
	_, err := Open(context.Background(), Config{NodeID: "n1", DataDir: path, RaftAddr: freeAddr(t), APIAddr: freeAddr(t), Logger: testLogger()})
	if err == nil || !strings.Contains(err.Error(), "not a directory") {
		t.Fatalf("data dir that is a file: %v", err)
	}
}

func writeFile(t *testing.T, path string, data []byte) {
	t.Helper()
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
}

// Timeouts Raft refuses are reported with their flag before the data dir
// is touched, never as a damaged state.
func TestRaftTimeoutsNameTheirFlag(t *testing.T) {
	tests := []struct {
		heartbeat, election time.Duration
		want                []string
	}{
		{250 * time.Millisecond, 100 * time.Millisecond, []string{"--raft-election-timeout 100ms", "--raft-heartbeat-timeout 250ms", "at least as long"}},
		{time.Millisecond, 250 * time.Millisecond, []string{"--raft-heartbeat-timeout 1ms", "at least 5ms"}},
		{250 * time.Millisecond, time.Millisecond, []string{"--raft-election-timeout 1ms", "at least 5ms"}},
	}
	for _, tt := range tests {
		dir := filepath.Join(t.TempDir(), "data")
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		n, err := Open(ctx, Config{NodeID: "n1", DataDir: dir, RaftAddr: freeAddr(t), APIAddr: freeAddr(t),
			HeartbeatTimeout: tt.heartbeat, ElectionTimeout: tt.election, Logger: testLogger()})
		cancel()
		if err == nil {
			n.Close()
			t.Fatalf("heartbeat %s, election %s: started", tt.heartbeat, tt.election)
		}
		for _, want := range tt.want {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("error %q does not say %q", err, want)
			}
		}
		if strings.Contains(err.Error(), "damaged") {
			t.Errorf("a flag error reported as a damaged state: %v", err)
		}
		if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("a refused configuration created the data dir: %v", err)
		}
	}
}

// A store that cannot be opened for want of permission, space or a
// writable mount gets the file system's remedy; only what cannot be read
// or decoded is called damaged. (Tests run as root, which no mode bits
// stop, so the errors are the ones bbolt returns from open(2).)
func TestStoreErrorsSayWhatToDo(t *testing.T) {
	path := "/var/lib/teapot-lb/raft/raft.db"
	for errno, want := range map[syscall.Errno]string{
		syscall.EACCES: "chown -R",
		syscall.EROFS:  "read-only",
		syscall.ENOSPC: "free space",
		syscall.EIO:    "will not start empty",
	} {
		err := storeError("raft log", path, &os.PathError{Op: "open", Path: path, Err: errno})
		if !strings.Contains(err.Error(), want) || !errors.Is(err, errno) {
			t.Errorf("%v: %q does not say %q", errno, err, want)
		}
		if errno != syscall.EIO && strings.Contains(err.Error(), "damaged") {
			t.Errorf("%v reported as damaged: %v", errno, err)
		}
	}
}

// Root is refused on a data dir of another user (what it wrote there would
// stop that user's unit), and told to run as the owner.
func TestRootRefusesDataDirOfAnotherUser(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("runs as root only: checks what serve as root does on another user's data dir")
	}
	dir := t.TempDir()
	if err := os.Chown(dir, 65534, 65534); err != nil {
		t.Fatal(err)
	}
	err := checkDataDir(dir)
	if err == nil || !strings.Contains(err.Error(), "belongs to uid 65534") || !strings.Contains(err.Error(), "sudo -u teapot-lb") {
		t.Fatalf("root on another user's data dir: %v", err)
	}
	if err := checkDataDir(t.TempDir()); err != nil {
		t.Fatalf("root on its own data dir: %v", err)
	}
}

// A host whose data dir's file system went read-only (as the kernel
// remounts one after disk errors) stops with what to do, before it opens
// its log.
func TestReadOnlyDataDirSaysRemount(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to mount a tmpfs")
	}
	mnt := t.TempDir()
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size=64m", "tmpfs", mnt).CombinedOutput(); err != nil {
		t.Skipf("cannot mount a tmpfs (needs CAP_SYS_ADMIN): %v: %s", err, out)
	}
	t.Cleanup(func() { exec.Command("umount", "-l", mnt).Run() })
	h := startHost(t, Config{NodeID: "n1", DataDir: filepath.Join(mnt, "data")})
	apply(t, h.node, pool("public", "192.0.2.0/28"))
	cfg := h.cfg
	h.stop()
	if out, err := exec.Command("mount", "-o", "remount,ro", mnt).CombinedOutput(); err != nil {
		t.Fatalf("remount read-only: %v: %s", err, out)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	n, err := Open(ctx, cfg)
	if err == nil {
		n.Close()
		t.Fatal("a host started on a read-only data dir")
	}
	for _, want := range []string{"does not take writes", "read-only", "remount it read-write"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %q", err, want)
		}
	}
	if strings.Contains(err.Error(), "damaged") {
		t.Errorf("a read-only mount reported as a damaged state: %v", err)
	}
}
