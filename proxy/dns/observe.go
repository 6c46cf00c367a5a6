package dns

import (
	"slices"
	"strings"

	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/teapot-lb/teapot-lb/api/observe"
	pb "github.com/teapot-lb/teapot-lb/api/proto/teapotv1"
)

var _ observe.Source = (*Server)(nil)

// Observe adds what this host's DNS answers for the names of the load
// balancers f selects: each name and address, answered or why not, and
// the names left out of the table. An observation of the whole host (no
// tenant, no load balancer) gets no names (it would list every one) but
// the zones served, with the DS and DNSKEY of those signed. Safe on a nil
// Server.
func (s *Server) Observe(f observe.Filter, h *pb.HostObservation) {
	if s == nil {
		return
	}
	if f.Tenant == "" && f.LB == "" {
		h.DnsZones = append(h.DnsZones, s.zoneObservations()...)
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

// zoneObservations are the zones served and the public parts of their
// keys: never the private key.
func (s *Server) zoneObservations() []*pb.DNSZoneObservation {
	var out []*pb.DNSZoneObservation
	for _, z := range s.table.Load().zones {
		o := &pb.DNSZoneObservation{Zone: z.name}
		if s.sec != nil && s.sec.zones[z.name] {
			o.Signed = true
			if k := s.sec.key(z.name); k != nil {
				o.Ds, o.Dnskey, o.KeyTag = dsText(k), strings.ReplaceAll(k.dnskey.String(), "\t", " "), uint32(k.tag)
				rolloverObservation(o, s.sec.zoneKeysOf(z.name))
			} else if o.Error = s.sec.keyErr(z.name); o.Error == "" {
				o.Error = "the key is being loaded from the replicated state"
			}
		}
		for _, st := range s.PushStatus() {
			if st.Zone == z.name {
				o.Push = pushObservation(st)
			}
		}
		out = append(out, o)
	}
	slices.SortFunc(out, func(a, b *pb.DNSZoneObservation) int { return strings.Compare(a.Zone, b.Zone) })
	return out
}

func pushObservation(st PushStatus) *pb.DNSPushObservation {
	o := &pb.DNSPushObservation{Server: st.Server, Key: strings.TrimSuffix(st.Key, "."), Active: st.Active,
		Records: uint32(st.Records), Pushed: st.Pushed, Updates: st.Updates, Failures: st.Failures, LastError: st.LastError}
	if !st.LastSuccess.IsZero() {
		o.LastSuccess = timestamppb.New(st.LastSuccess)
	}
	if !st.LastErrorAt.IsZero() {
		o.LastErrorAt = timestamppb.New(st.LastErrorAt)
	}
	return o
}
