package web

import (
	"context"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	pb "github.com/teapot-lb/teapot-lb/api/proto/teapotv1"
)

// TestTenantAttachmentView: each tenant's attachment on every host, with
// its state (up, failed with the reason, not-listed) and since when, and
// the pools that live in attachments, are in the streamed snapshot; a
// host that stops answering keeps its last report, marked unreachable
// with when it was observed, never fresh.
func TestTenantAttachmentView(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	since := now.Add(-90 * time.Second)
	att := func(state, reason string) []*pb.TenantAttachmentObservation {
		return []*pb.TenantAttachmentObservation{{Tenant: "acme", Namespace: "teapot-att-acme", State: state, Reason: reason, Vni: 1001,
			Address: "10.0.0.2/24", Since: timestamppb.New(since)}}
	}
	hosts := []*pb.HostObservation{
		{NodeId: "n1", Reachable: true, TenantAttachments: att("up", "")},
		{NodeId: "n2", Reachable: true, TenantAttachments: att("failed", "add VXLAN device (VNI 1001, port 4789): file exists "+hostile)},
	}
	tenant := acmeTenant()
	pool := &pb.Object{Kind: &pb.Object_VipPool{VipPool: &pb.VIPPool{Name: "acme-private", Cidrs: []string{"10.0.0.100/32"}, Mode: "arp", Attachment: "acme"}}}
	c := &netCluster{cluster: &cluster{
		status: &pb.ClusterStatusResponse{LeaderId: "n1", Nodes: []*pb.NodeStatus{node("n1", "leader", true), node("n2", "follower", true)}},
		obs:    &pb.ObserveResponse{Hosts: hosts},
		objs:   map[string][]*pb.Object{"Tenant": {tenant}, "VIPPool": {pool}},
	}}
	s, get := newNetServer(t, c, &now)
	snap := s.current(0, time.Time{}).Snapshot
	if len(snap.Attachments) != 1 || len(snap.Attachments[0].Hosts) != 2 {
		t.Fatalf("attachments in the snapshot: %+v", snap.Attachments)
	}
	n1, n2 := snap.Attachments[0].Hosts[0], snap.Attachments[0].Hosts[1]
	if n1.Node != "n1" || n1.State != "up" || !n1.Since.Equal(since) || !n1.Reachable || !n1.Observed.Equal(now) || n1.VNI != 1001 || n1.Address != "10.0.0.2/24" {
		t.Errorf("n1: %+v", n1)
	}
	if n2.State != "failed" || !strings.Contains(n2.Reason, "file exists") {
		t.Errorf("n2: %+v", n2)
	}
	if len(snap.Pools) != 1 || snap.Pools[0].Attachment != "acme" {
		t.Errorf("pools: %+v", snap.Pools)
	}
	_, body := get("/api/snapshot")
	if !strings.Contains(string(body), `"attachments":[{"tenant":"acme"`) || !strings.Contains(string(body), `"attachment":"acme"`) || strings.Contains(string(body), "<img") {
		t.Errorf("the streamed snapshot: attachments and the pool's attachment, markup escaped: %.400s", body)
	}

	// n2 stops answering: its report stays, unreachable, observed at first.
	first := now
	now = now.Add(10 * time.Second)
	c.set(func() {
		c.obs = &pb.ObserveResponse{Hosts: []*pb.HostObservation{hosts[0], {NodeId: "n2", Error: "connection refused"}}}
	})
	s.refresh(context.Background())
	snap = s.current(0, time.Time{}).Snapshot
	n1, n2 = snap.Attachments[0].Hosts[0], snap.Attachments[0].Hosts[1]
	if !n1.Reachable || !n1.Observed.Equal(now) || n2.Reachable || !n2.Observed.Equal(first) || n2.Error != "connection refused" || n2.State != "failed" {
		t.Errorf("after n2 stopped answering: n1 %+v; n2 %+v", n1, n2)
	}
}
