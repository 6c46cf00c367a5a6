package translate_test

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/teapot-lb/teapot-lb/api"
	pb "github.com/teapot-lb/teapot-lb/api/proto/teapotv1"
	"github.com/teapot-lb/teapot-lb/tenantsync/translate"
)

// caPEM is a fresh self-signed CA certificate as PEM.
func caPEM(t *testing.T) string {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "ca"}, IsCA: true, BasicConstraintsValid: true,
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour)}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	return string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}))
}

func caMap(ns, name, data string) *corev1.ConfigMap {
	return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Data: map[string]string{translate.CACertKey: data}}
}

// btlsPolicy is a BackendTLSPolicy of namespace shop, created sec seconds
// after epoch, on Service tlsweb (section "": the whole Service).
func btlsPolicy(name string, sec int, section, host string, cas ...gwv1.LocalObjectReference) *gwv1.BackendTLSPolicy {
	p := &gwv1.BackendTLSPolicy{ObjectMeta: meta("shop", name, sec)}
	ref := gwv1.LocalPolicyTargetReferenceWithSectionName{LocalPolicyTargetReference: gwv1.LocalPolicyTargetReference{Kind: "Service", Name: "tlsweb"}}
	if section != "" {
		ref.SectionName = ptr(gwv1.SectionName(section))
	}
	p.Spec.TargetRefs = []gwv1.LocalPolicyTargetReferenceWithSectionName{ref}
	p.Spec.Validation = gwv1.BackendTLSPolicyValidation{Hostname: gwv1.PreciseHostname(host), CACertificateRefs: cas}
	return p
}

func cmRef(name string) gwv1.LocalObjectReference {
	return gwv1.LocalObjectReference{Kind: "ConfigMap", Name: gwv1.ObjectName(name)}
}

// TestGatewayBackendTLSPolicy is the translation table of
// BackendTLSPolicies: the pool of the targeted Service port verifies its
// members as the winning policy says, and each policy gets the status the
// suite expects (Accepted, Conflicted, NoValidCACertificate with
// InvalidKind or InvalidCACertificateRef); a policy without a usable CA
// leaves the pool without members.
func TestGatewayBackendTLSPolicy(t *testing.T) {
	t.Parallel()
	ca := caPEM(t)
	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "tlsweb"}, Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeNodePort,
		Ports: []corev1.ServicePort{{Name: "https-1", Port: 443, NodePort: 30443, Protocol: corev1.ProtocolTCP}, {Name: "https-2", Port: 8443, NodePort: 30843, Protocol: corev1.ProtocolTCP}}}}
	gw := gateway("shop", "gw", listener("http", gwv1.HTTPProtocolType, 80, ""))
	route := httpRoute("shop", "r", 1, []gwv1.ParentReference{parent("gw", "")}, []string{"abc.example.com"},
		gwv1.HTTPRouteRule{Matches: []gwv1.HTTPRouteMatch{{Path: &gwv1.HTTPPathMatch{Type: ptr(gwv1.PathMatchExact), Value: ptr("/a")}}}, BackendRefs: httpBackends(bref("tlsweb", 443, nil))},
		gwv1.HTTPRouteRule{Matches: []gwv1.HTTPRouteMatch{{Path: &gwv1.HTTPPathMatch{Type: ptr(gwv1.PathMatchExact), Value: ptr("/b")}}}, BackendRefs: httpBackends(bref("tlsweb", 8443, nil))})
	type st struct{ accepted, acceptedReason, resolvedReason string }
	ok := st{"True", "Accepted", "ResolvedRefs"}
	system := btlsPolicy("system", 0, "", "abc.example.com")
	system.Spec.Validation.WellKnownCACertificates = ptr(gwv1.WellKnownCACertificatesSystem)
	sans := btlsPolicy("sans", 0, "", "abc.example.com", cmRef("ca"))
	sans.Spec.Validation.SubjectAltNames = []gwv1.SubjectAltName{{Type: gwv1.HostnameSubjectAltNameType, Hostname: "other.example.com"},
		{Type: gwv1.URISubjectAltNameType, URI: "spiffe://abc.example.com/test-identity"}}
	options := btlsPolicy("options", 0, "", "abc.example.com", cmRef("ca"))
	options.Spec.Options = map[gwv1.AnnotationKey]gwv1.AnnotationValue{"x": "y"}
	tests := []struct {
		name     string
		cms      []runtime.Object
		policies []runtime.Object
		tls443   *pb.BackendTLS // nil: no tls
		tls8443  *pb.BackendTLS
		empty    bool // the 443 pool has no members
		status   map[string]st
	}{
		{
			name:     "a CA ConfigMap and a hostname",
			cms:      []runtime.Object{caMap("shop", "ca", ca)},
			policies: []runtime.Object{btlsPolicy("p", 0, "https-1", "abc.example.com", cmRef("ca"))},
			tls443:   &pb.BackendTLS{CaPem: ca, ServerName: "abc.example.com"},
			status:   map[string]st{"p": ok},
		},
		{
			name:     "subject alternative names",
			cms:      []runtime.Object{caMap("shop", "ca", ca)},
			policies: []runtime.Object{sans},
			tls443: &pb.BackendTLS{CaPem: ca, ServerName: "abc.example.com", SubjectAltNames: []*pb.SubjectAltName{
				{Hostname: "other.example.com"}, {Uri: "spiffe://abc.example.com/test-identity"}}},
			tls8443: &pb.BackendTLS{CaPem: ca, ServerName: "abc.example.com", SubjectAltNames: []*pb.SubjectAltName{
				{Hostname: "other.example.com"}, {Uri: "spiffe://abc.example.com/test-identity"}}},
			status: map[string]st{"sans": ok},
		},
		{
			name:     "system roots",
			policies: []runtime.Object{system},
			tls443:   &pb.BackendTLS{SystemRoots: true, ServerName: "abc.example.com"},
			tls8443:  &pb.BackendTLS{SystemRoots: true, ServerName: "abc.example.com"},
			status:   map[string]st{"system": ok},
		},
		{
			name: "the older policy of a section wins, then the first by name",
			cms:  []runtime.Object{caMap("shop", "ca", ca)},
			policies: []runtime.Object{btlsPolicy("b-old", 0, "https-1", "other.example.com", cmRef("ca")),
				btlsPolicy("a-new", 5, "https-1", "abc.example.com", cmRef("ca")),
				btlsPolicy("w-1", 0, "", "other.example.com", cmRef("ca")), btlsPolicy("w-2", 0, "", "abc.example.com", cmRef("ca"))},
			tls443:  &pb.BackendTLS{CaPem: ca, ServerName: "other.example.com"},
			tls8443: &pb.BackendTLS{CaPem: ca, ServerName: "other.example.com"},
			status:  map[string]st{"b-old": ok, "a-new": {"False", "Conflicted", ""}, "w-1": ok, "w-2": {"False", "Conflicted", ""}},
		},
		{
			name:     "a section's policy over the whole Service's",
			cms:      []runtime.Object{caMap("shop", "ca", ca)},
			policies: []runtime.Object{btlsPolicy("sec", 0, "https-1", "other.example.com", cmRef("ca")), btlsPolicy("whole", 0, "", "abc.example.com", cmRef("ca"))},
			tls443:   &pb.BackendTLS{CaPem: ca, ServerName: "other.example.com"},
			tls8443:  &pb.BackendTLS{CaPem: ca, ServerName: "abc.example.com"},
			status:   map[string]st{"sec": ok, "whole": ok},
		},
		{
			name:     "a CA of another kind",
			policies: []runtime.Object{btlsPolicy("p", 0, "https-1", "abc.example.com", gwv1.LocalObjectReference{Kind: "Secret", Name: "ca"})},
			empty:    true,
			status:   map[string]st{"p": {"False", "NoValidCACertificate", "InvalidKind"}},
		},
		{
			name:     "a CA ConfigMap that does not exist",
			policies: []runtime.Object{btlsPolicy("p", 0, "https-1", "abc.example.com", cmRef("nope"))},
			empty:    true,
			status:   map[string]st{"p": {"False", "NoValidCACertificate", "InvalidCACertificateRef"}},
		},
		{
			name:     "a CA ConfigMap that holds no certificate",
			cms:      []runtime.Object{caMap("shop", "ca", "junk")},
			policies: []runtime.Object{btlsPolicy("p", 0, "https-1", "abc.example.com", cmRef("ca"))},
			empty:    true,
			status:   map[string]st{"p": {"False", "NoValidCACertificate", "InvalidCACertificateRef"}},
		},
		{
			name:     "a CA ConfigMap over the bound",
			cms:      []runtime.Object{caMap("shop", "ca", strings.Repeat(ca, api.MaxBackendCAPEMLen/len(ca)+1))},
			policies: []runtime.Object{btlsPolicy("p", 0, "https-1", "abc.example.com", cmRef("ca"))},
			empty:    true,
			status:   map[string]st{"p": {"False", "NoValidCACertificate", "InvalidCACertificateRef"}},
		},
		{
			name:     "a CA ConfigMap of more certificates than a pool verifies with",
			cms:      []runtime.Object{caMap("shop", "ca", strings.Repeat(ca, api.MaxCheckCACerts+1))},
			policies: []runtime.Object{btlsPolicy("p", 0, "https-1", "abc.example.com", cmRef("ca"))},
			empty:    true,
			status:   map[string]st{"p": {"False", "NoValidCACertificate", "InvalidCACertificateRef"}},
		},
		{
			name: "two CA ConfigMaps of more certificates together than a pool verifies with",
			cms: []runtime.Object{caMap("shop", "ca", strings.Repeat(ca, api.MaxCheckCACerts-2)),
				caMap("shop", "ca2", strings.Repeat(ca, 3))},
			policies: []runtime.Object{btlsPolicy("p", 0, "https-1", "abc.example.com", cmRef("ca"), cmRef("ca2"))},
			tls443:   &pb.BackendTLS{CaPem: strings.Repeat(ca, api.MaxCheckCACerts-2), ServerName: "abc.example.com"},
			status:   map[string]st{"p": {"True", "Accepted", "InvalidCACertificateRef"}},
		},
		{
			name:     "options are refused",
			cms:      []runtime.Object{caMap("shop", "ca", ca)},
			policies: []runtime.Object{options},
			empty:    true,
			status:   map[string]st{"options": {"False", "Invalid", "ResolvedRefs"}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			core := append(backendObjs(svc), tt.cms...)
			objs := append([]runtime.Object{gwClass("teapot", translate.GatewayController), gw, route}, tt.policies...)
			src := gwSources(t, core, objs...)
			d := translate.Gateway(gw, src, gwOpts)
			if d.Refused != "" {
				t.Fatalf("refused: %s", d.Refused)
			}
			for key, want := range map[string]*pb.BackendTLS{"tlsweb-443": tt.tls443, "tlsweb-8443": tt.tls8443} {
				bp := d.LB.Pools[key]
				if bp == nil {
					t.Fatalf("no pool %s in %v", key, d.LB.Pools)
				}
				if !protoEqual(bp.GetTls(), want) {
					t.Errorf("pool %s tls %v, want %v", key, bp.GetTls(), want)
				}
				if want != nil && bp.GetBackendProtocol() != "tls" {
					t.Errorf("pool %s backendProtocol %q, want tls", key, bp.GetBackendProtocol())
				}
				if want != nil {
					if errs := api.CheckBackendPool("", bp, -1); len(errs) > 0 {
						t.Errorf("pool %s is refused by the API edge: %v", key, errs)
					}
				}
			}
			if n := len(d.LB.Pools["tlsweb-443"].GetMembers()); (n == 0) != tt.empty {
				t.Errorf("pool tlsweb-443 has %d members, want empty=%v", n, tt.empty)
			}
			if len(d.Gateway.Policies) != len(tt.status) {
				t.Errorf("statuses of %d policies, want %d: %v", len(d.Gateway.Policies), len(tt.status), d.Gateway.Policies)
			}
			for name, want := range tt.status {
				ps, found := d.Gateway.Policies[translate.RouteKey{Kind: translate.KindBackendTLSPolicy, Namespace: "shop", Name: name}]
				if !found {
					t.Fatalf("no status for policy %s", name)
				}
				if ps.AncestorRef.Name != "gw" || ps.AncestorRef.Namespace == nil || *ps.AncestorRef.Namespace != "shop" || string(ps.ControllerName) != translate.GatewayController {
					t.Errorf("policy %s: ancestor %+v by %s", name, ps.AncestorRef, ps.ControllerName)
				}
				acc := condOf(ps.Conditions, "Accepted")
				if string(acc.Status) != want.accepted || acc.Reason != want.acceptedReason || acc.ObservedGeneration != 3 {
					t.Errorf("policy %s Accepted %s %s (gen %d), want %s %s", name, acc.Status, acc.Reason, acc.ObservedGeneration, want.accepted, want.acceptedReason)
				}
				if res := condOf(ps.Conditions, "ResolvedRefs"); want.resolvedReason != "" && res.Reason != want.resolvedReason {
					t.Errorf("policy %s ResolvedRefs %s %s (%s), want %s", name, res.Status, res.Reason, res.Message, want.resolvedReason)
				}
			}
		})
	}
}

func protoEqual(a, b *pb.BackendTLS) bool {
	if a == nil || b == nil {
		return a == nil && b == nil
	}
	return proto.Equal(a, b)
}

// TestGatewayBackendClientCertificate: the Gateway's
// spec.tls.backend.clientCertificateRef is uploaded and presented by its
// pools that speak TLS, with ResolvedRefs True; a ref that does not
// resolve keeps the Gateway accepted with ResolvedRefs False and the
// reason the suite expects, and no pool presents a certificate.
func TestGatewayBackendClientCertificate(t *testing.T) {
	t.Parallel()
	ca := caPEM(t)
	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "tlsweb"}, Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeNodePort,
		Ports: []corev1.ServicePort{{Name: "https-1", Port: 443, NodePort: 30443, Protocol: corev1.ProtocolTCP}}}}
	route := httpRoute("shop", "r", 1, []gwv1.ParentReference{parent("gw", "")}, []string{"abc.example.com"},
		gwv1.HTTPRouteRule{BackendRefs: httpBackends(bref("tlsweb", 443, nil), bref("web", 80, nil))})
	secretRef := func(mut func(r *gwv1.SecretObjectReference)) *gwv1.SecretObjectReference {
		r := &gwv1.SecretObjectReference{Name: "client"}
		mut(r)
		return r
	}
	tests := []struct {
		name   string
		ref    *gwv1.SecretObjectReference
		reason string // "" for ResolvedRefs True
	}{
		{"a TLS Secret", secretRef(func(*gwv1.SecretObjectReference) {}), ""},
		{"a Secret that does not exist", secretRef(func(r *gwv1.SecretObjectReference) { r.Name = "nope" }), "InvalidClientCertificateRef"},
		{"another group", secretRef(func(r *gwv1.SecretObjectReference) { r.Group = ptr(gwv1.Group("wrong.example.io")) }), "InvalidClientCertificateRef"},
		{"another kind", secretRef(func(r *gwv1.SecretObjectReference) { r.Kind = ptr(gwv1.Kind("WrongKind")) }), "InvalidClientCertificateRef"},
		{"a malformed Secret", secretRef(func(r *gwv1.SecretObjectReference) { r.Name = "malformed" }), "InvalidClientCertificateRef"},
		{"another namespace without a grant", secretRef(func(r *gwv1.SecretObjectReference) { r.Namespace = ptr(gwv1.Namespace("other")) }), "RefNotPermitted"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			gw := gateway("shop", "gw", listener("http", gwv1.HTTPProtocolType, 80, ""))
			gw.Spec.TLS = &gwv1.GatewayTLSConfig{Backend: &gwv1.GatewayBackendTLS{ClientCertificateRef: tt.ref}}
			malformed := tlsSecret(t, "shop", "malformed")
			malformed.Data[corev1.TLSPrivateKeyKey] = []byte("junk")
			core := append(backendObjs(svc), caMap("shop", "ca", ca), tlsSecret(t, "shop", "client"), tlsSecret(t, "other", "client"), malformed)
			src := gwSources(t, core, gwClass("teapot", translate.GatewayController), gw, route, btlsPolicy("p", 0, "", "abc.example.com", cmRef("ca")))
			d := translate.Gateway(gw, src, gwOpts)
			if d.Refused != "" || d.Gateway.Accepted.Status != metav1.ConditionTrue {
				t.Fatalf("the Gateway is not served: %s %s", d.Gateway.Accepted.Reason, d.Refused)
			}
			rr := d.Gateway.ResolvedRefs
			if rr == nil || rr.ObservedGeneration != 3 {
				t.Fatalf("ResolvedRefs %+v, want one of generation 3", rr)
			}
			want := translate.CertificateSource{Name: "k8s-shop-client", Namespace: "shop", Secret: "client"}
			if tt.reason == "" {
				if rr.Status != metav1.ConditionTrue || d.LB.Pools["tlsweb-443"].GetTls().GetClientCertificate() != want.Name ||
					!slices.Contains(d.Gateway.Certificates, want) {
					t.Fatalf("ResolvedRefs %s %s, pool tls %v, certificates %v", rr.Status, rr.Reason, d.LB.Pools["tlsweb-443"].GetTls(), d.Gateway.Certificates)
				}
				if d.LB.Pools["web-80"].GetTls() != nil {
					t.Fatal("a cleartext pool got tls")
				}
				return
			}
			if rr.Status != metav1.ConditionFalse || rr.Reason != tt.reason {
				t.Fatalf("ResolvedRefs %s %s (%s), want False %s", rr.Status, rr.Reason, rr.Message, tt.reason)
			}
			if c := d.LB.Pools["tlsweb-443"].GetTls().GetClientCertificate(); c != "" {
				t.Fatalf("the pool presents %q from a ref that did not resolve", c)
			}
		})
	}
}

// A backend client certificate on a Gateway none of whose pools speaks
// TLS is presented to no member: a warning says so, and it is not
// uploaded.
func TestGatewayBackendClientCertificateUnused(t *testing.T) {
	t.Parallel()
	gw := gateway("shop", "gw", listener("http", gwv1.HTTPProtocolType, 80, ""))
	gw.Spec.TLS = &gwv1.GatewayTLSConfig{Backend: &gwv1.GatewayBackendTLS{ClientCertificateRef: &gwv1.SecretObjectReference{Name: "client"}}}
	route := httpRoute("shop", "r", 1, []gwv1.ParentReference{parent("gw", "")}, []string{"abc.example.com"},
		gwv1.HTTPRouteRule{BackendRefs: httpBackends(bref("web", 80, nil))})
	src := gwSources(t, append(backendObjs(), tlsSecret(t, "shop", "client")), gwClass("teapot", translate.GatewayController), gw, route)
	d := translate.Gateway(gw, src, gwOpts)
	if d.Refused != "" || d.Gateway.Accepted.Status != metav1.ConditionTrue {
		t.Fatalf("the Gateway is not served: %s %s", d.Gateway.Accepted.Reason, d.Refused)
	}
	if len(d.Warnings) != 1 || !strings.Contains(d.Warnings[0], "presented to none") {
		t.Errorf("warnings %q, want one that the certificate is presented to none", d.Warnings)
	}
	if len(d.Gateway.Certificates) != 0 {
		t.Errorf("certificates %v, want none uploaded", d.Gateway.Certificates)
	}
}

// TestGatewayBackendTLSPolicyOfGRPCBackends: a gRPC backend a
// BackendTLSPolicy covers speaks HTTP/2 over TLS (h2) to its members.
func TestGatewayBackendTLSPolicyOfGRPCBackends(t *testing.T) {
	t.Parallel()
	ca := caPEM(t)
	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "tlsweb"}, Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeNodePort,
		Ports: []corev1.ServicePort{{Name: "grpc", Port: 443, NodePort: 30443, Protocol: corev1.ProtocolTCP}}}}
	gw := gateway("shop", "gw", listener("http", gwv1.HTTPProtocolType, 80, ""))
	r := &gwv1.GRPCRoute{ObjectMeta: meta("shop", "g", 1)}
	r.Spec.ParentRefs = []gwv1.ParentReference{parent("gw", "")}
	r.Spec.Rules = []gwv1.GRPCRouteRule{{BackendRefs: []gwv1.GRPCBackendRef{{BackendRef: bref("tlsweb", 443, nil)}}}}
	src := gwSources(t, append(backendObjs(svc), caMap("shop", "ca", ca)), gwClass("teapot", translate.GatewayController), gw, r,
		btlsPolicy("p", 0, "", "grpc.example.com", cmRef("ca")))
	d := translate.Gateway(gw, src, gwOpts)
	bp := d.LB.Pools["tlsweb-443-h2c"]
	if bp.GetBackendProtocol() != "h2" || bp.GetTls().GetServerName() != "grpc.example.com" {
		t.Fatalf("pools %v, want tlsweb-443-h2c speaking h2 to grpc.example.com", d.LB.Pools)
	}
}

// A TCPRoute to a Service a BackendTLSPolicy covers is forwarded as it
// comes: its listener's pool has the Service's members but no tls (the LB
// speaks no TLS of its own on an L4 listener), and a warning says the
// policy is not applied to the route; an HTTPRoute to the same Service
// keeps the policy.
func TestGatewayBackendTLSPolicyNotOnL4Routes(t *testing.T) {
	t.Parallel()
	ca := caPEM(t)
	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "tlsweb"}, Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeNodePort,
		Ports: []corev1.ServicePort{{Name: "https-1", Port: 443, NodePort: 30443, Protocol: corev1.ProtocolTCP}}}}
	gw := gateway("shop", "gw", listener("http", gwv1.HTTPProtocolType, 80, ""), listener("tcp", gwv1.TCPProtocolType, 5443, ""))
	hr := httpRoute("shop", "r", 1, []gwv1.ParentReference{parent("gw", "http")}, []string{"abc.example.com"},
		gwv1.HTTPRouteRule{BackendRefs: httpBackends(bref("tlsweb", 443, nil))})
	tr := &gwv1.TCPRoute{ObjectMeta: meta("shop", "c", 2)}
	tr.Spec.ParentRefs = []gwv1.ParentReference{parent("gw", "tcp")}
	tr.Spec.Rules = []gwv1.TCPRouteRule{{BackendRefs: []gwv1.BackendRef{bref("tlsweb", 443, nil)}}}
	core := append(backendObjs(svc), caMap("shop", "ca", ca))
	src := gwSources(t, core, gwClass("teapot", translate.GatewayController), gw, hr, tr, btlsPolicy("p", 0, "", "abc.example.com", cmRef("ca")))
	d := translate.Gateway(gw, src, gwOpts)
	if d.Refused != "" {
		t.Fatalf("refused: %s", d.Refused)
	}
	if d.LB.Pools["tlsweb-443"].GetTls() == nil {
		t.Fatalf("the HTTPRoute's pool lost the policy: %v", d.LB.Pools["tlsweb-443"])
	}
	var tcpPool string
	for _, l := range d.LB.GetListeners() {
		if l.GetPort() == 5443 {
			tcpPool = l.GetPool()
		}
	}
	bp := d.LB.Pools[tcpPool]
	if bp == nil || bp.GetTls() != nil || bp.GetBackendProtocol() != "" || len(bp.GetMembers()) != len(d.LB.Pools["tlsweb-443"].GetMembers()) {
		t.Fatalf("tcp listener pool %q = %v, want the Service's members without tls", tcpPool, bp)
	}
	if len(d.Warnings) != 1 || !strings.Contains(d.Warnings[0], "TCPRoute shop/c: the BackendTLSPolicy of its backend is not applied") {
		t.Errorf("warnings %q", d.Warnings)
	}
}
