package agent

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"sync/atomic"
	"time"
)

// health is what the probes see: /healthz answers while the process
// serves; /readyz answers 200 once the informers' caches have synced and,
// on the replica that leads, while its stream to the LB cluster is open.
// A standby replica is ready when its caches are warm: it can take over.
type health struct {
	synced  atomic.Bool
	leading atomic.Bool
	// connected is set while a stream has been welcomed by an LB host.
	connected atomic.Bool
}

// ready reports whether the replica is ready, and why not.
func (h *health) ready() (bool, string) {
	switch {
	case !h.synced.Load():
		return false, "informers' caches not synced"
	case h.leading.Load() && !h.connected.Load():
		return false, "leading, but not connected to the LB cluster"
	case h.leading.Load():
		return true, "leading, connected to the LB cluster"
	default:
		return true, "standby, caches synced"
	}
}

// ServeHTTP serves /healthz and /readyz.
func (h *health) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	switch r.URL.Path {
	case "/healthz", "/livez":
		_, _ = fmt.Fprintln(w, "ok")
	case "/readyz":
		ok, why := h.ready()
		if !ok {
			w.WriteHeader(http.StatusServiceUnavailable)
		}
		_, _ = fmt.Fprintln(w, why)
	default:
		http.NotFound(w, r)
	}
}

// serveHealth listens on addr and serves the probes until ctx ends.
func (a *Agent) serveHealth(ctx context.Context, ln net.Listener) error {
	srv := &http.Server{
		Handler:           &a.health,
		ReadHeaderTimeout: 5 * time.Second,
		ReadTimeout:       10 * time.Second,
		WriteTimeout:      10 * time.Second,
		IdleTimeout:       60 * time.Second,
		MaxHeaderBytes:    8 << 10,
	}
	go func() {
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
	}()
	if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("health endpoint: %w", err)
	}
	return nil
}

// Ready reports whether the agent would answer /readyz with 200.
func (a *Agent) Ready() bool {
	ok, _ := a.health.ready()
	return ok
}
