package main

import (
	"net"
	"net/netip"
	"slices"
	"strconv"

	"github.com/teapot-lb/teapot-lb/api"
	pb "github.com/teapot-lb/teapot-lb/api/proto/teapotv1"
	"github.com/teapot-lb/teapot-lb/proxy/metricsserver"
	"github.com/teapot-lb/teapot-lb/vip"
)

// ownServices lists this host's services besides its API, Raft and
// heartbeat addresses, as bound, for its Node object: the leader refuses
// a member or health check that reaches one (api.HostPorts).
func ownServices(metrics *metricsserver.Server, web net.Listener, bgp *vip.BGPConfig) []*pb.NodeService {
	var out []*pb.NodeService
	if metrics != nil {
		out = append(out, &pb.NodeService{Name: api.ServiceMetrics, Addr: metrics.Addr().String()})
	}
	if web != nil {
		out = append(out, &pb.NodeService{Name: api.ServiceWeb, Addr: web.Addr().String()})
	}
	if bgp != nil {
		ports := []uint16{vip.DefaultBGPPort}
		for _, p := range bgp.Peers {
			if p.Port != 0 && !slices.Contains(ports, p.Port) {
				ports = append(ports, p.Port)
			}
		}
		for _, p := range ports {
			out = append(out, &pb.NodeService{Name: api.ServiceBGP, Addr: net.JoinHostPort("0.0.0.0", strconv.Itoa(int(p)))})
		}
	}
	return out
}

// hostAddresses lists the addresses of this host's interfaces (loopback
// is always counted as the host's), sorted.
func hostAddresses() []string {
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		return nil
	}
	var out []string
	for _, a := range addrs {
		p, err := netip.ParsePrefix(a.String())
		if err != nil || p.Addr().IsLoopback() || p.Addr().Zone() != "" {
			continue
		}
		if s := p.Addr().Unmap().String(); !slices.Contains(out, s) {
			out = append(out, s)
		}
	}
	slices.Sort(out)
	if len(out) > api.MaxNodeAddresses {
		out = out[:api.MaxNodeAddresses]
	}
	return out
}
