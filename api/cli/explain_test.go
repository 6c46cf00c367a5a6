package cli_test

import (
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/teapot-lb/teapot-lb/api"
	"github.com/teapot-lb/teapot-lb/api/observe"
	pb "github.com/teapot-lb/teapot-lb/api/proto/teapotv1"
)

// Fixtures of what the hosts see, for the explain and get goldens.

func event(f *fakeAdmin, node string, seq uint64, ago time.Duration, typ, severity, lb, msg string) *pb.Event {
	tenant := ""
	if lb != "" {
		tenant = lb[:len(lb)-len(lb[indexSlash(lb):])]
	}
	return &pb.Event{Seq: seq, NodeId: node, Time: timestamppb.New(f.now.Add(-ago)), Type: typ, Severity: severity, Tenant: tenant, LoadBalancer: lb, Message: msg}
}

func indexSlash(s string) int {
	for i := range s {
		if s[i] == '/' {
			return i
		}
	}
	return len(s)
}

// membersDown: every member of acme/shop fails its health check on
// every host.
func membersDown(f *fakeAdmin) []*pb.HostObservation {
	hosts := f.servingHosts()
	for i, h := range hosts {
		for _, p := range h.Pools {
			if p.LoadBalancer != "acme/shop" {
				continue
			}
			for _, m := range p.Members {
				m.Healthy, m.Down = false, true
				m.Reason = "health check fails: GET /healthz: 503 Service Unavailable"
			}
		}
		h.Problems = append(h.Problems, &pb.LoadBalancerProblem{LoadBalancer: "acme/shop", Field: "pools", Reason: "no healthy member in any of its pools"})
		h.Events = []*pb.Event{
			event(f, h.NodeId, 7, time.Duration(5-i)*time.Minute, observe.EventMemberDown, observe.Warning, "acme/shop", "member 10.20.0.11:30080 of pool web is down: health check fails: GET /healthz: 503 Service Unavailable"),
			event(f, h.NodeId, 8, time.Duration(4-i)*time.Minute, observe.EventMemberDown, observe.Warning, "acme/shop", "member 10.20.0.12:30080 of pool web is down: health check fails: GET /healthz: 503 Service Unavailable"),
		}
		h.LastEvent = 8
	}
	return hosts
}

// certEvents: both hosts serve; lb1 obtained acme/shop's certificate
// (shop.acme.example) and failed one for a name no load balancer of acme
// routes (old.acme.example).
func certEvents(f *fakeAdmin) []*pb.HostObservation {
	hosts := f.servingHosts()
	cert := func(seq uint64, ago time.Duration, typ, severity, host, msg string) *pb.Event {
		ev := event(f, "lb1", seq, ago, typ, severity, "", msg)
		ev.Tenant, ev.Host = "acme", host
		return ev
	}
	hosts[0].Events = []*pb.Event{
		cert(3, 9*time.Minute, observe.EventCertFailed, observe.Warning, "old.acme.example", "certificate for old.acme.example not obtained: acme: no route"),
		cert(4, 8*time.Minute, observe.EventCertIssued, observe.Info, "shop.acme.example", "certificate for shop.acme.example obtained"),
	}
	hosts[0].LastEvent = 4
	return hosts
}

// unboundOnLB2: lb2 cannot bind acme/shop's port 443 (another process
// holds it); lb1 serves.
func unboundOnLB2(f *fakeAdmin) []*pb.HostObservation {
	hosts := f.servingHosts()
	lb2 := hosts[1]
	for _, l := range lb2.Listeners {
		if l.LoadBalancer == "acme/shop" && l.Index == 0 {
			l.Bound = false
			l.Error = "listen tcp4 192.0.2.1:443: bind: address already in use"
			l.Since = timestamppb.New(f.now.Add(-10 * time.Minute))
			lb2.Problems = append(lb2.Problems, &pb.LoadBalancerProblem{LoadBalancer: "acme/shop", Field: "listeners[0]",
				Reason: "cannot listen on 192.0.2.1:443/tcp: " + l.Error + "; retried with backoff (free the port or move the listener)"})
		}
	}
	lb2.Events = []*pb.Event{
		event(f, "lb2", 3, 10*time.Minute, observe.EventBindFailed, observe.Warning, "acme/shop", "listeners[0] cannot listen on 192.0.2.1:443/tcp: listen tcp4 192.0.2.1:443: bind: address already in use"),
	}
	lb2.LastEvent = 3
	hosts[0].Events = []*pb.Event{event(f, "lb1", 12, time.Hour, observe.EventLeaderChange, observe.Info, "", "leader is now lb1")}
	hosts[0].LastEvent = 12
	return hosts
}

// dnsZonesOnLB2: lb2 answers DNS for a signed zone, a zone whose key is
// not loaded yet and an unsigned one.
func dnsZonesOnLB2(f *fakeAdmin) []*pb.HostObservation {
	hosts := f.servingHosts()
	hosts[1].DnsZones = []*pb.DNSZoneObservation{
		{Zone: "acme.example.", Signed: true, KeyTag: 40490,
			Ds:     "acme.example. 3600 IN DS 40490 13 2 61868713D675031208F1BDF122952E84DF2F1704C3D06E7A8239463F904CFBC5",
			Dnskey: "acme.example. 3600 IN DNSKEY 257 3 13 nG/LRCrc6iLhhQkrxSspCZVhmoCfdH7k6vGpGh0duMij7Bkp/E5aWvK0s7pk1h6GaykveQX+ZJx9s2eTr8CmSg==",
			// A key rollover in progress: both DS shown.
			NextKeyTag: 13702, NextDs: "acme.example. 3600 IN DS 13702 13 2 0DF5E6C9B1E5A3DC0F5D52E0A7E3D1C2B0A9F8E7D6C5B4A3928170605040302F",
			NextDnskey:          "acme.example. 3600 IN DNSKEY 257 3 13 ZmFrZSBrZXkgZm9yIHRoZSBnb2xkZW4gb2YgZXhwbGFpbiBub2RlLCBub3QgYSBwb2ludA==",
			RolloverStarted:     timestamppb.New(f.now.Add(-10 * time.Minute)),
			RolloverFinishAfter: timestamppb.New(f.now.Add(50 * time.Minute))},
		{Zone: "globex.example.", Signed: true, Error: "lock the key of globex.example.: no leader"},
		{Zone: "lb.example.com.", Signed: false, Push: &pb.DNSPushObservation{Server: "192.0.2.53:53", Key: "push", Active: true,
			Records: 12, Pushed: 14, Updates: 3, Failures: 1, LastSuccess: timestamppb.New(f.now.Add(-time.Minute)),
			LastErrorAt: timestamppb.New(f.now.Add(-2 * time.Minute)), LastError: "update of lb.example.com. at 192.0.2.53:53: the primary answered REFUSED: dns push failed"}},
	}
	return hosts
}

// refusedByValidation: the agent of acme sent a Service whose member lies
// outside the tenant's networks; lb1 refused it and nothing was stored.
func refusedByValidation(f *fakeAdmin) []*pb.HostObservation {
	hosts := f.servingHosts()
	hosts[0].Events = []*pb.Event{event(f, "lb1", 4, 2*time.Minute, observe.EventTenantRefused, observe.Warning, "acme/svc-default-web",
		"refused acme/svc-default-web: pools.default.members[0]: 192.168.1.5:30080 is outside the tenant's networks (10.20.0.0/16); ask the operator to add the network, or fix the Service's endpoints")}
	hosts[0].LastEvent = 4
	return hosts
}

// tenantBGP: acme peers with two speakers; lb1 has both sessions, one
// closed for its prefix count, and lb2 has no bgp: section.
func tenantBGP(f *fakeAdmin) []*pb.HostObservation {
	t := f.objs[key(&pb.ObjectRef{Kind: api.KindTenant, Name: "acme"})].GetTenant()
	t.Bgp = &pb.TenantBGP{Asn: 64600, Peers: []string{"10.20.0.5", "10.20.0.6"}, MaxPrefixes: 50, MaxPrefixesTotal: 80, Reannounce: true, Community: "64512:100"}
	hosts := f.servingHosts()
	since := timestamppb.New(f.now.Add(-90 * time.Second))
	hosts[0].TenantBgp = []*pb.TenantBGPObservation{{
		Tenant: "acme",
		Sessions: []*pb.TenantBGPSession{
			{Peer: "10.20.0.5", State: "established", Received: 3, Since: since},
			{Peer: "10.20.0.6", State: "prefix-limit", Reason: "announced more than maxPrefixes (50); dialled again 30s after it was closed", Since: since},
		},
		Accepted: []*pb.TenantRoute{{Prefix: "10.20.64.0/26", NextHop: "10.20.0.5", Peer: "10.20.0.5"}},
		Dropped: []*pb.TenantRoute{
			{Prefix: "0.0.0.0/0", NextHop: "10.20.0.5", Peer: "10.20.0.5", Reason: "default route"},
			{Prefix: "10.30.0.0/16", NextHop: "10.20.0.5", Peer: "10.20.0.5", Reason: "outside the tenant's networks"},
		},
		AcceptedCount: 1, DroppedCount: 2,
		Reannounced: 1, ReannounceSince: since, FabricSessions: 2,
	}}
	hosts[1].TenantBgp = []*pb.TenantBGPObservation{{Tenant: "acme", Problem: "this host has no bgp: section in its serve config (bgp.asn): it does not peer with the tenant's speakers nor install their routes"}}
	return hosts
}

// tenantCPU: acme, at half a core, used 0.1 of a core over lb1's last
// window and was held in debt twice; lb2 finds it in debt now. (explain-tenant shows hosts that report no
// budget: an earlier release.)
func tenantCPU(f *fakeAdmin) []*pb.HostObservation {
	t := f.objs[key(&pb.ObjectRef{Kind: api.KindTenant, Name: "acme"})].GetTenant()
	t.Quotas = &pb.Quotas{CpuMillicores: 500}
	hosts := f.servingHosts()
	hosts[0].TenantUsage = []*pb.TenantUsage{{Tenant: "acme", Connections: 3, Descriptors: 6, MaxDescriptors: 2186,
		Cpu: &pb.TenantCPUObservation{Millicores: 500, UsedSeconds: 1, WindowSeconds: 10, Time: timestamppb.New(f.now.Add(-4 * time.Second)),
			ThrottledSeconds: 0.35, Throttles: 2, HostCores: 2}}}
	hosts[1].TenantUsage = []*pb.TenantUsage{{Tenant: "acme",
		Cpu: &pb.TenantCPUObservation{Millicores: 500, UsedSeconds: 6.2, WindowSeconds: 10, Time: timestamppb.New(f.now.Add(-9 * time.Second)),
			ThrottledSeconds: 12.5, Throttles: 31, InDebt: true, HostCores: 2}}}
	return hosts
}

// dualStack: acme/dual holds an IPv4 and an IPv6 VIP; acme/half asked
// for both under familyPolicy prefer and got the IPv4 one alone. Both
// are served on every address they have.
func dualStack(f *fakeAdmin) []*pb.HostObservation {
	lb := func(name, policy string, addrs ...string) *pb.LoadBalancer {
		return &pb.LoadBalancer{Name: name, Tenant: "acme",
			Vip:       &pb.VIPRequest{Pool: "public", Families: []string{"ipv4", "ipv6"}, FamilyPolicy: policy},
			Listeners: []*pb.Listener{{Port: 53, Protocol: "udp", Pool: "dns"}},
			Pools:     map[string]*pb.BackendPool{"dns": {Members: []*pb.Member{{Address: "10.20.0.53:53"}}}},
			Status:    &pb.LoadBalancerStatus{Address: addrs[0], Addresses: addrs}}
	}
	f.put(api.Wrap(lb("dual", "", "192.0.2.40", "2001:db8:10::40")))
	f.put(api.Wrap(lb("half", "prefer", "192.0.2.41")))
	return f.servingHosts()
}
