package agent

import (
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"

	pb "github.com/teapot-lb/teapot-lb/api/proto/teapotv1"
	"github.com/teapot-lb/teapot-lb/tenantsync/translate"
)

func find(conds []metav1.Condition, typ string) metav1.Condition {
	for _, c := range conds {
		if c.Type == typ {
			return c
		}
	}
	return metav1.Condition{}
}

// TestGatewayStatusFollowsTheLBCluster: Programmed and status.addresses
// say what the LB cluster answered, a refusal included; listeners follow;
// transition times stay while a condition's status does not change.
func TestGatewayStatusFollowsTheLBCluster(t *testing.T) {
	gw := &gwv1.Gateway{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "gw", Generation: 2}}
	ok := func(typ, reason string) metav1.Condition {
		return metav1.Condition{Type: typ, Status: metav1.ConditionTrue, Reason: reason, ObservedGeneration: 2}
	}
	d := &translate.Desired{Gateway: &translate.GatewayResult{
		Generation: 2,
		Accepted:   ok("Accepted", "Accepted"),
		Listeners: []gwv1.ListenerStatus{{Name: "http", AttachedRoutes: 2, Conditions: []metav1.Condition{
			ok("Accepted", "Accepted"), ok("ResolvedRefs", "ResolvedRefs"), ok("Programmed", "Programmed"),
		}}},
	}}
	tests := []struct {
		name           string
		st             *pb.ObjectStatus
		refused        string
		prog, listener string // Programmed reasons
		addr           string
	}{
		{"no answer yet", nil, "", "Pending", "Pending", ""},
		{"assigned", &pb.ObjectStatus{Address: "192.0.2.7"}, "", "Programmed", "Programmed", "192.0.2.7"},
		{"refused by the LB cluster keeps the address it still serves", &pb.ObjectStatus{Address: "192.0.2.7", Error: "routes[0].host: shop.other.example is not within the tenant's domains"}, "", ReasonRefusedByLB, ReasonRefusedByLB, "192.0.2.7"},
		{"refused by the agent", nil, "no listener is valid", "Invalid", "Invalid", ""},
		{"addresses not usable", nil, "several addresses", "AddressNotUsable", "AddressNotUsable", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dd := *d
			dd.Refused = tt.refused
			if tt.prog == "AddressNotUsable" {
				res := *d.Gateway
				res.AddressNotUsable = tt.refused
				dd.Gateway = &res
			}
			got := gatewayStatus(gw, &dd, tt.st)
			p := find(got.Conditions, "Programmed")
			if p.Reason != tt.prog || (p.Status == metav1.ConditionTrue) != (tt.prog == "Programmed") || p.ObservedGeneration != 2 || p.LastTransitionTime.IsZero() {
				t.Errorf("Programmed = %+v, want reason %s", p, tt.prog)
			}
			if tt.st.GetError() != "" && p.Message != "refused by the LB cluster: "+tt.st.GetError() {
				t.Errorf("Programmed message %q does not carry the refusal", p.Message)
			}
			if lp := find(got.Listeners[0].Conditions, "Programmed"); lp.Reason != tt.listener {
				t.Errorf("listener Programmed = %+v, want %s", lp, tt.listener)
			}
			if got.Listeners[0].AttachedRoutes != 2 {
				t.Errorf("attachedRoutes %d", got.Listeners[0].AttachedRoutes)
			}
			var addr string
			if len(got.Addresses) > 0 {
				addr = got.Addresses[0].Value
			}
			if addr != tt.addr {
				t.Errorf("addresses %v, want %q", got.Addresses, tt.addr)
			}
		})
	}
	// A status written earlier keeps its transition times when nothing
	// changed, and the DeepEqual check then skips the write.
	old := metav1.NewTime(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	first := gatewayStatus(gw, d, &pb.ObjectStatus{Address: "192.0.2.7"})
	for i := range first.Conditions {
		first.Conditions[i].LastTransitionTime = old
	}
	gw.Status = first
	again := gatewayStatus(gw, d, &pb.ObjectStatus{Address: "192.0.2.7"})
	if c := find(again.Conditions, "Programmed"); !c.LastTransitionTime.Equal(&old) {
		t.Errorf("Programmed transition time moved to %v", c.LastTransitionTime)
	}
}

// TestRouteParentsKeepOtherControllers: the agent replaces only its own
// entries of status.parents.
func TestRouteParentsKeepOtherControllers(t *testing.T) {
	theirs := gwv1.RouteParentStatus{ParentRef: gwv1.ParentReference{Name: "their-gw"}, ControllerName: "example.com/gw"}
	stale := gwv1.RouteParentStatus{ParentRef: gwv1.ParentReference{Name: "gone"}, ControllerName: translate.GatewayController}
	ours := gwv1.RouteParentStatus{ParentRef: gwv1.ParentReference{Name: "gw"}, ControllerName: translate.GatewayController,
		Conditions: []metav1.Condition{{Type: "Accepted", Status: metav1.ConditionTrue, Reason: "Accepted", ObservedGeneration: 1}}}
	got := routeParents([]gwv1.RouteParentStatus{theirs, stale}, []gwv1.RouteParentStatus{ours}, translate.GatewayController)
	if len(got) != 2 || got[0].ParentRef.Name != "their-gw" || got[1].ParentRef.Name != "gw" || got[1].Conditions[0].LastTransitionTime.IsZero() {
		t.Fatalf("parents = %+v", got)
	}
}
