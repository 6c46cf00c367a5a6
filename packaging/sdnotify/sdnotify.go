// Package sdnotify speaks systemd's notify protocol for a Type=notify
// service: READY=1 once the caller says the host serves, WATCHDOG=1 at half
// the unit's WatchdogSec while the caller's liveness check passes, and
// STOPPING=1 on the way out. Outside systemd (no $NOTIFY_SOCKET) it does
// nothing.
package sdnotify

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"strconv"
	"time"
)

// Notifier sends state to the service manager.
type Notifier struct {
	addr     string
	watchdog time.Duration
	log      *slog.Logger
}

// FromEnv returns a Notifier for $NOTIFY_SOCKET and $WATCHDOG_USEC (when
// $WATCHDOG_PID names this process or is unset).
func FromEnv(log *slog.Logger) *Notifier {
	if log == nil {
		log = slog.Default()
	}
	n := &Notifier{addr: os.Getenv("NOTIFY_SOCKET"), log: log.With("component", "systemd")}
	if pid := os.Getenv("WATCHDOG_PID"); pid != "" && pid != strconv.Itoa(os.Getpid()) {
		return n
	}
	if us, err := strconv.ParseInt(os.Getenv("WATCHDOG_USEC"), 10, 64); err == nil && us > 0 {
		n.watchdog = time.Duration(us) * time.Microsecond
	}
	return n
}

// Enabled reports whether a service manager listens.
func (n *Notifier) Enabled() bool { return n != nil && n.addr != "" }

// Watchdog is the unit's WatchdogSec (0 when off).
func (n *Notifier) Watchdog() time.Duration { return n.watchdog }

// Notify sends one state message such as "READY=1\nSTATUS=serving".
func (n *Notifier) Notify(state string) error {
	if !n.Enabled() {
		return nil
	}
	addr := n.addr
	if addr[0] == '@' {
		addr = "\x00" + addr[1:]
	}
	c, err := net.DialUnix("unixgram", nil, &net.UnixAddr{Name: addr, Net: "unixgram"})
	if err != nil {
		return fmt.Errorf("notify socket %s: %w", n.addr, err)
	}
	defer c.Close()
	if _, err := c.Write([]byte(state)); err != nil {
		return fmt.Errorf("notify socket %s: %w", n.addr, err)
	}
	return nil
}

// Run waits for ready to return, sends READY=1 and then pings the
// watchdog while alive passes, until ctx ends, when it sends STOPPING=1.
// A failed liveness check stops the pings so that systemd restarts the
// service.
func (n *Notifier) Run(ctx context.Context, ready func(context.Context) (string, error), alive func() error) {
	status, err := ready(ctx)
	if err != nil {
		if !errors.Is(err, context.Canceled) {
			n.log.Error("not ready", "err", err)
		}
		return
	}
	if err := n.Notify("READY=1\nSTATUS=" + status); err != nil {
		n.log.Warn("tell systemd the host is ready", "err", err)
	}
	var tick <-chan time.Time
	if n.Enabled() && n.watchdog > 0 {
		t := time.NewTicker(n.watchdog / 2)
		defer t.Stop()
		tick = t.C
	}
	for {
		select {
		case <-ctx.Done():
			_ = n.Notify("STOPPING=1")
			return
		case <-tick:
			if err := alive(); err != nil {
				n.log.Error("liveness check failed; withholding the watchdog ping", "err", err)
				continue
			}
			if err := n.Notify("WATCHDOG=1"); err != nil {
				n.log.Warn("watchdog ping", "err", err)
			}
		}
	}
}
