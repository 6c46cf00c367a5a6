package sdnotify

import (
	"context"
	"errors"
	"net"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// listen is a notify socket as systemd opens it.
func listen(t *testing.T) (string, <-chan string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "notify")
	c, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: path, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	msgs := make(chan string, 100)
	go func() {
		buf := make([]byte, 4096)
		for {
			n, err := c.Read(buf)
			if err != nil {
				return
			}
			msgs <- string(buf[:n])
		}
	}()
	return path, msgs
}

func next(t *testing.T, msgs <-chan string) string {
	t.Helper()
	select {
	case m := <-msgs:
		return m
	case <-time.After(30 * time.Second):
		t.Fatal("no message from the notifier within 30s")
		return ""
	}
}

func TestReadyWatchdogStopping(t *testing.T) {
	path, msgs := listen(t)
	t.Setenv("NOTIFY_SOCKET", path)
	t.Setenv("WATCHDOG_USEC", "100000")
	t.Setenv("WATCHDOG_PID", "")
	n := FromEnv(nil)
	if !n.Enabled() || n.Watchdog() != 100*time.Millisecond {
		t.Fatalf("enabled %v watchdog %v", n.Enabled(), n.Watchdog())
	}
	release := make(chan struct{})
	var healthy atomic.Bool
	healthy.Store(true)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		n.Run(ctx, func(ctx context.Context) (string, error) {
			select {
			case <-release:
				return "serving revision 7", nil
			case <-ctx.Done():
				return "", ctx.Err()
			}
		}, func() error {
			if !healthy.Load() {
				return errors.New("stuck")
			}
			return nil
		})
	}()
	select {
	case m := <-msgs:
		t.Fatalf("sent %q before the host was ready", m)
	case <-time.After(300 * time.Millisecond):
	}
	close(release)
	if m := next(t, msgs); m != "READY=1\nSTATUS=serving revision 7" {
		t.Fatalf("first message %q", m)
	}
	if m := next(t, msgs); m != "WATCHDOG=1" {
		t.Fatalf("then %q, want WATCHDOG=1", m)
	}
	// A failing liveness check withholds the pings.
	healthy.Store(false)
	time.Sleep(150 * time.Millisecond)
	for len(msgs) > 0 {
		<-msgs
	}
	select {
	case m := <-msgs:
		t.Fatalf("sent %q while not alive", m)
	case <-time.After(400 * time.Millisecond):
	}
	healthy.Store(true)
	if m := next(t, msgs); m != "WATCHDOG=1" {
		t.Fatalf("after recovery %q", m)
	}
	cancel()
	<-done
	for {
		if m := next(t, msgs); m == "STOPPING=1" {
			break
		} else if !strings.HasPrefix(m, "WATCHDOG") {
			t.Fatalf("unexpected %q", m)
		}
	}
}

func TestOutsideSystemd(t *testing.T) {
	t.Setenv("NOTIFY_SOCKET", "")
	n := FromEnv(nil)
	if n.Enabled() {
		t.Fatal("enabled without NOTIFY_SOCKET")
	}
	if err := n.Notify("READY=1"); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	n.Run(ctx, func(context.Context) (string, error) { return "", context.Canceled }, func() error { return nil })
}
