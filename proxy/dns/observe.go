package dns

import (
	"slices"
	"strings"

	"github.com/teapot-lb/teapot-lb/api/observe"
	pb "github.com/teapot-lb/teapot-lb/api/proto/teapotv1"
)

var _ observe.Source = (*Server)(nil)

// Observe adds what this host's DNS answers for the names of the load
// balancers f selects: each name and address, answered or why not, and
// the names left out of the table. An observation of the whole host (no
// tenant, no load balancer) gets none: it would list every name. Safe on
// a nil Server.
func (s *Server) Observe(f observe.Filter, h *pb.HostObservation) {
	if s == nil || f == (observe.Filter{}) {
		return
	}
	t := s.table.Load()
	var out []*pb.DNSNameObservation
	add := func(name string, ts []Target) {
		for _, tg := range ts {
			if !f.MatchLB(tg.LB) {
				continue
			}
			why := s.Serves(tg)
			out = append(out, &pb.DNSNameObservation{LoadBalancer: tg.LB, Name: name, Address: tg.Addr.String(), Answered: why == "", Reason: why})
		}
	}
	for n, ts := range t.names {
		add(n, ts)
	}
	for n, ts := range t.wild {
		add("*."+n, ts)
	}
	for _, l := range t.left {
		if f.MatchLB(l.LB) {
			out = append(out, &pb.DNSNameObservation{LoadBalancer: l.LB, Name: l.Name, Reason: l.Reason})
		}
	}
	slices.SortFunc(out, func(a, b *pb.DNSNameObservation) int {
		return strings.Compare(a.LoadBalancer+" "+a.Name+" "+a.Address, b.LoadBalancer+" "+b.Name+" "+b.Address)
	})
	h.DnsNames = append(h.DnsNames, out...)
}
