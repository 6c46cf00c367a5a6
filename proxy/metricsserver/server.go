// Package metricsserver serves an LB host's Prometheus metrics over plain
// HTTP at /metrics, in the Prometheus text format. The collectors live
// with the parts they describe; this package gathers them into one
// registry with the Go runtime and process collectors, and lets the large
// ones (TextWriter, with api/promtext) write their series straight to the
// response. On a
// loopback address it also serves the Go runtime's
// profiles at /debug/pprof/ (CPU, heap, allocations, goroutines, threads,
// and the execution trace), for operators on the host; on any other
// address it does not.
package metricsserver

import (
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/common/expfmt"
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

// TextWriter is a collector too large to gather: a scrape writes its
// series straight to the response in the text format, after the
// registry's, instead of building a metric object per series first.
type TextWriter interface {
	prometheus.Collector
	WriteText(io.Writer) error
}

// maxScrapes bounds the scrapes served at once; more are answered 503.
const maxScrapes = 4

// metricsHandler serves a registry and the TextWriters in the Prometheus
// text format (version 0.0.4), gzipped when the scraper accepts it.
type metricsHandler struct {
	g    prometheus.Gatherer
	log  *slog.Logger
	busy chan struct{}

	mu   sync.Mutex
	text []TextWriter
}

func newMetricsHandler(g prometheus.Gatherer, log *slog.Logger) *metricsHandler {
	return &metricsHandler{g: g, log: log, busy: make(chan struct{}, maxScrapes)}
}

func (h *metricsHandler) add(t TextWriter) {
	h.mu.Lock()
	h.text = append(h.text, t)
	h.mu.Unlock()
}

func (h *metricsHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	select {
	case h.busy <- struct{}{}:
		defer func() { <-h.busy }()
	default:
		http.Error(w, fmt.Sprintf("%d scrapes are being served; try again", maxScrapes), http.StatusServiceUnavailable)
		return
	}
	mfs, err := h.g.Gather()
	if err != nil {
		// What could be gathered is served, as promhttp's ContinueOnError.
		h.log.Warn("gather metrics", "err", err)
	}
	h.mu.Lock()
	text := slices.Clone(h.text)
	h.mu.Unlock()

	format := expfmt.NewFormat(expfmt.TypeTextPlain)
	w.Header().Set("Content-Type", string(format))
	var out io.Writer = w
	if gzipAccepted(r.Header.Get("Accept-Encoding")) {
		w.Header().Set("Content-Encoding", "gzip")
		w.Header().Add("Vary", "Accept-Encoding")
		gz := gzip.NewWriter(w)
		defer gz.Close()
		out = gz
	}
	enc := expfmt.NewEncoder(out, format)
	for _, mf := range mfs {
		if err := enc.Encode(mf); err != nil {
			h.log.Warn("write metrics", "err", err)
			return
		}
	}
	for _, t := range text {
		if err := t.WriteText(out); err != nil {
			h.log.Warn("write metrics", "err", err)
			return
		}
	}
}

// gzipAccepted reports whether an Accept-Encoding header lists gzip
// without q=0.
func gzipAccepted(header string) bool {
	for part := range strings.SplitSeq(header, ",") {
		coding, params, _ := strings.Cut(strings.TrimSpace(part), ";")
		if !strings.EqualFold(strings.TrimSpace(coding), "gzip") {
			continue
		}
		q := strings.ReplaceAll(params, " ", "")
		return q != "q=0" && q != "q=0.0" && q != "q=0.00" && q != "q=0.000"
	}
	return false
}

// describeOnly stands for a TextWriter in the registry: its descriptors
// are registered, so that a name is never exported twice, and it collects
// nothing there.
type describeOnly struct{ c prometheus.Collector }

func (d describeOnly) Describe(ch chan<- *prometheus.Desc) { d.c.Describe(ch) }
func (describeOnly) Collect(chan<- prometheus.Metric)      {}

type slogPrinter struct{ log *slog.Logger }

func (p slogPrinter) Println(v ...any) { p.log.Warn("gather metrics", "err", fmt.Sprint(v...)) }

// Server serves /metrics on one address.
type Server struct {
	ln      net.Listener
	srv     *http.Server
	log     *slog.Logger
	reg     *prometheus.Registry
	metrics *metricsHandler
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
	mh := newMetricsHandler(reg, log)
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", mh)
	var h http.Handler = mux
	// A response has 30 s; a profile's runs for its duration first.
	writeTimeout := 30 * time.Second
	if ap, err := netip.ParseAddrPort(ln.Addr().String()); err == nil && ap.Addr().IsLoopback() {
		h = withProfiles(h)
		writeTimeout += ProfileMaxSeconds * time.Second
	}
	return &Server{ln: ln, log: log, reg: reg, metrics: mh, srv: &http.Server{
		Handler:           h,
		ReadHeaderTimeout: 5 * time.Second,
		ReadTimeout:       10 * time.Second,
		WriteTimeout:      writeTimeout,
		IdleTimeout:       time.Minute,
		MaxHeaderBytes:    16 << 10,
	}}, nil
}

// Register adds collectors; a TextWriter's series are written by it at
// each scrape.
func (s *Server) Register(cs ...prometheus.Collector) error {
	for _, c := range cs {
		t, isText := c.(TextWriter)
		if isText {
			c = describeOnly{t}
		}
		if err := s.reg.Register(c); err != nil {
			return fmt.Errorf("register metrics: %w", err)
		}
		if isText {
			s.metrics.add(t)
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
