package api

import (
	"cmp"
	"fmt"
	"net/netip"
	"slices"
	"strings"

	pb "github.com/teapot-lb/teapot-lb/api/proto/teapotv1"
)

// Bounds and defaults of a tenant's attachment (Tenant.attachment).
const (
	// MaxVNI is the largest VXLAN network identifier (24 bits).
	MaxVNI = 1<<24 - 1
	// MaxAttachmentRemotes bounds attachment.vxlan.remotes: every host
	// holds a forwarding entry per remote.
	MaxAttachmentRemotes = 16
	// MaxAttachmentHosts bounds attachment.hosts.
	MaxAttachmentHosts = 64
	// DefaultVXLANPort is attachment.vxlan.port when it is 0 (IANA's).
	DefaultVXLANPort = 4789
	// DefaultAttachmentMTU is attachment.mtu when it is 0: 1500 less
	// VXLAN's 50 bytes over IPv4.
	DefaultAttachmentMTU = 1450
	// MinAttachmentMTU and MaxAttachmentMTU bound attachment.mtu.
	MinAttachmentMTU = 1280
	MaxAttachmentMTU = 9000
	// AttachmentNamespacePrefix starts the name of every network
	// namespace of an attachment ("teapot-att-acme"); a host that starts
	// finds the ones it made by it.
	AttachmentNamespacePrefix = "teapot-att-"
)

// AttachmentNamespace is the name of the network namespace in which a
// host attaches tenant's networks.
func AttachmentNamespace(tenant string) string { return AttachmentNamespacePrefix + tenant }

// VXLANPort is the UDP port of a's tunnel.
func VXLANPort(a *pb.TenantAttachment) uint16 {
	if p := a.GetVxlan().GetPort(); p != 0 {
		return uint16(p)
	}
	return DefaultVXLANPort
}

// AttachmentMTU is the MTU of a's VXLAN device.
func AttachmentMTU(a *pb.TenantAttachment) int {
	if m := a.GetMtu(); m != 0 {
		return int(m)
	}
	return DefaultAttachmentMTU
}

// checkTenantAttachment checks t.attachment against the tenant's
// well-formed networks and the other tenants' attachments.
func checkTenantAttachment(ck *checker, t *pb.Tenant, nets []netip.Prefix, c Catalog) {
	a := t.GetAttachment()
	if a == nil {
		return
	}
	if t.GetBgp().GetReannounce() {
		ck.invalidf("bgp.reannounce", "cannot be used with attachment: the tenant's routes live in its own address space (its namespace on each host, where they are installed), which the fabric routers do not reach, and its networks may be another tenant's too; announcing them upstream would leak a private prefix to the fabric. Leave reannounce (and community) out")
	}
	v := a.GetVxlan()
	if v == nil {
		ck.invalidf("attachment.vxlan", "is required: the VXLAN tunnel (vni, remotes) that joins the tenant's side to the hosts")
	} else {
		checkAttachmentVXLAN(ck, t.GetName(), v, c)
	}
	if len(a.GetHosts()) == 0 {
		ck.invalidf("attachment.hosts", "is empty: give each LB host's address in the tenant's network by node id (like lb1: 10.0.0.2/24)")
	}
	if tooMany(ck, "attachment.hosts", len(a.GetHosts()), MaxAttachmentHosts) {
		return
	}
	ids := make([]string, 0, len(a.GetHosts()))
	for id := range a.GetHosts() {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	unknown := unknownNodes(t.GetName(), c)
	seen := map[netip.Addr]string{}
	var prefixes []netip.Prefix
	for _, id := range ids {
		f := "attachment.hosts." + id
		if !isNodeID(id) {
			ck.invalidf("attachment.hosts", "has a key that is not a node id (1 to 63 lower-case letters, digits, '.' and '-', as cluster status lists them)")
			continue
		}
		if why := unknown(id); why != "" {
			ck.invalidf(f, "%s", why)
			continue
		}
		s := a.GetHosts()[id]
		if tooLong(ck, f, s, MaxAddressLen) {
			continue
		}
		p, err := netip.ParsePrefix(s)
		switch {
		case err != nil:
			ck.invalidf(f, "%q is not an address with its prefix length (like 10.0.0.2/24)", s)
			continue
		case p.Addr().Is4In6():
			ck.invalidf(f, "%s is an IPv4-mapped IPv6 address; write it in IPv4 form", s)
			continue
		case p.Addr() == p.Masked().Addr() && p.Bits() < p.Addr().BitLen()-1:
			ck.invalidf(f, "%s is the network's own address; give the host's address in it (like %s)", s, p.Addr().Next())
			continue
		case !inPrefixes(nets, p.Addr()):
			ck.invalidf(f, "%s is outside the tenant's networks; the host's address in the tenant's network lies inside them", s)
			continue
		}
		if other, dup := seen[p.Addr()]; dup {
			ck.invalidf(f, "%s is already the address of host %s", p.Addr(), other)
			continue
		}
		seen[p.Addr()] = id
		prefixes = append(prefixes, p.Masked())
	}
	if g := a.GetGateway(); g != "" {
		ga, err := netip.ParseAddr(g)
		switch {
		case tooLong(ck, "attachment.gateway", g, MaxAddressLen):
		case err != nil || ga.Zone() != "":
			ck.invalidf("attachment.gateway", "%q is not an IP address (like 10.0.0.1)", g)
		case !inPrefixes(prefixes, ga):
			ck.invalidf("attachment.gateway", "%s is not on the prefix of any host's address; the gateway is a neighbour of the hosts in the tenant's network", g)
		default:
			if _, dup := seen[ga]; dup {
				ck.invalidf("attachment.gateway", "%s is a host's own address", g)
			}
		}
	}
	if m := a.GetMtu(); m != 0 && (m < MinAttachmentMTU || m > MaxAttachmentMTU) {
		ck.invalidf("attachment.mtu", "%d is out of range; give %d to %d (0: %d)", m, MinAttachmentMTU, MaxAttachmentMTU, DefaultAttachmentMTU)
	}
}

func checkAttachmentVXLAN(ck *checker, self string, v *pb.AttachmentVXLAN, c Catalog) {
	switch n := v.GetVni(); {
	case n == 0:
		ck.invalidf("attachment.vxlan.vni", "is required: the VXLAN network identifier of the tenant's tunnel (1 to %d)", MaxVNI)
	case n > MaxVNI:
		ck.invalidf("attachment.vxlan.vni", "%d is over the largest VNI, %d", n, MaxVNI)
	default:
		for _, o := range sortedTenants(c) {
			if o.GetName() != self && o.GetAttachment().GetVxlan().GetVni() == n {
				ck.conflictf("attachment.vxlan.vni", "VNI %d is the attachment of tenant %s; every tenant has a VNI of its own", n, o.GetName())
				break
			}
		}
	}
	if len(v.GetRemotes()) == 0 {
		ck.invalidf("attachment.vxlan.remotes", "is empty: list the underlay addresses of the tenant side's VXLAN endpoints")
	}
	if !tooMany(ck, "attachment.vxlan.remotes", len(v.GetRemotes()), MaxAttachmentRemotes) {
		seen := map[netip.Addr]int{}
		for i, s := range v.GetRemotes() {
			f := fmt.Sprintf("attachment.vxlan.remotes[%d]", i)
			if tooLong(ck, f, s, MaxAddressLen) {
				continue
			}
			ad, err := netip.ParseAddr(s)
			switch {
			case err != nil || ad.Zone() != "":
				ck.invalidf(f, "%q is not an IP address (like 192.0.2.7)", s)
				continue
			case ad.Is4In6():
				ck.invalidf(f, "%s is an IPv4-mapped IPv6 address; write it in IPv4 form", s)
				continue
			case !ad.IsGlobalUnicast() && !ad.IsPrivate() && !ad.IsLoopback():
				ck.invalidf(f, "%s is not a unicast address; a remote is one VXLAN endpoint", s)
				continue
			}
			if j, dup := seen[ad]; dup {
				ck.invalidf(f, "%s is already listed as remotes[%d]", s, j)
				continue
			}
			seen[ad] = i
		}
	}
	if p := v.GetPort(); p > 65535 {
		ck.invalidf("attachment.vxlan.port", "%d is not a UDP port (1 to 65535; 0: %d)", p, DefaultVXLANPort)
	} else {
		checkVXLANPortFree(ck, uint16(cmp.Or(p, DefaultVXLANPort)), c)
	}
	if u := v.GetUnderlay(); u != "" {
		if why := InterfaceNameProblem(u); why != "" {
			ck.invalidf("attachment.vxlan.underlay", "%s", why)
		}
	}
}

// checkVXLANPortFree refuses a VXLAN port that the hosts' own UDP
// services or a load balancer's UDP listener use: the tunnel's socket
// holds its port on every address of each host (the kernel's, bound
// before the device moves into the namespace), so the other could never
// bind, or the tunnel could not.
func checkVXLANPortFree(ck *checker, port uint16, c Catalog) {
	const f = "attachment.vxlan.port"
	if nl, ok := c.(NodeLister); ok {
		for _, n := range nl.Nodes() {
			uses := []struct{ what, addr string }{{ServiceHeartbeat, n.GetHeartbeatAddr()}}
			for _, sv := range n.GetServices() {
				if sv.GetName() == ServiceRateShare {
					uses = append(uses, struct{ what, addr string }{sv.GetName(), sv.GetAddr()})
				}
			}
			for _, u := range uses {
				if _, p, ok := parseServiceAddr(u.addr); ok && p == port {
					ck.conflictf(f, "%d is the UDP port of host %s's %s; the tunnel's socket holds its port on every address of each host, so give another (0: %d)", port, n.GetId(), u.what, DefaultVXLANPort)
					return
				}
			}
		}
	}
	for _, lb := range sortedLBs(c.LoadBalancers("")) {
		if i := udpListenerOn(lb, port); i >= 0 {
			ck.conflictf(f, "%d/udp is the port of listeners[%d] of %s; the tunnel's socket would hold it on every address of each host, so give another (0: %d) or move that listener", port, i, lbRef(lb), DefaultVXLANPort)
			return
		}
	}
}

// udpListenerOn returns the index of lb's first listener that binds UDP
// port (udp, or https with http3), or -1.
func udpListenerOn(lb *pb.LoadBalancer, port uint16) int {
	for i, l := range lb.GetListeners() {
		if l.GetPort() == uint32(port) && (l.GetProtocol() == "udp" || l.GetProtocol() == "https" && l.GetHttp3()) {
			return i
		}
	}
	return -1
}

// vxlanPorts returns the UDP ports the tenants' attachments hold on the
// LB hosts.
func vxlanPorts(c Catalog) map[uint32]bool {
	var out map[uint32]bool
	for _, t := range c.Tenants() {
		if a := t.GetAttachment(); a != nil {
			if out == nil {
				out = map[uint32]bool{}
			}
			out[uint32(VXLANPort(a))] = true
		}
	}
	return out
}

// maxNodesNamed bounds the node ids a refusal lists.
const maxNodesNamed = 5

// unknownNodes returns the reason attachment.hosts may not name a node
// id, or "" when it may: an id that is no LB host of the cluster (a key
// no host would ever read) unless the tenant's stored attachment already
// names it (a host removed since: explain tenant shows it), so that its
// other changes go through. A catalog that lists no hosts (validation
// outside a cluster) accepts every id.
func unknownNodes(tenant string, c Catalog) func(id string) string {
	nl, ok := c.(NodeLister)
	if !ok {
		return func(string) string { return "" }
	}
	nodes := nl.Nodes()
	if len(nodes) == 0 {
		return func(string) string { return "" }
	}
	ids := make([]string, 0, len(nodes))
	for _, n := range nodes {
		ids = append(ids, n.GetId())
	}
	slices.Sort(ids)
	stored := priorOf(c).Tenant(tenant).GetAttachment().GetHosts()
	return func(id string) string {
		if _, found := slices.BinarySearch(ids, id); found {
			return ""
		}
		if _, ok := stored[id]; ok {
			return ""
		}
		named := ids
		more := ""
		if len(named) > maxNodesNamed {
			named, more = named[:maxNodesNamed], fmt.Sprintf(" and %d more", len(ids)-maxNodesNamed)
		}
		return fmt.Sprintf("%s is not a host of the cluster (its hosts: %s%s); key each address by a node id that cluster status lists, and add a host's address once it has joined", id, strings.Join(named, ", "), more)
	}
}

// isNodeID reports whether s can be an LB host's node id.
func isNodeID(s string) bool {
	if s == "" || len(s) > 63 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' || c == '.') {
			return false
		}
	}
	return true
}
