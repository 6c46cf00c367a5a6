package dns

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	mdns "github.com/miekg/dns"
	"golang.org/x/net/netutil"

	pb "github.com/teapot-lb/teapot-lb/api/proto/teapotv1"
)

// Server answers DNS on the configured addresses from the latest table.
type Server struct {
	cfg    Config
	log    *slog.Logger
	rrl    *rrl
	budget *tenantBudget
	now    func() time.Time

	table atomic.Pointer[Table]
	// held: the VIPs held or announced somewhere, each with the tenants
	// it is carried for (none listed: every one; SetServed), nil: not
	// known yet.
	held atomic.Pointer[map[netip.Addr][]string]
	// heldHere: no VIP manager; the data plane binds every VIP here.
	heldHere atomic.Bool
	// ready: each load balancer's readiness on this host ("": ready).
	readyMu sync.RWMutex
	ready   map[string]string

	servers []*mdns.Server
	dirty   chan struct{}
	// xfr keeps the zones' copies for secondaries (nil: none configured).
	xfr *transfers
	// push keeps the zones of --dns-push on their primaries.
	push []*pusher
	// sec signs the zones of --dns-dnssec (nil: none).
	sec *signer
	// chal: the ACME DNS-01 challenges in progress (SetChallenges);
	// chalSpread and chalLagged count the waits for the other hosts that
	// ended with every host caught up, or at ChallengeSpreadTimeout.
	chal                   challenges
	chalSpread, chalLagged atomic.Uint64
	spreadTimeout          time.Duration // ChallengeSpreadTimeout
	stats                  Stats
}

var _ Serving = (*Server)(nil)

// Stats counts what the server did.
type Stats struct {
	Queries    atomic.Uint64
	Rcodes     [24]atomic.Uint64
	Slipped    atomic.Uint64
	Dropped    atomic.Uint64
	OverBudget atomic.Uint64
}

// New opens the server's sockets (UDP and TCP on every address), so that
// a busy address fails before anything else starts. Serve with Run.
func New(cfg Config) (*Server, error) {
	if err := cfg.Check(); err != nil {
		return nil, err
	}
	if len(cfg.DNSSEC) > 0 && cfg.Keys == nil {
		return nil, fmt.Errorf("--dns-dnssec needs the replicated key store: %w", ErrConfig)
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	rate, slip, perTenant := cfg.ResponsesPerSecond, cfg.Slip, cfg.QueriesPerTenant
	if rate == 0 {
		rate = DefaultResponsesPerSecond
	}
	if perTenant == 0 {
		perTenant = DefaultQueriesPerTenant
	}
	s := &Server{cfg: cfg, log: cfg.Logger.With("component", "dns"), rrl: newRRL(rate, slip),
		budget: newTenantBudget(perTenant), now: time.Now, ready: map[string]string{}, dirty: make(chan struct{}, 1)}
	s.sec = newSigner(cfg.DNSSEC, cfg.SignaturesPerTenant)
	s.table.Store(Compile(cfg, nil, 0))
	s.xfr = newTransfers(cfg)
	s.push = newPushers(cfg)
	if s.xfr != nil {
		s.refresh()
	}
	for _, addr := range cfg.Addrs {
		pc, ln, err := listenBoth(addr)
		if err != nil {
			s.Close()
			return nil, fmt.Errorf("--dns-addr %s: %w", addr, err)
		}
		s.servers = append(s.servers, &mdns.Server{PacketConn: pc, Handler: s, UDPSize: MaxUDPSize, TsigSecret: cfg.TSIGKeys})
		s.servers = append(s.servers, &mdns.Server{Listener: netutil.LimitListener(ln, MaxTCPConns), Handler: s, TsigSecret: cfg.TSIGKeys,
			ReadTimeout: 2 * time.Second, WriteTimeout: 2 * time.Second, MaxTCPQueries: 128,
			IdleTimeout: func() time.Duration { return 8 * time.Second }})
	}
	return s, nil
}

// Addrs returns the addresses the server listens on (UDP; TCP is the same).
func (s *Server) Addrs() []string {
	var out []string
	for _, srv := range s.servers {
		if srv.PacketConn != nil {
			out = append(out, srv.PacketConn.LocalAddr().String())
		}
	}
	return out
}

// Run serves until ctx ends or Close.
func (s *Server) Run(ctx context.Context) error {
	errs := make(chan error, len(s.servers))
	for _, srv := range s.servers {
		go func() { errs <- srv.ActivateAndServe() }()
	}
	go s.compileLoop(ctx)
	if s.xfr != nil {
		go s.xfrLoop(ctx)
	}
	for _, pu := range s.push {
		go s.pushLoop(ctx, pu)
	}
	if s.sec != nil {
		s.sec.loadKeys(ctx, s.cfg.Keys, s.log.Info)
	}
	s.log.Info("serving DNS", "addrs", s.cfg.Addrs, "zones", s.cfg.Zones)
	select {
	case <-ctx.Done():
		s.Close()
		return nil
	case err := <-errs:
		s.Close()
		return err
	}
}

// Close stops serving and closes the sockets.
func (s *Server) Close() error {
	var errs []error
	for _, srv := range s.servers {
		if err := srv.Shutdown(); err != nil {
			// Not started yet: close its socket.
			if srv.PacketConn != nil {
				srv.PacketConn.Close()
			}
			if srv.Listener != nil {
				srv.Listener.Close()
			}
		}
	}
	return errors.Join(errs...)
}

// Update compiles the committed state objs at revision and serves it.
func (s *Server) Update(objs []*pb.Object, revision uint64) {
	t := Compile(s.cfg, objs, revision)
	s.table.Store(t)
	s.touch()
	s.budget.forget(func(tenant string) bool { return t.tenants[tenant] })
	s.sec.forget(func(tenant string) bool { return t.tenants[tenant] })
}

// Table returns the table served now.
func (s *Server) Table() *Table { return s.table.Load() }

// SetServed takes the VIPs that some host holds or announces (the VIP
// manager's serving watch), each with the tenants it is carried for,
// sorted: none listed for an address of the hosts' own network, carried
// for every tenant; else those of the tenants whose attachments share
// the address that some host carries it for. A VIP carried for none is
// left out. The map is not changed after the call.
func (s *Server) SetServed(served map[netip.Addr][]string) {
	s.held.Store(&served)
	s.touch()
}

// SetHeld takes the VIPs that some host holds or announces, each for
// every tenant that uses it (SetServed).
func (s *Server) SetHeld(held map[netip.Addr]bool) {
	served := make(map[netip.Addr][]string, len(held))
	for a, ok := range held {
		if ok {
			served[a] = nil
		}
	}
	s.SetServed(served)
}

// HeldHere says that this host runs no VIP manager: its data plane binds
// every VIP itself, and the network brings it the traffic (as for a
// static pool). Readiness still decides.
func (s *Server) HeldHere() {
	s.heldHere.Store(true)
	s.touch()
}

// SetReady takes every load balancer's readiness on this host ("":
// ready, else why not); one missing is not ready.
func (s *Server) SetReady(ready map[string]string) {
	if s == nil {
		return
	}
	s.readyMu.Lock()
	s.ready = make(map[string]string, len(ready))
	for k, v := range ready {
		s.ready[k] = v
	}
	s.readyMu.Unlock()
	s.touch()
}

// SetReadyFor takes the readiness of some load balancers; gone no longer
// exist.
func (s *Server) SetReadyFor(ready map[string]string, gone []string) {
	if s == nil {
		return
	}
	s.readyMu.Lock()
	for k, v := range ready {
		s.ready[k] = v
	}
	for _, k := range gone {
		delete(s.ready, k)
	}
	s.readyMu.Unlock()
	s.touch()
}

// Serves is the answer rule: a load balancer's address is answered while
// some host holds or announces it for the load balancer's tenant (an
// address that the attachments of several tenants share may be carried
// for some of them only) and the load balancer is ready here (a listener
// open and a member up).
func (s *Server) Serves(t Target) string {
	if !s.heldHere.Load() {
		var tenants []string
		ok := false
		if held := s.held.Load(); held != nil {
			tenants, ok = (*held)[t.Addr]
		}
		switch {
		case !ok:
			return "no host holds or announces " + t.Addr.String()
		case len(tenants) > 0 && !slices.Contains(tenants, t.Tenant):
			// The reason reaches the tenant (Observe): it names no other.
			return "no host holds or announces " + t.Addr.String() + " for tenant " + t.Tenant +
				" (tenants' attachments share it, and no host is known to carry it in this one's)"
		}
	}
	s.readyMu.RLock()
	why, ok := s.ready[t.LB]
	s.readyMu.RUnlock()
	switch {
	case !ok:
		return "not served on this host yet"
	case why != "":
		return why
	}
	return ""
}

// Stats returns the server's counters.
func (s *Server) Stats() *Stats { return &s.stats }

// ServeDNS answers one query.
func (s *Server) ServeDNS(w mdns.ResponseWriter, req *mdns.Msg) {
	s.stats.Queries.Add(1)
	if s.serveTransfer(w, req) {
		return
	}
	if s.xfr != nil && req.IsTsig() != nil && w.TsigStatus() != nil {
		// Signed with a key not ours, or a bad signature.
		m := new(mdns.Msg)
		m.SetRcode(req, mdns.RcodeNotAuth)
		_ = w.WriteMsg(m)
		return
	}
	now := s.now()
	t := s.table.Load()
	_, udp := w.RemoteAddr().(*net.UDPAddr)
	m, res := t.Answer(req, s, func(tenant string) bool { return s.budget.allow(tenant, now) })
	if m == nil {
		s.stats.OverBudget.Add(1)
		if udp {
			return
		}
		m = new(mdns.Msg)
		m.SetRcode(req, mdns.RcodeRefused)
	}
	size, do := mdns.MinMsgSize, false
	if opt := req.IsEdns0(); opt != nil {
		size = max(min(int(opt.UDPSize()), MaxUDPSize), mdns.MinMsgSize)
		do = opt.Do()
		m.SetEdns0(MaxUDPSize, do)
		if opt.Version() != 0 {
			m.Answer, m.Ns = nil, nil
			m.Rcode = mdns.RcodeBadVers
		}
	}
	slipped := false
	if udp {
		src := netip.Addr{}
		if ua, ok := w.RemoteAddr().(*net.UDPAddr); ok {
			src, _ = netip.AddrFromSlice(ua.IP)
		}
		switch s.rrl.check(src, res, now) {
		case Drop:
			s.stats.Dropped.Add(1)
			return
		case Slip:
			s.stats.Slipped.Add(1)
			m.Answer, m.Ns = nil, nil
			m.Extra = nil
			m.Truncated = true
			slipped = true
		}
	}
	// Signed after response-rate limiting: a dropped or slipped response
	// costs no signature.
	if do && !slipped {
		if err := s.sec.secure(m, req, res, t, s, now); err != nil {
			if udp && errors.Is(err, errSignBudget) {
				return
			}
			m = new(mdns.Msg)
			m.SetRcode(req, mdns.RcodeServerFailure)
			m.SetEdns0(MaxUDPSize, do)
		}
	}
	if udp {
		m.Truncate(size)
	}
	if s.xfr != nil {
		s.sign(m, req)
	}
	if m.Rcode >= 0 && m.Rcode < len(s.stats.Rcodes) {
		s.stats.Rcodes[m.Rcode].Add(1)
	}
	_ = w.WriteMsg(m)
}
