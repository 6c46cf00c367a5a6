package cli_test

import (
	"context"
	"net"
	"sort"
	"strconv"
	"strings"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/teapot-lb/teapot-lb/api"
	"github.com/teapot-lb/teapot-lb/api/adminserver"
	"github.com/teapot-lb/teapot-lb/api/observe"
	pb "github.com/teapot-lb/teapot-lb/api/proto/teapotv1"
)

// Observe answers with f.hosts when a test set them, and otherwise with
// two hosts that serve every stored load balancer: listeners bound,
// members healthy, the VIP held by lb1. It filters like the real hosts.
func (f *fakeAdmin) Observe(_ context.Context, req *pb.ObserveRequest) (*pb.ObserveResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	hosts := f.hosts
	if hosts == nil {
		hosts = f.servingHosts()
	}
	flt := observe.FilterOf(req)
	out := &pb.ObserveResponse{Revision: f.rev, Time: timestamppb.New(f.now)}
	for _, h := range hosts {
		if req.GetNode() != "" && h.GetNodeId() != req.GetNode() {
			continue
		}
		out.Hosts = append(out.Hosts, filterHost(h, flt, req))
	}
	if lb := req.GetLoadBalancer(); lb != "" {
		// as the admin API server does: certificate events of the names
		// the load balancer serves
		t, n, _ := strings.Cut(lb, "/")
		observe.KeepCertEventsOf(out.Hosts, f.objs[key(&pb.ObjectRef{Kind: api.KindLoadBalancer, Tenant: t, Name: n})].GetLoadBalancer())
	}
	return out, nil
}

func (f *fakeAdmin) Events(ctx context.Context, req *pb.EventsRequest) (*pb.EventsResponse, error) {
	obs, err := f.Observe(ctx, &pb.ObserveRequest{Tenant: req.GetTenant(), LoadBalancer: req.GetLoadBalancer(), Node: req.GetNode(), EventsAfter: req.GetAfter(), EventsOnly: true})
	if err != nil {
		return nil, err
	}
	return adminserver.MergeEvents(obs, req.GetAfter()), nil
}

// servingHosts is what two healthy hosts would report (under f.mu).
func (f *fakeAdmin) servingHosts() []*pb.HostObservation {
	var keys []string
	for k, o := range f.objs {
		if o.GetLoadBalancer() != nil {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	var out []*pb.HostObservation
	for _, id := range []string{"lb1", "lb2"} {
		h := &pb.HostObservation{NodeId: id, Reachable: true, Revision: f.rev, Time: timestamppb.New(f.now)}
		for _, k := range keys {
			lb := f.objs[k].GetLoadBalancer()
			name := lb.GetTenant() + "/" + lb.GetName()
			addrs := api.StatusAddresses(lb)
			for _, addr := range addrs {
				for i, l := range lb.GetListeners() {
					h.Listeners = append(h.Listeners, &pb.ListenerObservation{LoadBalancer: name, Index: uint32(i),
						Address: net.JoinHostPort(addr, strconv.Itoa(int(l.GetPort()))), Protocol: l.GetProtocol(), Bound: true,
						Since: timestamppb.New(f.now.Add(-time.Hour))})
				}
			}
			var pools []string
			for p := range lb.GetPools() {
				pools = append(pools, p)
			}
			sort.Strings(pools)
			for _, p := range pools {
				po := &pb.PoolObservation{LoadBalancer: name, Pool: p}
				for _, m := range lb.GetPools()[p].GetMembers() {
					po.Members = append(po.Members, &pb.MemberObservation{Address: m.GetAddress(), Healthy: true, LastCheck: timestamppb.New(f.now.Add(-2 * time.Second))})
				}
				h.Pools = append(h.Pools, po)
			}
			h.Traffic = append(h.Traffic, &pb.TrafficObservation{LoadBalancer: name, Requests: map[string]uint64{"2xx": 1200, "4xx": 12, "5xx": 3},
				ActiveConnections: 4, Connections: 310, BytesIn: 52_000, BytesOut: 3_400_000, P99Seconds: 0.025})
			state, reason := "released", "lb1 holds it"
			if id == "lb1" {
				state, reason = "holding", "ranked first among live hosts"
			}
			for _, r := range lb.GetRoutes() {
				if r.GetHost() != "" {
					d := &pb.DNSNameObservation{LoadBalancer: name, Name: r.GetHost() + ".", Address: addrs[0], Answered: true}
					if id == "lb2" {
						d.Answered, d.Reason = false, "pools.web: no member is up"
					}
					h.DnsNames = append(h.DnsNames, d)
				}
			}
			for _, addr := range addrs {
				h.Vips = append(h.Vips, &pb.VIPHolding{Address: addr, Mode: "arp", State: state, Reason: reason,
					Since: timestamppb.New(f.now.Add(-3 * time.Hour)), LoadBalancers: []string{name}})
			}
		}
		out = append(out, h)
	}
	return out
}

// filterHost keeps what req selects of h.
func filterHost(h *pb.HostObservation, f observe.Filter, req *pb.ObserveRequest) *pb.HostObservation {
	out := &pb.HostObservation{NodeId: h.NodeId, Reachable: h.Reachable, Error: h.Error, Time: h.Time, Revision: h.Revision, Draining: h.Draining, LastEvent: h.LastEvent}
	for _, ev := range h.Events {
		if ev.Seq > req.GetEventsAfter()[h.NodeId] && f.MatchEvent(ev) {
			out.Events = append(out.Events, ev)
		}
	}
	if req.GetEventsOnly() {
		return out
	}
	for _, l := range h.Listeners {
		if f.MatchLB(l.LoadBalancer) {
			out.Listeners = append(out.Listeners, l)
		}
	}
	for _, p := range h.Pools {
		if f.MatchLB(p.LoadBalancer) {
			out.Pools = append(out.Pools, p)
		}
	}
	for _, tr := range h.Traffic {
		if f.MatchLB(tr.LoadBalancer) {
			out.Traffic = append(out.Traffic, tr)
		}
	}
	for _, p := range h.Problems {
		if f.MatchLB(p.LoadBalancer) {
			out.Problems = append(out.Problems, p)
		}
	}
	for _, d := range h.DnsNames {
		if f != (observe.Filter{}) && f.MatchLB(d.LoadBalancer) {
			out.DnsNames = append(out.DnsNames, d)
		}
	}
	if f.Tenant == "" && f.LB == "" {
		out.DnsZones = h.DnsZones // as proxy/dns does: the host's zones, to a whole-host observation only
	}
	for _, v := range h.Vips {
		for _, lb := range v.LoadBalancers {
			if f.MatchLB(lb) {
				out.Vips = append(out.Vips, v)
				break
			}
		}
	}
	for _, b := range h.TenantBgp {
		if f.MatchTenant(b.Tenant) {
			out.TenantBgp = append(out.TenantBgp, b)
		}
	}
	for _, u := range h.TenantUsage {
		if f.MatchTenant(u.Tenant) {
			out.TenantUsage = append(out.TenantUsage, u)
		}
	}
	for _, a := range h.TenantAttachments {
		if f.MatchTenant(a.Tenant) {
			out.TenantAttachments = append(out.TenantAttachments, a)
		}
	}
	for _, c := range h.Certificates {
		if f.MatchTenant(c.Tenant) {
			out.Certificates = append(out.Certificates, c)
		}
	}
	return proto.Clone(out).(*pb.HostObservation)
}
