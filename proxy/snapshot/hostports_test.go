package snapshot

import (
	"net/netip"
	"slices"
	"strings"
	"testing"

	"github.com/teapot-lb/teapot-lb/api"
	pb "github.com/teapot-lb/teapot-lb/api/proto/teapotv1"
)

// A stored load balancer that still names an LB host's own service (as a
// member or as its health check's port) is never dialled: the data plane
// skips the member whatever validation let in before, and compiles again
// when a host publishes a new service.
func TestMembersNeverDialAHostsOwnService(t *testing.T) {
	t.Parallel()
	node := &pb.Node{Id: "n1", ApiAddr: "10.20.0.5:7443", RaftAddr: "10.20.0.5:7300", Addresses: []string{"10.20.0.5"},
		Services: []*pb.NodeService{{Name: api.ServiceMetrics, Addr: "0.0.0.0:9300"}}}
	lb := tcpLB("shop", "192.0.2.1", 80, "10.20.0.5:9300", "10.20.0.5:7443", "192.0.2.7:9300", "10.20.0.6:80", "10.20.0.5:8080")
	checked := tcpLB("checked", "192.0.2.2", 80, "10.20.0.5:80")
	checked.Pools["app"].HealthCheck = &pb.HealthCheck{Tcp: &pb.TCPCheck{}, Port: 9300}
	all := objs(lb, checked)
	// The operator gave the tenant a network over the VIPs.
	all[0] = tenantObj("acme", []string{"acme.example"}, []string{"10.20.0.0/16", "192.0.2.0/24"})
	before := Compile(all, 1, Defaults{}, nil)
	if got := len(before.Listener(Key{Addr: netip.MustParseAddrPort("192.0.2.1:80"), Network: TCP}).Pool.Members); got != 5 {
		t.Fatalf("without the host's record: %d members, want 5", got)
	}
	s := CompileChange(before, Change{Put: []*pb.Object{api.Wrap(node)}}, 2, Defaults{})
	var kept []string
	for _, m := range s.Listener(Key{Addr: netip.MustParseAddrPort("192.0.2.1:80"), Network: TCP}).Pool.Members {
		kept = append(kept, m.Addr.String())
	}
	if !slices.Equal(kept, []string{"10.20.0.6:80", "10.20.0.5:8080"}) {
		t.Errorf("members dialled: %v", kept)
	}
	var why []string
	for _, p := range problemsOf(s, "acme/shop") {
		why = append(why, p.Field+": "+p.Reason)
	}
	for i, want := range []string{"service port of LB host n1 (metrics)", "service port of LB host n1 (api)", "virtual IP and port 9300 is a service port of LB host n1 (metrics)"} {
		if i >= len(why) || !strings.Contains(why[i], want) {
			t.Errorf("problem %d: %v, want %q", i, why, want)
		}
	}
	if ms := s.Listener(Key{Addr: netip.MustParseAddrPort("192.0.2.2:80"), Network: TCP}).Pool.Members; len(ms) != 0 {
		t.Errorf("a member checked on the host's metrics port is kept: %v", ms)
	}
	// A host record that changes nothing the data plane reads (a drain)
	// compiles nothing again.
	drained := &pb.Node{Id: node.Id, ApiAddr: node.ApiAddr, RaftAddr: node.RaftAddr, Addresses: node.Addresses, Services: node.Services, Draining: true}
	if s2 := CompileChange(s, Change{Put: []*pb.Object{api.Wrap(drained)}}, 3, Defaults{}); s2 != s {
		t.Error("a drained host compiled the load balancers again")
	}
}
