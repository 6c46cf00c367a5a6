package dns

import (
	"net/netip"
	"slices"
	"strings"

	mdns "github.com/miekg/dns"

	"github.com/teapot-lb/teapot-lb/api"
	pb "github.com/teapot-lb/teapot-lb/api/proto/teapotv1"
)

// Target is one load balancer that serves a name, and its address.
type Target struct {
	// LB is "tenant/name".
	LB     string
	Tenant string
	Addr   netip.Addr
}

// Left is a name of the state the table does not answer for, and why.
type Left struct {
	Name, LB, Reason string
}

// zone is one served zone: its SOA, NS and glue.
type zone struct {
	name string
	soa  *mdns.SOA
	ns   []mdns.RR
	glue map[string][]netip.Addr
}

// Table is what the server answers from: compiled from the committed
// state, never changed once built.
type Table struct {
	cfg      Config
	ttl      uint32
	revision uint64
	zones    []*zone // longest name first
	// names are the exact names, wild the wildcards by the name they
	// stand in front of ("acme.example." for *.acme.example); a name
	// holds its targets sorted and without repeats (no target: the name
	// exists, its load balancer has no address yet).
	names map[string][]Target
	wild  map[string][]Target
	// inner are the names that exist only because a name below them does
	// (empty non-terminals): NODATA, not NXDOMAIN.
	inner map[string]bool
	// tenants are those with a name in the table.
	tenants map[string]bool
	left    []Left
}

// Compile builds the table of the state objs at revision: the route and
// server-name route hosts of every load balancer, inside a zone and
// inside its tenant's domains, with the load balancer's address.
func Compile(cfg Config, objs []*pb.Object, revision uint64) *Table {
	t := &Table{cfg: cfg, ttl: cfg.ttl(), revision: revision,
		names: map[string][]Target{}, wild: map[string][]Target{}, inner: map[string]bool{}, tenants: map[string]bool{}}
	for _, z := range cfg.Zones {
		if cz, err := canonicalZone(z); err == nil && !slices.ContainsFunc(t.zones, func(x *zone) bool { return x.name == cz }) {
			t.zones = append(t.zones, t.buildZone(cz))
		}
	}
	slices.SortFunc(t.zones, func(a, b *zone) int { return len(b.name) - len(a.name) })
	domains := map[string][]string{}
	for _, o := range objs {
		if tn := o.GetTenant(); tn != nil {
			domains[tn.GetName()] = tn.GetDomains()
		}
	}
	for _, o := range objs {
		lb := o.GetLoadBalancer()
		if lb == nil {
			continue
		}
		ref := lb.GetTenant() + "/" + lb.GetName()
		for _, h := range hostsOf(lb) {
			t.add(ref, lb, h, domains)
		}
	}
	for n, ts := range t.names {
		t.names[n] = sortTargets(ts)
	}
	for n, ts := range t.wild {
		t.wild[n] = sortTargets(ts)
	}
	for n := range t.names {
		t.markInner(n)
	}
	for n := range t.wild {
		t.markInner("*." + n)
	}
	for _, z := range t.zones {
		for n := range z.glue {
			t.markInner(n)
		}
	}
	slices.SortFunc(t.left, func(a, b Left) int { return strings.Compare(a.Name+a.LB, b.Name+b.LB) })
	return t
}

// hostsOf returns the names a load balancer serves: its route hosts,
// its server-name route hosts and its hostnames.
func hostsOf(lb *pb.LoadBalancer) []string {
	out := slices.Clone(lb.GetHostnames())
	for _, r := range lb.GetRoutes() {
		if h := r.GetHost(); h != "" {
			out = append(out, h)
		}
	}
	for _, l := range lb.GetListeners() {
		for _, r := range l.GetSniRoutes() {
			if h := r.GetHost(); h != "" {
				out = append(out, h)
			}
		}
	}
	return out
}

func (t *Table) add(ref string, lb *pb.LoadBalancer, host string, domains map[string][]string) {
	name := mdns.CanonicalName(host)
	if _, ok := mdns.IsDomainName(name); !ok {
		t.left = append(t.left, Left{Name: host, LB: ref, Reason: "not a domain name"})
		return
	}
	bare := strings.TrimPrefix(name, "*.")
	if t.zoneOf(bare) == nil && t.zoneOf(name) == nil {
		t.left = append(t.left, Left{Name: name, LB: ref, Reason: "outside the zones served"})
		return
	}
	if !api.HostInDomains(strings.TrimSuffix(strings.ToLower(host), "."), domains[lb.GetTenant()]) {
		t.left = append(t.left, Left{Name: name, LB: ref, Reason: "outside the tenant's domains"})
		return
	}
	t.tenants[lb.GetTenant()] = true
	var tg []Target
	// Every VIP of the load balancer: a dual-stack one is answered for
	// A and AAAA.
	for _, a := range api.StatusAddrs(lb) {
		tg = append(tg, Target{LB: ref, Tenant: lb.GetTenant(), Addr: a.Unmap()})
	}
	if len(tg) == 0 {
		t.left = append(t.left, Left{Name: name, LB: ref, Reason: "the load balancer has no address yet"})
	}
	if strings.HasPrefix(name, "*.") {
		t.wild[bare] = append(t.wild[bare], tg...)
		return
	}
	t.names[name] = append(t.names[name], tg...)
}

// markInner records the ancestors of name inside its zone.
func (t *Table) markInner(name string) {
	z := t.zoneOf(name)
	if z == nil {
		return
	}
	for off, end := mdns.NextLabel(name, 0); !end; off, end = mdns.NextLabel(name, off) {
		p := name[off:]
		if len(p) <= len(z.name) {
			break
		}
		t.inner[p] = true
	}
}

func sortTargets(ts []Target) []Target {
	slices.SortFunc(ts, func(a, b Target) int {
		if c := strings.Compare(a.LB, b.LB); c != 0 {
			return c
		}
		return a.Addr.Compare(b.Addr)
	})
	return slices.Compact(ts)
}

func (t *Table) buildZone(name string) *zone {
	z := &zone{name: name, glue: map[string][]netip.Addr{}}
	infra := uint32(InfraTTL / 1e9)
	primary := name
	if len(t.cfg.NameServers) > 0 {
		primary = t.cfg.NameServers[0].Name
	}
	z.soa = &mdns.SOA{
		Hdr: mdns.RR_Header{Name: name, Rrtype: mdns.TypeSOA, Class: mdns.ClassINET, Ttl: infra},
		Ns:  primary, Mbox: "hostmaster." + name,
		// The serial follows the state's revision (RFC 1982 arithmetic
		// wraps it).
		Serial: uint32(t.revision), Refresh: 3600, Retry: 600, Expire: 604800, Minttl: t.ttl,
	}
	for _, ns := range t.cfg.NameServers {
		z.ns = append(z.ns, &mdns.NS{Hdr: mdns.RR_Header{Name: name, Rrtype: mdns.TypeNS, Class: mdns.ClassINET, Ttl: infra}, Ns: ns.Name})
		if inZone(ns.Name, name) {
			z.glue[ns.Name] = append(z.glue[ns.Name], ns.Addrs...)
		}
	}
	return z
}

// zoneOf returns the most specific zone holding name, or nil.
func (t *Table) zoneOf(name string) *zone {
	for _, z := range t.zones {
		if inZone(name, z.name) {
			return z
		}
	}
	return nil
}

// inZone reports whether name (canonical: lower case, fully qualified) is
// zone or below it.
func inZone(name, zone string) bool {
	n, z := len(name), len(zone)
	return n == z && name == zone || n > z && name[n-z-1] == '.' && name[n-z:] == zone
}

// Revision is the state revision the table was compiled from.
func (t *Table) Revision() uint64 { return t.revision }

// LeftOut returns the names of the state the table does not answer for.
func (t *Table) LeftOut() []Left { return slices.Clone(t.left) }

// Names returns every exact and wildcard name with its targets, sorted.
func (t *Table) Names() map[string][]Target {
	out := make(map[string][]Target, len(t.names)+len(t.wild))
	for n, ts := range t.names {
		out[n] = slices.Clone(ts)
	}
	for n, ts := range t.wild {
		out["*."+n] = slices.Clone(ts)
	}
	return out
}
