package translate

import (
	"fmt"
	"slices"

	corev1 "k8s.io/api/core/v1"

	pb "github.com/teapot-lb/teapot-lb/api/proto/teapotv1"
)

// AnnotationSourceRanges is the older spelling of
// spec.loadBalancerSourceRanges that cloud providers read.
const AnnotationSourceRanges = "service.beta.kubernetes.io/load-balancer-source-ranges"

// sourceRanges restricts every listener of the Service's load balancer
// to the client networks of spec.loadBalancerSourceRanges, or of the
// annotation when the field is empty (as cloud providers read them). A
// list the LB cannot enforce as written (an entry that is not a CIDR, too
// many entries) refuses the Service rather than serve it open: the load
// balancer is not created (an existing one is removed with its VIP).
func sourceRanges(svc *corev1.Service, lb *pb.LoadBalancer, d *Desired) {
	field, ranges := "spec.loadBalancerSourceRanges", svc.Spec.LoadBalancerSourceRanges
	if len(ranges) == 0 {
		field, ranges = "annotation "+AnnotationSourceRanges, csvList(svc.Annotations[AnnotationSourceRanges])
	}
	if len(ranges) > 0 {
		if !checkSources(field, ranges, d) {
			return
		}
		for _, l := range lb.Listeners {
			l.AllowedSources = slices.Clone(ranges)
		}
	}
	edgeSources(svc.Annotations, lb, d, false)
	edgeRates(svc.Annotations, lb, d, edgeService)
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
