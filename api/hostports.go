package api

import (
	"fmt"
	"net/netip"
	"strings"

	pb "github.com/teapot-lb/teapot-lb/api/proto/teapotv1"
)

// Service names of an LB host's own ports (pb.NodeService.name, and the
// Node's API, Raft and heartbeat addresses).
const (
	ServiceAPI       = "api"
	ServiceRaft      = "raft"
	ServiceHeartbeat = "heartbeat"
	ServiceMetrics   = "metrics"
	ServiceWeb       = "web"
	ServiceBGP       = "bgp"
	// ServiceRateShare is the UDP port where a host receives the other
	// hosts' counts of total rate limits.
	ServiceRateShare = "rate-share"
)

// MaxNodeServices and MaxNodeAddresses bound what a host publishes.
const (
	MaxNodeServices  = 64
	MaxNodeAddresses = 1024
)

// HostPorts are the LB hosts' own services: their API, Raft, heartbeat,
// metrics and profiling, dashboard and BGP ports. A member or a health
// check that reaches one of them would hand a tenant the host's metrics of
// every tenant, its Go profiles, its dashboard or its cluster ports, on
// the tenant's public VIP; so none is ever a member or a checked port,
// whatever the tenant's networks say. A service listening on every address
// (0.0.0.0, ::) answers on each of the host's addresses, on every loopback
// address and on the VIPs, so all of them are refused on its port. A nil
// *HostPorts knows none.
type HostPorts struct {
	exact map[netip.AddrPort]string
	// every maps a port to the services on it that listen on every
	// address, with the addresses of their hosts.
	every map[uint16][]everyAddr
}

type everyAddr struct {
	what  string
	addrs map[netip.Addr]bool
}

// NewHostPorts collects the services the hosts publish in their Node
// objects.
func NewHostPorts(nodes []*pb.Node) *HostPorts {
	h := &HostPorts{exact: map[netip.AddrPort]string{}, every: map[uint16][]everyAddr{}}
	for _, n := range nodes {
		h.AddNode(n)
	}
	return h
}

// AddNode adds the services of one host.
func (h *HostPorts) AddNode(n *pb.Node) {
	addrs := map[netip.Addr]bool{}
	for _, s := range n.GetAddresses() {
		if a, err := netip.ParseAddr(s); err == nil {
			addrs[a.Unmap().WithZone("")] = true
		}
	}
	// The addresses the host's own services name are its addresses too
	// (a host of an earlier release publishes no list).
	for _, s := range []string{n.GetApiAddr(), n.GetRaftAddr(), n.GetHeartbeatAddr()} {
		if a, _, ok := parseServiceAddr(s); ok && !a.IsUnspecified() {
			addrs[a] = true
		}
	}
	for _, s := range n.GetServices() {
		if a, _, ok := parseServiceAddr(s.GetAddr()); ok && !a.IsUnspecified() {
			addrs[a] = true
		}
	}
	add := func(name, addr string) {
		a, port, ok := parseServiceAddr(addr)
		if !ok {
			return
		}
		what := fmt.Sprintf("a service port of LB host %s (%s)", Clip(n.GetId(), MaxQuoted), Clip(name, MaxQuoted))
		if a.IsUnspecified() {
			h.every[port] = append(h.every[port], everyAddr{what: what, addrs: addrs})
			return
		}
		ap := netip.AddrPortFrom(a, port)
		if _, dup := h.exact[ap]; !dup {
			h.exact[ap] = what
		}
	}
	add(ServiceAPI, n.GetApiAddr())
	add(ServiceRaft, n.GetRaftAddr())
	add(ServiceHeartbeat, n.GetHeartbeatAddr())
	for _, s := range n.GetServices() {
		add(s.GetName(), s.GetAddr())
	}
}

// parseServiceAddr parses "IP:port", "[IPv6]:port" or ":port" (every
// address).
func parseServiceAddr(s string) (netip.Addr, uint16, bool) {
	if p, ok := strings.CutPrefix(s, ":"); ok {
		ap, err := netip.ParseAddrPort("0.0.0.0:" + p)
		return ap.Addr(), ap.Port(), err == nil && ap.Port() != 0
	}
	ap, err := netip.ParseAddrPort(s)
	if err != nil || ap.Port() == 0 {
		return netip.Addr{}, 0, false
	}
	return ap.Addr().Unmap().WithZone(""), ap.Port(), true
}

// Owner names the host service that ap reaches ("a service port of LB
// host n1 (metrics)"), or returns "".
func (h *HostPorts) Owner(ap netip.AddrPort) string {
	if h == nil {
		return ""
	}
	a := ap.Addr().Unmap().WithZone("")
	if what, ok := h.exact[netip.AddrPortFrom(a, ap.Port())]; ok {
		return what
	}
	for _, e := range h.every[ap.Port()] {
		if a.IsLoopback() || a.IsUnspecified() || e.addrs[a] {
			return e.what
		}
	}
	return ""
}

// OnEveryAddress names a host service that listens on every address on
// port (and so on the VIPs too), or returns "".
func (h *HostPorts) OnEveryAddress(port uint16) string {
	if h == nil || len(h.every[port]) == 0 {
		return ""
	}
	return h.every[port][0].what
}

// Problem says why a member ap, health-checked on port hcPort (0: its own
// port), reaches an LB host's own service, or returns "".
func (h *HostPorts) Problem(ap netip.AddrPort, hcPort uint32) string {
	if what := h.Owner(ap); what != "" {
		return fmt.Sprintf("%s is %s and is never a member", ap, what)
	}
	if hcPort != 0 && hcPort <= 65535 && hcPort != uint32(ap.Port()) {
		hp := netip.AddrPortFrom(ap.Addr(), uint16(hcPort))
		if what := h.Owner(hp); what != "" {
			return fmt.Sprintf("healthCheck.port %d: %s is %s and is never checked", hcPort, hp, what)
		}
	}
	return ""
}

// CheckNodeServices checks what a host publishes of its own services.
func CheckNodeServices(n *pb.Node) []FieldError {
	var errs []FieldError
	if len(n.GetServices()) > MaxNodeServices {
		errs = append(errs, FieldError{Field: "services", Reason: fmt.Sprintf("has %d entries; at most %d", len(n.GetServices()), MaxNodeServices)})
	}
	for i, s := range n.GetServices() {
		if _, _, ok := parseServiceAddr(s.GetAddr()); !ok {
			errs = append(errs, FieldError{Field: fmt.Sprintf("services[%d].addr", i), Reason: Reasonf("%q must be IP:port", s.GetAddr())})
		}
	}
	if len(n.GetAddresses()) > MaxNodeAddresses {
		errs = append(errs, FieldError{Field: "addresses", Reason: fmt.Sprintf("has %d entries; at most %d", len(n.GetAddresses()), MaxNodeAddresses)})
	}
	for i, s := range n.GetAddresses() {
		if _, err := netip.ParseAddr(s); err != nil {
			errs = append(errs, FieldError{Field: fmt.Sprintf("addresses[%d]", i), Reason: Reasonf("%q is not an IP address", s)})
		}
	}
	return errs
}
