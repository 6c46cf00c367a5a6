package vip

import (
	"errors"
	"fmt"
	"net/netip"

	"github.com/osrg/gobgp/v4/pkg/apiutil"
	"github.com/osrg/gobgp/v4/pkg/packet/bgp"
)

// ErrNoSpeaker: this host has no BGP speaker (no bgp: section) to
// announce tenants' routes on.
var ErrNoSpeaker = errors.New("this host has no BGP speaker")

// SetTenantRoutes makes the routes of tenants this host announces on its
// fabric sessions (next hop self) those of want, each prefix with its
// community: tenant routes the relay accepted (vip/tenantbgp, a tenant's
// bgp.reannounce). It is safe from any goroutine.
func (m *Manager) SetTenantRoutes(want map[netip.Prefix]uint32) error {
	if m == nil || m.spk == nil {
		return ErrNoSpeaker
	}
	return m.spk.setUpstream(want)
}

// FabricSessions counts the sessions this host has established with its
// fabric routers (0 without a speaker).
func (m *Manager) FabricSessions() int {
	if m == nil || m.spk == nil {
		return 0
	}
	return m.spk.established()
}

// setUpstream announces what want adds or changes and withdraws what it
// no longer holds.
func (sp *speaker) setUpstream(want map[netip.Prefix]uint32) error {
	sp.umu.Lock()
	defer sp.umu.Unlock()
	if sp.withdrawn {
		return nil
	}
	var errs []error
	for p := range sp.upstream {
		if _, ok := want[p]; ok {
			continue
		}
		if err := sp.upstreamPath(p, 0, true); err != nil {
			errs = append(errs, err)
			continue
		}
		delete(sp.upstream, p)
	}
	for p, c := range want {
		if cur, ok := sp.upstream[p]; ok && cur == c {
			continue
		}
		if err := sp.upstreamPath(p, c, false); err != nil {
			errs = append(errs, err)
			continue
		}
		sp.upstream[p] = c
	}
	return errors.Join(errs...)
}

// upstreamPath announces (or withdraws) prefix p, next hop self, with
// community c.
func (sp *speaker) upstreamPath(p netip.Prefix, c uint32, withdraw bool) error {
	var extra []bgp.PathAttributeInterface
	if !withdraw {
		extra = append(extra, bgp.NewPathAttributeCommunities([]uint32{c}))
	}
	path, err := selfPath(p, withdraw, extra...)
	if err != nil {
		return fmt.Errorf("tenant route %s: %w", p, err)
	}
	if withdraw {
		if err := sp.srv.DeletePath(apiutil.DeletePathRequest{Paths: []*apiutil.Path{path}}); err != nil {
			return fmt.Errorf("withdraw tenant route %s: %w", p, err)
		}
		return nil
	}
	if _, err := sp.srv.AddPath(apiutil.AddPathRequest{Paths: []*apiutil.Path{path}}); err != nil {
		return fmt.Errorf("announce tenant route %s: %w", p, err)
	}
	return nil
}
