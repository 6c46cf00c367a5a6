package translate

import (
	"fmt"
	"slices"
	"strings"

	gwv1 "sigs.k8s.io/gateway-api/apis/v1"
)

// backendClientCert resolves the Gateway's spec.tls.backend
// clientCertificateRef: a kubernetes.io/tls Secret uploaded as a tenant
// certificate and presented by every pool that speaks TLS to its members
// (those a BackendTLSPolicy verifies). It sets the Gateway's ResolvedRefs
// condition (only when spec.tls.backend is set); a ref that does not
// resolve leaves the pools without a client certificate and the Gateway
// served, as the spec asks.
func (g *gwBuild) backendClientCert() {
	t := g.gw.Spec.TLS
	if t == nil || t.Backend == nil {
		return
	}
	gen := g.gw.Generation
	ok := cond(string(gwv1.GatewayConditionResolvedRefs), true, string(gwv1.GatewayReasonResolvedRefs), "", gen)
	g.res.ResolvedRefs = &ok
	ref := t.Backend.ClientCertificateRef
	if ref == nil {
		return
	}
	fail := func(reason, msg string) {
		c := cond(string(gwv1.GatewayConditionResolvedRefs), false, reason, "spec.tls.backend.clientCertificateRef: "+msg, gen)
		g.res.ResolvedRefs = &c
	}
	grp, kind := "", "Secret"
	if ref.Group != nil {
		grp = string(*ref.Group)
	}
	if ref.Kind != nil {
		kind = string(*ref.Kind)
	}
	ns := g.gw.Namespace
	if ref.Namespace != nil {
		ns = string(*ref.Namespace)
	}
	switch {
	case grp != "" || kind != "Secret":
		fail(string(gwv1.GatewayReasonInvalidClientCertificateRef), fmt.Sprintf("kind %s is not supported; use a core Secret of type kubernetes.io/tls", strings.TrimPrefix(grp+"/"+kind, "/")))
		return
	case ns != g.gw.Namespace && !g.granted(KindGateway, g.gw.Namespace, "Secret", ns, string(ref.Name)):
		fail(string(gwv1.GatewayReasonRefNotPermitted), fmt.Sprintf("no ReferenceGrant in namespace %s lets Gateways of namespace %s refer to Secret %s", ns, g.gw.Namespace, ref.Name))
		return
	}
	if msg := g.secretProblem(ns, string(ref.Name)); msg != "" {
		fail(string(gwv1.GatewayReasonInvalidClientCertificateRef), msg)
		return
	}
	src := CertificateSource{Name: certificateName(ns, string(ref.Name)), Namespace: ns, Secret: string(ref.Name)}
	used := false
	for _, bp := range g.lb.Pools {
		if bp.GetTls() != nil {
			bp.Tls.ClientCertificate = src.Name
			used = true
		}
	}
	if !used {
		g.d.Warnings = append(g.d.Warnings, "spec.tls.backend.clientCertificateRef: no pool of the Gateway speaks TLS to its members, so the certificate is presented to none; a BackendTLSPolicy on a backend Service makes its pool speak TLS")
	} else if !slices.Contains(g.res.Certificates, src) {
		g.res.Certificates = append(g.res.Certificates, src)
	}
}
