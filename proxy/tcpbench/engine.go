package main

import (
	"errors"
	"flag"
	"fmt"
	"net/netip"
	"os"
	"os/signal"
	"syscall"
	"time"

	pb "github.com/teapot-lb/teapot-lb/api/proto/teapotv1"
	"github.com/teapot-lb/teapot-lb/proxy"
)

// serveEngine runs teapot-lb's proxy with one load balancer: a tcp
// listener on -listen forwarding to -backend, until SIGTERM or SIGINT.
func serveEngine(args []string) error {
	fs := flag.NewFlagSet("engine", flag.ContinueOnError)
	listen := fs.String("listen", "127.0.0.2:5201", "VIP and port of the tcp listener")
	backend := fs.String("backend", "127.0.0.1:5201", "the member")
	path := fs.String("data-path", "epoll", "the data path: epoll or io_uring")
	if err := fs.Parse(args); err != nil {
		return err
	}
	want, err := proxy.ParseDataPath(*path)
	if err != nil {
		return fmt.Errorf("-data-path: %w", err)
	}
	dataPath, _, err := proxy.ChooseDataPath(want)
	if err != nil {
		return err
	}
	vip, err := netip.ParseAddrPort(*listen)
	if err != nil {
		return fmt.Errorf("-listen: %w", err)
	}
	p := proxy.New(proxy.Config{DrainTimeout: time.Second, DataPath: dataPath})
	if p.DataPath() != dataPath {
		return fmt.Errorf("the proxy runs %s, not %s", p.DataPath(), dataPath)
	}
	defer p.Close()
	objs := []*pb.Object{
		{Kind: &pb.Object_Tenant{Tenant: &pb.Tenant{Name: "bench", Networks: []string{"127.0.0.0/8"}}}},
		{Kind: &pb.Object_VipPool{VipPool: &pb.VIPPool{Name: "lo", Cidrs: []string{"127.0.0.0/8"}, Mode: "static"}}},
		{Kind: &pb.Object_LoadBalancer{LoadBalancer: &pb.LoadBalancer{
			Name:      "iperf",
			Tenant:    "bench",
			Listeners: []*pb.Listener{{Port: uint32(vip.Port()), Protocol: "tcp", Pool: "app"}},
			Pools:     map[string]*pb.BackendPool{"app": {Members: []*pb.Member{{Address: *backend}}}},
			Status:    &pb.LoadBalancerStatus{Address: vip.Addr().String()},
		}}},
	}
	if err := p.Update(objs, 1); err != nil {
		return fmt.Errorf("update: %w", err)
	}
	for lb, ps := range p.Status() {
		if len(ps) > 0 {
			return fmt.Errorf("%s: %v", lb, ps)
		}
	}
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGTERM, os.Interrupt)
	<-sigs
	if err := p.Close(); err != nil && !errors.Is(err, proxy.ErrClosed) {
		return err
	}
	return nil
}
