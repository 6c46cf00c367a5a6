package cli_test

import (
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	pb "github.com/teapot-lb/teapot-lb/api/proto/teapotv1"
)

// withTraffic: both hosts serve acme/shop. Over the last interval of its
// ring (ended 4 s ago) lb1 saw 90 req/s, 10 % of them 5xx, p99 180 ms,
// mostly to 10.20.0.11; lb2 saw 30 req/s (its interval ended 7 s ago)
// and reports 70 more members than its 64 busiest. 10.20.0.12 has 3
// requests in flight on lb1.
func withTraffic(f *fakeAdmin) []*pb.HostObservation {
	hosts := f.servingHosts()
	at := func(ago time.Duration) *timestamppb.Timestamp { return timestamppb.New(f.now.Add(-ago)) }
	member := func(addr string, rps, errShare, p99 float64, ago time.Duration) *pb.MemberTraffic {
		return &pb.MemberTraffic{Pool: "web", Address: addr, RequestsPerSecond: rps, ErrorShare: errShare, P99Seconds: p99, Time: at(ago), IntervalSeconds: 10}
	}
	hosts[0].Traffic = append(hosts[0].Traffic, &pb.TrafficObservation{LoadBalancer: "acme/shop", ActiveConnections: 12,
		Last: &pb.HistoryPoint{Time: at(4 * time.Second), RequestsPerSecond: 90, ErrorShare: 0.1, P99Seconds: 0.18},
		Members: []*pb.MemberTraffic{
			member("10.20.0.11:30080", 80, 0.1125, 0.18, 4*time.Second),
			member("10.20.0.12:30080", 10, 0, 0.05, 4*time.Second),
		}})
	hosts[1].Traffic = append(hosts[1].Traffic, &pb.TrafficObservation{LoadBalancer: "acme/shop", ActiveConnections: 3,
		Last:    &pb.HistoryPoint{Time: at(7 * time.Second), RequestsPerSecond: 30, ErrorShare: 0, P99Seconds: 0.04},
		Members: []*pb.MemberTraffic{member("10.20.0.12:30080", 30, 0, 0.04, 7*time.Second)}, MembersOmitted: 70})
	for _, p := range hosts[0].Pools {
		if p.LoadBalancer == "acme/shop" {
			for _, m := range p.Members {
				if m.Address == "10.20.0.12:30080" {
					m.InFlight = 3
				}
			}
		}
	}
	return hosts
}
