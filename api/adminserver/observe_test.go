package adminserver

import (
	"context"
	"testing"

	"github.com/teapot-lb/teapot-lb/api"
	pb "github.com/teapot-lb/teapot-lb/api/proto/teapotv1"
)

// certStore stores acme/shop (routing shop.acme.example) and answers
// Observe with the events its hosts select for the request.
type certStore struct {
	Store
	events []*pb.Event
}

func (c *certStore) Get(_ context.Context, ref *pb.ObjectRef) (*pb.Object, error) {
	if ref.GetKind() == api.KindLoadBalancer && ref.GetTenant() == "acme" && ref.GetName() == "shop" {
		return &pb.Object{Kind: &pb.Object_LoadBalancer{LoadBalancer: &pb.LoadBalancer{Tenant: "acme", Name: "shop",
			Routes: []*pb.Route{{Host: "shop.acme.example"}}}}}, nil
	}
	return nil, api.ErrNotFound
}

func (c *certStore) Observe(_ context.Context, req *pb.ObserveRequest) (*pb.ObserveResponse, error) {
	// As the hosts do: certificate events by tenant.
	h := &pb.HostObservation{NodeId: "n1", Reachable: true}
	for _, ev := range c.events {
		if ev.GetLoadBalancer() == req.GetLoadBalancer() || ev.GetTenant() == "acme" {
			h.Events = append(h.Events, ev)
		}
	}
	return &pb.ObserveResponse{Hosts: []*pb.HostObservation{h}}, nil
}

// Observe and Events of one load balancer keep the certificate events of
// the names it routes and drop the tenant's others.
func TestCertEventsOfALoadBalancer(t *testing.T) {
	t.Parallel()
	st := &certStore{events: []*pb.Event{
		{Seq: 1, NodeId: "n1", Type: "cert-issued", Tenant: "acme", Host: "shop.acme.example"},
		{Seq: 2, NodeId: "n1", Type: "cert-failed", Tenant: "acme", Host: "old.acme.example"},
		{Seq: 3, NodeId: "n1", Type: "member-down", Tenant: "acme", LoadBalancer: "acme/shop"},
	}}
	s := New(st)
	obs, err := s.Observe(context.Background(), &pb.ObserveRequest{LoadBalancer: "acme/shop"})
	if err != nil {
		t.Fatal(err)
	}
	if evs := obs.GetHosts()[0].GetEvents(); len(evs) != 2 || evs[0].GetSeq() != 1 || evs[1].GetSeq() != 3 {
		t.Errorf("Observe acme/shop: events %v, want 1 and 3", evs)
	}
	resp, err := s.Events(context.Background(), &pb.EventsRequest{LoadBalancer: "acme/gone"})
	if err != nil {
		t.Fatal(err)
	}
	for _, ev := range resp.GetEvents() {
		if ev.GetHost() != "" {
			t.Errorf("Events of a load balancer not stored: certificate event %v", ev)
		}
	}
}
