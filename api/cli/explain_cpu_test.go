package cli

import (
	"strings"
	"testing"

	pb "github.com/teapot-lb/teapot-lb/api/proto/teapotv1"
)

// TestCPUStateNeverHeld: a budget of at least the host's CPUs is shown
// as never held there, not as "within budget"; debt comes first; a host
// that does not say its CPUs (an earlier build) shows the plain state.
func TestCPUStateNeverHeld(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		obs  *pb.TenantCPUObservation
		want string
	}{
		{&pb.TenantCPUObservation{Millicores: 500, HostCores: 2}, "within budget"},
		{&pb.TenantCPUObservation{Millicores: 100000, HostCores: 2}, "never held: the budget is not less than this host's 2 CPUs"},
		{&pb.TenantCPUObservation{Millicores: 2000, HostCores: 2}, "never held"},
		{&pb.TenantCPUObservation{Millicores: 100000, HostCores: 2, InDebt: true}, "in debt"},
		{&pb.TenantCPUObservation{Millicores: 100000}, "within budget"},
	} {
		if got := cpuState(tt.obs); !strings.HasPrefix(got, tt.want) {
			t.Errorf("%v: %q, want %q", tt.obs, got, tt.want)
		}
	}
}
