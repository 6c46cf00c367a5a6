package vip

import (
	"fmt"
	"iter"
	"net/netip"

	pb "github.com/teapot-lb/teapot-lb/api/proto/teapotv1"
)

// Open returns this host's VIP manager. A host with no Interface and no
// BGP takes no part in VIPs: Open returns the disabled manager, a nil
// *Manager, whose methods do nothing (Run and Close return at once,
// HeartbeatAddr is "", Collector describes the metrics and
// exports none). Otherwise it is New,
// with HeartbeatAddr defaulting to the IP of RaftAddr at
// DefaultHeartbeatPort.
func Open(cfg Config) (*Manager, error) {
	if cfg.Interface == "" && cfg.BGP == nil {
		return nil, nil
	}
	if cfg.HeartbeatAddr == "" {
		ap, err := netip.ParseAddrPort(cfg.RaftAddr)
		if err != nil {
			return nil, fmt.Errorf("--raft-addr %q: must be IP:port (for example 127.0.0.1:7300)", cfg.RaftAddr)
		}
		cfg.HeartbeatAddr = netip.AddrPortFrom(ap.Addr(), DefaultHeartbeatPort).String()
	}
	return New(cfg)
}

// HeartbeatAddr is the IP:port of this host's failure detector ("" for
// the disabled manager).
func (m *Manager) HeartbeatAddr() string {
	if m == nil {
		return ""
	}
	return m.cfg.HeartbeatAddr
}

// Follow passes on one committed revision once the data plane has
// applied it: after a reset (objs: the whole state) the state goes to
// Update; any other revision (changes: each object before and after it)
// goes to UpdateRevision.
func (m *Manager) Follow(reset bool, objs []*pb.Object, changes iter.Seq2[*pb.Object, *pb.Object], revision uint64,
	state func() ([]*pb.Object, uint64)) {
	if m == nil {
		return
	}
	if reset {
		m.Update(objs, revision)
		return
	}
	m.UpdateRevision(changes, revision, state)
}

// BGPIdentity is the AS number and router id a host with cfg has (its
// bgp: section with defaults; 0 and "" without one or when it is
// invalid, which Open then reports). The tenant BGP relay peers under
// them; it starts before Open because gobgp's StartBgp writes package
// variables that a running server reads, so the two servers of a host
// start one after the other, before either has work.
func BGPIdentity(cfg Config) (asn uint32, routerID string) {
	if cfg.BGP == nil {
		return 0, ""
	}
	hb := cfg.HeartbeatAddr
	if hb == "" {
		ap, err := netip.ParseAddrPort(cfg.RaftAddr)
		if err != nil {
			return 0, ""
		}
		hb = netip.AddrPortFrom(ap.Addr(), DefaultHeartbeatPort).String()
	}
	ap, err := netip.ParseAddrPort(hb)
	if err != nil {
		return 0, ""
	}
	b, err := cfg.BGP.withDefaults(ap.Addr())
	if err != nil {
		return 0, ""
	}
	return b.ASN, b.RouterID
}
