package translate

import (
	"fmt"
	"slices"
	"strings"

	"github.com/teapot-lb/teapot-lb/api"
	pb "github.com/teapot-lb/teapot-lb/api/proto/teapotv1"
)

// Annotations of edge protection (source ranges), on Services, Ingresses
// and Gateways. Ingresses also take ingress-nginx's spellings of the same
// thing, so that tenants moving from ingress-nginx keep their
// restrictions.
const (
	AnnotationAllowedSources = "teapot-lb.io/allowed-sources"
	AnnotationDeniedSources  = "teapot-lb.io/denied-sources"

	NginxAllowlistSourceRange = "nginx.ingress.kubernetes.io/allowlist-source-range"
	NginxWhitelistSourceRange = "nginx.ingress.kubernetes.io/whitelist-source-range"
	NginxDenylistSourceRange  = "nginx.ingress.kubernetes.io/denylist-source-range"
)

// csvList splits a comma-separated annotation value.
func csvList(v string) []string {
	var out []string
	for _, s := range strings.Split(v, ",") {
		if s = strings.TrimSpace(s); s != "" {
			out = append(out, s)
		}
	}
	return out
}

// sourceList reads the first of names that is set, and says which; a
// later one set to another list is a warning (the first wins).
func sourceList(ann map[string]string, d *Desired, names ...string) (string, []string) {
	used, list := "", []string(nil)
	for _, n := range names {
		v := csvList(ann[n])
		if len(v) == 0 {
			continue
		}
		if used == "" {
			used, list = n, v
		} else if !slices.Equal(v, list) {
			d.Warnings = append(d.Warnings, fmt.Sprintf("annotation %s is not read: %s is set and wins", n, used))
		}
	}
	return used, list
}

// checkSources refuses a list the LB cannot enforce as written; it
// reports whether the list is good.
func checkSources(field string, list []string, d *Desired) bool {
	if len(list) > api.MaxListenerSources {
		d.Refused = fmt.Sprintf("%s has %d ranges; at most %d: summarise them into wider CIDRs. So that it is not open to every address, it gets no load balancer and no VIP", field, len(list), api.MaxListenerSources)
		return false
	}
	for i, r := range list {
		if _, err := api.ParseSource(r); err != nil {
			d.Refused = fmt.Sprintf("%s[%d]: %s is not a CIDR (like 192.0.2.0/24 or 2001:db8::/32); so that it is not open to every address, it gets no load balancer and no VIP: correct the entry", field, i, api.Excerpt(r))
			return false
		}
	}
	return true
}

// edgeSources sets the allowed and denied sources of every listener of lb
// from the annotations (nginx: an Ingress, which also reads
// ingress-nginx's spellings). allowed, when not nil, was already set from
// a field of the object (a Service's loadBalancerSourceRanges) and wins
// over the allowed-sources annotation. It reports false when it refused
// the object (d.Refused says why).
func edgeSources(ann map[string]string, lb *pb.LoadBalancer, d *Desired, nginx bool) bool {
	allowNames, denyNames := []string{AnnotationAllowedSources}, []string{AnnotationDeniedSources}
	if nginx {
		allowNames = append(allowNames, NginxAllowlistSourceRange, NginxWhitelistSourceRange)
		denyNames = append(denyNames, NginxDenylistSourceRange)
	}
	aName, allowed := sourceList(ann, d, allowNames...)
	dName, denied := sourceList(ann, d, denyNames...)
	if len(allowed) > 0 && !checkSources("annotation "+aName, allowed, d) {
		return false
	}
	if len(denied) > 0 && !checkSources("annotation "+dName, denied, d) {
		return false
	}
	for _, l := range lb.Listeners {
		if len(allowed) > 0 {
			if len(l.AllowedSources) > 0 {
				d.Warnings = append(d.Warnings, fmt.Sprintf("annotation %s is not read: spec.loadBalancerSourceRanges is set and wins", aName))
				allowed = nil
			} else {
				l.AllowedSources = slices.Clone(allowed)
			}
		}
		if len(denied) > 0 {
			l.DeniedSources = slices.Clone(denied)
		}
	}
	return true
}
