package web

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	pb "github.com/teapot-lb/teapot-lb/api/proto/teapotv1"
)

// With the only host gone, the dashboard never shows the last data as
// live: the host unreachable with the age of its data, the VIP's holder
// unknown, the load balancer Unknown with its last status, and the
// error once with a count. It recovers by itself.
func TestNoHostAnswers(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	c := &cluster{
		status: &pb.ClusterStatusResponse{LeaderId: "n1", Nodes: []*pb.NodeStatus{node("n1", "leader", true, holding("192.0.2.200", "holding", "ranks first"))}},
		obs:    &pb.ObserveResponse{Hosts: []*pb.HostObservation{hostObs("n1", "")}},
		objs:   map[string][]*pb.Object{"LoadBalancer": {shop()}},
	}
	s, err := New(Config{Source: c, Now: func() time.Time { return now }})
	if err != nil {
		t.Fatal(err)
	}
	read := func() *Snapshot {
		t.Helper()
		s.refresh(context.Background())
		now = now.Add(time.Second)
		return s.current(0, time.Time{}).Snapshot
	}
	first := now
	v := read()
	if !v.Reachable || !v.Cluster.Nodes[0].Reachable || !v.Cluster.Nodes[0].Observed.Equal(first) || v.LBs[0].Status != StatusServing ||
		strings.Join(v.LBs[0].HeldBy, ",") != "n1" || v.LBs[0].Hosts[0].Observed != first || v.StaleAfterSeconds != 3 {
		t.Fatalf("healthy read: %+v", v)
	}

	c.set(func() { c.down = errors.New("rpc error: code = Unavailable desc = connection refused") })
	read()
	v = read()
	n := v.Cluster.Nodes[0]
	if v.Reachable || !v.ReadAt.Equal(first) || n.Reachable || n.Healthy || !n.Observed.Equal(first) {
		t.Errorf("the dead host: reachable %v, read at %v, node %+v; want unreachable with its data from %v", v.Reachable, v.ReadAt, n, first)
	}
	if h := v.Cluster.VIPs[0].Holders[0]; !h.Stale || !h.Observed.Equal(first) {
		t.Errorf("VIP holder %+v: want stale, observed %v", h, first)
	}
	lb := v.LBs[0]
	if lb.Status != StatusUnknown || lb.LastStatus != StatusServing || len(lb.HeldBy) != 0 || strings.Join(lb.HeldByStale, ",") != "n1" ||
		lb.Hosts[0].Reachable || !strings.Contains(strings.Join(lb.Reasons, ""), "no LB host answered") {
		t.Errorf("load balancer while no host answers: %+v", lb)
	}
	if len(v.Errors) != 1 || v.Errors[0].Count != 2 || len(v.Errors[0].Parts) != 7 || !v.Errors[0].Since.Equal(first.Add(time.Second)) {
		t.Errorf("errors %+v: want one line, 7 parts, 2 reads in a row", v.Errors)
	}

	c.set(func() { c.down = nil })
	v = read()
	if !v.Reachable || !v.Cluster.Nodes[0].Reachable || v.LBs[0].Status != StatusServing || strings.Join(v.LBs[0].HeldBy, ",") != "n1" || len(v.Errors) != 0 {
		t.Errorf("after the host came back: %+v", v)
	}
	var kinds []string
	for _, e := range s.current(0, time.Time{}).Events {
		kinds = append(kinds, e.Message)
	}
	if got := strings.Join(kinds, "\n"); !strings.Contains(got, "acme/shop Serving → Unknown") || !strings.Contains(got, "acme/shop Unknown → Serving") {
		t.Errorf("timeline:\n%s", got)
	}
}

// One host of two does not answer: it is unreachable, never healthy, and
// the VIP it held is unknown, while the other host's data is live.
func TestOneHostDoesNotAnswer(t *testing.T) {
	t.Parallel()
	c := &cluster{
		status: &pb.ClusterStatusResponse{LeaderId: "n2", Nodes: []*pb.NodeStatus{
			node("n1", "follower", true, holding("192.0.2.200", "holding", "ranks first")), node("n2", "leader", true)}},
		obs:  &pb.ObserveResponse{Hosts: []*pb.HostObservation{{NodeId: "n1", Error: "context deadline exceeded"}, hostObs("n2", "")}},
		objs: map[string][]*pb.Object{"LoadBalancer": {shop()}},
	}
	v, obs := gather(context.Background(), c, time.Now(), nil)
	f := freshness{seen: map[string]time.Time{}}
	f.settle(nil, v, obs, time.Second)
	if n := v.Cluster.Nodes[0]; n.ID != "n1" || n.Reachable || n.Healthy || !n.Observed.IsZero() {
		t.Errorf("n1 %+v: want unreachable, never observed", n)
	}
	if n := v.Cluster.Nodes[1]; !n.Reachable || !n.Healthy {
		t.Errorf("n2 %+v: want reachable and healthy", n)
	}
	if lb := v.LBs[0]; len(lb.HeldBy) != 0 || strings.Join(lb.HeldByStale, ",") != "n1" {
		t.Errorf("held by %v, last known %v: want n1 unknown", lb.HeldBy, lb.HeldByStale)
	}
	if n := v.Cluster.Nodes[0]; n.Error != "context deadline exceeded" {
		t.Errorf("n1's error %q, want the observation's", n.Error)
	}

	// n1 answered before: its last view of the load balancer stays, marked
	// as from a host that does not answer.
	c.set(func() { c.obs.Hosts[0] = hostObs("n1", "") })
	prev, obs := gather(context.Background(), c, time.Now(), nil)
	f.settle(nil, prev, obs, time.Second)
	c.set(func() { c.obs.Hosts[0] = &pb.HostObservation{NodeId: "n1", Error: "context deadline exceeded"} })
	v, obs = gather(context.Background(), c, time.Now(), nil)
	f.settle(prev, v, obs, time.Second)
	if h := v.LBs[0].Hosts[0]; h.Node != "n1" || h.Reachable || len(h.Members) != 2 || h.Observed.IsZero() {
		t.Errorf("n1's view of acme/shop %+v: want its last members, unreachable, with their age", h)
	}
}

// A member shared by two load balancers changes once on the timeline,
// naming both; certificate events keep their tenant and name.
func TestSharedMemberEventOnce(t *testing.T) {
	t.Parallel()
	ev := func(seq uint64, lb, pool string) *pb.Event {
		return &pb.Event{Seq: seq, NodeId: "n1", Type: "member-down", Severity: "warning", LoadBalancer: lb, Time: timestamppb.Now(),
			Message: "member 192.0.2.51:8080 of pool " + pool + " is down: connect: connection refused"}
	}
	h := &pb.HostObservation{NodeId: "n1", Reachable: true, Events: []*pb.Event{
		ev(1, "acme/shop", "web"), ev(2, "acme/blog", "api"), ev(3, "beta/x", "web"),
		{Seq: 4, NodeId: "n1", Type: "cert-issued", Tenant: "acme", Host: "shop.acme.example", Message: "certificate for shop.acme.example obtained"},
	}}
	got := hostEvents(h, 0)
	if len(got) != 2 || strings.Join(got[0].Subjects, ",") != "acme/shop,acme/blog,beta/x" ||
		got[0].Message != "n1: member 192.0.2.51:8080 of pool web is down: connect: connection refused (acme/shop); also acme/blog (pool api); also beta/x (pool web)" {
		t.Fatalf("events %+v", got)
	}
	if got[1].Tenant != "acme" || got[1].Host != "shop.acme.example" {
		t.Errorf("certificate event %+v", got[1])
	}
	if again := hostEvents(h, 4); len(again) != 0 {
		t.Errorf("events already seen: %+v", again)
	}
}
