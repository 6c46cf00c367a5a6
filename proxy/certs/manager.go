package certs

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/caddyserver/certmagic"

	"github.com/teapot-lb/teapot-lb/api/observe"
	pb "github.com/teapot-lb/teapot-lb/api/proto/teapotv1"
	"github.com/teapot-lb/teapot-lb/proxy/cpubudget"
)

// Store is what the manager needs of the replicated state: the certificate
// store and writes of Certificate status objects. *consensus.Node
// satisfies it.
type Store interface {
	KV
	Apply(ctx context.Context, req *pb.ApplyRequest, internal bool) (*pb.ApplyResponse, error)
	Delete(ctx context.Context, req *pb.DeleteRequest, internal bool) (*pb.DeleteResponse, error)
}

// Config configures a Manager.
type Config struct {
	Store Store
	// Host is this LB host's id (in lock owners).
	Host string
	// CA is the ACME directory URL; empty takes LetsEncrypt.
	CA string
	// Roots verify the CA's HTTPS endpoint; nil takes the system roots.
	Roots *x509.CertPool
	// Email is the ACME account's contact; optional.
	Email string
	// TicketSecret derives the TLS session ticket keys. Hosts given the
	// same secret resume each other's sessions; nil takes a random one.
	TicketSecret []byte
	// RenewCheckInterval is how often certificates are checked for
	// renewal and reloaded from the store (default 10m);
	// OCSPCheckInterval how often OCSP staples are refreshed (default 1h).
	RenewCheckInterval time.Duration
	OCSPCheckInterval  time.Duration
	// RenewalWindowRatio renews when less than this part of a
	// certificate's lifetime remains (default 1/3).
	RenewalWindowRatio float64
	// LockTTL: see NewStorage.
	LockTTL time.Duration
	Logger  *slog.Logger
	// Events receives certificates obtained and failures to obtain or
	// renew one; nil drops them.
	Events func(*pb.Event)
	// OrdersPerHour bounds the new ACME orders of each tenant on this
	// host (default DefaultOrdersPerHour); failing names back off
	// besides (FirstOrderBackoff, doubling).
	OrdersPerHour int
	// DNSZones are the zones the LB hosts answer (--dns-zones): a wildcard
	// route host in one of them gets an ACME certificate through DNS-01,
	// whose TXT records the hosts' DNS answers from the store
	// (DNS01Prefix); other wildcards are refused.
	DNSZones []string
	// DNS01Wait, when set, returns once this host's DNS answers the TXT
	// record name (lower case, no final dot) with txt; the CA is told to
	// validate only then.
	DNS01Wait func(ctx context.Context, name, txt string) error
	// CPU charges the signatures of full handshakes to the listener's
	// tenant (shared with the health checks' client signatures); nil
	// takes budgets of the defaults.
	CPU *cpubudget.Budgets
}

// Manager obtains, renews, loads and serves certificates. Update gives it
// the state; Run does the work; TLS termination asks it for certificates.
type Manager struct {
	cfg   Config
	log   *slog.Logger
	store *Storage
	iss   *issuer
	cache *certmagic.Cache
	magic *certmagic.Config

	latest atomic.Pointer[desired]
	wake   chan struct{}
	// acme is the current ACME host -> tenant map, read by the HTTP-01
	// handler and handshakes.
	acme     atomic.Pointer[map[string]string]
	failures sync.Map // host -> string: the last failure to obtain or renew
	// uploadHost maps an uploaded certificate's cache tag to one of its
	// names, to find it for clients without SNI.
	uploadHost sync.Map
	// hostless maps the cache tag of an uploaded certificate that names
	// no host to its *tls.Certificate: a listener's default.
	hostless sync.Map

	tls              tlsState
	cpu              *cpubudget.Budgets
	failedHandshakes atomic.Uint64
	issueFailures    atomic.Uint64
	lastHandshakeLog atomic.Int64
	lookups          limiter
	ctx              context.Context
	cancel           context.CancelFunc
	closeOne         sync.Once

	// Owned by Run: the hosts handed to certmagic, with what cancels
	// their work in progress.
	managed  map[string]context.CancelFunc
	uploaded map[string]loaded
	// current is set once the host's state holds every committed write
	// (see Current); until then names are only loaded, never obtained.
	current atomic.Bool
	// preloaded are the names loaded from the store before current.
	preloaded map[string]bool
}

// loaded is an uploaded certificate in the cache.
type loaded struct {
	generation uint64
	hash       string
}

// LoadRoots reads PEM certificates from file into a pool that also holds
// the system roots; no file ("") is nil, the system roots alone.
func LoadRoots(file string) (*x509.CertPool, error) {
	if file == "" {
		return nil, nil
	}
	data, err := os.ReadFile(file)
	if err != nil {
		return nil, fmt.Errorf("read --acme-ca-root: %w", err)
	}
	pool, err := x509.SystemCertPool()
	if err != nil || pool == nil {
		pool = x509.NewCertPool()
	}
	if !pool.AppendCertsFromPEM(data) {
		return nil, fmt.Errorf("--acme-ca-root %s holds no PEM certificate", file)
	}
	return pool, nil
}

// New returns a manager; Run starts its work.
func New(cfg Config) (*Manager, error) {
	if cfg.Store == nil {
		return nil, errors.New("certs: Config.Store is required")
	}
	if cfg.CA == "" {
		cfg.CA = LetsEncrypt
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	log := cfg.Logger.With("component", "certs")
	if cfg.CPU == nil {
		cfg.CPU = cpubudget.New(cpubudget.Options{})
	}
	m := &Manager{
		cpu:       cfg.CPU,
		cfg:       cfg,
		log:       log,
		store:     NewStorage(cfg.Store, cfg.Host, cfg.LockTTL, log),
		wake:      make(chan struct{}, 1),
		managed:   map[string]context.CancelFunc{},
		preloaded: map[string]bool{},
		uploaded:  map[string]loaded{},
		lookups:   newLimiter(50, 100),
	}
	m.ctx, m.cancel = context.WithCancel(context.Background())
	m.iss = newIssuer(cfg.CA, cfg.Email, cfg.Roots, m.store, log)
	m.iss.orders = newOrderLimiter(cfg.OrdersPerHour)
	m.iss.tenantOf = func(host string) string { return (*m.acme.Load())[host] }
	m.iss.dnsWait = cfg.DNS01Wait
	zl := zapLogger(log)
	m.cache = certmagic.NewCache(certmagic.CacheOptions{
		GetConfigForCert:   func(certmagic.Certificate) (*certmagic.Config, error) { return m.magic, nil },
		RenewCheckInterval: cfg.RenewCheckInterval,
		OCSPCheckInterval:  cfg.OCSPCheckInterval,
		Logger:             zl,
	})
	m.magic = certmagic.New(m.cache, certmagic.Config{
		Storage:            m.store,
		Issuers:            []certmagic.Issuer{m.iss},
		KeySource:          certmagic.StandardKeyGenerator{KeyType: certmagic.P256},
		RenewalWindowRatio: cfg.RenewalWindowRatio,
		OnEvent:            m.onEvent,
		DisableARI:         true,
		Logger:             zl,
	})
	empty := map[string]string{}
	m.acme.Store(&empty)
	m.tls.init(cfg.TicketSecret)
	return m, nil
}

// Update hands the manager the full state (all objects). It returns at
// once; Run applies the latest state.
func (m *Manager) Update(objs []*pb.Object) {
	d := computeDesired(objs, m.cfg.DNSZones)
	acme := d.managed
	m.acme.Store(&acme)
	m.latest.Store(d)
	select {
	case m.wake <- struct{}{}:
	default:
	}
}

// statusEvery is how often Run compares the certificates in the cache
// with the Certificate objects.
const statusEvery = 2 * time.Second

// Run manages certificates until ctx ends or Close is called.
func (m *Manager) Run(ctx context.Context) {
	stop := context.AfterFunc(ctx, m.cancel)
	defer stop()
	t := time.NewTicker(statusEvery)
	defer t.Stop()
	go m.awaitCurrent()
	for {
		select {
		case <-m.ctx.Done():
			return
		case <-m.wake:
		case <-t.C:
		}
		m.tls.rotate(time.Now())
		if d := m.latest.Load(); d != nil {
			m.reconcile(d)
		}
	}
}

// Close stops certificate management and releases the locks this host
// holds.
func (m *Manager) Close() {
	m.closeOne.Do(func() {
		m.cancel()
		m.cache.Stop()
		m.store.Close()
	})
}

func (m *Manager) reconcile(d *desired) {
	if !m.preload(d) {
		return
	}
	var add []string
	for h := range d.managed {
		if _, ok := m.managed[h]; !ok {
			add = append(add, h)
		}
	}
	var drop []certmagic.SubjectIssuer
	for h, cancel := range m.managed {
		if _, ok := d.managed[h]; !ok {
			cancel() // an obtain in progress or waiting to retry stops
			delete(m.managed, h)
			m.iss.orders.forget(h)
			m.failures.Delete(h)
			drop = append(drop, certmagic.SubjectIssuer{Subject: h})
		}
	}
	if len(drop) > 0 {
		m.cache.RemoveManaged(drop)
	}
	if len(add) > 0 {
		slices.Sort(add)
		m.log.Info("managing certificates", "names", add)
	}
	for _, h := range add {
		ctx, cancel := context.WithCancel(m.ctx)
		m.managed[h] = cancel
		if err := m.magic.ManageAsync(ctx, []string{h}); err != nil {
			m.log.Error("manage certificate", "name", h, "err", err)
		}
	}
	m.loadUploads(d)
	m.writeStatus(d)
}

// onEvent records failures and successes of certmagic's work.
func (m *Manager) onEvent(_ context.Context, event string, data map[string]any) error {
	name, _ := data["identifier"].(string)
	switch event {
	case "cert_failed":
		m.issueFailures.Add(1)
		err, _ := data["error"].(error)
		if name != "" && err != nil {
			m.failures.Store(name, oneLine(err))
			m.event(observe.EventCertFailed, observe.Warning, name, "certificate for "+name+" not obtained: "+oneLine(err))
		}
	case "cert_obtained":
		if name != "" {
			m.failures.Delete(name)
			m.event(observe.EventCertIssued, observe.Info, name, "certificate for "+name+" obtained")
		}
	case "cached_managed_cert":
		sans, _ := data["sans"].([]string)
		for _, n := range sans {
			m.failures.Delete(n)
		}
	default:
		return nil
	}
	select {
	case m.wake <- struct{}{}:
	default:
	}
	return nil
}

// oneLine flattens an error into one line for last_error.
func oneLine(err error) string {
	s := strings.Join(strings.Fields(err.Error()), " ")
	if len(s) > 1000 {
		s = s[:1000] + "..."
	}
	return s
}

// managedCert returns the managed certificate in the cache for host.
func (m *Manager) managedCert(host string) (certmagic.Certificate, bool) {
	var best certmagic.Certificate
	found := false
	for _, c := range m.cache.AllMatchingCertificates(host) {
		if len(c.Tags) != 0 || c.Leaf == nil || !slices.Contains(c.Names, host) {
			continue
		}
		if !found || c.Leaf.NotAfter.After(best.Leaf.NotAfter) {
			best, found = c, true
		}
	}
	return best, found
}

// HTTPChallengePrefix is the path under which ACME HTTP-01 challenges
// arrive.
const HTTPChallengePrefix = "/.well-known/acme-challenge/"

// IsHTTPChallenge reports whether a request path is an ACME HTTP-01
// challenge: the L7 engine sends such requests on http listeners to
// HTTPChallengeHandler.
func IsHTTPChallenge(path string) bool {
	return strings.HasPrefix(path, HTTPChallengePrefix) && len(path) > len(HTTPChallengePrefix)
}

// Challenge routes the requests of http listeners (proxy.NewHTTP's
// challenge): an ACME HTTP-01 challenge (IsHTTPChallenge) goes to
// HTTPChallengeHandler, any other path gets nil, for the load balancer.
func (m *Manager) Challenge(path string) http.Handler {
	if IsHTTPChallenge(path) {
		return m.HTTPChallengeHandler()
	}
	return nil
}

// HTTPChallengeHandler answers ACME HTTP-01 challenges for the hosts this
// cluster manages, whichever LB host started the order; other requests
// get 404.
func (m *Manager) HTTPChallengeHandler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		token, ok := strings.CutPrefix(r.URL.Path, HTTPChallengePrefix)
		host := strings.ToLower(strings.TrimSuffix(hostOnly(r.Host), "."))
		if !ok || token == "" || (r.Method != http.MethodGet && r.Method != http.MethodHead) {
			http.NotFound(w, r)
			return
		}
		chal, found := m.findChallenge(r.Context(), host)
		if !found || chal.Token != token || chal.Type != "http-01" {
			http.NotFound(w, r)
			return
		}
		w.Header().Set("Content-Type", "text/plain")
		_, _ = w.Write([]byte(chal.KeyAuthorization))
	})
}

// handshakeFailed counts failed handshakes and logs a sample of them: at
// most one line every 10 seconds.
func (m *Manager) handshakeFailed(err error) {
	n := m.failedHandshakes.Add(1)
	now := time.Now().UnixNano()
	last := m.lastHandshakeLog.Load()
	if now-last < int64(10*time.Second) || !m.lastHandshakeLog.CompareAndSwap(last, now) {
		return
	}
	m.log.Debug("TLS handshake failed", "err", err, "failed_total", n)
}

// FailedHandshakes returns how many TLS handshakes failed on this host.
func (m *Manager) FailedHandshakes() uint64 { return m.failedHandshakes.Load() }
