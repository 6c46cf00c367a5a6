// Package metricsserver serves an LB host's Prometheus metrics over plain
// HTTP at /metrics. The collectors live with the parts they describe; this
// package gathers them into one registry with the Go runtime and process
// collectors. On a loopback address it also serves the Go runtime's
// profiles at /debug/pprof/ (CPU, heap, allocations, goroutines, threads,
// and the execution trace), for operators on the host; on any other
// address it does not.
package metricsserver

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"net/netip"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// NewRegistry returns a registry of the collectors with the Go runtime
// and process collectors.
func NewRegistry(cs ...prometheus.Collector) (*prometheus.Registry, error) {
	reg := prometheus.NewRegistry()
	cs = append(cs, collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	for _, c := range cs {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("register metrics: %w", err)
		}
	}
	return reg, nil
}

// Handler serves g's metrics in the Prometheus text or OpenMetrics format.
func Handler(g prometheus.Gatherer, log *slog.Logger) http.Handler {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(g, promhttp.HandlerOpts{
		ErrorLog:            slogPrinter{log},
		ErrorHandling:       promhttp.ContinueOnError,
		MaxRequestsInFlight: 4,
		Timeout:             10 * time.Second,
	}))
	return mux
}

type slogPrinter struct{ log *slog.Logger }

func (p slogPrinter) Println(v ...any) { p.log.Warn("gather metrics", "err", fmt.Sprint(v...)) }

// Server serves /metrics on one address.
type Server struct {
	ln  net.Listener
	srv *http.Server
	log *slog.Logger
	reg *prometheus.Registry
}

// Listen binds addr now, so that a busy port is known at start; the
// collectors are added with Register.
func Listen(addr string, log *slog.Logger) (*Server, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	log = log.With("component", "metrics")
	reg, err := NewRegistry()
	if err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	h := Handler(reg, log)
	// A response has 30 s; a profile's runs for its duration first.
	writeTimeout := 30 * time.Second
	if ap, err := netip.ParseAddrPort(ln.Addr().String()); err == nil && ap.Addr().IsLoopback() {
		h = withProfiles(h)
		writeTimeout += ProfileMaxSeconds * time.Second
	}
	return &Server{ln: ln, log: log, reg: reg, srv: &http.Server{
		Handler:           h,
		ReadHeaderTimeout: 5 * time.Second,
		ReadTimeout:       10 * time.Second,
		WriteTimeout:      writeTimeout,
		IdleTimeout:       time.Minute,
		MaxHeaderBytes:    16 << 10,
	}}, nil
}

// Register adds collectors.
func (s *Server) Register(cs ...prometheus.Collector) error {
	for _, c := range cs {
		if err := s.reg.Register(c); err != nil {
			return fmt.Errorf("register metrics: %w", err)
		}
	}
	return nil
}

// Close stops listening (for a serve that fails before Run).
func (s *Server) Close() error { return s.ln.Close() }

// Addr is the address the server listens on.
func (s *Server) Addr() net.Addr { return s.ln.Addr() }

// Run serves until ctx ends.
func (s *Server) Run(ctx context.Context) {
	go func() {
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_ = s.srv.Shutdown(sctx)
	}()
	s.log.Info("serving metrics", "addr", s.ln.Addr().String(), "path", "/metrics")
	if err := s.srv.Serve(s.ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
		s.log.Warn("metrics server stopped", "err", err)
	}
}

// ProfileMaxSeconds bounds the duration of a CPU profile, an execution
// trace or a delta profile asked for with ?seconds=N
// (/debug/pprof/profile, /debug/pprof/trace, /debug/pprof/heap and the
// other named profiles).
const ProfileMaxSeconds = 120

// withProfiles serves next plus the runtime's profiles under
// /debug/pprof/. Profiles that last (?seconds=N) run one at a time (the
// runtime allows one CPU profile per process anyway); a second request is
// answered 429. A snapshot of a named profile (no seconds) is not limited.
func withProfiles(next http.Handler) http.Handler {
	mux := http.NewServeMux()
	mux.Handle("/", next)
	busy := make(chan struct{}, 1)
	one := func(h http.HandlerFunc) http.HandlerFunc {
		return func(w http.ResponseWriter, r *http.Request) {
			if s := r.URL.Query().Get("seconds"); s != "" {
				if n, err := strconv.Atoi(s); err != nil || n < 1 || n > ProfileMaxSeconds {
					http.Error(w, fmt.Sprintf("seconds: give a whole number from 1 to %d", ProfileMaxSeconds), http.StatusBadRequest)
					return
				}
			}
			select {
			case busy <- struct{}{}:
				defer func() { <-busy }()
			default:
				http.Error(w, "a profile is already being taken; try again when it ends", http.StatusTooManyRequests)
				return
			}
			h(w, r)
		}
	}
	index := one(pprof.Index)
	mux.HandleFunc("GET /debug/pprof/", func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Query().Has("seconds") {
			index(w, r) // a delta profile of a named profile lasts seconds
			return
		}
		pprof.Index(w, r)
	})
	mux.HandleFunc("GET /debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("GET /debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("GET /debug/pprof/profile", one(pprof.Profile))
	mux.HandleFunc("GET /debug/pprof/trace", one(pprof.Trace))
	return mux
}
