package main

import (
	"context"
	"log/slog"
	"strings"

	"github.com/teapot-lb/teapot-lb/api"
	"github.com/teapot-lb/teapot-lb/api/observe"
	pb "github.com/teapot-lb/teapot-lb/api/proto/teapotv1"
	"github.com/teapot-lb/teapot-lb/consensus"
	"github.com/teapot-lb/teapot-lb/proxy/certs"
	"github.com/teapot-lb/teapot-lb/proxy/dns"
	"github.com/teapot-lb/teapot-lb/vip"
)

// openDNS starts the authoritative DNS server when --dns-addr is set
// (nil when it is not): it answers from state and learns from the VIP
// manager which VIPs some host holds, for which tenants, and follows the
// data plane's readiness through plane.
// Zones of --dns-dnssec keep their keys in keys (the replicated store).
// The ACME DNS-01 challenges come from the store items that watch yields.
// Zones of --dns-push are pushed only while leader says this host leads.
// cluster reports every host's applied index, which the ACME DNS-01 wait
// reads.
func openDNS(ctx context.Context, cfg serveConfig, log *slog.Logger, state func() ([]*pb.Object, uint64), keys dns.KeyStore, watch func() *consensus.Watcher, vm *vip.Manager, plane *observe.Plane, leader func() bool, cluster func(context.Context) (*pb.ClusterStatusResponse, error), stack *closers) (*dns.Server, error) {
	dc, err := cfg.dnsSettings().Config()
	if err != nil || !dc.Enabled() {
		return nil, err
	}
	dc.State, dc.Logger, dc.Keys, dc.Leader = state, log, keys, leader
	// The DNS-01 wait covers every host: the cluster's applied indexes.
	dc.Cluster, dc.NodeID = cluster, cfg.NodeID
	srv, err := dns.New(dc)
	if err != nil {
		return nil, err
	}
	if vm == nil {
		srv.HeldHere()
	}
	vm.SetServingWatch(srv.SetServed)
	go srv.FollowObserved(ctx, plane)
	keyChange := make(chan struct{}, 1)
	go followChallenges(ctx, watch().Only(api.KindStorageItem), srv, keyChange)
	go func() {
		for {
			select {
			case <-ctx.Done():
				return
			case <-keyChange:
				srv.KeysChanged(ctx)
			}
		}
	}()
	go func() {
		if err := srv.Run(ctx); err != nil {
			log.Error("DNS server stopped", "component", "dns", "err", err)
		}
	}()
	stack.PushFunc(func() { srv.Close() })
	return srv, nil
}

// followChallenges carries the ACME DNS-01 challenges that the certificate
// managers keep in the replicated store (under certs.DNS01Prefix) to the
// DNS server, which answers their TXT records, and signals keys when the
// zones' signing keys (under dns.KeyPrefix) change, as a key rollover
// does. It has a watch of its own: the data plane's and the certificate
// manager's pass over revisions that change only storage items.
func followChallenges(ctx context.Context, w *consensus.Watcher, srv *dns.Server, keys chan<- struct{}) {
	type record struct{ name, txt string }
	recs := map[string]record{} // store key -> record
	put := func(o *pb.Object) {
		it := o.GetStorageItem()
		if name, txt, ok := certs.DNS01Record(it.GetKey(), it.GetValue()); ok {
			recs[it.GetKey()] = record{name, txt}
		}
	}
	for {
		ev, err := w.Next(ctx)
		if err != nil {
			return
		}
		changed := ev.Reset
		if ev.Reset {
			clear(recs)
			for _, o := range ev.Objects {
				put(o)
			}
		}
		for _, c := range ev.Changes {
			if c.Ref.GetKind() == api.KindStorageItem && strings.HasPrefix(c.Ref.GetName(), dns.KeyPrefix) {
				select {
				case keys <- struct{}{}:
				default: // a reload is due already
				}
			}
			if c.Ref.GetKind() != api.KindStorageItem || !strings.HasPrefix(c.Ref.GetName(), certs.DNS01Prefix) {
				continue
			}
			changed = true
			delete(recs, c.Ref.GetName())
			if c.Object != nil {
				put(c.Object)
			}
		}
		if changed {
			byName := map[string][]string{}
			for _, r := range recs {
				byName[r.name] = append(byName[r.name], r.txt)
			}
			srv.SetChallenges(byName)
		}
	}
}
