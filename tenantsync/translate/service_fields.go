package translate

import (
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"

	pb "github.com/teapot-lb/teapot-lb/api/proto/teapotv1"
)

// AnnotationSourceRanges is the older spelling of
// spec.loadBalancerSourceRanges that cloud providers read.
const AnnotationSourceRanges = "service.beta.kubernetes.io/load-balancer-source-ranges"

// sourceRanges refuses a Service that restricts its clients by source
// address: the LB cannot enforce it yet, and serving the Service to every
// address would open what its owner closed. The load balancer is not
// created (an existing one is removed with its VIP).
func sourceRanges(svc *corev1.Service, d *Desired) {
	field := ""
	switch {
	case len(svc.Spec.LoadBalancerSourceRanges) > 0:
		field = fmt.Sprintf("spec.loadBalancerSourceRanges (%d ranges)", len(svc.Spec.LoadBalancerSourceRanges))
	case strings.TrimSpace(svc.Annotations[AnnotationSourceRanges]) != "":
		field = "annotation " + AnnotationSourceRanges
	default:
		return
	}
	d.Refused = field + " restricts the clients by source address, which teapot-lb load balancers do not enforce yet; " +
		"so that the Service is not open to every address, it gets no load balancer and no VIP: " +
		"remove the field to serve it to every client, or keep it unserved until source ranges are enforced"
}

// serviceFamily chooses the VIP's family and says what a dual-stack
// policy gets: a load balancer has one VIP, so RequireDualStack is refused
// and PreferDualStack is served on the first family of spec.ipFamilies.
func serviceFamily(svc *corev1.Service, v *pb.VIPRequest, d *Desired) {
	fams := svc.Spec.IPFamilies
	if v.Address == "" && len(fams) > 0 && fams[0] == corev1.IPv6Protocol {
		v.Family = "ipv6"
	}
	if svc.Spec.IPFamilyPolicy == nil {
		return
	}
	switch *svc.Spec.IPFamilyPolicy {
	case corev1.IPFamilyPolicyRequireDualStack:
		d.Refused = "spec.ipFamilyPolicy RequireDualStack asks for an IPv4 and an IPv6 VIP, and a teapot-lb load balancer has one VIP, so the Service gets no load balancer: " +
			"use PreferDualStack (served on one VIP of the first of spec.ipFamilies) or SingleStack"
	case corev1.IPFamilyPolicyPreferDualStack:
		first := corev1.IPv4Protocol
		if len(fams) > 0 {
			first = fams[0]
		}
		d.Warnings = append(d.Warnings, fmt.Sprintf("spec.ipFamilyPolicy PreferDualStack: served on one %s VIP (the first of spec.ipFamilies); a teapot-lb load balancer has one VIP, so there is no VIP of the other family", first))
	}
}

// sessionAffinityHashOn is what a ClientIP Service's pools hash.
const sessionAffinityHashOn = "client-ip"

// affinity makes a ClientIP Service's pool hash the client address
// (Maglev: every LB host sends one client address to one member).
func affinity(svc *corev1.Service, bp *pb.BackendPool) {
	if svc.Spec.SessionAffinity == corev1.ServiceAffinityClientIP {
		bp.Algorithm, bp.HashOn = "hash", sessionAffinityHashOn
	}
}

// affinityWarnings says what a ClientIP Service gets that differs from
// kube-proxy: an algorithm annotation is overridden, and the affinity
// does not expire after sessionAffinityConfig.clientIP.timeoutSeconds.
func affinityWarnings(svc *corev1.Service, d *Desired) {
	if svc.Spec.SessionAffinity != corev1.ServiceAffinityClientIP {
		return
	}
	if a := svc.Annotations[AnnotationAlgorithm]; a != "" && a != "hash" {
		d.Warnings = append(d.Warnings, fmt.Sprintf("%s %.32q is overridden by spec.sessionAffinity ClientIP: the pools hash the client address", AnnotationAlgorithm, a))
	}
	timeout := int32(corev1.DefaultClientIPServiceAffinitySeconds)
	if c := svc.Spec.SessionAffinityConfig; c != nil && c.ClientIP != nil && c.ClientIP.TimeoutSeconds != nil {
		timeout = *c.ClientIP.TimeoutSeconds
	}
	d.Warnings = append(d.Warnings, fmt.Sprintf("spec.sessionAffinityConfig.clientIP.timeoutSeconds (%d) is not applied: spec.sessionAffinity ClientIP is served by hashing the client address, "+
		"so a client stays on its member with no expiry while the members stay the same, and when a member is added or removed some clients move at once", timeout))
}

// serviceHostnames reads the DNS names a Service asks for, from
// teapot-lb.io/hostname and external-dns.alpha.kubernetes.io/hostname
// (comma-separated, as external-dns reads it): trimmed, lower-cased,
// without a trailing dot, each once. The cluster refuses a name outside
// the tenant's domains, with the reason in the Service's status.
func serviceHostnames(ann map[string]string) []string {
	var out []string
	for _, key := range []string{AnnotationHostname, AnnotationExternalDNSHostname} {
		for _, h := range strings.Split(ann[key], ",") {
			h = strings.TrimSuffix(strings.ToLower(strings.TrimSpace(h)), ".")
			if h != "" && !slices.Contains(out, h) {
				out = append(out, h)
			}
		}
	}
	return out
}
