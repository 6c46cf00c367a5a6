package tenantsync_test

import (
	"context"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/teapot-lb/teapot-lb/api"
	pb "github.com/teapot-lb/teapot-lb/api/proto/teapotv1"
	"github.com/teapot-lb/teapot-lb/consensus"
)

// A host's own services (metrics and profiling, dashboard, BGP, API,
// Raft, heartbeat) are never a tenant's member or checked port, even when
// a tenant network covers the host's address: a service on 0.0.0.0 is
// refused on every address of the host and on loopback.
func TestMembersNeverAHostsOwnService(t *testing.T) {
	t.Parallel() // a host of its own, in a temporary directory on free ports
	var raft string
	h := startObservedHost(t, func(c *consensus.Config) {
		raft = c.RaftAddr
		c.HeartbeatAddr = "10.20.0.5:7946"
		c.Addresses = []string{"10.20.0.5", "10.30.0.5"}
		c.Services = []*pb.NodeService{
			{Name: api.ServiceMetrics, Addr: "0.0.0.0:9300"},
			{Name: api.ServiceWeb, Addr: "10.20.0.5:9443"},
			{Name: api.ServiceBGP, Addr: "0.0.0.0:179"},
		}
	})
	h.seed(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for { // the host registers its services once it is the leader
		o, err := h.node.Get(ctx, &pb.ObjectRef{Kind: api.KindNode, Name: "n1"})
		if err == nil && len(o.GetNode().GetServices()) == 3 {
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("the host's services never registered: %v %v", o, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	raftPort := netip.MustParseAddrPort(raft).Port()
	checked := func(lb *pb.LoadBalancer, port uint32) *pb.LoadBalancer {
		lb.Pools["web"].HealthCheck = &pb.HealthCheck{Tcp: &pb.TCPCheck{}, Port: port}
		return lb
	}
	acme := h.open(t, "acme") // networks 10.20.0.0/16
	beta := h.open(t, "beta") // networks 10.30.0.0/16 and 127.0.0.0/8
	for _, tc := range []struct {
		who  *agentStream
		lb   *pb.LoadBalancer
		want string // "" accepted
	}{
		{acme, tcpLB("svc-metrics", &pb.VIPRequest{Pool: "public"}, "10.20.0.5:9300"), "service port of LB host n1 (metrics)"},
		{beta, tcpLB("svc-metrics-other-addr", &pb.VIPRequest{Pool: "public"}, "10.30.0.5:9300"), "service port of LB host n1 (metrics)"},
		{beta, tcpLB("svc-metrics-loopback", &pb.VIPRequest{Pool: "public"}, "127.0.0.1:9300"), "service port of LB host n1 (metrics)"},
		{beta, tcpLB("svc-metrics-loopback2", &pb.VIPRequest{Pool: "public"}, "127.0.0.2:9300"), "service port of LB host n1 (metrics)"},
		{acme, tcpLB("svc-web", &pb.VIPRequest{Pool: "public"}, "10.20.0.5:9443"), "service port of LB host n1 (web)"},
		{acme, tcpLB("svc-bgp", &pb.VIPRequest{Pool: "public"}, "10.20.0.5:179"), "service port of LB host n1 (bgp)"},
		{acme, tcpLB("svc-heartbeat", &pb.VIPRequest{Pool: "public"}, "10.20.0.5:7946"), "service port of LB host n1 (heartbeat)"},
		{beta, tcpLB("svc-raft", &pb.VIPRequest{Pool: "public"}, raft), "service port of LB host n1 (raft)"},
		{acme, checked(tcpLB("svc-check-metrics", &pb.VIPRequest{Pool: "public"}, "10.20.0.5:8080"), 9300), "healthCheck.port 9300"},
		{beta, checked(tcpLB("svc-check-raft", &pb.VIPRequest{Pool: "public"}, "127.0.0.1:8080"), uint32(raftPort)), "healthCheck.port"},
		// The host's address on a port of no service of its own, and
		// another address on the metrics port, stay members.
		{acme, tcpLB("svc-host-app", &pb.VIPRequest{Pool: "public"}, "10.20.0.5:8080"), ""},
		{acme, tcpLB("svc-other-metrics", &pb.VIPRequest{Pool: "public"}, "10.20.0.6:9300"), ""},
		{acme, tcpLB("svc-other-web", &pb.VIPRequest{Pool: "public"}, "10.20.0.6:9443"), ""},
	} {
		got := result(t, tc.who.change(upsert(tc.lb)), tc.lb.GetName()).GetError()
		switch {
		case tc.want == "" && got != "":
			t.Errorf("%s refused: %s", tc.lb.GetName(), got)
		case tc.want != "" && !strings.Contains(got, tc.want):
			t.Errorf("%s: error %q, want it refused as %q", tc.lb.GetName(), got, tc.want)
		}
	}
}
