package proxy

import (
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net/netip"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/teapot-lb/teapot-lb/api/observe"
	pb "github.com/teapot-lb/teapot-lb/api/proto/teapotv1"
	"github.com/teapot-lb/teapot-lb/proxy/cpubudget"
	"github.com/teapot-lb/teapot-lb/proxy/health"
	"github.com/teapot-lb/teapot-lb/proxy/internal/pmap"
	"github.com/teapot-lb/teapot-lb/proxy/internal/splice"
	"github.com/teapot-lb/teapot-lb/proxy/internal/uring"
	"github.com/teapot-lb/teapot-lb/proxy/snapshot"
	"github.com/teapot-lb/teapot-lb/proxy/steer"
)

// Errors of the proxy.
var (
	// ErrNoChanges: Update found nothing to change.
	ErrNoChanges = errors.New("proxy: no changes")
	// ErrClosed: the proxy is closed.
	ErrClosed = errors.New("proxy: closed")
	// ErrNoState: ApplyChange before the first Update.
	ErrNoState = errors.New("proxy: no state to apply a change to; call Update with the whole state first")
)

// Problem is something wrong with one field of a load balancer.
type Problem = snapshot.Problem

// Limits are the data plane's defaults and bounds; zero fields take the
// defaults noted.
type Limits struct {
	// Defaults fill what load balancers leave unset (connect timeout 5s,
	// idle timeouts tcp 1h, http 60s, udp 30s, 65536 connections per TCP
	// listener and flows per UDP listener, health checks every 5s with a
	// 2s timeout, rise 2, fall 3).
	snapshot.Defaults
	// MaxConnectionsPerTenant bounds a tenant's client connections and
	// UDP flows on this host across its listeners, unless the tenant's
	// quotas.connections says otherwise (0: half of
	// MaxDescriptorsPerTenant).
	MaxConnectionsPerTenant int
	// MaxDescriptorsPerTenant bounds the descriptors a tenant's
	// connections hold on this host: each client connection, UDP flow and
	// member connection (idle pooled ones included) holds one. A tenant's
	// quotas.connections makes it twice that quota. 0: twice
	// MaxConnectionsPerTenant when that is set, else derived from the
	// descriptor limit (see DeriveBudgets).
	MaxDescriptorsPerTenant int
	// MaxHostConnections bounds the client connections and UDP flows of
	// every tenant together (0: half of MaxHostDescriptors).
	MaxHostConnections int
	// MaxHostDescriptors bounds the descriptors of every tenant's
	// connections together, so that the admin API, Raft and health checks
	// keep theirs (0: twice MaxHostConnections when that is set, else
	// derived from the descriptor limit).
	MaxHostDescriptors int
	// H3WindowGrowthPerTenant bounds what one tenant's QUIC connections
	// may grow their receive windows by, together (0:
	// MaxTenantH3WindowGrowth).
	H3WindowGrowthPerTenant int64
	// SplicePipes bounds the pipes TCP and TLS passthrough connections
	// splice through, two descriptors each, held only while bytes move (0:
	// derived from the descriptor limit; negative: none, always copy).
	SplicePipes int
	// ConnectAttempts bounds the members tried for one connection
	// (default 3).
	ConnectAttempts int
	// EjectAfter consecutive connect failures eject a member for EjectFor
	// (default 3 and 5s), doubling while it keeps failing up to
	// MaxEjectFor (default 1m).
	EjectAfter  int
	EjectFor    time.Duration
	MaxEjectFor time.Duration
}

// Config configures a Proxy.
type Config struct {
	Logger *slog.Logger
	// Attachments, when set, dials the members of attached tenants from
	// their namespaces (see Attachments).
	Attachments Attachments
	// ClientSource, when set, is the host's policy routing for pools whose
	// member connections are made from the client's own address
	// (pools.*.clientSource); without it their connections are refused.
	ClientSource ClientSource
	// Metrics receives the counters; nil records nothing.
	Metrics Metrics
	// DrainTimeout is how long connections of a removed listener (or of a
	// load balancer that lost its listener) keep running before they are
	// closed, and how long Close waits (default 30s).
	DrainTimeout time.Duration
	// HTTP serves the connections of http and https listeners. Without it
	// those listeners are not opened and report a problem.
	HTTP   ConnHandler
	Limits Limits
	// Events receives the data plane's events (a listener that cannot be
	// opened or opens again, a member going down or up); nil drops them.
	Events func(*pb.Event)
	// Observed receives the data plane's observed state (see Observed);
	// nil: the proxy keeps a plane of its own.
	Observed *observe.Plane
	// BindRetry is the first delay before a listener that could not be
	// opened is tried again; it doubles up to MaxBindRetry (defaults 1s
	// and 30s).
	BindRetry    time.Duration
	MaxBindRetry time.Duration
	// H3ConnIDRate and H3ConnIDBurst, H3ResetRate and H3ResetBurst,
	// H3EarlyRate and H3EarlyBurst bound each tenant's QUIC connection
	// IDs, stateless resets and 0-RTT connections on this host (per
	// second, and at once; zero: H3ConnIDRate and so on).
	H3ConnIDRate, H3ConnIDBurst float64
	H3ResetRate, H3ResetBurst   float64
	H3EarlyRate, H3EarlyBurst   float64
	// Steer, when set, steers the addresses of TCP listeners to a
	// socket per tenant and address family instead of opening a socket
	// per listener (see steered.go). The caller opens and closes it.
	Steer *steer.Steer
	// CPU is the tenants' budgets of signature CPU, charged by the
	// client signatures of their HTTPS health checks (and, given to the
	// certificate manager too, by their listeners' handshakes); nil takes
	// budgets of the defaults. Its host budgets (quotas.cpuMillicores)
	// count every tenant's requests, connections, datagrams and bytes
	// and hold a tenant in debt where they enter, once its accountant
	// runs (Budgets.Run); nil counts and holds nothing.
	CPU *cpubudget.Budgets
	// ClientCertificate returns a tenant's uploaded certificate with its
	// key (the certificate manager's Uploaded), for pools that present
	// one to their members; nil: such pools fail their TLS handshakes.
	ClientCertificate func(tenant, name string) *tls.Certificate
	// DataPath is how TCP and TLS passthrough connections move bytes:
	// DataPathIOURing starts the io_uring relay (ChooseDataPath says
	// whether it can), DataPathAuto takes it where ChooseDataPath does;
	// epoll and "" take epoll.
	DataPath DataPath
}

// DefaultDrainTimeout is used when Config.DrainTimeout is zero.
const DefaultDrainTimeout = 30 * time.Second

// Proxy is the data plane of one LB host.
type Proxy struct {
	cfg     Config
	log     *slog.Logger
	metrics Metrics
	health  *health.Registry

	// current is what each new connection reads.
	current atomic.Pointer[served]

	mu      sync.Mutex // serializes Update and Close
	snap    *snapshot.Snapshot
	sockets map[snapshot.Key]*socket
	// steering is nil without Config.Steer.
	steering *steering
	missing  int // listeners that should be open but are not
	// failed holds the listeners that could not be opened: why, since when.
	failed map[snapshot.Key]bindFailure
	retry  retryState
	// failedAnew says a listener failed to open that was not failing;
	// binds counts the attempts to open a listener.
	failedAnew bool
	binds      int
	closed     bool
	// touched are the load balancers whose status the last apply set.
	touched []string
	// stages times the change being applied, for its log line.
	stages stageTimes

	statusMu sync.Mutex
	status   *pmap.Map[string, []Problem]

	tenants sync.Map // tenant name -> *tenantBudget
	// regexBudgets: tenant name -> *regexBudget (regexbudget.go).
	regexBudgets sync.Map
	// rateTables: tenant name -> *ratelimit.Table (ratelimits.go).
	rateTables sync.Map
	// rateShareKey is set once the host shares its rate-limit keys with
	// its peers (ShareRateKeys): the header values' hash key.
	rateShareKey atomic.Pointer[[16]byte]
	// wafBudgets: tenant name -> *wafBudget (wafroute.go).
	wafBudgets sync.Map
	// steeredDrops: tenant name -> *steeredDrops (steered_drops.go).
	steeredDrops sync.Map
	// clientSourceErrs: clientSourceKey -> why its pools could not dial
	// from clients' addresses last (clientsource.go).
	clientSourceErrs sync.Map
	hostConns        atomic.Int64
	hostFDs          atomic.Int64
	pipes            *splice.Pool
	// relay is the io_uring relay (nil on epoll; datapath.go).
	relay *uring.Relay
	wg    sync.WaitGroup

	handover handoverState
	// h3failed: listener key -> why its HTTP/3 port is not served; the
	// retry timer tries these again with the TCP listeners that failed.
	h3mu     sync.Mutex
	h3failed map[snapshot.Key]string
	// h3limits: tenant -> *h3Limits, its QUIC connection IDs and
	// stateless resets.
	h3limits sync.Map
	// h3up says, by socket key, whether its HTTP/3 port is served
	// (guarded by mu; the flags are read per connection).
	h3up map[snapshot.Key]*atomic.Bool

	// recovering holds the load balancers without a healthy member (zero
	// time) or recovering from it (since when), for memberReadiness.
	recoverMu  sync.Mutex
	recovering map[string]time.Time
	// passiveStop ends watchPassive.
	passiveStop chan struct{}
	// plane is the observed state publish writes, one publish at a time.
	plane     *observe.Plane
	publishMu sync.Mutex
}

// Pipes returns the host's splice pipe pool (Limits.SplicePipes), for the
// L7 engine's tunnels (l7.Server.SetPipes).
func (p *Proxy) Pipes() *splice.Pool { return p.pipes }

// New returns a proxy serving nothing; Update gives it the state.
func New(cfg Config) *Proxy {
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Metrics == nil {
		cfg.Metrics = nopMetrics{}
	}
	if cfg.DrainTimeout <= 0 {
		cfg.DrainTimeout = DefaultDrainTimeout
	}
	cfg.Limits.Defaults = cfg.Limits.Defaults.WithDefaults()
	if cfg.BindRetry <= 0 {
		cfg.BindRetry = DefaultBindRetry
	}
	if cfg.MaxBindRetry <= 0 {
		cfg.MaxBindRetry = DefaultMaxBindRetry
	}
	cfg.MaxBindRetry = max(cfg.MaxBindRetry, cfg.BindRetry)
	for _, d := range []struct {
		v   *float64
		def float64
	}{{&cfg.H3ConnIDRate, H3ConnIDRate}, {&cfg.H3ConnIDBurst, H3ConnIDBurst}, {&cfg.H3ResetRate, H3ResetRate}, {&cfg.H3ResetBurst, H3ResetBurst},
		{&cfg.H3EarlyRate, H3EarlyRate}, {&cfg.H3EarlyBurst, H3EarlyBurst}} {
		if *d.v <= 0 {
			*d.v = d.def
		}
	}
	if cfg.Limits.ConnectAttempts <= 0 {
		cfg.Limits.ConnectAttempts = 3
	}
	cfg.Limits = cfg.Limits.withBudgets(DeriveBudgets(DescriptorLimit()))
	log := cfg.Logger.With("component", "proxy")
	p := &Proxy{
		cfg:     cfg,
		log:     log,
		metrics: cfg.Metrics,
		sockets: map[snapshot.Key]*socket{},
		failed:  map[snapshot.Key]bindFailure{},
		status:  pmap.New[string, []Problem](pmap.String),
		pipes:   splice.NewPool(cfg.Limits.SplicePipes),
		plane:   cfg.Observed,
	}
	if p.plane == nil {
		p.plane = observe.NewPlane()
	}
	p.startRelay()
	if cfg.Steer != nil {
		p.steering = &steering{s: cfg.Steer, shared: map[sharedKey]*sharedSocket{},
			udp: map[udpSharedKey]*udpShared{}, udpDests: map[netip.AddrPort]*udpDest{}}
	}
	p.health = health.NewRegistry(health.Options{
		Logger:      log,
		OnChange:    p.memberChanged,
		Owners:      p.memberOwners,
		EjectAfter:  cfg.Limits.EjectAfter,
		EjectFor:    cfg.Limits.EjectFor,
		MaxEjectFor: cfg.Limits.MaxEjectFor,
		CPU:         cfg.CPU,
		Dial:        p.healthDial(),
	})
	p.current.Store(emptyServed())
	p.passiveStop = make(chan struct{})
	p.wg.Go(func() { p.watchPassive(p.passiveStop) })
	return p
}

// Update makes objs, the full desired state (all LoadBalancers, Tenants
// and VIPPools), the proxy's configuration. It compiles off the hot path,
// opens the new listeners, swaps the snapshot that new connections read,
// and then closes the listeners no longer wanted (their connections drain
// for DrainTimeout). Listeners that remain keep their sockets and
// connections. It returns ErrNoChanges when nothing changed; every
// listener that failed to open earlier is retried (ApplyChange retries
// only those it changes), and in between on a timer with backoff
// (BindRetry, doubling up to MaxBindRetry).
func (p *Proxy) Update(objs []*pb.Object, revision uint64) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return ErrClosed
	}
	s := snapshot.Compile(objs, revision, p.cfg.Limits.Defaults, p.snap)
	if s == p.snap && p.missing == 0 {
		return ErrNoChanges
	}
	applied := p.apply(s, true)
	p.scheduleRetry(true)
	if !applied {
		return ErrNoChanges
	}
	return nil
}

// ApplyChange applies ch, the change of the desired state that led to
// revision, to the state of the last Update or ApplyChange, compiling only
// what ch touches (snapshot.CompileChange). Otherwise it is Update: it
// returns ErrNoChanges when nothing served changed. It also returns the
// load balancers whose status it set again (sorted), for StatusOf and
// ReadinessOf. The first state must come through Update. Of the
// listeners that could not be opened it tries again only those ch
// changes; the retry timer keeps its backoff unless one fails anew.
func (p *Proxy) ApplyChange(ch snapshot.Change, revision uint64) ([]string, error) {
	return p.applyChange(ch, revision, time.Time{})
}

// applyChange is ApplyChange; committed is when this host committed the
// revision (zero: unknown), for the log line.
func (p *Proxy) applyChange(ch snapshot.Change, revision uint64, committed time.Time) ([]string, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return nil, ErrClosed
	}
	if p.snap == nil {
		return nil, ErrNoState
	}
	start := time.Now()
	s := snapshot.CompileChange(p.snap, ch, revision, p.cfg.Limits.Defaults)
	p.stages = stageTimes{committed: committed, start: start, compiled: time.Now()}
	defer func() { p.stages = stageTimes{} }()
	p.touched = nil
	applied := p.apply(s, false)
	p.armRetry()
	if !applied {
		return nil, ErrNoChanges
	}
	return p.touched, nil
}

// apply serves s; it reports false when s serves what was served and no
// listener that was missing could be opened. It works on what differs
// between the snapshot in service and s (pmap.Diff visits only the parts
// the two do not share), so a change costs what it changes. The listeners
// that could not be opened are tried again when they differ, and all of
// them when retryFailed.
func (p *Proxy) apply(s *snapshot.Snapshot, retryFailed bool) bool {
	old := p.current.Load()
	prev := p.snap
	if prev == nil {
		prev = &snapshot.Snapshot{}
	}
	keySet := map[snapshot.Key]bool{}
	// The listen addresses that come and go, for the health registry.
	var listening, leaving []netip.AddrPort
	pmap.Diff(prev.Listeners, s.Listeners, samePtr, func(k snapshot.Key, _ *snapshot.Listener, had bool, _ *snapshot.Listener, has bool) {
		keySet[k] = true
		switch {
		case has && !had:
			listening = append(listening, k.Addr)
		case had && !has && s.Listener(snapshot.Key{Addr: k.Addr, Network: otherNetwork(k.Network), Space: k.Space}) == nil:
			leaving = append(leaving, k.Addr)
		}
	})
	lbs := map[string]bool{}
	pmap.Diff(prev.Problems, s.Problems, slices.Equal, func(lb string, _ []Problem, _ bool, _ []Problem, _ bool) {
		lbs[lb] = true
	})
	changed := len(keySet) > 0 || len(lbs) > 0
	if retryFailed {
		for k := range p.failed {
			keySet[k] = true
		}
		for k := range p.h3Missing() {
			keySet[k] = true
		}
	}
	keys := slices.SortedFunc(maps.Keys(keySet), compareKeys)
	opened := 0
	fresh := map[snapshot.Key]*socket{}
	for _, k := range keys {
		if o := prev.Listener(k); o != nil {
			lbs[o.LB] = true
		}
		l := s.Listener(k)
		if l == nil {
			continue
		}
		lbs[l.LB] = true
		if sock := p.sockets[k]; sock != nil {
			// Open, but its HTTP/3 port may be missing: tried here, so
			// that a retry that opens only that publishes the change.
			if retryFailed && sock.h3 == nil && p.h3Missing()[k] {
				if p.syncH3(sock, l) {
					opened++
				}
			}
			continue
		}
		if !p.opens(l) {
			continue
		}
		p.binds++
		sock, _, err := p.acquireSocket(l)
		if err != nil {
			p.bindFailed(l, err)
			continue
		}
		opened++
		p.bindOK(l)
		fresh[k] = sock
	}
	if !changed && opened == 0 {
		// Nothing served changes; s is kept for the next compile. The
		// first state marks the plane reported, even when it is empty.
		p.snap = s
		p.publish(nil)
		return false
	}
	if p.snap == nil {
		p.health.SetSelf(s.ListenAddrs())
	} else if len(listening) > 0 || len(leaving) > 0 {
		p.health.ChangeSelf(listening, leaving)
	}
	rt, retired := p.build(s, old, keys)
	p.current.Store(rt)
	for lb := range lbs {
		// A changed or deleted load balancer's failures to dial from
		// clients' addresses are reported anew.
		p.forgetClientSource(lb)
	}
	for _, k := range keys {
		sock := p.sockets[k]
		if sock == nil {
			if sock = fresh[k]; sock == nil {
				continue
			}
			p.sockets[k] = sock
		}
		if l := s.Listener(k); l == nil || !p.opens(l) {
			p.releaseSocket(sock)
			delete(p.sockets, k)
		} else {
			if sock.shared != nil {
				if err := p.steerListener(sock, l.Tenant); err != nil {
					// The address stays with the former tenant's socket,
					// whose connections acceptSteered refuses.
					p.log.Warn("listener not moved to its new tenant's shared socket", "tenant", l.Tenant, "lb", l.LB, "listener", k.String(), "error", err)
				}
			}
			if p.steering != nil {
				p.steerUDPFor(sock, l)
			}
			sock.setOwner(l.LB)
			sock.enforceSources(l)
			p.syncH3(sock, l)
		}
	}
	for _, pool := range retired {
		pool.release(p.health)
	}
	p.snap = s
	// A failed listener that is not among keys is unchanged and still
	// missing.
	for _, k := range keys {
		if _, ok := p.failed[k]; !ok {
			continue
		}
		if l := s.Listener(k); l == nil || p.sockets[k] != nil {
			delete(p.failed, k)
		}
	}
	p.missing = len(p.failed) + len(p.h3Missing())
	p.setStatus(s, lbs)
	p.touched = slices.Sorted(maps.Keys(lbs))
	p.publish(p.touched)
	args := []any{"revision", s.Revision, "listeners", len(p.sockets), "missing", p.missing, "opened", opened, "changed", len(keys)}
	p.log.Info("configuration applied", append(args, p.stages.attrs()...)...)
	return true
}

// stageTimes are the moments of a change's way through this host.
type stageTimes struct {
	committed time.Time // the revision committed here (zero: unknown)
	start     time.Time // the data plane took it
	compiled  time.Time // its snapshot compiled
}

// attrs are the log attributes of the stages, in milliseconds: waited
// from the commit to the data plane, compile, then until it was served
// (bind, build, swap, status).
func (st stageTimes) attrs() []any {
	if st.start.IsZero() {
		return nil
	}
	ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
	now := time.Now()
	out := []any{"compile_ms", ms(st.compiled.Sub(st.start)), "serve_ms", ms(now.Sub(st.compiled))}
	if !st.committed.IsZero() {
		out = append([]any{"waited_ms", ms(st.start.Sub(st.committed))}, out...)
	}
	return out
}

// opens reports whether this host opens a socket for l: http and https
// listeners need the L7 handler.
func (p *Proxy) opens(l *snapshot.Listener) bool { return !l.Protocol.L7() || p.cfg.HTTP != nil }

func samePtr[T any](a, b *T) bool { return a == b }

// setStatus sets the status of the load balancers lbs from s and the
// listeners this host could not open (under p.mu). lbs holds every load
// balancer whose listeners apply tried to open: a failure that apply did
// not try again is as it was.
func (p *Proxy) setStatus(s *snapshot.Snapshot, lbs map[string]bool) {
	p.statusMu.Lock()
	defer p.statusMu.Unlock()
	e := p.status.Edit()
	cur := p.current.Load()
	for lb := range lbs {
		ps, ok := s.Problems.Get(lb)
		ps = slices.Clone(ps)
		for _, l := range s.ListenersOf(lb) {
			if ls, ok := cur.listeners.Get(l.Key); ok && ls.Listener == l {
				for _, pr := range ls.rules.problems {
					if !slices.Contains(ps, pr) {
						ps = append(ps, pr)
					}
				}
			}
		}
		if !ok && len(ps) == 0 {
			e.Delete(lb)
			continue
		}
		for _, l := range s.ListenersOf(lb) {
			field := fmt.Sprintf("listeners[%d]", l.Index)
			if !p.opens(l) {
				ps = append(ps, Problem{Field: field,
					Reason: fmt.Sprintf("%s listeners need the L7 handler, which this host does not run; %s is not open", l.Protocol, l.Key)})
			} else if bf, failed := p.failed[l.Key]; failed {
				ps = append(ps, Problem{Field: field,
					Reason: fmt.Sprintf("cannot listen on %s: %s; retried with backoff (free the port or move the listener)", l.Key, bf.err)})
			} else if why := p.h3Problem(l); why != "" {
				ps = append(ps, Problem{Field: field + ".http3", Reason: why})
			}
		}
		e.Set(lb, ps)
	}
	p.status = e.Done()
}

func compareKeys(a, b snapshot.Key) int {
	if c := a.Addr.Compare(b.Addr); c != 0 {
		return c
	}
	return int(a.Network) - int(b.Network)
}

func sortedKeys(m *pmap.Map[snapshot.Key, *snapshot.Listener]) []snapshot.Key {
	return slices.SortedFunc(func(yield func(snapshot.Key) bool) {
		for k := range m.All() {
			if !yield(k) {
				return
			}
		}
	}, compareKeys)
}

// Status returns, for every load balancer of the last Update
// ("tenant/name"), the problems found: by the compiler, listeners that
// could not be opened, and http listeners without an L7 handler. A load
// balancer without problems has an empty list.
func (p *Proxy) Status() map[string][]Problem {
	p.statusMu.Lock()
	st := p.status
	p.statusMu.Unlock()
	out := make(map[string][]Problem, st.Len())
	for lb, ps := range st.All() {
		out[lb] = slices.Clone(ps)
	}
	return out
}

// Close stops accepting on every listener, lets connections drain for up
// to DrainTimeout, closes what remains and stops the health checks.
func (p *Proxy) Close() error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil
	}
	p.closed = true
	close(p.passiveStop)
	p.retry.stop()
	old := p.current.Load()
	p.current.Store(emptyServed())
	for _, sock := range p.sockets {
		p.releaseSocket(sock)
	}
	p.sockets, p.snap = nil, nil
	for _, pool := range old.pools.All() {
		pool.release(p.health)
	}
	p.mu.Unlock()
	p.wg.Wait()
	if p.relay != nil {
		p.relay.Close()
	}
	p.pipes.Close()
	p.health.Close()
	return nil
}

// otherNetwork is tcp for udp and udp for tcp: a listen address is this
// host's as long as a listener of either uses it.
func otherNetwork(n snapshot.Network) snapshot.Network {
	if n == snapshot.TCP {
		return snapshot.UDP
	}
	return snapshot.TCP
}
