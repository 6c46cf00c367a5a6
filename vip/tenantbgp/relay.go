package tenantbgp

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"time"

	gobgpapi "github.com/osrg/gobgp/v4/api"
	"github.com/osrg/gobgp/v4/pkg/apiutil"
	"github.com/osrg/gobgp/v4/pkg/packet/bgp"
	"github.com/osrg/gobgp/v4/pkg/server"

	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/teapot-lb/teapot-lb/api"
	"github.com/teapot-lb/teapot-lb/api/observe"
	pb "github.com/teapot-lb/teapot-lb/api/proto/teapotv1"
	"github.com/teapot-lb/teapot-lb/vip/bfd"
	"github.com/teapot-lb/teapot-lb/vip/internal/quietlog"
)

// Timings of the relay.
const (
	// connectRetry is how often a tenant speaker without a session is
	// dialled, in seconds.
	connectRetry = 3
	// LimitHold is how long a session closed for announcing more than its
	// maxPrefixes stays down before it is dialled again.
	LimitHold = 30 * time.Second
	// ResetHold is how long a session reset because its BFD went down
	// stays idle before it is dialled again (gobgp's idle hold time
	// after a reset): a speaker whose BFD flaps costs the hosts a table
	// at most every ResetHold.
	ResetHold = 30 * time.Second
	// resync is the longest time between two passes; a change of a
	// session or of its routes starts one at once, at most one per
	// minGap.
	resync = 2 * time.Second
	minGap = 100 * time.Millisecond
	// maxListed bounds the accepted and dropped prefixes an observation
	// lists per tenant (the counts stay whole), and maxEvents the drop
	// events one pass sends per tenant.
	maxListed = 100
	maxEvents = 5
)

// ErrConfig: the relay's settings are invalid.
var ErrConfig = errors.New("invalid tenant BGP settings")

// Config configures a Relay.
type Config struct {
	// ASN and RouterID are this host's, from the serve config's bgp:
	// section; ASN 0 turns the relay off (it then reports, per tenant with
	// BGP, that this host has no sessions).
	ASN      uint32
	RouterID string
	Logger   *slog.Logger
	// Events receives the drops (a tenant, prefix and reason each) and
	// the sessions closed for their prefix count; nil drops them.
	Events func(*pb.Event)
	// HostAddrs returns this host's own addresses (default: those of its
	// interfaces).
	HostAddrs func() []netip.Addr
	// Routes installs the accepted routes (default: the kernel's main
	// table over netlink, protocol RouteProtocol).
	Routes Installer
	// PeerPort is the port the tenants' speakers listen on (default 179)
	// and LimitHold how long a session closed for its prefix count stays
	// down (default LimitHold); tests shorten them.
	PeerPort  uint16
	LimitHold time.Duration
	// SpaceResync is how long a table of routes goes at most without an
	// install that reads it (default SpaceResync; a shorter one, as tests
	// set, also shortens the longest time between two passes).
	SpaceResync time.Duration
	// Reannounce, when set, announces the accepted routes of the tenants
	// with bgp.reannounce on the host's fabric sessions: it is given the
	// whole set, each prefix with its tenant's community, whenever it
	// changes (upstream.go), and again after it returned an error.
	Reannounce func(map[netip.Prefix]uint32) error
	// FabricSessions, when set, counts the host's established sessions
	// with its fabric routers, for the observation of re-announcing.
	FabricSessions func() int
	// NodeID is this host's id (the key of a tenant's
	// attachment.hosts), and Attachments the attached tenants'
	// namespaces: an attached tenant's sessions are made, and its routes
	// installed, inside its namespace (attached.go). Without Attachments
	// an attached tenant's sessions are not made.
	NodeID      string
	Attachments Attachments
	// SpaceRoutes, when set, installs an attached tenant's routes in
	// place of its namespace's table (tests).
	SpaceRoutes func(tenant string) Installer
	// BFDPort is the UDP port of the tenants' BFD, ours and their
	// speakers' (default 3784; bfd.go), and ResetHold how long a session
	// reset for its BFD stays idle before it is dialled again (default
	// ResetHold, whole seconds); tests change them.
	BFDPort   uint16
	ResetHold time.Duration
}

// Installer puts the desired set of routes in place (the whole set every
// time) and returns the prefixes it could not install, with why.
type Installer interface {
	Set(routes map[netip.Prefix]netip.Addr) map[netip.Prefix]error
	Close() error
}

// Relay peers with the tenants' speakers, judges what they announce and
// installs what it accepts.
type Relay struct {
	cfg  Config
	log  *slog.Logger
	srv  *server.BgpServer
	stop context.CancelFunc
	kick chan struct{}

	mu    sync.Mutex
	world *world
	obs   map[string]*pb.TenantBGPObservation
	// announced holds the prefixes of obs's Announced by tenant, made
	// when VIPProblem first needs it after a pass (nil until then).
	announced map[string]map[string]bool
	// limits counts the sessions closed for their prefix count, by
	// tenant, and rateLimits those closed for their update rate.
	limits, rateLimits map[string]uint64
	// judgeTime is the time spent reading and judging each tenant's
	// routes.
	judgeTime map[string]time.Duration
	// vips are the VIPs of bgp pools in tenants' attachments this host
	// announces to their speakers (export.go).
	vips map[netip.Addr]vipExport

	// ribs mirror the sessions' routes from gobgp's events (rib.go),
	// under dmu; ctx ends when the relay closes.
	dmu  sync.Mutex
	ribs map[netip.Addr]*rib
	// closeMu keeps Close from the loop's sessions and spaces while a
	// pass changes them.
	closeMu sync.Mutex
	// totals count each tenant's routes over its sessions (under dmu).
	totals map[string]*tenantTotal
	ctx    context.Context

	// Owned by the loop. Sessions are known by the address gobgp has
	// for them: the speaker's for a tenant of the host's table, a
	// loopback address of the session's tunnel for an attached one
	// (attached.go); sessions holds which speaker each is.
	peers      map[netip.Addr]string // configured peer -> fingerprint
	sessions   map[netip.Addr]*session
	spaces     map[string]Installer // attached tenants' tables
	secret     string
	states     map[netip.Addr]sessionState
	limitSince map[netip.Addr]time.Time
	dropped    map[string]map[dropKey]bool // by tenant, as last reported
	// retiring are the sessions gobgp did not remove when asked (their
	// routes are installed nowhere; each pass asks again).
	retiring map[netip.Addr]*retiring
	// deletePeer removes a peer from the speaker, and disablePeer
	// disables it (tests make them fail).
	deletePeer, disablePeer func(ctx context.Context, a netip.Addr) error
	// judged holds each session's routes as last read and judged, against
	// judgedWorld and judgedHost (judged.go); lists are the tenants'
	// lists as last built, and installs what each space's last installs
	// left (install.go).
	judged      map[netip.Addr]*peerRoutes
	judgedWorld *world
	judgedHost  []netip.Addr
	lastFull    time.Time
	lists       map[string]*routeLists
	installs    map[string]*spaceInstall
	// buckets bound each established session's UPDATE messages as gobgp
	// counts them (a floor: gobgp's events are charged as they come, in
	// the sessions' mirrors), and rateLimited holds the sessions closed
	// for going over (rate.go).
	buckets     map[netip.Addr]*updateBucket
	rateLimited map[netip.Addr]rateLimit
	// failed are the routes the kernel refused at the last install of
	// the host's table, and up what was last announced upstream
	// (upstream.go).
	failed map[netip.Prefix]error
	up     upstream
	// bfd are the attached tenants' BFD endpoints (bfd.go), bfdAllDown
	// since when all of a tenant's BFD sessions are down while a BGP
	// session of it is established, and bfdSt what the endpoints'
	// goroutines share.
	bfd        map[string]*bfd.Endpoint
	bfdAllDown map[string]time.Time
	bfdSt      bfdState
	// exp is what the speaker announces of the VIPs (export.go), and
	// advertised how many prefixes gobgp sends each session.
	exp        exports
	advertised map[netip.Addr]uint32
}

// session is one speaker's session: its key, tenant, and the tunnel
// that carries it when the tenant is attached.
type session struct {
	key    peerKey
	tenant string
	tun    *tunnel
}

type sessionState struct {
	state, reason string
	since         time.Time
}

// New starts the relay's BGP speaker (when cfg.ASN is set). It opens no
// port on the host's addresses: it dials the tenants' speakers (an
// attached tenant's through a loopback tunnel, attached.go).
func New(cfg Config) (*Relay, error) {
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.HostAddrs == nil {
		cfg.HostAddrs = interfaceAddrs
	}
	if cfg.LimitHold == 0 {
		cfg.LimitHold = LimitHold
	}
	if cfg.SpaceResync == 0 {
		cfg.SpaceResync = SpaceResync
	}
	if cfg.ResetHold == 0 {
		cfg.ResetHold = ResetHold
	}
	r := &Relay{cfg: cfg, log: cfg.Logger.With("component", "tenant-bgp"), kick: make(chan struct{}, 1), world: compile(nil, cfg.NodeID),
		sessions: map[netip.Addr]*session{}, spaces: map[string]Installer{}, secret: newLoopbackSecret(),
		obs: map[string]*pb.TenantBGPObservation{}, limits: map[string]uint64{}, rateLimits: map[string]uint64{},
		peers: map[netip.Addr]string{}, states: map[netip.Addr]sessionState{},
		limitSince: map[netip.Addr]time.Time{}, dropped: map[string]map[dropKey]bool{}, judgeTime: map[string]time.Duration{},
		ribs: map[netip.Addr]*rib{}, totals: map[string]*tenantTotal{}, judged: map[netip.Addr]*peerRoutes{},
		buckets: map[netip.Addr]*updateBucket{}, rateLimited: map[netip.Addr]rateLimit{}, lists: map[string]*routeLists{},
		installs: map[string]*spaceInstall{}, retiring: map[netip.Addr]*retiring{},
		bfd: map[string]*bfd.Endpoint{}, bfdAllDown: map[string]time.Time{},
		bfdSt: bfdState{downs: map[string]uint64{}, errs: map[string]error{}, held: map[bfdPeer]bfdHold{},
			eps: map[string]*bfd.Endpoint{}, closed: map[string]bfd.Stats{}}}
	r.deletePeer = func(ctx context.Context, a netip.Addr) error {
		return r.srv.DeletePeer(ctx, &gobgpapi.DeletePeerRequest{Address: a.String()})
	}
	r.disablePeer = func(ctx context.Context, a netip.Addr) error {
		return r.srv.DisablePeer(ctx, &gobgpapi.DisablePeerRequest{Address: a.String(), Communication: "session deconfigured"})
	}
	if cfg.ASN == 0 {
		return r, nil
	}
	if r.cfg.Routes == nil {
		k, err := newKernelRoutes()
		if err != nil {
			return nil, err
		}
		r.cfg.Routes = k
	}
	// gobgp logs every step at info; its warnings and errors are enough
	// next to the session changes the relay logs.
	level := &slog.LevelVar{}
	level.Set(slog.LevelWarn)
	r.srv = server.NewBgpServer(server.LoggerOption(quietlog.New(r.log, slog.LevelWarn), level))
	go r.srv.Serve()
	ctx, cancel := context.WithCancel(context.Background())
	r.ctx, r.stop = ctx, cancel
	fail := func(what string, err error) (*Relay, error) {
		cancel()
		r.srv.Stop()
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	if err := r.srv.StartBgp(ctx, &gobgpapi.StartBgpRequest{Global: &gobgpapi.Global{Asn: cfg.ASN, RouterId: cfg.RouterID, ListenPort: -1}}); err != nil {
		return fail("start the tenant BGP speaker", err)
	}
	// Nothing a tenant announces enters the speaker's RIB, so nothing is
	// ever sent on to another tenant or anywhere else: the relay reads
	// each session's received routes and judges them itself. The only
	// paths the RIB takes are the relay's own (the VIPs of bgp pools in
	// tenants' attachments), and the export policy sends each only to
	// the sessions of its tenants (export.go).
	if err := r.srv.AddPolicy(ctx, &gobgpapi.AddPolicyRequest{Policy: &gobgpapi.Policy{Name: "local-only", Statements: []*gobgpapi.Statement{{
		Name:       "local-only",
		Conditions: &gobgpapi.Conditions{RouteType: gobgpapi.Conditions_ROUTE_TYPE_LOCAL},
		Actions:    &gobgpapi.Actions{RouteAction: gobgpapi.RouteAction_ROUTE_ACTION_ACCEPT},
	}}}}); err != nil {
		return fail("set the tenant BGP speaker's policy", err)
	}
	for _, dir := range []gobgpapi.PolicyDirection{gobgpapi.PolicyDirection_POLICY_DIRECTION_IMPORT, gobgpapi.PolicyDirection_POLICY_DIRECTION_EXPORT} {
		var pols []*gobgpapi.Policy
		if dir == gobgpapi.PolicyDirection_POLICY_DIRECTION_IMPORT {
			pols = []*gobgpapi.Policy{{Name: "local-only"}}
		}
		if err := r.srv.SetPolicyAssignment(ctx, &gobgpapi.SetPolicyAssignmentRequest{Assignment: &gobgpapi.PolicyAssignment{
			Name: "global", Direction: dir, Policies: pols, DefaultAction: gobgpapi.RouteAction_ROUTE_ACTION_REJECT}}); err != nil {
			return fail("set the tenant BGP speaker's policy", err)
		}
	}
	err := r.srv.WatchEvent(ctx, server.WatchEventMessageCallbacks{
		OnPathUpdate: func(ps []*apiutil.Path, _ time.Time) { r.onPaths(ps) },
		OnPeerUpdate: func(e *apiutil.WatchEventMessage_PeerEvent, _ time.Time) { r.onPeer(e) },
	}, server.WatchUpdate(false, "", ""), server.WatchPeer())
	if err != nil {
		return fail("watch the tenant BGP sessions", err)
	}
	return r, nil
}

func (r *Relay) poke() {
	select {
	case r.kick <- struct{}{}:
	default:
	}
}

// Update takes the committed state (the whole of it; only tenants and
// VIP pools matter).
func (r *Relay) Update(objs []*pb.Object) {
	if r == nil {
		return
	}
	w := compile(objs, r.cfg.NodeID)
	r.mu.Lock()
	r.world = w
	r.mu.Unlock()
	r.poke()
}

// Run converges until ctx ends.
func (r *Relay) Run(ctx context.Context) {
	if r == nil || r.srv == nil {
		return
	}
	t := time.NewTicker(min(resync, r.cfg.SpaceResync))
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-r.kick:
		case <-t.C:
		}
		start := time.Now()
		r.pass(ctx)
		// Passes take at most a third of a core however much the
		// tenants' routes churn.
		select {
		case <-ctx.Done():
			return
		case <-time.After(max(minGap, 2*time.Since(start))):
		}
	}
}

// Close closes the sessions, removes the installed routes and stops the
// speaker.
func (r *Relay) Close() error {
	if r == nil || r.srv == nil {
		return nil
	}
	r.stop()
	r.srv.Stop()
	// After the pass under way, if any: one that installed after this
	// would put routes back, and touch the table while it is cleared.
	r.closeMu.Lock()
	defer r.closeMu.Unlock()
	r.closeBFD()
	err := r.cfg.Routes.Close()
	for _, s := range r.sessions {
		if s.tun != nil {
			s.tun.close()
		}
	}
	for _, in := range r.spaces {
		err = cmpErr(err, in.Close())
	}
	return err
}

// pass converges once: sessions to the world's peers, then the routes
// of the sessions that changed (judgeSessions), then the tables whose
// accepted routes changed or are due a resync, and the lists of the
// tenants whose routes changed (install).
func (r *Relay) pass(ctx context.Context) {
	r.closeMu.Lock()
	defer r.closeMu.Unlock()
	if r.ctx.Err() != nil {
		return // closed
	}
	r.mu.Lock()
	w := r.world
	r.mu.Unlock()
	r.syncPeers(ctx, w)
	now := time.Now()
	r.readStates(ctx, w, now)
	r.syncBFD(w, now)
	r.syncExports(ctx, w, now)
	host := r.install(w, r.judgeSessions(w, r.cfg.HostAddrs(), now), now)
	r.reannounce(w, host)
	obs := map[string]*pb.TenantBGPObservation{}
	for name, t := range w.tenants {
		o := &pb.TenantBGPObservation{Tenant: name, Attachment: namespaceOf(t.space)}
		if l := r.lists[name]; l != nil {
			o.Accepted, o.AcceptedCount, o.Dropped, o.DroppedCount = l.accepted, l.nAccepted, l.dropped, l.nDropped
		}
		switch {
		case w.unlisted[name]:
			o.Problem = "the tenant's attachment lists no address for this host (attachment.hosts): its speakers are not dialled from here, where it has no namespace"
		case t.space != "" && r.cfg.Attachments == nil:
			o.Problem = "this host does not attach tenants' networks: the tenant's speakers are not dialled from here"
		}
		r.observeUpstream(t, name, o)
		r.observeExports(name, o)
		obs[name] = o
	}
	for _, peer := range r.sortedSessions() {
		s := r.sessions[peer]
		st := r.states[peer]
		sess := &pb.TenantBGPSession{Peer: s.key.addr.String(), State: st.state, Reason: st.reason, Attachment: namespaceOf(s.key.space)}
		if !st.since.IsZero() {
			sess.Since = timestamppb.New(st.since)
		}
		if pr := r.judged[peer]; pr != nil {
			sess.Received = uint32(len(pr.routes))
		}
		r.observeBFD(s, sess)
		sess.Advertised = r.advertised[peer]
		if o := obs[s.tenant]; o != nil {
			o.Sessions = append(o.Sessions, sess)
		}
	}
	r.observeRetiring(w, obs)
	for _, c := range w.conflicts {
		obs[c.tenant].Sessions = append(obs[c.tenant].Sessions, &pb.TenantBGPSession{Peer: c.peer.addr.String(), State: "refused",
			Attachment: namespaceOf(c.peer.space),
			Reason:     fmt.Sprintf("%s is also a peer of tenant %s, which has the session", c.peer.addr, c.owner)})
	}
	r.mu.Lock()
	r.obs, r.announced = obs, nil
	r.mu.Unlock()
}

// syncPeers makes the speaker's peers those of w: a session for each
// speaker of a tenant of the host's table, and one through a tunnel for
// each speaker of an attached tenant (attached.go).
func (r *Relay) syncPeers(ctx context.Context, w *world) {
	prints := map[peerKey]string{}
	for k, tenant := range w.peers {
		t := w.tenants[tenant]
		if t.space != "" && r.cfg.Attachments == nil {
			continue
		}
		b := t.bgp
		prints[k] = fmt.Sprintf("%s %d %x %d %d", tenant, b.GetAsn(), b.GetPassword(), api.TenantBGPMaxPrefixes(b), api.TenantBGPMaxPrefixesTotal(b))
	}
	r.retryRetiring(ctx)
	have := map[peerKey]netip.Addr{}
	for a, fp := range r.peers {
		s := r.sessions[a]
		if prints[s.key] == fp {
			have[s.key] = a
			continue
		}
		if err := r.deletePeer(ctx, a); err != nil && ctx.Err() == nil && r.speakerHas(ctx, a) {
			r.retire(a, s, err)
			continue
		}
		r.forget(a, s)
	}
	keys := make([]peerKey, 0, len(prints))
	for k := range prints {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, cmpKeys)
	for _, k := range keys {
		if _, ok := have[k]; ok {
			continue
		}
		tenant := w.peers[k]
		b := w.tenants[tenant].bgp
		s := &session{key: k, tenant: tenant}
		a := k.addr
		p := apiPeer(a, b, r.cfg.PeerPort)
		if k.space != "" {
			var err error
			a, err = loopbackFor(func(x netip.Addr) bool { return r.loopbackTaken(w, x) })
			if err == nil {
				ttl := 0
				if b.GetAsn() != r.cfg.ASN {
					ttl = 1 // eBGP, as gobgp sets it on its own sockets
				}
				s.tun, err = openTunnel(r.cfg.Attachments, tenant, a, netip.AddrPortFrom(k.addr, cmp.Or(r.cfg.PeerPort, 179)), b.GetPassword(), r.secret, ttl)
			}
			if err != nil {
				r.log.Warn("cannot carry a tenant BGP session from its attachment", "tenant", tenant, "peer", k, "err", err)
				continue
			}
			p = tunnelPeer(k.addr, a, s.tun.port(), b, r.secret)
		} else if _, used := r.sessions[a]; used {
			r.log.Warn("a tenant BGP peer has the address of an attached session's tunnel", "tenant", tenant, "peer", k)
			continue
		} else if _, old := r.retiring[a]; old {
			continue // the speaker still has the old session to a (observed as waiting)
		}
		p.Timers.Config.IdleHoldTimeAfterReset = uint64(max(r.cfg.ResetHold, time.Second) / time.Second)
		r.dmu.Lock()
		total := r.totals[tenant]
		if total == nil {
			total = &tenantTotal{}
			r.totals[tenant] = total
		}
		// Every session of the tenant added again after a change of the
		// bound (the fingerprint holds it) sends its table again.
		total.limit = int(api.TenantBGPMaxPrefixesTotal(b))
		rb := newRIB(api.TenantBGPMaxPrefixes(b), total)
		rb.rate, rb.burst, rb.changeBurst = float64(api.TenantBGPUpdateRate(b)), float64(api.TenantBGPUpdateBurst(b)), float64(api.TenantBGPRouteBurst(b))
		r.ribs[a] = rb
		r.dmu.Unlock()
		if err := r.srv.AddPeer(ctx, &gobgpapi.AddPeerRequest{Peer: p}); err != nil {
			if ctx.Err() == nil {
				r.log.Warn("cannot add a tenant BGP peer", "tenant", tenant, "peer", k, "err", err)
			}
			if s.tun != nil {
				s.tun.close()
			}
			r.dmu.Lock()
			if r.ribs[a] == rb {
				rb.reset()
				delete(r.ribs, a)
			}
			r.dmu.Unlock()
			continue
		}
		r.peers[a] = prints[k]
		r.sessions[a] = s
		r.states[a] = sessionState{state: "idle", since: time.Now()}
	}
	r.dmu.Lock()
	for tenant, total := range r.totals {
		if _, ok := w.tenants[tenant]; !ok && total.n == 0 {
			delete(r.totals, tenant)
		}
	}
	r.dmu.Unlock()
}

// loopbackTaken reports whether a new attached session may not take the
// loopback address x: a session has it, or one retiring, or a speaker of
// the host's table, or the export policy in place names it for a tenant
// (a new session there would be sent that tenant's VIPs until the next
// policy is in place).
func (r *Relay) loopbackTaken(w *world, x netip.Addr) bool {
	_, used := r.sessions[x]
	_, old := r.retiring[x]
	_, peer := w.peers[peerKey{addr: x}]
	return used || old || peer || r.exp.namesSession(x)
}

// sortedSessions are the sessions' addresses by speaker.
func (r *Relay) sortedSessions() []netip.Addr {
	out := sortedAddrs(r.sessions)
	slices.SortFunc(out, func(a, b netip.Addr) int { return cmpKeys(r.sessions[a].key, r.sessions[b].key) })
	return out
}

// tenantOf is the tenant of the session gobgp knows as a.
func (r *Relay) tenantOf(a netip.Addr) string {
	if s := r.sessions[a]; s != nil {
		return s.tenant
	}
	return ""
}

// speaker names the speaker of the session gobgp knows as a.
func (r *Relay) speaker(a netip.Addr) string {
	if s := r.sessions[a]; s != nil {
		return s.key.String()
	}
	return a.String()
}

// readStates reads each session's state, closes one over its update
// rate (checkRate), and dials again a session closed for its prefix count
// or its rate LimitHold after it was closed.
func (r *Relay) readStates(ctx context.Context, w *world, now time.Time) {
	var peers []*gobgpapi.Peer
	// What gobgp sends each session is counted only while the relay
	// announces VIPs: it walks the RIB once per session.
	err := r.srv.ListPeer(ctx, &gobgpapi.ListPeerRequest{EnableAdvertised: len(r.exp.paths) > 0}, func(p *gobgpapi.Peer) { peers = append(peers, p) })
	r.advertised = map[netip.Addr]uint32{}
	for _, p := range peers {
		r.readState(ctx, w, p, now)
		if a, err := netip.ParseAddr(p.GetConf().GetNeighborAddress()); err == nil {
			for _, af := range p.GetAfiSafis() {
				r.advertised[a] += uint32(af.GetState().GetAdvertised())
			}
		}
	}
	if err != nil && ctx.Err() == nil {
		r.log.Warn("cannot read the tenant BGP sessions", "err", err)
	}
}

// readState reads one session's state.
func (r *Relay) readState(ctx context.Context, w *world, p *gobgpapi.Peer, now time.Time) {
	a, err := netip.ParseAddr(p.GetConf().GetNeighborAddress())
	if err != nil {
		return
	}
	if _, ok := r.peers[a]; !ok {
		return
	}
	st := p.GetState()
	state := strings.ToLower(strings.TrimPrefix(st.GetSessionState().String(), "SESSION_STATE_"))
	reason := st.GetDisconnectMessage()
	r.overHeld(a, p)
	if s, why, closedAt := r.prefixLimited(a, now); s != "" {
		state, reason = s, why
		if r.limitSince[a] != closedAt {
			r.limitSince[a] = closedAt
			r.limitEvent(a, reason)
		}
	} else if s, why := r.checkRate(ctx, a, p, w.tenants[r.tenantOf(a)], now); s != "" {
		state, reason = s, why
	}
	if s := r.sessions[a]; s != nil && s.tun != nil && state != "established" {
		// The tenant side of the tunnel is what the operator looks for.
		if up, err := s.tun.state(); !up && err != nil {
			state, reason = "active", fmt.Sprintf("cannot reach %s from inside %s: %v", s.key.addr, namespaceOf(s.key.space), err)
		}
	}
	prev := r.states[a]
	if prev.state != state {
		prev.since = now
		r.log.Info("tenant BGP session", "peer", r.speaker(a), "state", state, "reason", reason)
	}
	prev.state, prev.reason = state, reason
	r.states[a] = prev
}

func prefixOf(n bgp.NLRI) (netip.Prefix, bool) {
	if p, ok := n.(*bgp.IPAddrPrefix); ok {
		return p.Prefix.Masked(), true
	}
	p, err := netip.ParsePrefix(n.String())
	return p.Masked(), err == nil
}

func nextHop(p *apiutil.Path) netip.Addr {
	for _, a := range p.Attrs {
		switch a := a.(type) {
		case *bgp.PathAttributeNextHop:
			return a.Value
		case *bgp.PathAttributeMpReachNLRI:
			return a.Nexthop
		}
	}
	return netip.Addr{}
}

// tunnelPeer is the gobgp peer of an attached tenant's speaker at
// speaker, reached through the tunnel at local:port, signed with secret.
func tunnelPeer(speaker, local netip.Addr, port uint16, b *pb.TenantBGP, secret string) *gobgpapi.Peer {
	p := apiPeer(speaker, b, port)
	p.Conf.NeighborAddress, p.Conf.AuthPassword = local.String(), secret
	p.Transport.LocalAddress = local.String()
	return p
}

// apiPeer is the gobgp peer of one tenant speaker.
func apiPeer(a netip.Addr, b *pb.TenantBGP, port uint16) *gobgpapi.Peer {
	fam := &gobgpapi.Family{Afi: gobgpapi.Family_AFI_IP, Safi: gobgpapi.Family_SAFI_UNICAST}
	if a.Is6() {
		fam.Afi = gobgpapi.Family_AFI_IP6
	}
	return &gobgpapi.Peer{
		// Paths through this host's ASN are taken in like any other (the
		// relay judges them; it sends nothing on): gobgp would otherwise
		// keep them in the Adj-RIB-In without an event, out of the
		// mirror's count (rib.go).
		Conf:      &gobgpapi.PeerConf{NeighborAddress: a.String(), PeerAsn: b.GetAsn(), AuthPassword: b.GetPassword(), AllowOwnAsn: 255},
		Timers:    &gobgpapi.Timers{Config: &gobgpapi.TimersConfig{ConnectRetry: connectRetry}},
		Transport: &gobgpapi.Transport{RemotePort: uint32(port)},
		AfiSafis: []*gobgpapi.AfiSafi{{
			Config: &gobgpapi.AfiSafiConfig{Family: fam, Enabled: true},
		}},
	}
}

func (r *Relay) limitEvent(a netip.Addr, reason string) {
	tenant := r.tenantOf(a)
	r.mu.Lock()
	r.limits[tenant]++
	r.mu.Unlock()
	r.log.Warn("tenant BGP session closed", "tenant", tenant, "peer", r.speaker(a), "reason", reason)
	r.event(tenant, fmt.Sprintf("BGP session with %s closed: %s", r.speaker(a), reason))
}

func (r *Relay) event(tenant, msg string) {
	if r.cfg.Events == nil {
		return
	}
	r.cfg.Events(&pb.Event{Type: observe.EventRouteDropped, Severity: observe.Warning, Tenant: tenant, Message: msg})
}

func sortedAddrs[V any](m map[netip.Addr]V) []netip.Addr {
	out := make([]netip.Addr, 0, len(m))
	for a := range m {
		out = append(out, a)
	}
	slices.SortFunc(out, func(a, b netip.Addr) int { return a.Compare(b) })
	return out
}

func addrString(a netip.Addr) string {
	if !a.IsValid() {
		return ""
	}
	return a.String()
}

// interfaceAddrs are the addresses of this host's interfaces.
func interfaceAddrs() []netip.Addr {
	as, err := net.InterfaceAddrs()
	if err != nil {
		return nil
	}
	var out []netip.Addr
	for _, a := range as {
		if n, ok := a.(*net.IPNet); ok {
			if ip, ok := netip.AddrFromSlice(n.IP); ok {
				out = append(out, ip.Unmap())
			}
		}
	}
	return out
}
