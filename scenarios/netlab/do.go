package netlab

import (
	"context"
	"fmt"
	"net"
	"os"
	"runtime"

	"golang.org/x/sys/unix"
)

// Do runs fn inside the host's network namespace, on a locked OS thread.
// Sockets that fn opens stay in the namespace after it returns, and can
// be used from any goroutine. fn must not start goroutines that expect
// to be in the namespace, nor start processes (use Start).
func (h *Host) Do(fn func() error) error {
	runtime.LockOSThread()
	orig, err := os.Open("/proc/thread-self/ns/net")
	if err != nil {
		runtime.UnlockOSThread()
		return fmt.Errorf("open this thread's namespace: %w", err)
	}
	defer orig.Close()
	target, err := os.Open(netnsDir + "/" + h.NS)
	if err != nil {
		runtime.UnlockOSThread()
		return fmt.Errorf("open namespace of %s: %w", h.Name, err)
	}
	defer target.Close()
	if err := unix.Setns(int(target.Fd()), unix.CLONE_NEWNET); err != nil {
		runtime.UnlockOSThread()
		return fmt.Errorf("enter %s: %w", h.Name, err)
	}
	defer func() {
		// A thread that cannot go back stays locked: it ends with this
		// goroutine instead of serving another in the wrong namespace.
		if unix.Setns(int(orig.Fd()), unix.CLONE_NEWNET) == nil {
			runtime.UnlockOSThread()
		}
	}()
	return fn()
}

// DialContext opens a connection from inside the host; its signature is
// that of net.Dialer.DialContext, for HTTP transports and rest.Config.Dial.
func (h *Host) DialContext(ctx context.Context, network, addr string) (net.Conn, error) {
	var c net.Conn
	err := h.Do(func() (err error) {
		var d net.Dialer
		c, err = d.DialContext(ctx, network, addr)
		return err
	})
	return c, err
}
