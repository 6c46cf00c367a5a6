package api

import (
	"testing"

	pb "github.com/teapot-lb/teapot-lb/api/proto/teapotv1"
)

func TestTenantBGPBounds(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name         string
		b            *pb.TenantBGP
		burst, total uint32
	}{
		{"defaults", &pb.TenantBGP{}, 100 + 1000, 4000},
		{"a small table", &pb.TenantBGP{MaxPrefixes: 50, MaxUpdatesPerSecond: 10}, 10 + 50, 200},
		{"a large table: the burst stays bounded", &pb.TenantBGP{MaxPrefixes: 20000}, 100 + MaxTenantBGPUpdateBurst, 80000},
		{"the most: the total stays bounded", &pb.TenantBGP{MaxPrefixes: MaxTenantBGPMaxPrefixes, MaxUpdatesPerSecond: MaxTenantBGPUpdateRate},
			MaxTenantBGPUpdateRate + MaxTenantBGPUpdateBurst, MaxTenantBGPMaxPrefixesTotal},
		{"a total set", &pb.TenantBGP{MaxPrefixesTotal: 1500}, 1100, 1500},
	} {
		if got := TenantBGPUpdateBurst(tt.b); got != tt.burst {
			t.Errorf("%s: burst %d, want %d", tt.name, got, tt.burst)
		}
		if got := TenantBGPMaxPrefixesTotal(tt.b); got != tt.total {
			t.Errorf("%s: total %d, want %d", tt.name, got, tt.total)
		}
	}
}
