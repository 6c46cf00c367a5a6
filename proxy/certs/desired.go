package certs

import (
	"fmt"
	"slices"
	"strings"

	"github.com/teapot-lb/teapot-lb/api"
	pb "github.com/teapot-lb/teapot-lb/api/proto/teapotv1"
)

// Certificate states written in Certificate objects.
const (
	StatePending = "pending" // being obtained
	StateValid   = "valid"   // served; last_error may tell of a failed renewal
	StateFailed  = "failed"  // no certificate: last_error says why
	StateRefused = "refused" // not requested: the tenant's quota is reached
)

// Certificate sources.
const (
	SourceACME     = "acme"
	SourceUploaded = "uploaded"
)

// desired is what the certificate manager should do for one state.
type desired struct {
	// managed maps each ACME host to its tenant.
	managed map[string]string
	// refused maps ACME hosts beyond their tenant's quota to the reason.
	refused map[string]refusal
	// uploaded holds the uploaded Certificate objects by "tenant/name".
	uploaded map[string]*pb.Certificate
	// status holds every Certificate object by "tenant/name".
	status map[string]*pb.Certificate
}

type refusal struct{ tenant, reason string }

// computeDesired works out, purely from the state, which names get ACME
// certificates: every host routed by a load balancer with an https
// listener that has acme: true, when the host lies inside its tenant's
// domains; a wildcard ("*.acme.example") only when it lies in one of
// zones, the zones the LB hosts answer (--dns-zones), since only DNS-01
// issues it: another is refused, saying so. Each tenant gets at most
// quotas.certificates certificates, uploaded ones counted first, then its
// ACME hosts in name order; the rest are refused. Every host computes the
// same result from the same state (and the same zones).
func computeDesired(objs []*pb.Object, zones []string) *desired {
	d := &desired{
		managed:  map[string]string{},
		refused:  map[string]refusal{},
		uploaded: map[string]*pb.Certificate{},
		status:   map[string]*pb.Certificate{},
	}
	tenants := map[string]*pb.Tenant{}
	var lbs []*pb.LoadBalancer
	for _, o := range objs {
		switch {
		case o.GetTenant() != nil:
			tenants[o.GetTenant().GetName()] = o.GetTenant()
		case o.GetLoadBalancer() != nil:
			lbs = append(lbs, o.GetLoadBalancer())
		case o.GetCertificate() != nil:
			c := o.GetCertificate()
			key := c.GetTenant() + "/" + c.GetName()
			d.status[key] = c
			if c.GetSource() == SourceUploaded {
				d.uploaded[key] = c
			}
		}
	}
	hosts := map[string][]string{} // tenant -> ACME hosts
	owner := map[string]string{}
	for _, lb := range lbs {
		t := tenants[lb.GetTenant()]
		if t == nil || lb.GetStatus().GetAddress() == "" || !wantsACME(lb) {
			continue
		}
		for _, r := range lb.GetRoutes() {
			h := strings.ToLower(r.GetHost())
			base, wild := strings.CutPrefix(h, "*.")
			if h == "" || !isHostName(base) || !api.HostInDomains(h, t.GetDomains()) {
				continue
			}
			if _, seen := owner[h]; seen {
				continue // domains are exclusive: the first tenant keeps it
			}
			owner[h] = t.GetName()
			if wild && !InZones(h, zones) {
				d.refused[h] = refusal{tenant: t.GetName(), reason: wildcardRefusal(h, zones)}
				continue
			}
			hosts[t.GetName()] = append(hosts[t.GetName()], h)
		}
	}
	for tenant, hs := range hosts {
		slices.Sort(hs)
		q := int(api.EffectiveQuotas(tenants[tenant]).GetCertificates())
		used := 0
		for _, c := range d.uploaded {
			if c.GetTenant() == tenant {
				used++
			}
		}
		room := max(0, min(len(hs), q-used))
		for i, h := range hs {
			if i < room {
				d.managed[h] = tenant
				continue
			}
			d.refused[h] = refusal{tenant: tenant, reason: fmt.Sprintf(
				"tenant %s has reached its quota of %d certificates (quotas.certificates); remove a host or ask the operator to raise the quota",
				tenant, q)}
		}
	}
	return d
}

// wantsACME reports whether lb has an https listener with acme: true.
// LoadBalancerChangeMatters reports whether a change of a load balancer
// from prev to next (nil when created or deleted) can change which names
// get ACME certificates: only load balancers with an https listener that
// has acme: true name any. Other changes need no new computeDesired.
func LoadBalancerChangeMatters(prev, next *pb.LoadBalancer) bool {
	return prev != nil && wantsACME(prev) || next != nil && wantsACME(next)
}

// TenantChangeMatters reports whether a change of a tenant from prev to
// next (nil when created or deleted) can change which names get ACME
// certificates: its domains and its certificate quota decide. A tenant
// without domains names none, so creating or deleting one changes
// nothing (a state of many tenants is loaded without a pass over the
// whole state per tenant).
func TenantChangeMatters(prev, next *pb.Tenant) bool {
	if prev == nil || next == nil {
		return len(prev.GetDomains()) > 0 || len(next.GetDomains()) > 0
	}
	return !slices.Equal(prev.GetDomains(), next.GetDomains()) ||
		api.EffectiveQuotas(prev).GetCertificates() != api.EffectiveQuotas(next).GetCertificates()
}

func wantsACME(lb *pb.LoadBalancer) bool {
	for _, l := range lb.GetListeners() {
		if l.GetProtocol() == "https" && l.GetTls().GetAcme() {
			return true
		}
	}
	return false
}

// isHostName reports whether s is a lowercase DNS name of at least two
// labels (api.IsDNSName).
func isHostName(s string) bool {
	return strings.Contains(s, ".") && api.IsDNSName(s)
}

// wildcardRefusal says why the wildcard host gets no ACME certificate.
func wildcardRefusal(host string, zones []string) string {
	served := "none"
	if len(zones) > 0 {
		served = strings.Join(zones, ", ")
	}
	return fmt.Sprintf("%s is a wildcard, which ACME issues only through DNS-01, answered by the LB hosts for the zones they serve (--dns-zones: %s); %s is in none of them: ask the operator to add a zone holding it to --dns-zones (and delegate it to the LB hosts), or upload a certificate and list it in tls.certificates",
		host, served, strings.TrimPrefix(host, "*."))
}
