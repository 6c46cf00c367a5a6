package web

import (
	"context"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	pb "github.com/teapot-lb/teapot-lb/api/proto/teapotv1"
)

// attachedOn is a host that reports acme's attachment in state, since.
func attachedOn(id, state, reason string, since time.Time) *pb.HostObservation {
	return &pb.HostObservation{NodeId: id, Reachable: true, TenantAttachments: []*pb.TenantAttachmentObservation{{
		Tenant: "acme", Namespace: "teapot-att-acme", State: state, Reason: reason, Vni: 4100, Address: "10.20.0.2/24", Since: timestamppb.New(since)}}}
}

// TestTenantAttachmentView: the stream carries each host's state of a
// tenant's attachment (the reason cut to its bound) with when the host
// reported it; a host that stops answering keeps its last report, marked
// unreachable, with its time.
func TestTenantAttachmentView(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	since := now.Add(-time.Hour)
	hosts := []*pb.HostObservation{attachedOn("n1", "up", "", since), attachedOn("n2", "failed", hostile+strings.Repeat("r", 1000), since)}
	c := &netCluster{cluster: &cluster{
		status: &pb.ClusterStatusResponse{LeaderId: "n1", Nodes: []*pb.NodeStatus{node("n1", "leader", true), node("n2", "follower", true)}},
		obs:    &pb.ObserveResponse{Hosts: hosts},
		objs:   map[string][]*pb.Object{"Tenant": {acmeTenant()}},
	}}
	s, get := newNetServer(t, c, &now)
	at := s.current(0, time.Time{}).Snapshot.Attachments
	if len(at) != 1 || at[0].Tenant != "acme" || len(at[0].Hosts) != 2 {
		t.Fatalf("attachments in the snapshot: %+v", at)
	}
	n1, n2 := at[0].Hosts[0], at[0].Hosts[1]
	if n1.Node != "n1" || n1.State != "up" || !n1.Reachable || !n1.Observed.Equal(now) || !n1.Since.Equal(since) || n1.VNI != 4100 || n1.Address != "10.20.0.2/24" {
		t.Errorf("n1: %+v", n1)
	}
	if n2.State != "failed" || !strings.HasPrefix(n2.Reason, hostile) || len(n2.Reason) > textMax+30 {
		t.Errorf("n2: %+v", n2)
	}
	if _, body := get("/api/snapshot"); !strings.Contains(string(body), `"attachments":[{"tenant":"acme"`) || strings.Contains(string(body), "<img") {
		t.Errorf("the streamed snapshot: %.300s", body)
	}

	first := now
	now = now.Add(10 * time.Second)
	c.set(func() {
		c.obs = &pb.ObserveResponse{Hosts: []*pb.HostObservation{hosts[0], {NodeId: "n2", Error: "connection refused"}}}
	})
	s.refresh(context.Background())
	at = s.current(0, time.Time{}).Snapshot.Attachments
	n1, n2 = at[0].Hosts[0], at[0].Hosts[1]
	if !n1.Reachable || !n1.Observed.Equal(now) || n2.Reachable || !n2.Observed.Equal(first) || n2.Error != "connection refused" || n2.State != "failed" {
		t.Errorf("after n2 stopped answering: n1 %+v; n2 %+v", n1, n2)
	}
}
