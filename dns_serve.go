package main

import (
	"context"
	"log/slog"

	"github.com/teapot-lb/teapot-lb/api/observe"
	pb "github.com/teapot-lb/teapot-lb/api/proto/teapotv1"
	"github.com/teapot-lb/teapot-lb/proxy/dns"
	"github.com/teapot-lb/teapot-lb/vip"
)

// openDNS starts the authoritative DNS server when --dns-addr is set
// (nil when it is not): it answers from state and learns from the VIP
// manager which VIPs some host holds and follows the data plane's
// readiness through plane.
// Zones of --dns-dnssec keep their keys in keys (the replicated store).
func openDNS(ctx context.Context, cfg serveConfig, log *slog.Logger, state func() ([]*pb.Object, uint64), keys dns.KeyStore, vm *vip.Manager, plane *observe.Plane, stack *closers) (*dns.Server, error) {
	dc, err := cfg.dnsSettings().Config()
	if err != nil || !dc.Enabled() {
		return nil, err
	}
	dc.State, dc.Logger, dc.Keys = state, log, keys
	srv, err := dns.New(dc)
	if err != nil {
		return nil, err
	}
	if vm == nil {
		srv.HeldHere()
	}
	vm.SetServingWatch(srv.SetHeld)
	go srv.FollowObserved(ctx, plane)
	go func() {
		if err := srv.Run(ctx); err != nil {
			log.Error("DNS server stopped", "component", "dns", "err", err)
		}
	}()
	stack.PushFunc(func() { srv.Close() })
	return srv, nil
}
