package translate_test

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	pb "github.com/teapot-lb/teapot-lb/api/proto/teapotv1"
	"github.com/teapot-lb/teapot-lb/tenantsync/syncspec"
	"github.com/teapot-lb/teapot-lb/tenantsync/translate"
)

func class(name, controller string, isDefault bool) *networkingv1.IngressClass {
	ic := &networkingv1.IngressClass{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: networkingv1.IngressClassSpec{Controller: controller}}
	if isDefault {
		ic.Annotations = map[string]string{"ingressclass.kubernetes.io/is-default-class": "true"}
	}
	return ic
}

func backend(svc string, port any) networkingv1.IngressBackend {
	b := networkingv1.IngressBackend{Service: &networkingv1.IngressServiceBackend{Name: svc}}
	switch p := port.(type) {
	case string:
		b.Service.Port.Name = p
	case int:
		b.Service.Port.Number = int32(p)
	}
	return b
}

func path(p string, typ networkingv1.PathType, b networkingv1.IngressBackend) networkingv1.HTTPIngressPath {
	return networkingv1.HTTPIngressPath{Path: p, PathType: &typ, Backend: b}
}

func ingress(ns, name string, opts ...func(*networkingv1.Ingress)) *networkingv1.Ingress {
	ing := &networkingv1.Ingress{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Annotations: map[string]string{}},
		Spec: networkingv1.IngressSpec{
			IngressClassName: ptr("teapot"),
			Rules: []networkingv1.IngressRule{{
				Host: "shop.acme.example",
				IngressRuleValue: networkingv1.IngressRuleValue{HTTP: &networkingv1.HTTPIngressRuleValue{Paths: []networkingv1.HTTPIngressPath{
					path("/", networkingv1.PathTypePrefix, backend("web", "http")),
					path("/api", networkingv1.PathTypeImplementationSpecific, backend("api", 8080)),
					path("/healthz", networkingv1.PathTypeExact, backend("web", "http")),
				}}},
			}},
		},
	}
	for _, o := range opts {
		o(ing)
	}
	return ing
}

func backendServices() []runtime.Object {
	web := service("shop", "web", func(s *corev1.Service) { s.Spec.Type = corev1.ServiceTypeNodePort; s.Spec.LoadBalancerClass = nil })
	api := service("shop", "api", func(s *corev1.Service) {
		s.Spec.Type = corev1.ServiceTypeNodePort
		s.Spec.LoadBalancerClass = nil
		s.Spec.Ports = []corev1.ServicePort{{Name: "grpc", Port: 8080, NodePort: 30808}}
	})
	return []runtime.Object{web, api}
}

func TestIngress(t *testing.T) {
	opts := translate.Options{DefaultPool: "public"}
	routes := []*pb.Route{
		{Host: "shop.acme.example", Path: "/", Pool: "web-http"},
		{Host: "shop.acme.example", Path: "/api", Pool: "api-8080"},
		{Host: "shop.acme.example", Path: "/healthz", PathType: "exact", Pool: "web-http"},
	}
	nodePools := map[string]*pb.BackendPool{
		"web-http": {Members: members("10.20.0.11:30080", "10.20.0.12:30080")},
		"api-8080": {Members: members("10.20.0.11:30808", "10.20.0.12:30808")},
	}
	http := &pb.Listener{Port: 80, Protocol: "http"}
	tests := []struct {
		name     string
		objs     []runtime.Object
		ing      *networkingv1.Ingress
		opts     translate.Options
		want     *pb.LoadBalancer
		warnings []string
	}{
		{
			name: "http routes to NodePort backends",
			objs: append(append([]runtime.Object{}, nodes...), backendServices()...),
			ing:  ingress("shop", "main"), opts: opts,
			want: &pb.LoadBalancer{Name: "ing-shop-main", Vip: &pb.VIPRequest{Pool: "public"}, Listeners: []*pb.Listener{http}, Routes: routes, Pools: nodePools},
		},
		{
			name: "TLS hosts add https with ACME; ssl-redirect; default backend",
			objs: append(append([]runtime.Object{}, nodes...), backendServices()...),
			ing: ingress("shop", "main", func(i *networkingv1.Ingress) {
				i.Spec.TLS = []networkingv1.IngressTLS{{Hosts: []string{"shop.acme.example"}}}
				i.Annotations[translate.AnnotationSSLRedirect] = "true"
				b := backend("web", "http")
				i.Spec.DefaultBackend = &b
			}),
			opts: opts,
			want: &pb.LoadBalancer{
				Name: "ing-shop-main", Vip: &pb.VIPRequest{Pool: "public"},
				Listeners: []*pb.Listener{
					{Port: 80, Protocol: "http", RedirectToHttps: true},
					{Port: 443, Protocol: "https", Tls: &pb.TLSPolicy{Acme: true}},
				},
				Routes: append(append([]*pb.Route{}, routes...), &pb.Route{Path: "/", Pool: "web-http"}),
				Pools:  nodePools,
			},
		},
		{
			name: "uploaded certificates instead of ACME",
			objs: append(append([]runtime.Object{}, nodes...), backendServices()...),
			ing: ingress("shop", "main", func(i *networkingv1.Ingress) {
				i.Spec.TLS = []networkingv1.IngressTLS{{Hosts: []string{"shop.acme.example"}, SecretName: "shop-tls"}}
				i.Annotations[translate.AnnotationTLSCertificates] = "shop, shop-ecdsa"
			}),
			opts: opts,
			want: &pb.LoadBalancer{
				Name: "ing-shop-main", Vip: &pb.VIPRequest{Pool: "public"},
				Listeners: []*pb.Listener{http, {Port: 443, Protocol: "https", Tls: &pb.TLSPolicy{Certificates: []string{"shop", "shop-ecdsa"}}}},
				Routes:    routes, Pools: nodePools,
			},
			// The Secret is not read, which a warning says.
			warnings: []string{"1 secretName entries are not read"},
		},
		{
			name: "pod mode reads the backends' EndpointSlices",
			objs: append(backendServices(),
				slice("shop", "web-1", "web", "http", 8080, ep(nil, "10.244.1.1")),
				slice("shop", "api-1", "api", "grpc", 9000, ep(nil, "10.244.2.2"), ep(ptr(false), "10.244.2.3"))),
			ing:  ingress("shop", "main"),
			opts: translate.Options{DefaultPool: "public", PodsRoutable: true},
			want: &pb.LoadBalancer{Name: "ing-shop-main", Vip: &pb.VIPRequest{Pool: "public"}, Listeners: []*pb.Listener{http}, Routes: routes,
				Pools: map[string]*pb.BackendPool{
					"web-http": {Members: members("10.244.1.1:8080")},
					"api-8080": {Members: members("10.244.2.2:9000")},
				}},
		},
		{
			name: "client-source is refused on an Ingress",
			objs: append(append([]runtime.Object{}, nodes...), backendServices()...),
			ing: ingress("shop", "main", func(i *networkingv1.Ingress) {
				i.Annotations[translate.AnnotationClientSource] = "true"
			}),
			opts:     translate.Options{DefaultPool: "public", ClientSource: true},
			want:     &pb.LoadBalancer{Name: "ing-shop-main", Vip: &pb.VIPRequest{Pool: "public"}, Listeners: []*pb.Listener{http}, Routes: routes, Pools: nodePools},
			warnings: []string{"read on Services of type LoadBalancer only, not on an Ingress"},
		},
		{
			name: "a missing backend Service leaves an empty pool and a warning",
			objs: nodes, ing: ingress("shop", "main", func(i *networkingv1.Ingress) {
				i.Spec.Rules[0].HTTP.Paths = i.Spec.Rules[0].HTTP.Paths[:1]
			}),
			opts: opts,
			want: &pb.LoadBalancer{Name: "ing-shop-main", Vip: &pb.VIPRequest{Pool: "public"}, Listeners: []*pb.Listener{http},
				Routes: routes[:1], Pools: map[string]*pb.BackendPool{"web-http": {}}},
			warnings: []string{"does not exist"},
		},
		{
			name: "a ClusterIP backend has no nodePort in NodePort mode",
			objs: append(append([]runtime.Object{}, nodes...), service("shop", "web", func(s *corev1.Service) {
				s.Spec.Type = corev1.ServiceTypeClusterIP
				s.Spec.Ports[0].NodePort = 0
			})),
			ing: ingress("shop", "main", func(i *networkingv1.Ingress) {
				i.Spec.Rules[0].HTTP.Paths = i.Spec.Rules[0].HTTP.Paths[:1]
			}),
			opts: opts,
			want: &pb.LoadBalancer{Name: "ing-shop-main", Vip: &pb.VIPRequest{Pool: "public"}, Listeners: []*pb.Listener{http},
				Routes: routes[:1], Pools: map[string]*pb.BackendPool{"web-http": {}}},
			warnings: []string{"has no nodePort"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			objs := append([]runtime.Object{class("teapot", translate.IngressController, false)}, tt.objs...)
			src := sources(t, append(objs, tt.ing)...)
			if !translate.WantsIngress(tt.ing, src, tt.opts) {
				t.Fatal("WantsIngress = false")
			}
			d := translate.Ingress(tt.ing, src, tt.opts)
			check(t, d, tt.want, tt.warnings)
			if !d.ProxyMode {
				t.Error("an Ingress is always terminated by the LB: ProxyMode = false")
			}
		})
	}
}

func TestWantsIngress(t *testing.T) {
	classes := []runtime.Object{
		class("teapot", translate.IngressController, false),
		class("nginx", "k8s.io/ingress-nginx", false),
	}
	withDefault := append([]runtime.Object{class("default", translate.IngressController, true)}, classes...)
	tests := []struct {
		name string
		objs []runtime.Object
		ing  *networkingv1.Ingress
		want bool
	}{
		{"our class by name", classes, ingress("a", "b"), true},
		{"another controller's class", classes, ingress("a", "b", func(i *networkingv1.Ingress) { i.Spec.IngressClassName = ptr("nginx") }), false},
		{"a class that does not exist", classes, ingress("a", "b", func(i *networkingv1.Ingress) { i.Spec.IngressClassName = ptr("gone") }), false},
		{"legacy annotation", classes, ingress("a", "b", func(i *networkingv1.Ingress) {
			i.Spec.IngressClassName = nil
			i.Annotations["kubernetes.io/ingress.class"] = "teapot"
		}), true},
		{"no class and no default", classes, ingress("a", "b", func(i *networkingv1.Ingress) { i.Spec.IngressClassName = nil }), false},
		{"no class, our class is the default", withDefault, ingress("a", "b", func(i *networkingv1.Ingress) { i.Spec.IngressClassName = nil }), true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			src := sources(t, tt.objs...)
			if got := translate.WantsIngress(tt.ing, src, translate.Options{}); got != tt.want {
				t.Errorf("WantsIngress = %t, want %t", got, tt.want)
			}
		})
	}
}

func TestNames(t *testing.T) {
	long := strings.Repeat("x", 60)
	tests := []struct {
		name, got, want string
	}{
		{"service", syncspec.ServiceName("shop", "web"), "svc-shop-web"},
		{"ingress", syncspec.IngressName("shop", "main"), "ing-shop-main"},
		{"ingress with dots", syncspec.IngressName("shop", "www.acme"), syncspec.HashedName("ing-", "Ingress", "shop", "www.acme")},
		{"too long", syncspec.ServiceName("shop", long), syncspec.HashedName("svc-", "Service", "shop", long)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.got != tt.want {
				t.Errorf("got %q, want %q", tt.got, tt.want)
			}
			if len(tt.got) > 63 || !syncspec.Managed(tt.got) {
				t.Errorf("%q is not a managed DNS label", tt.got)
			}
		})
	}
	a, b := syncspec.HashedName("svc-", "Service", "a-b", "c"), syncspec.HashedName("svc-", "Service", "a", "b-c")
	if a == b {
		t.Errorf("hashed names of a-b/c and a/b-c clash: %s", a)
	}
	if h := syncspec.HashedName("svc-", "Service", "shop", long); len(h) != 63 || !strings.HasPrefix(h, "svc-shop-xxx") {
		t.Errorf("hashed long name %q: want 63 characters starting with the readable part", h)
	}
}
