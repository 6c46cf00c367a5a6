package main

import (
	"fmt"
	"log/slog"
	"sync/atomic"

	pb "github.com/teapot-lb/teapot-lb/api/proto/teapotv1"
	"github.com/teapot-lb/teapot-lb/packaging/serveconfig"
	"github.com/teapot-lb/teapot-lb/proxy"
)

// chooseDataPath resolves serve's data-path at start: auto takes
// io_uring where the kernel and the sandbox offer it, else epoll (logged
// with the reason); io_uring asked for where it is unavailable is a
// refused configuration (exit 78, no restart), not a silent epoll.
func chooseDataPath(want string, log *slog.Logger) (proxy.DataPath, error) {
	dp, err := proxy.ParseDataPath(want)
	if err != nil {
		return "", serveconfig.Refuse(fmt.Errorf("--data-path: %w", err))
	}
	got, why, err := proxy.ChooseDataPath(dp)
	if err != nil {
		return "", serveconfig.Refuse(err)
	}
	log.Info("data path of TCP connections", "component", "serve", "data-path", got, "asked", dp, "why", why)
	return got, nil
}

// dataPathOf reports the data path the host's proxy took, once it runs,
// in the host's NodeStatus (cluster status).
type dataPathOf struct{ atomic.Pointer[proxy.Proxy] }

func (d *dataPathOf) describe(ns *pb.NodeStatus) {
	if p := d.Load(); p != nil {
		ns.DataPath = string(p.DataPath())
	}
}
