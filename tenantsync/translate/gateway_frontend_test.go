package translate_test

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"

	corelisters "k8s.io/client-go/listers/core/v1"

	"github.com/teapot-lb/teapot-lb/tenantsync/translate"
)

// spec.tls.frontend: each HTTPS listener gets the CA bundle of its port's
// entry (or the default) and its mode; a reference that does not resolve
// leaves its listener not accepted and unserved, with the reason the
// suite expects; HTTP listeners are untouched, and a perPort entry of a
// port without an HTTPS listener is a warning; AllowInsecureFallback sets
// the Gateway's InsecureFrontendValidationMode.
func TestGatewayFrontendValidation(t *testing.T) {
	t.Parallel()
	caPEM := string(tlsSecret(t, "x", "x").Data[corev1.TLSCertKey])
	ca2PEM := string(tlsSecret(t, "x", "x").Data[corev1.TLSCertKey])
	https := func(name string, port int32) gwv1.Listener {
		l := listener(name, gwv1.HTTPSProtocolType, port, "")
		l.TLS = &gwv1.ListenerTLSConfig{CertificateRefs: []gwv1.SecretObjectReference{{Name: "cert"}}}
		return l
	}
	gw := gateway("shop", "gw", https("https", 443), https("fallback", 8443), https("unresolved", 7443), https("kind", 6443),
		https("grant", 5443), listener("http", gwv1.HTTPProtocolType, 80, ""))
	cmRef := func(name string) gwv1.ObjectReference {
		return gwv1.ObjectReference{Kind: "ConfigMap", Name: gwv1.ObjectName(name)}
	}
	valid := func(mode gwv1.FrontendValidationModeType, refs ...gwv1.ObjectReference) gwv1.TLSConfig {
		return gwv1.TLSConfig{Validation: &gwv1.FrontendTLSValidation{CACertificateRefs: refs, Mode: mode}}
	}
	other := cmRef("ca")
	other.Namespace = ptr(gwv1.Namespace("elsewhere"))
	gw.Spec.TLS = &gwv1.GatewayTLSConfig{Frontend: &gwv1.FrontendTLSConfig{
		Default: valid("", cmRef("ca")),
		PerPort: []gwv1.TLSPortConfig{
			{Port: 8443, TLS: valid(gwv1.AllowInsecureFallback, cmRef("ca2"), cmRef("missing"))},
			{Port: 7443, TLS: valid("", cmRef("missing"))},
			{Port: 6443, TLS: valid("", gwv1.ObjectReference{Kind: "Service", Name: "web"})},
			{Port: 5443, TLS: valid("", other)},
			{Port: 80, TLS: valid("", cmRef("missing"))},
		},
	}}
	gw.Annotations = map[string]string{translate.AnnotationClientSubjectHeader: "X-Client-Subject"}
	src := gwSources(t, append(backendObjs(), tlsSecret(t, "shop", "cert")), gwClass("teapot", translate.GatewayController), gw)
	cms := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc})
	for _, cm := range []*corev1.ConfigMap{
		{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "ca"}, Data: map[string]string{"ca.crt": caPEM}},
		{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "ca2"}, Data: map[string]string{"ca.crt": ca2PEM}},
		{ObjectMeta: metav1.ObjectMeta{Namespace: "elsewhere", Name: "ca"}, Data: map[string]string{"ca.crt": caPEM}},
	} {
		_ = cms.Add(cm)
	}
	src.Gateway.ConfigMaps = corelisters.NewConfigMapLister(cms)
	d := translate.Gateway(gw, src, gwOpts)
	if d.Refused != "" {
		t.Fatalf("refused: %s", d.Refused)
	}
	ports := map[uint32]string{}
	for _, l := range d.LB.GetListeners() {
		cv := l.GetTls().GetClientValidation()
		switch {
		case cv == nil:
			ports[l.Port] = l.Protocol
		case cv.CaBundle == caPEM || cv.CaBundle == ca2PEM:
			ports[l.Port] = l.Protocol + " " + cv.Mode + " " + cv.SubjectHeader
		default:
			ports[l.Port] = l.Protocol + " other bundle " + cv.Mode
		}
	}
	want := map[uint32]string{443: "https require X-Client-Subject", 8443: "https optional X-Client-Subject", 80: "http"}
	if len(ports) != len(want) {
		t.Errorf("listeners %v, want %v", ports, want)
	}
	for p, w := range want {
		if ports[p] != w {
			t.Errorf("port %d: %q, want %q", p, ports[p], w)
		}
	}
	type conds struct{ accepted, resolved, programmed string }
	for name, w := range map[string]conds{
		"https":      {"True/Accepted", "True/ResolvedRefs", "True/Programmed"},
		"fallback":   {"True/Accepted", "False/InvalidCACertificateRef", "True/Programmed"},
		"unresolved": {"False/NoValidCACertificate", "False/InvalidCACertificateRef", "False/Invalid"},
		"kind":       {"False/NoValidCACertificate", "False/InvalidCACertificateKind", "False/Invalid"},
		"grant":      {"False/NoValidCACertificate", "False/RefNotPermitted", "False/Invalid"},
		"http":       {"True/Accepted", "True/ResolvedRefs", "True/Programmed"},
	} {
		var st *gwv1.ListenerStatus
		for i := range d.Gateway.Listeners {
			if d.Gateway.Listeners[i].Name == gwv1.SectionName(name) {
				st = &d.Gateway.Listeners[i]
			}
		}
		if st == nil {
			t.Fatalf("no status for listener %s", name)
		}
		c := func(typ string) string { x := condOf(st.Conditions, typ); return string(x.Status) + "/" + x.Reason }
		if got := (conds{c("Accepted"), c("ResolvedRefs"), c("Programmed")}); got != w {
			t.Errorf("listener %s: %+v, want %+v", name, got, w)
		}
	}
	if c := condOf(d.Gateway.Conditions, "InsecureFrontendValidationMode"); c.Status != metav1.ConditionTrue || c.Reason != "ConfigurationChanged" {
		t.Errorf("InsecureFrontendValidationMode = %+v", c)
	}
	if len(d.Warnings) != 1 || !strings.Contains(d.Warnings[0], "perPort[4]: port 80 has no HTTPS listener") {
		t.Errorf("warnings %q, want one of perPort[4]", d.Warnings)
	}
}

// A subject header the LB cluster would refuse is a warning, and the
// listeners are served without one.
func TestGatewayClientSubjectHeaderRefused(t *testing.T) {
	t.Parallel()
	l := listener("https", gwv1.HTTPSProtocolType, 443, "")
	l.TLS = &gwv1.ListenerTLSConfig{CertificateRefs: []gwv1.SecretObjectReference{{Name: "cert"}}}
	gw := gateway("shop", "gw", l)
	gw.Annotations = map[string]string{translate.AnnotationClientSubjectHeader: "X-Forwarded-User"}
	gw.Spec.TLS = &gwv1.GatewayTLSConfig{Frontend: &gwv1.FrontendTLSConfig{Default: gwv1.TLSConfig{Validation: &gwv1.FrontendTLSValidation{
		CACertificateRefs: []gwv1.ObjectReference{{Kind: "ConfigMap", Name: "ca"}}}}}}
	src := gwSources(t, append(backendObjs(), tlsSecret(t, "shop", "cert")), gwClass("teapot", translate.GatewayController), gw)
	cms := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc})
	_ = cms.Add(&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "ca"}, Data: map[string]string{"ca.crt": string(tlsSecret(t, "x", "x").Data[corev1.TLSCertKey])}})
	src.Gateway.ConfigMaps = corelisters.NewConfigMapLister(cms)
	d := translate.Gateway(gw, src, gwOpts)
	if len(d.LB.GetListeners()) != 1 || d.LB.Listeners[0].GetTls().GetClientValidation() == nil || d.LB.Listeners[0].Tls.ClientValidation.SubjectHeader != "" {
		t.Fatalf("listeners %v", d.LB.GetListeners())
	}
	if len(d.Warnings) != 1 || !strings.Contains(d.Warnings[0], "forwarding header") {
		t.Errorf("warnings %q", d.Warnings)
	}
}
