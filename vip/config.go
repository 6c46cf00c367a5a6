package vip

import (
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"strconv"
	"time"

	"github.com/teapot-lb/teapot-lb/api/observe"
	pb "github.com/teapot-lb/teapot-lb/api/proto/teapotv1"
)

// Defaults of the failure detector and the BGP speaker.
const (
	DefaultHeartbeatInterval = 20 * time.Millisecond
	DefaultHeartbeatMisses   = 5
	DefaultHeartbeatPort     = 7946
	DefaultBGPInterface      = "lo"
	DefaultWithdrawGrace     = 500 * time.Millisecond
	DefaultBFDInterval       = 300 * time.Millisecond
	DefaultBFDMultiplier     = 3
	DefaultBGPPort           = 179
	// DefaultStateMaxAge bounds how long a host cut off from the Raft
	// leader keeps announcing bgp VIPs on its last committed state.
	DefaultStateMaxAge = 10 * time.Second
	// DefaultHandoverCloseGrace bounds how long the HTTP requests in
	// progress at the end of a handover may take to finish.
	DefaultHandoverCloseGrace = 2 * time.Second
)

// Errors.
var (
	// ErrConfig: a setting is invalid; the message names it.
	ErrConfig = errors.New("invalid VIP settings")
	// ErrPermission: the process lacks CAP_NET_ADMIN or CAP_NET_RAW.
	ErrPermission = errors.New("missing capability")
	// ErrClosed: the manager is closed.
	ErrClosed = errors.New("vip manager closed")
)

// Config configures a Manager.
type Config struct {
	// NodeID is this host's id in the cluster.
	NodeID string
	// Interface carries the VIPs of arp pools ("" when this host serves no
	// arp pool).
	Interface string
	// HeartbeatAddr is the IP:port of this host's failure detector on the
	// data-plane network (Open: default the IP of RaftAddr, port
	// DefaultHeartbeatPort).
	HeartbeatAddr string
	// RaftAddr is this host's Raft IP:port; Open derives the default
	// HeartbeatAddr from it.
	RaftAddr string
	// StateDir is the directory of this host's state (serve's
	// --data-dir); the incarnation of its latest process is kept there,
	// so that each process's heartbeats carry a greater one than the
	// last ("": the clock alone orders them; see nextIncarnation).
	StateDir string
	// HeartbeatInterval between heartbeats to every peer (default 20ms);
	// a peer is dead after HeartbeatMisses intervals without one
	// (default 5).
	HeartbeatInterval time.Duration
	HeartbeatMisses   int
	// BGP runs the embedded speaker for bgp pools (nil: none).
	BGP *BGPConfig
	// StateMaxAge: a host announces bgp VIPs only while it heard the Raft
	// leader (or is the leader) within this long (default 10s).
	StateMaxAge time.Duration
	// NetnsDir is where the namespaces of tenants' attachments are bound
	// (default DefaultNetnsDir): the VIPs of a pool in a tenant's
	// attachment (VIPPool.attachment) live on its AttachmentDevice there.
	NetnsDir string
	// TenantVIPs announces the VIPs of bgp pools in tenants' attachments
	// to those tenants' own speakers (vip/tenantbgp's relay); nil: such
	// VIPs cannot be announced here, and say so.
	TenantVIPs TenantVIPs
	Logger     *slog.Logger
	// Events receives this host's VIP moves (taken, released, announced,
	// withdrawn) with the reason; nil drops them.
	Events func(*pb.Event)
	// Handover is the data plane's part when this host gives its arp
	// VIPs up on purpose (nil: they go at once); HandoverTimeout bounds
	// how long it keeps them for it (default 30s), and HandoverCloseGrace
	// how long after that the HTTP requests in progress may take to
	// finish before the connections left are closed (default 2s).
	Handover           Handover
	HandoverTimeout    time.Duration
	HandoverCloseGrace time.Duration
	// Observed is the data plane's observed state; Run follows it for
	// the readiness of each load balancer (nil: no VIP is ever ready).
	Observed *observe.Plane
}

// BGPConfig is the `bgp:` section of the serve config file.
type BGPConfig struct {
	// ASN is this host's autonomous system number.
	ASN uint32 `json:"asn"`
	// RouterID is an IPv4 address (default: the heartbeat address when it
	// is IPv4).
	RouterID string `json:"router-id,omitempty"`
	// Interface carries the VIPs of bgp pools (default lo).
	Interface string `json:"interface,omitempty"`
	// MED, when set, is attached to every route: a host with a higher MED
	// is a standby that routers use only when no host with a lower one
	// announces the VIP.
	MED *uint32 `json:"med,omitempty"`
	// WithdrawGrace is how long a stopping host keeps serving after it
	// withdrew its routes, so that routers move new flows away first
	// (default 500ms).
	WithdrawGrace Duration  `json:"withdraw-grace,omitempty"`
	Peers         []BGPPeer `json:"peers"`
}

// BGPPeer is one router this host peers with.
type BGPPeer struct {
	Address string `json:"address"`
	ASN     uint32 `json:"asn"`
	// Port is the peer's BGP port (default 179).
	Port uint16 `json:"port,omitempty"`
	// Password enables TCP MD5 signatures.
	Password string `json:"password,omitempty"`
	// HoldTime of the session (default 90s; BFD detects failures faster).
	HoldTime Duration   `json:"hold-time,omitempty"`
	BFD      *BFDConfig `json:"bfd,omitempty"`
}

// BFDConfig turns on BFD for a peer; the session drops its routes after
// Multiplier intervals without a packet.
type BFDConfig struct {
	Enabled bool `json:"enabled"`
	// MinTx and MinRx are the intervals offered (default 300ms each).
	MinTx      Duration `json:"min-tx,omitempty"`
	MinRx      Duration `json:"min-rx,omitempty"`
	Multiplier uint32   `json:"multiplier,omitempty"`
}

// Duration is a time.Duration written as "300ms" in config files and on
// the command line.
type Duration time.Duration

// String renders d like time.Duration.
func (d Duration) String() string { return time.Duration(d).String() }

// Set parses a flag value.
func (d *Duration) Set(s string) error {
	v, err := time.ParseDuration(s)
	if err != nil {
		if _, nerr := strconv.ParseFloat(s, 64); nerr == nil && len(s) <= 20 {
			return fmt.Errorf("%s has no unit; write %ss", s, s)
		}
		if len(s) > 40 {
			s = s[:40] + "..."
		}
		return fmt.Errorf("%q is not a duration like 20ms or 1s", s)
	}
	*d = Duration(v)
	return nil
}

// Type names the flag's type in help output.
func (d *Duration) Type() string { return "duration" }

// MarshalJSON writes the duration as a string.
func (d Duration) MarshalJSON() ([]byte, error) { return json.Marshal(d.String()) }

// UnmarshalJSON reads "300ms"; a bare number is refused for want of a
// unit (0 aside), as Set does.
func (d *Duration) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err == nil {
		return d.Set(s)
	}
	var n json.Number
	if err := json.Unmarshal(b, &n); err != nil {
		return fmt.Errorf("not a duration like \"20ms\" or \"1s\"")
	}
	return d.Set(n.String())
}

// withDefaults fills the zero fields and checks the rest; errors name the
// setting and wrap ErrConfig.
func (c Config) withDefaults() (Config, error) {
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.NodeID == "" {
		return c, fmt.Errorf("%w: node id must not be empty", ErrConfig)
	}
	if c.HeartbeatInterval == 0 {
		c.HeartbeatInterval = DefaultHeartbeatInterval
	}
	if c.HeartbeatMisses == 0 {
		c.HeartbeatMisses = DefaultHeartbeatMisses
	}
	if c.StateMaxAge == 0 {
		c.StateMaxAge = DefaultStateMaxAge
	}
	if c.HandoverTimeout <= 0 {
		c.HandoverTimeout = 30 * time.Second
	}
	if c.HandoverCloseGrace <= 0 {
		c.HandoverCloseGrace = DefaultHandoverCloseGrace
	}
	switch {
	case c.StateMaxAge < time.Second || c.StateMaxAge > 10*time.Minute:
		return c, fmt.Errorf("%w: state max age %s: use 1s to 10m (default %s)", ErrConfig, c.StateMaxAge, DefaultStateMaxAge)
	case c.HeartbeatInterval < time.Millisecond || c.HeartbeatInterval > 10*time.Second:
		return c, fmt.Errorf("%w: --heartbeat-interval %s: use 1ms to 10s (default %s)", ErrConfig, c.HeartbeatInterval, DefaultHeartbeatInterval)
	case c.HeartbeatMisses < 2 || c.HeartbeatMisses > 100:
		return c, fmt.Errorf("%w: --heartbeat-misses %d: use 2 to 100 (default %d)", ErrConfig, c.HeartbeatMisses, DefaultHeartbeatMisses)
	}
	ap, err := netip.ParseAddrPort(c.HeartbeatAddr)
	if err != nil || ap.Addr().IsUnspecified() || ap.Port() == 0 {
		return c, fmt.Errorf("%w: --heartbeat-addr %q: must be IP:port that peers can reach (for example 192.0.2.11:%d)", ErrConfig, c.HeartbeatAddr, DefaultHeartbeatPort)
	}
	if c.Interface == "" && c.BGP == nil {
		return c, fmt.Errorf("%w: set --vip-interface (arp pools) or a bgp: section (bgp pools)", ErrConfig)
	}
	if c.BGP != nil {
		b, err := c.BGP.withDefaults(ap.Addr())
		if err != nil {
			return c, err
		}
		c.BGP = &b
	}
	return c, nil
}

func (b BGPConfig) withDefaults(heartbeatIP netip.Addr) (BGPConfig, error) {
	bad := func(field, format string, args ...any) (BGPConfig, error) {
		return b, fmt.Errorf("%w: bgp.%s: %s", ErrConfig, field, fmt.Sprintf(format, args...))
	}
	if b.ASN == 0 || b.ASN == 23456 || b.ASN == 4294967295 {
		return bad("asn", "set this host's AS number (1 to 4294967294, not 23456)")
	}
	if b.RouterID == "" && heartbeatIP.Is4() {
		b.RouterID = heartbeatIP.String()
	}
	if a, err := netip.ParseAddr(b.RouterID); err != nil || !a.Is4() {
		return bad("router-id", "%q: set an IPv4 address (it defaults to the heartbeat address when that is IPv4)", b.RouterID)
	}
	if b.Interface == "" {
		b.Interface = DefaultBGPInterface
	}
	if b.WithdrawGrace == 0 {
		b.WithdrawGrace = Duration(DefaultWithdrawGrace)
	}
	if b.WithdrawGrace < 0 || time.Duration(b.WithdrawGrace) > time.Minute {
		return bad("withdraw-grace", "%s: use 0s to 1m", b.WithdrawGrace)
	}
	if len(b.Peers) == 0 {
		return bad("peers", "list at least one router (address and asn)")
	}
	peers := make([]BGPPeer, len(b.Peers))
	seen := map[netip.Addr]bool{}
	for i, p := range b.Peers {
		f := "peers[" + strconv.Itoa(i) + "]"
		a, err := netip.ParseAddr(p.Address)
		if err != nil || a.Zone() != "" {
			return bad(f+".address", "%q is not an IP address", p.Address)
		}
		if seen[a] {
			return bad(f+".address", "%s is listed twice", a)
		}
		seen[a] = true
		if p.ASN == 0 || p.ASN == 4294967295 {
			return bad(f+".asn", "set the router's AS number (1 to 4294967294)")
		}
		if p.Port == 0 {
			p.Port = DefaultBGPPort
		}
		if p.HoldTime != 0 && (time.Duration(p.HoldTime) < 3*time.Second || time.Duration(p.HoldTime) > 65535*time.Second) {
			return bad(f+".hold-time", "%s: use 3s to 65535s, or leave it out for 90s", p.HoldTime)
		}
		if p.BFD != nil {
			bfd := *p.BFD
			if bfd.MinTx == 0 {
				bfd.MinTx = Duration(DefaultBFDInterval)
			}
			if bfd.MinRx == 0 {
				bfd.MinRx = Duration(DefaultBFDInterval)
			}
			if bfd.Multiplier == 0 {
				bfd.Multiplier = DefaultBFDMultiplier
			}
			for name, v := range map[string]Duration{"min-tx": bfd.MinTx, "min-rx": bfd.MinRx} {
				if time.Duration(v) < 10*time.Millisecond || time.Duration(v) > time.Minute {
					return bad(f+".bfd."+name, "%s: use 10ms to 1m", v)
				}
			}
			if bfd.Multiplier > 255 {
				return bad(f+".bfd.multiplier", "%d: use 1 to 255", bfd.Multiplier)
			}
			p.BFD = &bfd
		}
		peers[i] = p
	}
	b.Peers = peers
	return b, nil
}

// TenantVIPs announces VIPs to attached tenants' speakers, over the
// sessions this host has with them from inside their namespaces.
type TenantVIPs interface {
	// AnnounceVIP has a announced to the speakers of each of tenants,
	// with communities, replacing what was asked for a before.
	AnnounceVIP(a netip.Addr, tenants []string, communities []uint32) error
	// WithdrawVIP withdraws a from every tenant's speakers.
	WithdrawVIP(a netip.Addr) error
	// VIPProblem says why a, announced, does not reach a router of
	// every tenant it is for (empty: it does).
	VIPProblem(a netip.Addr) string
}
