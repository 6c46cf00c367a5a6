package tenantsync_test

import (
	"fmt"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/teapot-lb/teapot-lb/api"
	pb "github.com/teapot-lb/teapot-lb/api/proto/teapotv1"
	"github.com/teapot-lb/teapot-lb/tenantsync"
)

// A tenant at default quotas cannot store more than quotas.storedBytes
// through its stream: load balancers of 1 MB each (1,000 routes with long
// paths, within every count quota) fill it after six, the seventh is
// refused naming the quota and the figures, and another tenant still
// writes.
func TestStoredBytesBoundATenantsLoadBalancers(t *testing.T) {
	t.Parallel() // a host of its own, in a temporary directory on free ports
	h := startHost(t, tenantsync.Config{})
	h.seed(t)
	big := func(name string) *pb.LoadBalancer {
		lb := &pb.LoadBalancer{
			Name: name, Vip: &pb.VIPRequest{Pool: "public"},
			Listeners: []*pb.Listener{{Port: 80, Protocol: "http"}},
			Pools:     map[string]*pb.BackendPool{"web": {Members: []*pb.Member{{Address: "10.20.0.1:80"}}}},
		}
		for i := range 1000 {
			lb.Routes = append(lb.Routes, &pb.Route{Host: "www.acme.example", Path: fmt.Sprintf("/%04d/%s", i, strings.Repeat("p", 1000)), Pool: "web"})
		}
		return lb
	}
	acme := h.open(t, "acme")
	var stored int
	for i := 0; ; i++ {
		lb := big(fmt.Sprintf("svc-big-%d", i))
		e := result(t, acme.change(upsert(lb)), lb.GetName()).GetError()
		if e == "" {
			stored += proto.Size(lb)
			if stored > api.DefaultStoredBytes {
				t.Fatalf("%d bytes stored, over the default quota of %d", stored, api.DefaultStoredBytes)
			}
			continue
		}
		if !strings.Contains(e, "quotas.storedBytes") || !strings.Contains(e, fmt.Sprintf("at most 6.0 MiB (%d bytes)", api.DefaultStoredBytes)) {
			t.Fatalf("load balancer %d: %s", i, e)
		}
		if i != 6 {
			t.Fatalf("refused after %d load balancers of %d bytes, want after 6", i, proto.Size(lb))
		}
		break
	}
	beta := h.open(t, "beta")
	if e := result(t, beta.change(upsert(tcpLB("svc-small", &pb.VIPRequest{Pool: "public"}, "10.30.0.1:80"))), "svc-small").GetError(); e != "" {
		t.Fatalf("another tenant refused: %s", e)
	}
}
