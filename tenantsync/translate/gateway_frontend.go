package translate

import (
	"fmt"
	"slices"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/teapot-lb/teapot-lb/api"
	pb "github.com/teapot-lb/teapot-lb/api/proto/teapotv1"
)

// Client certificate validation of a Gateway's HTTPS listeners
// (spec.tls.frontend): each HTTPS listener takes the perPort entry of its
// port, else the default, and gets its CA bundle from the ConfigMaps the
// entry names (key ca.crt). A reference that does not resolve makes the
// listener's ResolvedRefs False; when none resolves the listener is not
// accepted (NoValidCACertificate) and not served, so that it never serves
// clients without the check it asks for.

// frontendValidation returns the validation spec.tls.frontend asks of
// listeners on port, or nil.
func frontendValidation(gw *gwv1.Gateway, port gwv1.PortNumber) *gwv1.FrontendTLSValidation {
	t := gw.Spec.TLS
	if t == nil || t.Frontend == nil {
		return nil
	}
	for _, pp := range t.Frontend.PerPort {
		if pp.Port == port {
			return pp.TLS.Validation
		}
	}
	return t.Frontend.Default.Validation
}

// listenerClientCAs resolves the client validation of an HTTPS listener
// into ls.client. It returns the listener's ResolvedRefs condition when a
// reference does not resolve, and its Accepted condition when none does.
func (g *gwBuild) listenerClientCAs(ls *listenerState) (resolved, accepted *metav1.Condition) {
	v := frontendValidation(g.gw, ls.spec.Port)
	if v == nil {
		return nil, nil
	}
	gen := g.gw.Generation
	var bundle strings.Builder
	var problem *metav1.Condition
	fail := func(reason, msg string) {
		if problem == nil {
			c := cond(string(gwv1.ListenerConditionResolvedRefs), false, reason, msg, gen)
			problem = &c
		}
	}
	seen := map[string]bool{}
	for i, ref := range v.CACertificateRefs {
		f := fmt.Sprintf("spec.tls.frontend caCertificateRefs[%d]", i)
		ns := g.gw.Namespace
		if ref.Namespace != nil {
			ns = string(*ref.Namespace)
		}
		switch {
		case ref.Group != "" || ref.Kind != "ConfigMap":
			fail(string(gwv1.ListenerReasonInvalidCACertificateKind), fmt.Sprintf("%s: kind %s is not supported; use a core ConfigMap with the bundle in %s",
				f, strings.TrimPrefix(string(ref.Group)+"/"+string(ref.Kind), "/"), CACertKey))
			continue
		case ns != g.gw.Namespace && !g.granted(KindGateway, g.gw.Namespace, "ConfigMap", ns, string(ref.Name)):
			fail(string(gwv1.ListenerReasonRefNotPermitted), fmt.Sprintf("%s: no ReferenceGrant in namespace %s lets Gateways of namespace %s refer to ConfigMap %s", f, ns, g.gw.Namespace, ref.Name))
			continue
		}
		pem, why := g.caConfigMap(ns, string(ref.Name), api.MaxCABundleBytes, func(s string) string { _, why := api.ParseCABundle(s); return why })
		if why == "" && bundle.Len()+len(pem) > api.MaxCABundleBytes {
			why = fmt.Sprintf("the listener's CA bundles together pass %d bytes", api.MaxCABundleBytes)
		}
		if why != "" {
			fail(string(gwv1.ListenerReasonInvalidCACertificateRef), f+": "+why)
			continue
		}
		if !seen[pem] {
			seen[pem] = true
			bundle.WriteString(strings.TrimSpace(pem))
			bundle.WriteByte('\n')
		}
	}
	if bundle.Len() == 0 {
		if problem == nil {
			fail(string(gwv1.ListenerReasonInvalidCACertificateRef), "spec.tls.frontend: no caCertificateRefs")
		}
		c := cond(string(gwv1.ListenerConditionAccepted), false, string(gwv1.ListenerReasonNoValidCACertificate),
			"no CA certificate of spec.tls.frontend resolves; the listener is not served rather than served without client certificate validation", gen)
		return problem, &c
	}
	if _, why := api.ParseCABundle(bundle.String()); why != "" {
		c := cond(string(gwv1.ListenerConditionAccepted), false, string(gwv1.ListenerReasonNoValidCACertificate), "spec.tls.frontend: the CA bundles "+why, gen)
		return problem, &c
	}
	ls.client = &pb.ClientValidation{CaBundle: bundle.String(), Mode: "require"}
	if v.Mode == gwv1.AllowInsecureFallback {
		ls.client.Mode = "optional"
	}
	return problem, nil
}

// frontendPortsUnused warns of each spec.tls.frontend.perPort entry whose
// port has no HTTPS listener: client validation applies to HTTPS
// listeners only, so the entry validates nothing.
func (g *gwBuild) frontendPortsUnused() {
	t := g.gw.Spec.TLS
	if t == nil || t.Frontend == nil {
		return
	}
	for i, pp := range t.Frontend.PerPort {
		if !slices.ContainsFunc(g.ls, func(ls *listenerState) bool { return ls.spec.Port == pp.Port && ls.proto == "https" }) {
			g.d.Warnings = append(g.d.Warnings, fmt.Sprintf("spec.tls.frontend.perPort[%d]: port %d has no HTTPS listener, so the entry validates no client; add an HTTPS listener on port %d or remove the entry", i, pp.Port, pp.Port))
		}
	}
}

// insecureFallback is the Gateway's InsecureFrontendValidationMode
// condition when a served listener lets clients without a valid
// certificate in, or nil.
func (g *gwBuild) insecureFallback() *metav1.Condition {
	for _, ls := range g.ls {
		if ls.valid && ls.client != nil && ls.client.Mode == "optional" {
			c := cond(string(gwv1.GatewayConditionInsecureFrontendValidationMode), true, string(gwv1.GatewayReasonConfigurationChanged),
				fmt.Sprintf("listener %s serves clients without a valid certificate (AllowInsecureFallback)", ls.spec.Name), g.gw.Generation)
			return &c
		}
	}
	return nil
}

// AnnotationClientSubjectHeader, on a Gateway, names the request header
// that carries the subject of a client's verified certificate to the
// members, on every HTTPS listener spec.tls.frontend validates.
const AnnotationClientSubjectHeader = "teapot-lb.io/client-subject-header"

// clientSubjectHeader applies AnnotationClientSubjectHeader to the LB's
// https listeners with client validation; a name the LB cluster would
// refuse, or one without such a listener, is a warning.
func (g *gwBuild) clientSubjectHeader() {
	h := strings.TrimSpace(g.gw.Annotations[AnnotationClientSubjectHeader])
	if h == "" {
		return
	}
	if why := api.SubjectHeaderProblem(h); why != "" {
		g.d.Warnings = append(g.d.Warnings, fmt.Sprintf("annotation %s is not applied: %s", AnnotationClientSubjectHeader, why))
		return
	}
	set := false
	for _, l := range g.lb.Listeners {
		if cv := l.GetTls().GetClientValidation(); cv != nil {
			cv.SubjectHeader, set = h, true
		}
	}
	if !set {
		g.d.Warnings = append(g.d.Warnings, fmt.Sprintf("annotation %s is not applied: no HTTPS listener validates client certificates (spec.tls.frontend)", AnnotationClientSubjectHeader))
	}
}
