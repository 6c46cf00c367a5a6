package tenantbgp

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"sync"
	"sync/atomic"
	"testing"
)

// A tenant with bgp.reannounce is told, per host, how many of its routes
// the host announces to its fabric routers and since when, or why it
// cannot (the speaker refused them) until a later pass succeeds.
func TestRelayObservesReannounce(t *testing.T) {
	if ownProcess(t) {
		return
	}
	port := freePort(t)
	var fail atomic.Bool
	var fabric atomic.Int32
	fabric.Store(2)
	var mu sync.Mutex
	var sent map[netip.Prefix]uint32
	r, err := New(Config{ASN: 65001, RouterID: "127.0.0.1", Routes: &memRoutes{}, PeerPort: port,
		HostAddrs: func() []netip.Addr { return []netip.Addr{netip.MustParseAddr("127.0.0.1")} },
		Reannounce: func(want map[netip.Prefix]uint32) error {
			if fail.Load() {
				return errors.New("this host has no BGP speaker")
			}
			mu.Lock()
			defer mu.Unlock()
			sent = want
			return nil
		},
		FabricSessions: func() int { return int(fabric.Load()) }})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	sp := startTenantSpeaker(t, "", port)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	go r.Run(ctx)
	sp.path(t, "10.244.1.0/24", false)
	sp.path(t, "10.99.0.0/16", false) // outside the tenant's networks: never re-announced
	st := kubeState(0, true)
	st[0].GetTenant().Bgp.Reannounce, st[0].GetTenant().Bgp.Community = true, "64512:100"
	r.Update(st)

	waitUntil(t, "one route re-announced", func() error {
		o := observed(r)
		if o.GetReannounced() != 1 || o.GetReannounceError() != "" || o.GetReannounceSince() == nil || o.GetFabricSessions() != 2 {
			return fmt.Errorf("observed %v", o)
		}
		mu.Lock()
		defer mu.Unlock()
		if len(sent) != 1 || sent[netip.MustParsePrefix("10.244.1.0/24")] != 64512<<16|100 {
			return fmt.Errorf("sent %v", sent)
		}
		return nil
	})
	before := observed(r).GetReannounceSince().AsTime()

	fail.Store(true)
	sp.path(t, "10.244.2.0/24", false)
	waitUntil(t, "the refusal shown", func() error {
		o := observed(r)
		if o.GetReannounceError() != "this host has no BGP speaker" || o.GetReannounced() != 0 || !o.GetReannounceSince().AsTime().After(before) {
			return fmt.Errorf("observed %v", o)
		}
		return nil
	})

	fail.Store(false)
	waitUntil(t, "both routes re-announced at a later pass", func() error {
		if o := observed(r); o.GetReannounced() != 2 || o.GetReannounceError() != "" {
			return fmt.Errorf("observed %v", o)
		}
		return nil
	})
	// The fabric sessions go down: the routes reach no router, and the
	// observation says so at the next pass.
	fabric.Store(0)
	waitUntil(t, "no fabric session", func() error {
		if o := observed(r); o.GetReannounced() != 2 || o.GetFabricSessions() != 0 {
			return fmt.Errorf("observed %v", o)
		}
		return nil
	})

	// Without reannounce, nothing is said about it.
	r.Update(kubeState(0, true))
	waitUntil(t, "re-announcement no longer observed", func() error {
		if o := observed(r); o.GetReannounceSince() != nil || o.GetReannounced() != 0 {
			return fmt.Errorf("observed %v", o)
		}
		return nil
	})
}
