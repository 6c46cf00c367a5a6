package vip

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"fmt"
	"iter"
	"log/slog"
	"maps"
	"net"
	"net/netip"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	pb "github.com/teapot-lb/teapot-lb/api/proto/teapotv1"
)

// Manager holds and announces this host's share of the VIPs. A nil
// *Manager is the disabled manager of a host that takes no part in VIPs
// (Open): its methods do nothing.
type Manager struct {
	cfg         Config
	log         *slog.Logger
	dead        time.Duration // a peer unheard for this long is dead
	quorum      time.Duration // window of the two-way contact that makes a majority
	holdDown    time.Duration // a holder keeps its arp VIPs this long after losing its majority
	settle      time.Duration // a peer back from the dead counts towards a majority after this
	gap         time.Duration // an absence this long makes a peer settle again
	incarnation uint64        // nextIncarnation

	// carriers: the interfaces, the speaker and the actuator that
	// converges them (actuator.go).
	carriers
	// heartbeats: the failure detector's transport (heartbeat.go).
	heartbeats

	kick      chan struct{}
	stop      chan struct{}
	stopOnce  sync.Once
	loopDone  chan struct{}
	closeOnce sync.Once
	closeErr  error

	mu       sync.Mutex // guards the inputs and the published status
	key      []byte
	want     *desired
	revision uint64
	// epochs counts the whole states given (Update); wantDelta holds the
	// addresses whose VIP UpdateLoadBalancers changed since the loop last
	// took m.want (evaluate takes both at once).
	epochs    uint64
	wantDelta map[netip.Addr]bool
	ready     map[string]string
	haveReady bool
	// readyAll: setReady replaced the readiness since the loop last took
	// it; readyDelta: the load balancers setReadyFor changed since then.
	readyAll    bool
	readyDelta  map[string]bool
	linkChanged bool
	// decideAllAsked: an input changed that every VIP's decision reads
	// (pokeAll); the loop decides them all.
	decideAllAsked atomic.Bool
	contact        func() time.Time
	pub            published
	// stopping: HandOverClients was called (a stop hands clients over).
	stopping bool
	// handedOver: the handover the loop runs is over.
	handedOver atomic.Bool

	loop loopState // owned by the goroutine in Run, then by Close (loop.go)
	// serving: the VIPs held or announced somewhere, for SetServingWatch
	// (its fields but watch are the loop's).
	serving servingState
	moves   moveCounters
	// refused: the heartbeats refused for their process, by peer.
	refused refusalCounters
}

// published is what Describe shows, copied out of the loop.
type published struct {
	vips  []*pb.VIPHolding
	peers []peerStatus
}

type peerStatus struct {
	id    string
	heard time.Time
	alive bool
}

// New checks the settings and the host (interfaces exist, capabilities
// are there), removes VIP addresses a crashed process left on the
// interfaces, opens the heartbeat socket and starts the BGP speaker. It
// raises GOMAXPROCS to the CPUs plus one (see spareProcs). It
// does not hold anything until Run has the committed state (Update), the
// data plane's readiness (Config.Observed) and the heartbeat key (SetKey).
func New(cfg Config) (*Manager, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	m := &Manager{
		cfg:      cfg,
		log:      cfg.Logger.With("component", "vip"),
		dead:     time.Duration(cfg.HeartbeatMisses) * cfg.HeartbeatInterval,
		kick:     make(chan struct{}, 1),
		stop:     make(chan struct{}),
		loopDone: make(chan struct{}),
		ready:    map[string]string{},
	}
	m.quorum = m.dead - cfg.HeartbeatInterval
	m.holdDown = m.dead - m.quorum
	m.settle = settleMultiple * m.dead
	m.gap = gapMultiple * m.dead
	if m.incarnation, err = nextIncarnation(cfg.StateDir, time.Now()); err != nil {
		return nil, err
	}
	m.recv = make(chan received, 256)
	m.loop.init()
	m.act = newActuator(m)
	m.beats = newBeatSender(m)
	m.epoch = time.Now()
	m.arrivals.Store(&map[string]*peerArrival{})

	if cfg.Interface != "" {
		if err := checkCaps(true, "--vip-interface "+cfg.Interface); err != nil {
			return nil, err
		}
		m.arp = &iface{name: cfg.Interface}
		if _, err := m.arp.link(); err != nil {
			return nil, fmt.Errorf("%w: --vip-interface %s: no such interface on this host", ErrConfig, cfg.Interface)
		}
		m.frames = &sender{name: cfg.Interface}
		if err := m.frames.open(); err != nil {
			return nil, fmt.Errorf("--vip-interface %s: %w", cfg.Interface, permission(err))
		}
	}
	if cfg.BGP != nil {
		if err := checkCaps(false, "bgp.interface "+cfg.BGP.Interface); err != nil {
			m.frames.closeIfAny()
			return nil, err
		}
		m.bgpIf = &iface{name: cfg.BGP.Interface}
		if _, err := m.bgpIf.link(); err != nil {
			m.frames.closeIfAny()
			return nil, fmt.Errorf("%w: bgp.interface %s: no such interface on this host", ErrConfig, cfg.BGP.Interface)
		}
	}
	for _, f := range m.ifaces() {
		if err := m.removeOrphans(f); err != nil {
			m.frames.closeIfAny()
			return nil, err
		}
	}
	ap := netip.MustParseAddrPort(cfg.HeartbeatAddr)
	m.conn, err = net.ListenUDP("udp", net.UDPAddrFromAddrPort(ap))
	if err != nil {
		m.frames.closeIfAny()
		return nil, fmt.Errorf("--heartbeat-addr %s: %w", cfg.HeartbeatAddr, err)
	}
	setSocketOptions(m.conn, ap.Addr().Is4())
	if cfg.BGP != nil {
		if m.spk, err = startSpeaker(*cfg.BGP, cfg.Logger.With("component", "bgp"), m.pokeAll); err != nil {
			m.conn.Close()
			m.frames.closeIfAny()
			return nil, err
		}
	}
	if was, now := ensureSpareProcs(); now != was {
		m.log.Info("more Go processors than CPUs, so that the heartbeat threads always find one", "gomaxprocs", now, "was", was)
	}
	m.log.Info("VIP manager ready", "interface", cfg.Interface, "heartbeat", cfg.HeartbeatAddr,
		"interval", cfg.HeartbeatInterval, "misses", cfg.HeartbeatMisses, "bgp", cfg.BGP != nil)
	return m, nil
}

func (s *sender) closeIfAny() {
	if s != nil {
		s.close()
	}
}

// ifaces returns the interfaces this manager puts VIPs on.
func (m *Manager) ifaces() []*iface {
	var out []*iface
	if m.arp != nil {
		out = append(out, m.arp)
	}
	if m.bgpIf != nil && (m.arp == nil || m.bgpIf.name != m.arp.name) {
		out = append(out, m.bgpIf)
	}
	return out
}

// sweptIfaces returns the interfaces whose stray VIP addresses sweep
// removes: ifaces and those of the pools that exist on this host.
func (m *Manager) sweptIfaces() []*iface {
	out := m.ifaces()
	for _, e := range m.pools.all() {
		if slices.ContainsFunc(out, func(f *iface) bool { return f.name == e.f.name && f.ns == e.f.ns }) {
			continue
		}
		if _, err := e.f.link(); err == nil {
			out = append(out, e.f)
		}
	}
	return out
}

// removeOrphans takes off f the addresses that carry this package's marks:
// they were left by a process that did not shut down.
func (m *Manager) removeOrphans(f *iface) error {
	addrs, err := f.hostAddrs()
	if err != nil {
		return permission(err)
	}
	for _, a := range slices.SortedFunc(maps.Keys(addrs), netip.Addr.Compare) {
		if !addrs[a] {
			continue
		}
		if err := f.remove(a); err != nil {
			return err
		}
		m.log.Info("removed a VIP left by an earlier run", "addr", a, "interface", f.name)
	}
	return nil
}

// SetKey sets the secret that signs and checks heartbeats; every host of
// the cluster must derive the same. Until it is set no heartbeat is sent
// or accepted.
func (m *Manager) SetKey(key []byte) {
	if m == nil {
		return
	}
	m.mu.Lock()
	m.key = slices.Clone(key)
	m.mu.Unlock()
	m.pokeAll()
}

// SetStateContact tells the manager how to learn when this host last
// knew its committed state to be current: now while it is the Raft
// leader, else when it last heard from the leader (zero: not since this
// process started). Until it has heard the cluster this way the host
// holds and announces nothing; bgp VIPs are withdrawn when the contact is
// older than Config.StateMaxAge. Without it, the state counts as current.
func (m *Manager) SetStateContact(f func() time.Time) {
	if m == nil {
		return
	}
	m.mu.Lock()
	m.contact = f
	m.mu.Unlock()
	m.pokeAll()
}

// Update gives the manager the whole committed state: the hosts (and
// their heartbeat addresses), the VIP pools (and their modes) and the
// load balancers (and their addresses). It returns at once; Run
// converges.
func (m *Manager) Update(objs []*pb.Object, revision uint64) {
	if m == nil {
		return
	}
	d := desiredState(objs)
	m.mu.Lock()
	m.epochs++
	d.epoch = m.epochs
	m.want, m.revision, m.wantDelta = &d, revision, nil
	m.mu.Unlock()
	m.pokeAll()
}

// UpdateLoadBalancers applies one revision's changes (each object before
// and after it, nil when created or deleted) to the state of the last
// Update: only the VIPs of the load balancers changed are looked at, by
// this call and by the loop. It returns false and changes nothing when a
// change is not a load balancer's (a VIP pool, a host: then Update takes
// the whole state) or no state was given yet.
func (m *Manager) UpdateLoadBalancers(changes iter.Seq2[*pb.Object, *pb.Object], revision uint64) bool {
	var lbs []lbChange
	for prev, next := range changes {
		either := next
		if either == nil {
			either = prev
		}
		switch {
		case either.GetVipPool() != nil, either.GetNode() != nil:
			return false
		case either.GetLoadBalancer() != nil:
			if LoadBalancerChangeMatters(prev.GetLoadBalancer(), next.GetLoadBalancer()) {
				lbs = append(lbs, lbChange{prev.GetLoadBalancer(), next.GetLoadBalancer()})
			}
		}
	}
	m.mu.Lock()
	if m.want == nil {
		m.mu.Unlock()
		return false
	}
	if len(lbs) == 0 {
		m.mu.Unlock()
		return true
	}
	d, touched := m.want.withLoadBalancers(lbs)
	if m.wantDelta == nil {
		m.wantDelta = map[netip.Addr]bool{}
	}
	for _, a := range touched {
		m.wantDelta[a] = true
	}
	m.want, m.revision = d, revision
	m.mu.Unlock()
	m.poke()
	return true
}

// setReady tells which load balancers ("tenant/name") the data plane can
// serve (followObserved calls it with a Reset of Config.Observed): an
// empty reason means ready, any other text says why not. A VIP is ready
// when at least one load balancer using it is; a load balancer missing
// from the map is not ready. Until the first call no VIP is.
//
// A call that changes nothing is dropped without waking the loop.
func (m *Manager) setReady(lbs map[string]string) {
	m.mu.Lock()
	if m.haveReady && maps.Equal(m.ready, lbs) {
		m.mu.Unlock()
		return
	}
	m.ready, m.haveReady = maps.Clone(lbs), true
	if m.ready == nil {
		m.ready = map[string]string{}
	}
	m.readyAll, m.readyDelta = true, nil
	m.mu.Unlock()
	m.pokeAll()
}

// setReadyFor is setReady for some load balancers only (a change of
// Config.Observed): lbs holds their readiness as setReady takes it, and
// gone those that no longer exist. The others keep theirs. A call that
// changes nothing costs what it holds and does not wake the loop. It does
// nothing before the first setReady.
func (m *Manager) setReadyFor(lbs map[string]string, gone []string) {
	m.mu.Lock()
	if !m.haveReady {
		m.mu.Unlock()
		return
	}
	same := true
	for lb, why := range lbs {
		if old, ok := m.ready[lb]; !ok || old != why {
			same = false
			break
		}
	}
	for _, lb := range gone {
		if _, ok := m.ready[lb]; ok {
			same = false
		}
	}
	if same {
		m.mu.Unlock()
		return
	}
	// The loop takes the load balancers named (takeReadiness): a change
	// costs what it names, whatever the number of load balancers.
	if m.readyDelta == nil {
		m.readyDelta = map[string]bool{}
	}
	for lb, why := range lbs {
		m.ready[lb] = why
		m.readyDelta[lb] = true
	}
	for _, lb := range gone {
		delete(m.ready, lb)
		m.readyDelta[lb] = true
	}
	m.mu.Unlock()
	m.poke()
}

// ChangesMatter reports whether the changes of one revision, each object
// before and after it (nil when created, nil when deleted), can change the
// VIPs wanted: a VIP pool or a host changed, or a load balancer's address,
// VIP request or existence (LoadBalancerChangeMatters).
func ChangesMatter(changes iter.Seq2[*pb.Object, *pb.Object]) bool {
	for prev, next := range changes {
		either := next
		if either == nil {
			either = prev
		}
		switch {
		case either.GetVipPool() != nil, either.GetNode() != nil:
			return true
		case either.GetLoadBalancer() != nil:
			if LoadBalancerChangeMatters(prev.GetLoadBalancer(), next.GetLoadBalancer()) {
				return true
			}
		}
	}
	return false
}

// LoadBalancerChangeMatters reports whether a change of a load balancer
// from prev to next (nil when created or deleted) can change which VIPs
// exist: its address, its VIP request or its existence. Other changes
// (members, routes, listeners) leave the desired VIPs as they are.
func LoadBalancerChangeMatters(prev, next *pb.LoadBalancer) bool {
	if prev == nil || next == nil {
		return true
	}
	return prev.GetStatus().GetAddress() != next.GetStatus().GetAddress() ||
		!slices.Equal(prev.GetStatus().GetAddresses(), next.GetStatus().GetAddresses()) ||
		prev.GetVip().GetPool() != next.GetVip().GetPool()
}

// HeartbeatKey derives the failure detector's key from the cluster CA's
// private key, which every host holds and no tenant sees.
func HeartbeatKey(caKeyPEM []byte) []byte {
	mac := hmac.New(sha256.New, caKeyPEM)
	mac.Write([]byte("teapot-lb VIP heartbeats v1"))
	return mac.Sum(nil)
}

// poke wakes the loop for a change it takes as a delta (the VIPs of
// some load balancers, some load balancers' readiness).
func (m *Manager) poke() {
	select {
	case m.kick <- struct{}{}:
	default:
	}
}

// pokeAll wakes the loop for a change after which it decides every VIP.
func (m *Manager) pokeAll() {
	m.decideAllAsked.Store(true)
	m.poke()
}

// Describe adds this host's VIPs (held, announced, or released for a
// reason of its own), the failure detector's settings and the peers it
// sees to ns. It is safe on a nil Manager.
func (m *Manager) Describe(ns *pb.NodeStatus) {
	if m == nil {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	ns.HeartbeatInterval = m.cfg.HeartbeatInterval.String()
	ns.HeartbeatMisses = uint32(m.cfg.HeartbeatMisses)
	for _, v := range m.pub.vips {
		ns.Vips = append(ns.Vips, cloneHolding(v))
	}
	now := time.Now()
	for _, p := range m.pub.peers {
		pl := &pb.PeerLiveness{NodeId: p.id, Alive: p.alive, LastSeen: "never"}
		if !p.heard.IsZero() {
			pl.LastSeen = now.Sub(p.heard).Round(time.Millisecond).String()
		}
		ns.Peers = append(ns.Peers, pl)
	}
}

func cloneHolding(v *pb.VIPHolding) *pb.VIPHolding {
	return &pb.VIPHolding{
		Address: v.Address, Mode: v.Mode, State: v.State, Reason: v.Reason,
		Since: timestamppb.New(v.Since.AsTime()), LoadBalancers: slices.Clone(v.LoadBalancers),
		UnservedTenants: maps.Clone(v.UnservedTenants),
	}
}

// Close hands everything over and stops: in bgp mode it withdraws the
// routes first and keeps serving for the withdraw grace, so that routers
// move new flows away; in arp mode it tells the peers it is leaving (they
// take its VIPs at once) and waits a few heartbeat intervals. Then it
// removes the addresses and stops the speaker. Call it before the
// listeners close.
func (m *Manager) Close() error {
	if m == nil {
		return nil
	}
	m.closeOnce.Do(func() {
		m.stopLoop()
		m.closeErr = m.handOver()
	})
	return m.closeErr
}

// stopLoop ends Run's loop (if it runs) and waits for it.
func (m *Manager) stopLoop() {
	m.stopOnce.Do(func() { close(m.stop) })
	m.mu.Lock()
	running := m.loop.running
	m.mu.Unlock()
	if running {
		<-m.loopDone
	}
}

// Run detects failures, decides and converges until ctx ends or Close is
// called. It does not release anything when it returns: Close does.
func (m *Manager) Run(ctx context.Context) error {
	if m == nil {
		return nil
	}
	m.mu.Lock()
	if m.loop.running || m.loop.stopped {
		m.mu.Unlock()
		return ErrClosed
	}
	m.loop.running = true
	m.mu.Unlock()
	defer func() {
		m.mu.Lock()
		m.loop.running, m.loop.stopped = false, true
		m.mu.Unlock()
		close(m.loopDone)
	}()
	select {
	case <-m.stop:
		return nil
	default:
	}
	readerDone, readerStop := make(chan struct{}), make(chan struct{})
	go func() { defer close(readerDone); m.readHeartbeats(readerStop) }()
	actStop, actDone := make(chan struct{}), make(chan struct{})
	go func() { defer close(actDone); m.act.run(actStop) }()
	m.loop.nsLinks.open(m)
	defer m.loop.nsLinks.close()
	beatStop, beatDone := make(chan struct{}), make(chan struct{})
	go func() { defer close(beatDone); m.beatThread(beatStop) }()
	obsCtx, obsStop := context.WithCancel(ctx)
	obsDone := make(chan struct{})
	go func() { defer close(obsDone); m.followObserved(obsCtx) }()
	err := m.run(ctx)
	obsStop()
	<-obsDone
	close(beatStop)
	<-beatDone
	close(actStop)
	<-actDone
	// Wake the reader up; Close closes the socket later.
	close(readerStop)
	_ = m.conn.SetReadDeadline(time.Now())
	<-readerDone
	_ = m.conn.SetReadDeadline(time.Time{})
	return err
}

// handOver is the graceful part of Close; the loop and the actuator no
// longer run.
func (m *Manager) handOver() error {
	m.loop.leaving = true
	held := m.act.held
	var errs []error
	if m.spk != nil {
		announced := len(m.spk.announced)
		if err := m.spk.withdrawAll(); err != nil {
			errs = append(errs, err)
		}
		if announced > 0 {
			m.log.Info("withdrew every route before shutting down", "routes", announced)
		}
	}
	for _, a := range slices.SortedFunc(maps.Keys(held), netip.Addr.Compare) {
		if h := held[a]; h.mode == ModeBGP && len(h.route.Spaces) > 0 {
			if err := m.withdraw(h.route); err != nil {
				errs = append(errs, err)
			}
		}
	}
	grace := time.Duration(0)
	for _, h := range held {
		switch h.mode {
		case ModeARP:
			grace = max(grace, 3*m.cfg.HeartbeatInterval)
		case ModeBGP:
			grace = max(grace, time.Duration(m.cfg.BGP.WithdrawGrace))
		}
	}
	// Tell the peers, a few times in case one datagram is lost: they take
	// the arp VIPs at once.
	for i := range 3 {
		m.sendHeartbeats(time.Now())
		if i < 2 {
			time.Sleep(m.cfg.HeartbeatInterval / 4)
		}
	}
	time.Sleep(grace)
	for _, a := range slices.SortedFunc(maps.Keys(held), netip.Addr.Compare) {
		h := held[a]
		if err := h.remove(a); err != nil {
			errs = append(errs, err)
			continue
		}
		verb := "VIP released"
		if h.mode == ModeBGP {
			verb = "VIP withdrawn"
		}
		m.log.Info(verb, "addr", a, "mode", h.mode, "reason", "shutting down")
		delete(held, a)
	}
	if m.spk != nil {
		m.spk.stop()
	}
	m.conn.Close()
	m.frames.closeIfAny()
	for _, e := range m.pools.all() {
		e.frames.close()
	}
	if len(errs) > 0 {
		return fmt.Errorf("release VIPs: %w", errs[0])
	}
	return nil
}
