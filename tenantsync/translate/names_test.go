package translate_test

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/runtime"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/teapot-lb/teapot-lb/tenantsync/syncspec"
	"github.com/teapot-lb/teapot-lb/tenantsync/translate"
)

// lookalikes are pairs of objects whose namespace and name joined by '-'
// read the same.
var lookalikes = []struct{ ns1, name1, ns2, name2 string }{
	{"a-b", "c", "a", "b-c"},
	{"team", "web", "shop", "team-web"},
	{"x-y-z", "w", "x", "y-z-w"},
}

// TestCertificateNamesOfLookalikeSecretsDiffer: the tenant certificates
// uploaded from Secrets a-b/c and a/b-c have different names (they were
// both k8s-a-b-c, so one Gateway served the other namespace's key), and
// a Secret of a namespace without '-' keeps the name it had.
func TestCertificateNamesOfLookalikeSecretsDiffer(t *testing.T) {
	t.Parallel()
	for _, p := range lookalikes {
		a, b := syncspec.SecretCertificateName(p.ns1, p.name1), syncspec.SecretCertificateName(p.ns2, p.name2)
		if a == b {
			t.Errorf("Secrets %s/%s and %s/%s share the certificate name %s", p.ns1, p.name1, p.ns2, p.name2, a)
		}
		for _, n := range []string{a, b} {
			if len(n) > 63 || !strings.HasPrefix(n, syncspec.CertificatePrefix) {
				t.Errorf("%q is not a k8s- DNS label", n)
			}
		}
	}
	if got := syncspec.SecretCertificateName("shop", "shop-tls"); got != "k8s-shop-shop-tls" {
		t.Errorf("Secret shop/shop-tls: certificate %q, want the name it had, k8s-shop-shop-tls", got)
	}
	// A unique name is never a plain one: no namespace starts with '-'.
	if got := syncspec.SecretCertificateName("a-b", "c"); !strings.HasPrefix(got, "k8s--a-b-c-") {
		t.Errorf("Secret a-b/c: certificate %q, want k8s--a-b-c-HASH", got)
	}
	if u, h := syncspec.UniqueName("svc-", "Service", "a", "b-c"), syncspec.HashedName("svc-", "Service", "a", "b-c"); !strings.HasPrefix(u, "svc--") || u == h || len(u) > 63 {
		t.Errorf("UniqueName %q (HashedName %q)", u, h)
	}
}

// TestGatewayRoutesOfLookalikeNamespacesKeepTheirBackends: two routes of
// different namespaces attached to one Gateway name Services whose
// namespace and name read the same joined by '-'. Each route's traffic
// goes to its own Service's members: without a ReferenceGrant, neither
// reaches the other namespace's Service through a shared pool.
func TestGatewayRoutesOfLookalikeNamespacesKeepTheirBackends(t *testing.T) {
	t.Parallel()
	all := gwv1.NamespacesFromAll
	for _, p := range lookalikes {
		for _, gwNS := range []string{"gw", p.ns2} {
			t.Run(p.ns1+"/"+p.name1+" vs "+p.ns2+"/"+p.name2+" on a Gateway of "+gwNS, func(t *testing.T) {
				t.Parallel()
				l := listener("http", gwv1.HTTPProtocolType, 80, "")
				l.AllowedRoutes = &gwv1.AllowedRoutes{Namespaces: &gwv1.RouteNamespaces{From: &all}}
				gw := gateway(gwNS, "gw", l)
				pr := parent("gw", "")
				pr.Namespace = ptr(gwv1.Namespace(gwNS))
				r1 := httpRoute(p.ns1, "r", 1, []gwv1.ParentReference{pr}, []string{"one.acme.example"}, gwv1.HTTPRouteRule{BackendRefs: httpBackends(bref(p.name1, 80, nil))})
				r2 := httpRoute(p.ns2, "r", 2, []gwv1.ParentReference{pr}, []string{"two.acme.example"}, gwv1.HTTPRouteRule{BackendRefs: httpBackends(bref(p.name2, 80, nil))})
				core := append([]runtime.Object{}, nodes...)
				core = append(core, nodePortSvc(p.ns1, p.name1, 80, 30001), nodePortSvc(p.ns2, p.name2, 80, 30002))
				src := gwSources(t, core, gwClass("teapot", translate.GatewayController), gw, r1, r2)
				d := translate.Gateway(gw, src, gwOpts)
				want := map[string]string{"one.acme.example": ":30001", "two.acme.example": ":30002"}
				for _, r := range d.LB.GetRoutes() {
					port, ok := want[r.GetHost()]
					if !ok {
						continue
					}
					delete(want, r.GetHost())
					keys := []string{r.GetPool()}
					if len(r.GetBackends()) > 0 {
						keys = keys[:0]
						for _, b := range r.GetBackends() {
							keys = append(keys, b.GetPool())
						}
					}
					for _, key := range keys {
						pool := d.LB.GetPools()[key]
						if pool == nil || len(pool.GetMembers()) == 0 {
							t.Fatalf("route of %s: pool %q has no members", r.GetHost(), key)
						}
						for _, m := range pool.GetMembers() {
							if !strings.HasSuffix(m.GetAddress(), port) {
								t.Errorf("route of %s sends to %s (pool %q); want its own Service's node port %s", r.GetHost(), m.GetAddress(), key, port)
							}
						}
					}
				}
				if len(want) != 0 {
					t.Errorf("no route for %v", want)
				}
			})
		}
	}
}

// TestGatewaysOfLookalikeNamespacesServeTheirOwnSecrets: Gateway a/gw
// lists its own Secret b-c and Gateway a-b/gw its own Secret c. Each
// listener serves the certificate uploaded from its own namespace's
// Secret: no Gateway gets another namespace's key without a
// ReferenceGrant.
func TestGatewaysOfLookalikeNamespacesServeTheirOwnSecrets(t *testing.T) {
	t.Parallel()
	for _, p := range lookalikes {
		t.Run(p.ns1+"/"+p.name1+" vs "+p.ns2+"/"+p.name2, func(t *testing.T) {
			t.Parallel()
			https := func(ns, secret string) *gwv1.Gateway {
				l := listener("https", gwv1.HTTPSProtocolType, 443, "")
				l.TLS = &gwv1.ListenerTLSConfig{CertificateRefs: []gwv1.SecretObjectReference{{Name: gwv1.ObjectName(secret)}}}
				return gateway(ns, "gw", l)
			}
			g1, g2 := https(p.ns1, p.name1), https(p.ns2, p.name2)
			src := gwSources(t, []runtime.Object{tlsSecret(t, p.ns1, p.name1), tlsSecret(t, p.ns2, p.name2)}, gwClass("teapot", translate.GatewayController), g1, g2)
			served := map[string]translate.CertificateSource{}
			for _, g := range []*gwv1.Gateway{g1, g2} {
				d := translate.Gateway(g, src, gwOpts)
				if len(d.Gateway.Certificates) != 1 {
					t.Fatalf("Gateway %s/gw: certificates %v", g.Namespace, d.Gateway.Certificates)
				}
				c := d.Gateway.Certificates[0]
				if c.Namespace != g.Namespace {
					t.Errorf("Gateway %s/gw uploads Secret %s/%s", g.Namespace, c.Namespace, c.Secret)
				}
				var listed []string
				for _, l := range d.LB.GetListeners() {
					listed = append(listed, l.GetTls().GetCertificates()...)
				}
				if len(listed) != 1 || listed[0] != c.Name {
					t.Errorf("Gateway %s/gw lists certificates %v, want %s", g.Namespace, listed, c.Name)
				}
				if prev, ok := served[c.Name]; ok {
					t.Errorf("certificate %s is Secret %s/%s and Secret %s/%s: the agent uploads one of them for both Gateways", c.Name, prev.Namespace, prev.Secret, c.Namespace, c.Secret)
				}
				served[c.Name] = c
			}
		})
	}
}

// TestIngressBackendsOfLookalikePortsKeepTheirPools: Service web-http
// port alt and Service web port http-alt both read web-http-alt; each
// path of the Ingress keeps its own Service's members.
func TestIngressBackendsOfLookalikePortsKeepTheirPools(t *testing.T) {
	t.Parallel()
	svc := func(name, port string, nodePort int32) *corev1.Service {
		return service("shop", name, func(s *corev1.Service) {
			s.Spec.Type, s.Spec.LoadBalancerClass = corev1.ServiceTypeNodePort, nil
			s.Spec.Ports = []corev1.ServicePort{{Name: port, Port: 80, NodePort: nodePort}}
		})
	}
	ing := ingress("shop", "main", func(i *networkingv1.Ingress) {
		i.Spec.Rules[0].HTTP.Paths = []networkingv1.HTTPIngressPath{
			path("/one", networkingv1.PathTypePrefix, backend("web-http", "alt")),
			path("/two", networkingv1.PathTypePrefix, backend("web", "http-alt")),
		}
	})
	objs := append([]runtime.Object{class("teapot", translate.IngressController, false), svc("web-http", "alt", 30001), svc("web", "http-alt", 30002), ing}, nodes...)
	d := translate.Ingress(ing, sources(t, objs...), translate.Options{DefaultPool: "public"})
	want := map[string]string{"/one": ":30001", "/two": ":30002"}
	pools := map[string]bool{}
	for _, r := range d.LB.GetRoutes() {
		pools[r.GetPool()] = true
		for _, m := range d.LB.GetPools()[r.GetPool()].GetMembers() {
			if !strings.HasSuffix(m.GetAddress(), want[r.GetPath()]) {
				t.Errorf("path %s sends to %s (pool %q), want node port %s", r.GetPath(), m.GetAddress(), r.GetPool(), want[r.GetPath()])
			}
		}
	}
	if len(pools) != 2 {
		t.Errorf("routes %v share a pool", d.LB.GetRoutes())
	}
}
