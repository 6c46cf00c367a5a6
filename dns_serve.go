package main

import (
	"context"
	"log/slog"

	pb "github.com/teapot-lb/teapot-lb/api/proto/teapotv1"
	"github.com/teapot-lb/teapot-lb/proxy/dns"
	"github.com/teapot-lb/teapot-lb/vip"
)

// openDNS starts the authoritative DNS server when --dns-addr is set
// (nil when it is not): it answers from state and learns from the VIP
// manager which VIPs some host holds; the data plane's readiness reaches
// it through Follow, SetReady and SetReadyFor.
func openDNS(ctx context.Context, cfg serveConfig, log *slog.Logger, state func() ([]*pb.Object, uint64), vm *vip.Manager, stack *closers) (*dns.Server, error) {
	dc, err := cfg.dnsSettings().Config()
	if err != nil || !dc.Enabled() {
		return nil, err
	}
	dc.State, dc.Logger = state, log
	srv, err := dns.New(dc)
	if err != nil {
		return nil, err
	}
	if vm == nil {
		srv.HeldHere()
	}
	vm.SetServingWatch(srv.SetHeld)
	go func() {
		if err := srv.Run(ctx); err != nil {
			log.Error("DNS server stopped", "component", "dns", "err", err)
		}
	}()
	stack.PushFunc(func() { srv.Close() })
	return srv, nil
}
