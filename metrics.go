package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/teapot-lb/teapot-lb/api/cli"
	"github.com/teapot-lb/teapot-lb/consensus"
	"github.com/teapot-lb/teapot-lb/proxy"
	"github.com/teapot-lb/teapot-lb/proxy/accesslog"
	"github.com/teapot-lb/teapot-lb/proxy/certs"
	"github.com/teapot-lb/teapot-lb/proxy/metrics"
	"github.com/teapot-lb/teapot-lb/proxy/metricsserver"
	"github.com/teapot-lb/teapot-lb/tenantsync"
	"github.com/teapot-lb/teapot-lb/vip"
)

// openAccessLog returns the L7 engine's metrics: the access logger in
// front of the counters, writing to path (O_APPEND, so that logrotate's
// copytruncate works) or to stderr.
func openAccessLog(path string, counters *metrics.Memory) (*accesslog.Logger, error) {
	var out io.Writer = os.Stderr
	if path != "" {
		f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o640)
		if err != nil {
			return nil, fmt.Errorf("--access-log: %w", err)
		}
		out = f
	}
	return accesslog.New(accesslog.Config{Next: counters, Out: out}), nil
}

// defaultMetricsAddr is where serve exposes /metrics unless told otherwise.
const defaultMetricsAddr = "127.0.0.1:9300"

// listenMetrics binds --metrics-addr; nil when metrics are off. A busy
// default port only turns metrics off (a second serve on one machine); a
// busy port the operator chose is an error.
func listenMetrics(addr string, log *slog.Logger) (*metricsserver.Server, error) {
	if addr == "" {
		return nil, nil
	}
	srv, err := metricsserver.Listen(addr, log)
	if err != nil {
		if addr == defaultMetricsAddr {
			log.Warn("metrics are off: the default address is in use; set --metrics-addr", "component", "metrics", "addr", addr, "err", err)
			return nil, nil
		}
		return nil, fmt.Errorf("--metrics-addr %s: %w", addr, err)
	}
	return srv, nil
}

// serveMetrics registers every part's collector, and more, and serves
// them until ctx ends.
func serveMetrics(ctx context.Context, srv *metricsserver.Server, counters *metrics.Memory, px *proxy.Proxy,
	node *consensus.Node, tenants *tenantsync.Server, cm *certs.Manager, vm *vip.Manager, more ...prometheus.Collector) error {
	if srv == nil {
		return nil
	}
	cs := []prometheus.Collector{
		metrics.NewCollector(counters, metrics.CollectorConfig{Members: func(each func(metrics.Member)) {
			px.EachMember(func(m proxy.MemberStat) { each(metrics.Member(m)) })
		}, Served: px.LoadBalancers}),
		node.Collector(), tenants.Collector(), cm.Collector(), vm.Collector(),
		metricsserver.BuildInfo(cli.Version, cli.Commit),
	}
	cs = append(cs, more...)
	if err := srv.Register(cs...); err != nil {
		return err
	}
	go srv.Run(ctx)
	return nil
}
