package translate

import (
	"cmp"
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/teapot-lb/teapot-lb/api"
	pb "github.com/teapot-lb/teapot-lb/api/proto/teapotv1"
)

// KindBackendTLSPolicy is the Gateway API policy of TLS towards a
// Service's members.
const KindBackendTLSPolicy = "BackendTLSPolicy"

// CACertKey is the key of a CA ConfigMap that holds the PEM bundle.
const CACertKey = "ca.crt"

// backendTLS applies the BackendTLSPolicy of Service svc (namespace ns)
// port to the pool bp that sends to it, and records the status this
// Gateway gives every policy that targets the port: the oldest policy
// (then by name) of a target and section wins, the others are
// Conflicted; a policy naming the port's section takes it over one that
// names the whole Service. A policy that is not accepted (no usable CA)
// leaves the pool without members, so that its requests fail (503)
// instead of reaching the members unverified.
func (g *gwBuild) backendTLS(bp *pb.BackendPool, ns string, svc *corev1.Service, port corev1.ServicePort) {
	gs := g.src.Gateway
	if gs == nil || gs.BackendTLSPolicies == nil {
		return
	}
	all, err := gs.BackendTLSPolicies.BackendTLSPolicies(ns).List(labels.Everything())
	if err != nil || len(all) == 0 {
		return
	}
	// Candidates by section: "" (the whole Service) and the port's name.
	bySection := map[string][]*gwv1.BackendTLSPolicy{}
	for _, p := range all {
		if p.DeletionTimestamp != nil {
			continue
		}
		for _, ref := range p.Spec.TargetRefs {
			if ref.Group != "" || ref.Kind != "Service" || string(ref.Name) != svc.Name {
				continue
			}
			sec := ""
			if ref.SectionName != nil {
				sec = string(*ref.SectionName)
			}
			if sec != "" && sec != port.Name {
				continue
			}
			if !slices.Contains(bySection[sec], p) {
				bySection[sec] = append(bySection[sec], p)
			}
		}
	}
	var applied *gwv1.BackendTLSPolicy
	var appliedTLS *pb.BackendTLS
	sections := []string{""}
	if port.Name != "" {
		sections = []string{port.Name, ""}
	}
	for _, sec := range sections {
		ps := bySection[sec]
		if len(ps) == 0 {
			continue
		}
		slices.SortFunc(ps, func(a, b *gwv1.BackendTLSPolicy) int {
			return cmp.Or(a.CreationTimestamp.Compare(b.CreationTimestamp.Time), strings.Compare(a.Name, b.Name))
		})
		winner := ps[0]
		t, conds := g.policyTLS(winner)
		g.policyStatus(winner, conds)
		for _, loser := range ps[1:] {
			g.policyStatus(loser, []metav1.Condition{cond(string(gwv1.PolicyConditionAccepted), false, string(gwv1.PolicyReasonConflicted),
				fmt.Sprintf("BackendTLSPolicy %s is older (or of the same age and first by name) and targets the same Service section", winner.Name), loser.Generation)})
		}
		if applied == nil {
			applied, appliedTLS = winner, t
		}
	}
	if applied == nil {
		return
	}
	if appliedTLS == nil {
		bp.Members = nil
		return
	}
	if bp.BackendProtocol == "h2c" {
		bp.BackendProtocol = "h2"
	} else {
		bp.BackendProtocol = "tls"
	}
	bp.Tls = appliedTLS
}

// policyTLS resolves a policy into the pool's tls (nil when it cannot be
// applied) and its Accepted and ResolvedRefs conditions.
func (g *gwBuild) policyTLS(p *gwv1.BackendTLSPolicy) (*pb.BackendTLS, []metav1.Condition) {
	gen := p.Generation
	v := p.Spec.Validation
	t := &pb.BackendTLS{ServerName: strings.ToLower(string(v.Hostname))}
	accepted := cond(string(gwv1.PolicyConditionAccepted), true, string(gwv1.PolicyReasonAccepted), "", gen)
	resolved := cond(string(gwv1.BackendTLSPolicyConditionResolvedRefs), true, string(gwv1.BackendTLSPolicyReasonResolvedRefs), "", gen)
	var bundle strings.Builder
	var bad []string
	badReason := ""
	for i, ref := range v.CACertificateRefs {
		f := fmt.Sprintf("validation.caCertificateRefs[%d]", i)
		if ref.Group != "" || ref.Kind != "ConfigMap" {
			bad = append(bad, fmt.Sprintf("%s: kind %s is not supported; use a core ConfigMap", f, strings.TrimPrefix(string(ref.Group)+"/"+string(ref.Kind), "/")))
			badReason = cmp.Or(badReason, string(gwv1.BackendTLSPolicyReasonInvalidKind))
			continue
		}
		pemText, why := g.caConfigMap(p.Namespace, string(ref.Name), api.MaxBackendCAPEMLen, api.CAPEMProblem)
		if why == "" && bundle.Len()+len(pemText)+1 > api.MaxBackendCAPEMLen {
			why = fmt.Sprintf("the CA bundles together pass %d bytes (api.MaxBackendCAPEMLen)", api.MaxBackendCAPEMLen)
		}
		if why == "" {
			if p := api.CAPEMProblem(bundle.String() + pemText); p != "" {
				why = "the CA bundles together: " + p
			}
		}
		if why != "" {
			bad = append(bad, f+": "+why)
			badReason = cmp.Or(badReason, string(gwv1.BackendTLSPolicyReasonInvalidCACertificateRef))
			continue
		}
		bundle.WriteString(strings.TrimSpace(pemText))
		bundle.WriteByte('\n')
	}
	t.CaPem = bundle.String()
	if v.WellKnownCACertificates != nil {
		if *v.WellKnownCACertificates == gwv1.WellKnownCACertificatesSystem && len(v.CACertificateRefs) == 0 {
			t.SystemRoots = true
		} else if len(v.CACertificateRefs) == 0 {
			bad = append(bad, fmt.Sprintf("validation.wellKnownCACertificates %q is not supported; use System", *v.WellKnownCACertificates))
			badReason = cmp.Or(badReason, string(gwv1.BackendTLSPolicyReasonInvalidCACertificateRef))
		}
	}
	for _, s := range v.SubjectAltNames {
		switch s.Type {
		case gwv1.HostnameSubjectAltNameType:
			t.SubjectAltNames = append(t.SubjectAltNames, &pb.SubjectAltName{Hostname: strings.ToLower(string(s.Hostname))})
		case gwv1.URISubjectAltNameType:
			t.SubjectAltNames = append(t.SubjectAltNames, &pb.SubjectAltName{Uri: string(s.URI)})
		}
	}
	if len(bad) > 0 {
		resolved = cond(string(gwv1.BackendTLSPolicyConditionResolvedRefs), false, badReason, boundText(strings.Join(bad, "; "), 1024), gen)
	}
	switch {
	case t.CaPem == "" && !t.SystemRoots:
		accepted = cond(string(gwv1.PolicyConditionAccepted), false, string(gwv1.BackendTLSPolicyReasonNoValidCACertificate),
			"no CA certificate reference resolves; the Service's members get no requests (5xx) until one does", gen)
		return nil, []metav1.Condition{accepted, resolved}
	case len(p.Spec.Options) > 0:
		accepted = cond(string(gwv1.PolicyConditionAccepted), false, string(gwv1.PolicyReasonInvalid),
			"spec.options is not supported by teapot-lb; remove it", gen)
		return nil, []metav1.Condition{accepted, resolved}
	}
	return t, []metav1.Condition{accepted, resolved}
}

// caConfigMap returns the PEM CA bundle (CACertKey) of ConfigMap
// ns/name, or why it cannot serve as one: the ConfigMap is missing or
// unread, the bundle is over maxBytes, or problem says why not.
func (g *gwBuild) caConfigMap(ns, name string, maxBytes int, problem func(string) string) (pem, why string) {
	cms := g.src.Gateway.ConfigMaps
	if cms == nil {
		return "", "the agent does not read ConfigMaps (apply the ClusterRole of packaging/k8s/10-rbac.yaml)"
	}
	cm, err := cms.ConfigMaps(ns).Get(name)
	if apierrors.IsNotFound(err) {
		return "", fmt.Sprintf("ConfigMap %s/%s does not exist", ns, name)
	} else if err != nil {
		return "", fmt.Sprintf("ConfigMap %s/%s: %v", ns, name, err)
	}
	pem = cm.Data[CACertKey]
	switch {
	case pem == "":
		return "", fmt.Sprintf("ConfigMap %s/%s has no key %s", ns, name, CACertKey)
	case len(pem) > maxBytes:
		return "", fmt.Sprintf("ConfigMap %s/%s: %s is over %d bytes", ns, name, CACertKey, maxBytes)
	}
	if why := problem(pem); why != "" {
		return "", fmt.Sprintf("ConfigMap %s/%s: %s %s", ns, name, CACertKey, why)
	}
	return pem, ""
}

// policyStatus records the ancestor status this Gateway gives policy p.
func (g *gwBuild) policyStatus(p *gwv1.BackendTLSPolicy, conds []metav1.Condition) {
	if g.res.Policies == nil {
		g.res.Policies = map[RouteKey]gwv1.PolicyAncestorStatus{}
	}
	k := RouteKey{Kind: KindBackendTLSPolicy, Namespace: p.Namespace, Name: p.Name}
	if prev, ok := g.res.Policies[k]; ok && !policyWorse(conds, prev.Conditions) {
		return
	}
	grp, kind, ns := gwv1.Group(gatewayGroup), gwv1.Kind(KindGateway), gwv1.Namespace(g.gw.Namespace)
	g.res.Policies[k] = gwv1.PolicyAncestorStatus{
		AncestorRef:    gwv1.ParentReference{Group: &grp, Kind: &kind, Namespace: &ns, Name: gwv1.ObjectName(g.gw.Name)},
		ControllerName: gwv1.GatewayController(g.o.GatewayControllerName()),
		Conditions:     conds,
	}
}

// policyWorse reports whether conds say less of a policy than prev (a
// policy that wins one port and loses another is reported Conflicted).
func policyWorse(conds, prev []metav1.Condition) bool {
	ok := func(cs []metav1.Condition) bool {
		return !slices.ContainsFunc(cs, func(c metav1.Condition) bool { return c.Status != metav1.ConditionTrue })
	}
	return ok(prev) && !ok(conds)
}
