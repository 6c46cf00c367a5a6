package web

import (
	"context"
	"crypto"
	"embed"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"maps"
	"net/http"
	"sync"
	"time"

	"github.com/teapot-lb/teapot-lb/api/pki"
)

//go:embed assets
var assets embed.FS

// Defaults of Config.
const (
	DefaultInterval = time.Second
	// refreshTimeout bounds one read of the cluster.
	refreshTimeout = 5 * time.Second
	// maxStreams bounds the concurrent server-sent-event streams.
	maxStreams = 32
)

// Config configures a dashboard Server.
type Config struct {
	// Source is read every Interval.
	Source   Source
	Interval time.Duration
	Logger   *slog.Logger
	// Secure marks the session cookie Secure (the dashboard is served over TLS).
	Secure bool
	// Now is the clock (default time.Now).
	Now func() time.Time
	// TokenKey, when set, is the cluster CA's public key: logins then take
	// a CA-signed dashboard token (`teapot-lb dashboard token`) instead of
	// the one-time token, and any Host name is answered (serve --web-addr).
	TokenKey crypto.PublicKey
}

// Server serves the dashboard: the embedded pages, the JSON snapshot, the
// timeline and a server-sent-event stream of both. Every route but the
// login needs a session, which the one-time login token opens.
type Server struct {
	cfg  Config
	log  *slog.Logger
	auth *auth

	mu     sync.Mutex
	snap   *Snapshot
	events []Event
	seq    uint64
	subs   map[chan struct{}]bool
	// cursor is the newest host event seen per host.
	cursor map[string]uint64
	// lastHeld is the last set of hosts that held each VIP.
	lastHeld map[string][]string
	// charts are the live charts, from the hosts' traffic counters.
	charts *charter
	// fresh is when each host last answered.
	fresh freshness
	// sent is snap as the stream sends it (streamed), and sentJSON its
	// encoding, made once per read whatever the number of streams.
	sent     *Snapshot
	sentJSON json.RawMessage
	// histCache holds recent answers of /api/history.
	histCache historyCache
	// dnsCache holds the hosts' last answers of /api/dns per tenant.
	dnsCache dnsCache
}

// New returns a Server reading cfg.Source. Call Run to start reading.
func New(cfg Config) (*Server, error) {
	if cfg.Source == nil {
		return nil, errors.New("web: no source")
	}
	if cfg.Interval <= 0 {
		cfg.Interval = DefaultInterval
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	a, err := newAuth(cfg.Now, cfg.Secure)
	if err != nil {
		return nil, fmt.Errorf("login token: %w", err)
	}
	if cfg.TokenKey != nil {
		a.token = ""
		a.verify = func(tok string, now time.Time) (time.Time, string, error) {
			c, err := pki.VerifyDashboardToken(cfg.TokenKey, tok, now)
			return c.ExpiresAt(), c.ID, err
		}
	}
	return &Server{
		cfg: cfg, log: cfg.Logger.With("component", "web"), auth: a,
		subs: map[chan struct{}]bool{}, cursor: map[string]uint64{}, lastHeld: map[string][]string{},
		charts: newCharter(chartPoints), fresh: freshness{seen: map[string]time.Time{}},
	}, nil
}

// LoginToken is the one-time token that opens a session ("" once used).
func (s *Server) LoginToken() string { return s.auth.loginToken() }

// Run reads the cluster every Interval until ctx ends.
func (s *Server) Run(ctx context.Context) {
	t := time.NewTicker(s.cfg.Interval)
	defer t.Stop()
	for {
		s.refresh(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// refresh reads one snapshot, records what changed and wakes the streams.
func (s *Server) refresh(ctx context.Context) {
	// A read that takes longer than the page waits before calling data
	// stale is cut short: no answer in time is the answer.
	ctx, cancel := context.WithTimeout(ctx, min(refreshTimeout, staleAfter(s.cfg.Interval)))
	defer cancel()
	s.mu.Lock()
	cursor := maps.Clone(s.cursor)
	s.mu.Unlock()
	snap, obs := gather(ctx, s.cfg.Source, s.cfg.Now(), cursor)
	s.mu.Lock()
	// Hosts that did not answer keep their last data, marked with its age.
	s.fresh.settle(s.snap, snap, obs, s.cfg.Interval)
	if obs != nil {
		s.charts.add(obs, snap.Time)
	}
	events := diff(s.snap, snap, s.lastHeld)
	for _, h := range obs.GetHosts() {
		if !h.GetReachable() {
			continue
		}
		events = append(events, hostEvents(h, s.cursor[h.GetNodeId()])...)
		s.cursor[h.GetNodeId()] = max(s.cursor[h.GetNodeId()], h.GetLastEvent())
	}
	for _, e := range events {
		s.seq++
		e.Seq = s.seq
		s.events = append(s.events, e)
		s.log.Debug("dashboard event", "kind", e.Kind, "subject", e.Subject, "message", e.Message)
	}
	if n := len(s.events) - maxEvents; n > 0 {
		s.events = append([]Event(nil), s.events[n:]...)
	}
	s.snap = snap
	s.mu.Unlock()
	// The stream's snapshot, encoded outside the lock (the next read
	// copies from snap, never changes it).
	sent := streamed(snap)
	data, err := json.Marshal(sent)
	if err != nil {
		s.log.Error("encode dashboard snapshot", "err", err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.snap != snap || err != nil {
		return
	}
	s.sent, s.sentJSON = sent, data
	for c := range s.subs {
		select {
		case c <- struct{}{}:
		default:
		}
	}
}

// view is what a browser receives: the snapshot and the timeline after
// a sequence number.
type view struct {
	Snapshot *Snapshot `json:"snapshot"`
	Events   []Event   `json:"events"`
	// Charts has the chart points after the stream's last one (all of
	// them in the first view of a stream).
	Charts *Charts `json:"charts"`
}

// sentView is a view as the stream and /api/snapshot send it: the
// snapshot as streamed, encoded once per read.
type sentView struct {
	Snapshot json.RawMessage `json:"snapshot"`
	Events   []Event         `json:"events"`
	Charts   *Charts         `json:"charts"`
}

// sentAfter is the view to send after a sequence number and chart time
// (false: no read so far).
func (s *Server) sentAfter(after uint64, chartsAfter time.Time) (sentView, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	v := s.currentLocked(after, chartsAfter)
	return sentView{Snapshot: s.sentJSON, Events: v.Events, Charts: v.Charts}, s.sentJSON != nil
}

func (s *Server) current(after uint64, chartsAfter time.Time) view {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.currentLocked(after, chartsAfter)
}

func (s *Server) currentLocked(after uint64, chartsAfter time.Time) view {
	v := view{Snapshot: s.snap, Events: []Event{}, Charts: s.charts.since(chartsAfter)}
	for _, e := range s.events {
		if e.Seq > after {
			v.Events = append(v.Events, e)
		}
	}
	return v
}

// Handler returns the dashboard's HTTP handler.
func (s *Server) Handler() http.Handler {
	static, err := fs.Sub(assets, "assets")
	if err != nil {
		panic(err) // the embedded tree is fixed at build time
	}
	files := http.FileServerFS(static)
	mux := http.NewServeMux()
	mux.HandleFunc("GET /login", s.login)
	if s.cfg.TokenKey != nil {
		mux.HandleFunc("POST /login", s.login)
	}
	mux.Handle("GET /static/", s.private(http.StripPrefix("/static/", noStore(files))))
	mux.Handle("GET /{$}", s.private(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		serveFile(w, static, "index.html")
	})))
	mux.Handle("GET /api/snapshot", s.private(http.HandlerFunc(s.snapshot)))
	mux.Handle("GET /api/stream", s.private(http.HandlerFunc(s.stream)))
	mux.Handle("GET /api/history", s.private(http.HandlerFunc(s.history)))
	mux.Handle("GET /api/object", s.private(http.HandlerFunc(s.object)))
	mux.Handle("GET /api/members", s.private(http.HandlerFunc(s.members)))
	mux.Handle("GET /api/dns", s.private(http.HandlerFunc(s.dns)))
	mux.Handle("GET /api/bgp", s.private(http.HandlerFunc(s.bgp)))
	return securityHeaders(mux, s.cfg.TokenKey == nil)
}

func serveFile(w http.ResponseWriter, fsys fs.FS, name string) {
	data, err := fs.ReadFile(fsys, name)
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	w.Write(data)
}

func noStore(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "no-store")
		h.ServeHTTP(w, r)
	})
}

// securityHeaders refuses requests for a host name other than loopback
// and sets headers that keep the pages from being framed or loading
// anything from elsewhere.
func securityHeaders(h http.Handler, loopbackOnly bool) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if loopbackOnly && !localHost(r.Host) {
			http.Error(w, "the dashboard answers only for 127.0.0.1, [::1] or localhost", http.StatusMisdirectedRequest)
			return
		}
		hd := w.Header()
		hd.Set("Content-Security-Policy", "default-src 'self'; img-src 'self' data:; frame-ancestors 'none'; base-uri 'none'; form-action 'none'")
		hd.Set("X-Content-Type-Options", "nosniff")
		hd.Set("Referrer-Policy", "no-referrer")
		h.ServeHTTP(w, r)
	})
}

// private answers 401 without a session. The page itself gets a short
// text saying how to log in.
func (s *Server) private(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !s.auth.valid(r) {
			w.Header().Set("Cache-Control", "no-store")
			if s.cfg.TokenKey != nil {
				http.Error(w, "not logged in: get a token with `teapot-lb dashboard token --ttl 1h` and open /login", http.StatusUnauthorized)
				return
			}
			http.Error(w, "not logged in: open the login URL that `teapot-lb dashboard` printed (a login URL works once; restart the command for a new one)", http.StatusUnauthorized)
			return
		}
		h.ServeHTTP(w, r)
	})
}

// login exchanges ?token= for a session cookie and redirects to the
// dashboard, so the token does not stay in the address bar or history.
func (s *Server) login(w http.ResponseWriter, r *http.Request) {
	tok := r.URL.Query().Get("token")
	if r.Method == http.MethodPost {
		r.Body = http.MaxBytesReader(w, r.Body, 4096)
		tok = r.PostFormValue("token")
	}
	w.Header().Set("Cache-Control", "no-store")
	if tok == "" && s.cfg.TokenKey != nil {
		if s.auth.valid(r) {
			http.Redirect(w, r, "/", http.StatusSeeOther)
			return
		}
		loginPage(w)
		return
	}
	id := s.auth.login(tok)
	if id == "" {
		if s.auth.valid(r) {
			http.Redirect(w, r, "/", http.StatusSeeOther)
			return
		}
		s.log.Warn("dashboard login refused", "remote", r.RemoteAddr)
		if s.cfg.TokenKey != nil {
			http.Error(w, "login refused: the token is malformed, expired, not a dashboard-read token or not signed by this cluster's CA; get a new one with `teapot-lb dashboard token`", http.StatusForbidden)
			return
		}
		http.Error(w, "login refused: the token is wrong or was already used; restart `teapot-lb dashboard` for a new login URL", http.StatusForbidden)
		return
	}
	s.log.Info("dashboard login", "remote", r.RemoteAddr)
	http.SetCookie(w, s.auth.cookie(id))
	http.Redirect(w, r, "/", http.StatusSeeOther)
}

func (s *Server) snapshot(w http.ResponseWriter, r *http.Request) {
	v, ok := s.sentAfter(0, time.Time{})
	if !ok {
		http.Error(w, "no snapshot yet: the cluster was not read so far", http.StatusServiceUnavailable)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	json.NewEncoder(w).Encode(v)
}

// stream sends the snapshot and new timeline events as server-sent
// events, one "view" event per refresh.
func (s *Server) stream(w http.ResponseWriter, r *http.Request) {
	fl, ok := w.(http.Flusher)
	if !ok {
		http.Error(w, "streaming unsupported", http.StatusInternalServerError)
		return
	}
	wake := make(chan struct{}, 1)
	s.mu.Lock()
	if len(s.subs) >= maxStreams {
		s.mu.Unlock()
		http.Error(w, fmt.Sprintf("too many dashboard streams (at most %d); close other tabs", maxStreams), http.StatusTooManyRequests)
		return
	}
	s.subs[wake] = true
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		delete(s.subs, wake)
		s.mu.Unlock()
	}()
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-store")
	wake <- struct{}{}
	var after uint64
	var chartsAfter time.Time
	keepAlive := time.NewTicker(15 * time.Second)
	defer keepAlive.Stop()
	for {
		select {
		case <-r.Context().Done():
			return
		case <-keepAlive.C:
			fmt.Fprint(w, ": keep-alive\n\n")
			fl.Flush()
		case <-wake:
			v, ok := s.sentAfter(after, chartsAfter)
			if !ok {
				continue
			}
			chartsAfter = v.Charts.latest(chartsAfter)
			if n := len(v.Events); n > 0 {
				after = v.Events[n-1].Seq
			}
			data, err := json.Marshal(v)
			if err != nil {
				s.log.Error("encode dashboard view", "err", err)
				return
			}
			if _, err := fmt.Fprintf(w, "event: view\ndata: %s\n\n", data); err != nil {
				return
			}
			fl.Flush()
		}
	}
}
