package scenarios

import (
	"bytes"
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

// serveOnce runs serve on n's data dir until it exits (within a minute)
// and returns its output; it fails the test if serve keeps running.
func (c *cluster) serveOnce(t *testing.T, n *node, attr *syscall.SysProcAttr, extra ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	args := append([]string{"serve", "--data-dir", n.dir, "--node-id", n.id, "--raft-addr", n.raftAddr, "--api-addr", n.apiAddr,
		"--metrics-addr", "", "--acme-ca", noACME}, extra...)
	cmd := exec.CommandContext(ctx, c.bin, args...)
	cmd.Env = childEnv()
	cmd.SysProcAttr = attr
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	if ctx.Err() != nil {
		t.Fatalf("serve kept running on a faulty data dir:\n%s", out.String())
	}
	if err == nil {
		t.Fatalf("serve exited 0 on a faulty data dir:\n%s", out.String())
	}
	return out.String()
}

func needRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		unavailable(t, "needs root (mount a tmpfs, run as another user)")
	}
}

// A host whose disk is full stops at start with what to do, and starts
// once space is freed.
func TestServeOnFullDiskStopsWithWhatToDo(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: starts teapot-lb processes")
	}
	needRoot(t)
	c := newCluster(t)
	mnt := t.TempDir()
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size=24m", "tmpfs", mnt).CombinedOutput(); err != nil {
		unavailable(t, "mount a tmpfs: %v: %s", err, out)
	}
	t.Cleanup(func() { exec.Command("umount", "-l", mnt).Run() })
	n := c.newNode()
	n.dir = filepath.Join(mnt, "data")
	c.start(n)
	c.waitMember(n)
	if _, err := c.cli(n, "tenant", "create", "kept"); err != nil {
		t.Fatal(err)
	}
	c.stop(n)

	// Fill the file system.
	filler := filepath.Join(mnt, "filler")
	f, err := os.Create(filler)
	if err != nil {
		t.Fatal(err)
	}
	chunk := make([]byte, 1<<20)
	for {
		if _, err := f.Write(chunk); err != nil {
			break
		}
	}
	f.Close()
	out := c.serveOnce(t, n, nil)
	for _, want := range []string{"free space", n.dir} {
		if !strings.Contains(out, want) {
			t.Fatalf("serve on a full disk does not say %q:\n%s", want, out)
		}
	}
	t.Logf("full disk: %s", lastLine(out))

	os.Remove(filler)
	c.restart(n)
	waitFor(t, startTimeout, "the host with space again", func() error {
		names, err := c.tenantNames(n)
		if err != nil {
			return err
		}
		if !names["kept"] {
			return errStop(err)
		}
		return nil
	})
}

// A data dir that belongs to another user than the one serve runs as stops
// serve with the chown to run.
func TestServeOnDataDirOfAnotherUser(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: starts teapot-lb processes")
	}
	needRoot(t)
	c := newCluster(t)
	n := c.newNode()
	if err := os.MkdirAll(n.dir, 0o700); err != nil { // root's
		t.Fatal(err)
	}
	// The binary and the test's temporary directories must be reachable
	// by nobody: each ancestor gets o+x for the test, and its mode back
	// when the test ends.
	for _, p := range []string{filepath.Dir(n.dir), filepath.Dir(c.bin)} {
		for d := p; d != "/" && d != "."; d = filepath.Dir(d) {
			fi, err := os.Stat(d)
			if err != nil || fi.Mode().Perm()&0o001 != 0 {
				continue
			}
			if err := os.Chmod(d, fi.Mode().Perm()|0o001); err != nil {
				t.Fatal(err)
			}
			dir, mode := d, fi.Mode().Perm()
			t.Cleanup(func() {
				if err := os.Chmod(dir, mode); err != nil && !errors.Is(err, os.ErrNotExist) {
					t.Errorf("restore the mode of %s: %v", dir, err)
				}
			})
		}
	}
	nobody := &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	out := c.serveOnce(t, n, nobody)
	for _, want := range []string{"belongs to uid 0", "chown -R 65534 " + n.dir} {
		if !strings.Contains(out, want) {
			t.Fatalf("serve as nobody on root's data dir does not say %q:\n%s", want, out)
		}
	}
	t.Logf("another user's data dir: %s", lastLine(out))
}

// A host whose Raft log was destroyed while it was stopped stops with what
// to do and does not serve an empty state.
func TestServeOnDamagedRaftLog(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: starts teapot-lb processes")
	}
	c := newCluster(t)
	n := c.bootstrap()
	c.stop(n)
	if err := os.WriteFile(filepath.Join(n.dir, "raft", "raft.db"), bytes.Repeat([]byte("damaged "), 8192), 0o600); err != nil {
		t.Fatal(err)
	}
	out := c.serveOnce(t, n, nil)
	for _, want := range []string{"raft.db cannot be read", "will not start empty", "--restore"} {
		if !strings.Contains(out, want) {
			t.Fatalf("serve on a damaged log does not say %q:\n%s", want, out)
		}
	}
	t.Logf("damaged log: %s", lastLine(out))
}

func lastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return lines[len(lines)-1]
}
