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

// serviceFamily chooses the VIP's families. SingleStack (or no policy)
// gets one VIP of the first of spec.ipFamilies. RequireDualStack asks for
// a VIP of each family (the first of spec.ipFamilies first), which the LB
// cluster refuses unless the pool has a free address of each;
// PreferDualStack asks for the same with familyPolicy prefer, which the
// cluster serves on the families it has an address of, naming the other
// in the load balancer's problems (a Warning Event and the Accepted
// condition). On an LB cluster below feature level 4 (o.DualStack
// false) RequireDualStack is refused and PreferDualStack gets one VIP,
// with a warning.
func serviceFamily(svc *corev1.Service, v *pb.VIPRequest, o Options, d *Desired) {
	fams := svc.Spec.IPFamilies
	first := corev1.IPv4Protocol
	if len(fams) > 0 && fams[0] == corev1.IPv6Protocol {
		first = corev1.IPv6Protocol
	}
	single := func() {
		if v.Address == "" && first == corev1.IPv6Protocol {
			v.Family = "ipv6"
		}
	}
	if svc.Spec.IPFamilyPolicy == nil || *svc.Spec.IPFamilyPolicy == corev1.IPFamilyPolicySingleStack {
		single()
		return
	}
	policy := *svc.Spec.IPFamilyPolicy
	switch {
	case policy != corev1.IPFamilyPolicyRequireDualStack && policy != corev1.IPFamilyPolicyPreferDualStack:
		single()
		d.Warnings = append(d.Warnings, fmt.Sprintf("spec.ipFamilyPolicy %.32q is not SingleStack, PreferDualStack or RequireDualStack: served on one %s VIP", policy, first))
		return
	case !o.DualStack && policy == corev1.IPFamilyPolicyRequireDualStack:
		d.Refused = "spec.ipFamilyPolicy RequireDualStack asks for an IPv4 and an IPv6 VIP, and a host of the LB cluster runs a release without dual-stack load balancers (below feature level 4), so the Service gets no load balancer: " +
			"ask the operator to finish upgrading the LB hosts (the agent asks again when it reconnects), or use PreferDualStack or SingleStack"
		return
	case !o.DualStack:
		single()
		d.Warnings = append(d.Warnings, fmt.Sprintf("spec.ipFamilyPolicy PreferDualStack: served on one %s VIP (the first of spec.ipFamilies), because a host of the LB cluster runs a release without dual-stack load balancers (below feature level 4); the agent asks for both when it reconnects after the upgrade", first))
		return
	}
	v.Families = []string{"ipv4", "ipv6"}
	if first == corev1.IPv6Protocol {
		v.Families = []string{"ipv6", "ipv4"}
	}
	if policy == corev1.IPFamilyPolicyPreferDualStack {
		v.FamilyPolicy = "prefer"
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
