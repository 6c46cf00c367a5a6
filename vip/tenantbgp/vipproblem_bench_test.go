package tenantbgp

import (
	"net/netip"
	"testing"

	"github.com/osrg/gobgp/v4/pkg/server"
	pb "github.com/teapot-lb/teapot-lb/api/proto/teapotv1"
)

// The VIP layer asks VIPProblem for each of its VIPs at every
// evaluation: 1,000 VIPs of one tenant, all announced.
func BenchmarkVIPProblem1000(b *testing.B) {
	r := &Relay{srv: server.NewBgpServer(), vips: map[netip.Addr]vipExport{}}
	var ann []*pb.TenantRoute
	var addrs []netip.Addr
	base := netip.MustParseAddr("10.0.0.0")
	for i := 0; i < 1000; i++ {
		base = base.Next()
		addrs = append(addrs, base)
		r.vips[base] = vipExport{tenants: []string{"a"}}
		ann = append(ann, &pb.TenantRoute{Prefix: netip.PrefixFrom(base, 32).String()})
	}
	r.obs = map[string]*pb.TenantBGPObservation{"a": {Tenant: "a", Announced: ann, Sessions: []*pb.TenantBGPSession{{Peer: "10.9.0.1", State: "established", Attachment: "x"}}}}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		for _, a := range addrs {
			if p := r.VIPProblem(a); p != "" {
				b.Fatal(p)
			}
		}
	}
}
