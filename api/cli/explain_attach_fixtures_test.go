package cli_test

import (
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/teapot-lb/teapot-lb/api"
	pb "github.com/teapot-lb/teapot-lb/api/proto/teapotv1"
)

// tenantAttached: acme is attached over eth1 with a gateway, for lb1 and
// for lb9, which is no host of the cluster (it left after the attachment
// was stored); lb1 has it up, lb2 is not listed. acme's CPU quota is set.
func tenantAttached(f *fakeAdmin) []*pb.HostObservation {
	t := f.objs[key(&pb.ObjectRef{Kind: api.KindTenant, Name: "acme"})].GetTenant()
	t.Quotas = &pb.Quotas{CpuMillicores: 1500}
	t.Attachment = &pb.TenantAttachment{
		Vxlan:   &pb.AttachmentVXLAN{Vni: 4100, Remotes: []string{"192.0.2.7", "192.0.2.8"}, Underlay: "eth1"},
		Hosts:   map[string]string{"lb1": "10.20.0.2/24", "lb9": "10.20.0.9/24"},
		Gateway: "10.20.0.1",
		Mtu:     1400,
	}
	hosts := f.servingHosts()
	since := timestamppb.New(f.now.Add(-5 * time.Minute))
	hosts[0].TenantAttachments = []*pb.TenantAttachmentObservation{{Tenant: "acme", Namespace: "teapot-att-acme", State: "up", Vni: 4100, Address: "10.20.0.2/24", Since: since}}
	hosts[1].TenantAttachments = []*pb.TenantAttachmentObservation{{Tenant: "acme", Namespace: "teapot-att-acme", State: "not-listed", Vni: 4100, Since: since,
		Reason: "attachment.hosts lists no address for host lb2; add one to attach it"}}
	return hosts
}

// http3Listeners: acme/shop's https listener serves HTTP/3 with 0-RTT.
func http3Listeners(f *fakeAdmin) []*pb.HostObservation {
	lb := f.objs[key(&pb.ObjectRef{Kind: api.KindLoadBalancer, Tenant: "acme", Name: "shop"})].GetLoadBalancer()
	for _, l := range lb.GetListeners() {
		if l.GetProtocol() == "https" {
			l.Http3, l.Http3ZeroRtt = true, true
		}
	}
	return f.servingHosts()
}

// tenantBGPUpstreamRefused: as tenantBGP, but lb1's speaker refused the
// tenant's routes for its fabric routers.
func tenantBGPUpstreamRefused(f *fakeAdmin) []*pb.HostObservation {
	hosts := tenantBGP(f)
	o := hosts[0].TenantBgp[0]
	o.Reannounced, o.ReannounceError = 0, "announce tenant route 10.20.64.0/26: the speaker is stopping"
	return hosts
}

// tenantBGPNoFabric: as tenantBGP, but lb1 has no established session
// with a fabric router.
func tenantBGPNoFabric(f *fakeAdmin) []*pb.HostObservation {
	hosts := tenantBGP(f)
	hosts[0].TenantBgp[0].FabricSessions = 0
	return hosts
}

// tenantBGPAttached: acme is attached and has BGP: lb1 makes its session
// from inside the attachment and installs the route there; lb2 is not
// listed in the attachment.
func tenantBGPAttached(f *fakeAdmin) []*pb.HostObservation {
	hosts := tenantAttached(f)
	t := f.objs[key(&pb.ObjectRef{Kind: api.KindTenant, Name: "acme"})].GetTenant()
	t.Bgp = &pb.TenantBGP{Asn: 64600, Peers: []string{"10.20.0.5"}}
	since := timestamppb.New(f.now.Add(-90 * time.Second))
	hosts[0].TenantBgp = []*pb.TenantBGPObservation{{
		Tenant: "acme", Attachment: "teapot-att-acme",
		Sessions: []*pb.TenantBGPSession{{Peer: "10.20.0.5", Attachment: "teapot-att-acme", State: "established", Received: 1, Since: since}},
		Accepted: []*pb.TenantRoute{{Prefix: "10.20.64.0/26", NextHop: "10.20.0.5", Peer: "10.20.0.5"}}, AcceptedCount: 1,
	}}
	hosts[1].TenantBgp = []*pb.TenantBGPObservation{{Tenant: "acme", Attachment: "teapot-att-acme",
		Problem: "the tenant's attachment lists no address for this host (attachment.hosts): its speakers are not dialled from here, where it has no namespace"}}
	return hosts
}

// tenantBGPBFD: the attached tenant's sessions with BFD, one up and one
// down for its detection time.
func tenantBGPBFD(f *fakeAdmin) []*pb.HostObservation {
	hosts := tenantAttached(f)
	t := f.objs[key(&pb.ObjectRef{Kind: api.KindTenant, Name: "acme"})].GetTenant()
	t.Bgp = &pb.TenantBGP{Asn: 64600, Peers: []string{"10.20.0.5", "10.20.0.6"}, Bfd: &pb.TenantBGPBFD{}}
	since := timestamppb.New(f.now.Add(-90 * time.Second))
	hosts[0].TenantBgp = []*pb.TenantBGPObservation{{
		Tenant: "acme", Attachment: "teapot-att-acme",
		Sessions: []*pb.TenantBGPSession{
			{Peer: "10.20.0.5", Attachment: "teapot-att-acme", State: "established", Received: 1, Since: since, Bfd: "up", BfdSince: since},
			{Peer: "10.20.0.6", Attachment: "teapot-att-acme", State: "active", Since: timestamppb.New(f.now.Add(-2 * time.Second)),
				Reason: "BFD is down", Bfd: "down", BfdReason: "control detection time expired", BfdSince: timestamppb.New(f.now.Add(-3 * time.Second))},
		},
		Accepted: []*pb.TenantRoute{{Prefix: "10.20.64.0/26", NextHop: "10.20.0.5", Peer: "10.20.0.5"}}, AcceptedCount: 1,
	}}
	hosts[1].TenantBgp = []*pb.TenantBGPObservation{{Tenant: "acme", Attachment: "teapot-att-acme",
		Problem: "the tenant's attachment lists no address for this host (attachment.hosts): its speakers are not dialled from here, where it has no namespace"}}
	return hosts
}
