package api

import (
	"net/netip"
	"strings"
	"testing"

	"github.com/teapot-lb/teapot-lb/api/catalogtest"
	pb "github.com/teapot-lb/teapot-lb/api/proto/teapotv1"
)

func TestHostPortsNeverMembersNorCheckedPorts(t *testing.T) {
	t.Parallel()
	nodes := []*pb.Node{
		{Id: "n1", ApiAddr: "0.0.0.0:7443", RaftAddr: "10.20.0.5:7300", HeartbeatAddr: "10.20.0.5:7946",
			Addresses: []string{"10.20.0.5", "fd00:20::5"},
			Services: []*pb.NodeService{
				{Name: ServiceMetrics, Addr: "127.0.0.1:9300"},
				{Name: ServiceWeb, Addr: "[::]:9443"},
				{Name: ServiceBGP, Addr: "0.0.0.0:179"},
			}},
		{Id: "n2", ApiAddr: "10.20.0.6:7443", RaftAddr: "10.20.0.6:7300", Services: []*pb.NodeService{{Name: ServiceMetrics, Addr: ":9301"}}},
	}
	acme := acmeTenant()
	acme.Networks = append(acme.Networks, "127.0.0.0/8")
	c := catalogtest.New(publicPool(), sharedPool(), acme, nodes[0], nodes[1])
	for _, tc := range []struct {
		member string
		hc     uint32
		want   string // "" accepted
	}{
		{"10.20.0.5:7443", 0, "service port of LB host n1 (api)"},       // 0.0.0.0: every address of n1
		{"[fd00:20::5]:7443", 0, "service port of LB host n1 (api)"},    // and of both families
		{"127.0.0.1:7443", 0, "service port of LB host n1 (api)"},       // and loopback
		{"10.20.0.6:7443", 0, "service port of LB host n2 (api)"},       // n2's own, exact
		{"10.20.0.6:7300", 0, "service port of LB host n2 (raft)"},      //
		{"10.20.0.5:7946", 0, "service port of LB host n1 (heartbeat)"}, //
		{"127.0.0.1:9300", 0, "service port of LB host n1 (metrics)"},   // the loopback metrics and profiles
		{"10.20.0.5:9443", 0, "service port of LB host n1 (web)"},       // the dashboard on ::
		{"10.20.0.5:179", 0, "service port of LB host n1 (bgp)"},        //
		{"10.20.0.6:9301", 0, "service port of LB host n2 (metrics)"},   // ":port" is every address; n2's own are its services'
		{"10.20.0.5:80", 9300, ""},                                      // 10.20.0.5:9300 is no service (metrics is on loopback)
		{"127.0.0.1:80", 9300, "healthCheck.port 9300"},                 // a check on a host port
		{"10.20.0.6:80", 7300, "healthCheck.port 7300"},                 //
		{"10.20.0.5:8080", 0, ""},                                       // the host's address, another port
		{"10.20.0.7:7443", 0, ""},                                       // another address, the API's port
		{"127.0.0.2:9300", 0, ""},                                       // a listener on 127.0.0.1 only
	} {
		lb := shopLB()
		lb.Pools["web"].Members = []*pb.Member{{Address: tc.member}}
		lb.Pools["web"].HealthCheck = nil
		if tc.hc != 0 {
			lb.Pools["web"].HealthCheck = &pb.HealthCheck{Port: tc.hc}
		}
		err := ValidateLoadBalancer(lb, c)
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%s (check port %d) refused: %v", tc.member, tc.hc, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("%s (check port %d): %v, want refused as %q", tc.member, tc.hc, err, tc.want)
		}
	}
	if got := NewHostPorts(nodes).Owner(netip.MustParseAddrPort("[::ffff:10.20.0.5]:7443")); got == "" {
		t.Error("an IPv4-mapped address is not the host's")
	}
}
