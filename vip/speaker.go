package vip

import (
	"context"
	"fmt"
	"log/slog"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	gobgpapi "github.com/osrg/gobgp/v4/api"
	"github.com/osrg/gobgp/v4/pkg/apiutil"
	"github.com/osrg/gobgp/v4/pkg/packet/bgp"
	"github.com/osrg/gobgp/v4/pkg/server"

	"github.com/teapot-lb/teapot-lb/vip/internal/bgppath"
	"github.com/teapot-lb/teapot-lb/vip/internal/quietlog"
)

// connectRetry is how often the speaker dials a router it has no session
// with (gobgp's default is two minutes).
const connectRetry = 3 // seconds

// When a session goes down (the router's BFD timed out during a stall of
// this process, the router restarted, ...), the speaker removes the
// router from gobgp at once and adds it again after the redial hold:
// gobgp would otherwise wait 5s, or 30s after it reset the session
// itself, and a reset its BFD asks for while the session is down stays
// queued and ends the next session the moment it comes up, and so on,
// every time. The hold is redialMin, doubled after each session that
// lasted less than stableAfter, up to redialMax, so that a session that
// keeps failing costs the router one attempt per redialMax at most.
// gobgp dials a router it was given within 2s.
const (
	redialMin   = time.Second
	redialMax   = 32 * time.Second
	stableAfter = time.Minute
)

// nextRedial returns the redial hold after a session that lasted up went
// down, when the hold after the previous one was prev (0: none yet).
func nextRedial(prev, up time.Duration) time.Duration {
	if prev == 0 || up >= stableAfter {
		return redialMin
	}
	return min(2*prev, redialMax)
}

// route is one announced /32 or /128.
type route struct {
	Addr        netip.Addr
	Communities []uint32
	// Spaces are the attached tenants whose speakers the route goes to,
	// for a VIP of a bgp pool in tenants' attachments (vipSpec.Spaces):
	// announced over the tenants' own sessions (Config.TenantVIPs), never
	// to the fabric routers.
	Spaces []string
}

func (r route) key() string {
	var b strings.Builder
	b.WriteString(r.Addr.String())
	for _, c := range r.Communities {
		b.WriteString(" " + strconv.FormatUint(uint64(c), 10))
	}
	for _, t := range r.Spaces {
		b.WriteString(" @" + t)
	}
	return b.String()
}

// speaker is the embedded gobgp: it peers with the configured routers and
// announces the routes it is given, next hop self.
type speaker struct {
	cfg    BGPConfig
	log    *slog.Logger
	srv    *server.BgpServer
	cancel context.CancelFunc
	// announced maps each announced address to its route's key.
	announced map[netip.Addr]string

	mu sync.Mutex
	// sessions holds the state of each router's session.
	sessions map[netip.Addr]bool
	// upSince is when each router's session came up, hold its last
	// redial hold.
	upSince map[netip.Addr]time.Time
	hold    map[netip.Addr]time.Duration
	// peers are the configured routers by address.
	peers    map[netip.Addr]BGPPeer
	stopping bool
	redials  sync.WaitGroup

	// upstream are the tenants' routes announced (tenant.go), each
	// prefix's community, under umu.
	// withdrawn: every route went before shutting down, and no tenant's
	// route is announced again.
	umu       sync.Mutex
	upstream  map[netip.Prefix]uint32
	withdrawn bool
}

// established counts the routers this host has a session with.
func (sp *speaker) established() int {
	sp.mu.Lock()
	defer sp.mu.Unlock()
	n := 0
	for _, up := range sp.sessions {
		if up {
			n++
		}
	}
	return n
}

// startSpeaker starts gobgp (it does not listen on port 179: it dials the
// routers) and adds the peers. changed is called when a session comes up
// or goes down.
func startSpeaker(cfg BGPConfig, log *slog.Logger, changed func()) (*speaker, error) {
	level := &slog.LevelVar{}
	level.Set(slog.LevelWarn)
	// gobgp logs every step at info; its warnings and errors are enough
	// next to the session changes logged below.
	quiet := quietlog.New(log, slog.LevelWarn)
	srv := server.NewBgpServer(server.LoggerOption(quiet, level))
	go srv.Serve()
	ctx, cancel := context.WithCancel(context.Background())
	sp := &speaker{cfg: cfg, log: log, srv: srv, cancel: cancel, announced: map[netip.Addr]string{}, sessions: map[netip.Addr]bool{},
		upSince: map[netip.Addr]time.Time{}, hold: map[netip.Addr]time.Duration{}, peers: map[netip.Addr]BGPPeer{},
		upstream: map[netip.Prefix]uint32{}}
	for _, p := range cfg.Peers {
		sp.peers[netip.MustParseAddr(p.Address)] = p
	}
	err := srv.StartBgp(ctx, &gobgpapi.StartBgpRequest{Global: &gobgpapi.Global{
		Asn: cfg.ASN, RouterId: cfg.RouterID, ListenPort: -1,
	}})
	if err != nil {
		sp.stop()
		return nil, fmt.Errorf("start BGP speaker: %w", err)
	}
	err = srv.WatchEvent(ctx, server.WatchEventMessageCallbacks{
		OnPeerUpdate: func(ev *apiutil.WatchEventMessage_PeerEvent, _ time.Time) {
			if ev.Type != apiutil.PEER_EVENT_STATE {
				return
			}
			st := ev.Peer.State
			attrs := []any{"peer", ev.Peer.Conf.NeighborAddress, "state", strings.TrimPrefix(st.SessionState.String(), "BGP_FSM_")}
			if st.DisconnectMessage != "" {
				attrs = append(attrs, "reason", st.DisconnectMessage)
			}
			log.Info("BGP session", attrs...)
			up := st.SessionState == bgp.BGP_FSM_ESTABLISHED
			addr := ev.Peer.Conf.NeighborAddress
			sp.mu.Lock()
			was := sp.sessions[addr]
			sp.sessions[addr] = up
			if up && !was {
				sp.upSince[addr] = time.Now()
			}
			if was && !up && !sp.stopping {
				hold := nextRedial(sp.hold[addr], time.Since(sp.upSince[addr]))
				sp.hold[addr] = hold
				sp.redials.Add(1)
				// Not from this callback: gobgp calls it from the goroutine
				// that would serve DeletePeer.
				go sp.redial(ctx, addr, hold)
			}
			sp.mu.Unlock()
			if up != was && changed != nil {
				changed()
			}
		},
	}, server.WatchPeer())
	if err != nil {
		sp.stop()
		return nil, fmt.Errorf("watch BGP sessions: %w", err)
	}
	for i, p := range cfg.Peers {
		if err := srv.AddPeer(ctx, &gobgpapi.AddPeerRequest{Peer: apiPeer(p)}); err != nil {
			sp.stop()
			return nil, fmt.Errorf("%w: bgp.peers[%d]: %v", ErrConfig, i, err)
		}
	}
	return sp, nil
}

// redial removes a router whose session went down from gobgp, with what
// gobgp had queued for it, and adds it again after hold.
func (sp *speaker) redial(ctx context.Context, addr netip.Addr, hold time.Duration) {
	defer sp.redials.Done()
	p, ok := sp.peers[addr]
	if !ok {
		return
	}
	if err := sp.srv.DeletePeer(ctx, &gobgpapi.DeletePeerRequest{Address: addr.String()}); err != nil {
		if ctx.Err() == nil {
			sp.log.Warn("cannot reset the BGP peer after its session went down; gobgp redials on its own", "peer", addr, "err", err)
		}
		return
	}
	if hold > redialMin {
		sp.log.Warn("BGP session went down again soon after it came up; waits longer before dialling again", "peer", addr, "wait", hold)
	}
	select {
	case <-ctx.Done():
		return
	case <-time.After(hold):
	}
	if err := sp.srv.AddPeer(ctx, &gobgpapi.AddPeerRequest{Peer: apiPeer(p)}); err != nil && ctx.Err() == nil {
		sp.log.Error("cannot add the BGP peer again: no session with it until a restart", "peer", addr, "err", err)
	}
}

func apiPeer(p BGPPeer) *gobgpapi.Peer {
	a := netip.MustParseAddr(p.Address)
	fam := &gobgpapi.Family{Afi: gobgpapi.Family_AFI_IP, Safi: gobgpapi.Family_SAFI_UNICAST}
	if a.Is6() && !a.Is4In6() {
		fam.Afi = gobgpapi.Family_AFI_IP6
	}
	out := &gobgpapi.Peer{
		Conf: &gobgpapi.PeerConf{
			NeighborAddress: a.String(), PeerAsn: p.ASN, AuthPassword: p.Password,
		},
		Timers:    &gobgpapi.Timers{Config: &gobgpapi.TimersConfig{ConnectRetry: connectRetry}},
		Transport: &gobgpapi.Transport{RemotePort: uint32(p.Port)},
		AfiSafis:  []*gobgpapi.AfiSafi{{Config: &gobgpapi.AfiSafiConfig{Family: fam, Enabled: true}}},
	}
	if p.HoldTime != 0 {
		hold := uint64(time.Duration(p.HoldTime) / time.Second)
		out.Timers.Config.HoldTime = hold
		out.Timers.Config.KeepaliveInterval = max(hold/3, 1)
	}
	if b := p.BFD; b != nil && b.Enabled {
		out.Bfd = &gobgpapi.BfdPeerConfig{
			Enabled:                  true,
			DesiredMinimumTxInterval: uint32(time.Duration(b.MinTx) / time.Microsecond),
			RequiredMinimumReceive:   uint32(time.Duration(b.MinRx) / time.Microsecond),
			DetectionMultiplier:      b.Multiplier,
		}
	}
	return out
}

// path builds the gobgp path of a route; the unspecified next hop makes
// gobgp put this host's address of each session there.
func (sp *speaker) path(r route, withdraw bool) (*apiutil.Path, error) {
	var extra []bgp.PathAttributeInterface
	if sp.cfg.MED != nil {
		extra = append(extra, bgp.NewPathAttributeMultiExitDisc(*sp.cfg.MED))
	}
	if len(r.Communities) > 0 {
		extra = append(extra, bgp.NewPathAttributeCommunities(slices.Clone(r.Communities)))
	}
	return selfPath(netip.PrefixFrom(r.Addr, r.Addr.BitLen()), withdraw, extra...)
}

// selfPath is the gobgp path of prefix p, next hop self, with the extra
// attributes.
func selfPath(p netip.Prefix, withdraw bool, extra ...bgp.PathAttributeInterface) (*apiutil.Path, error) {
	return bgppath.Self(p, withdraw, extra...)
}

// announce adds or updates a route.
func (sp *speaker) announce(r route) error {
	if sp.announced[r.Addr] == r.key() {
		return nil
	}
	p, err := sp.path(r, false)
	if err != nil {
		return fmt.Errorf("announce %s: %w", r.Addr, err)
	}
	if _, err := sp.srv.AddPath(apiutil.AddPathRequest{Paths: []*apiutil.Path{p}}); err != nil {
		return fmt.Errorf("announce %s: %w", r.Addr, err)
	}
	sp.announced[r.Addr] = r.key()
	return nil
}

// withdraw removes the route of a.
func (sp *speaker) withdraw(a netip.Addr) error {
	if _, ok := sp.announced[a]; !ok {
		return nil
	}
	p, err := sp.path(route{Addr: a}, true)
	if err != nil {
		return fmt.Errorf("withdraw %s: %w", a, err)
	}
	if err := sp.srv.DeletePath(apiutil.DeletePathRequest{Paths: []*apiutil.Path{p}}); err != nil {
		return fmt.Errorf("withdraw %s: %w", a, err)
	}
	delete(sp.announced, a)
	return nil
}

// withdrawAll removes every route this host announces, the tenants'
// too.
func (sp *speaker) withdrawAll() error {
	sp.umu.Lock()
	defer sp.umu.Unlock()
	if len(sp.announced) == 0 && len(sp.upstream) == 0 {
		return nil
	}
	if err := sp.srv.DeletePath(apiutil.DeletePathRequest{DeleteAll: true}); err != nil {
		return fmt.Errorf("withdraw all routes: %w", err)
	}
	clear(sp.announced)
	clear(sp.upstream)
	sp.withdrawn = true
	return nil
}

// stop closes the sessions (a Cease notification to each router) and
// stops gobgp.
func (sp *speaker) stop() {
	sp.mu.Lock()
	sp.stopping = true
	sp.mu.Unlock()
	sp.cancel()
	sp.redials.Wait()
	sp.srv.Stop()
}
