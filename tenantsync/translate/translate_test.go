package translate_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes/fake"

	pb "github.com/teapot-lb/teapot-lb/api/proto/teapotv1"
	"github.com/teapot-lb/teapot-lb/tenantsync/syncspec"
	"github.com/teapot-lb/teapot-lb/tenantsync/translate"
)

// sources loads objs into a fake clientset and returns synced listers.
func sources(t *testing.T, objs ...runtime.Object) translate.Sources {
	t.Helper()
	client := fake.NewClientset(objs...)
	f := informers.NewSharedInformerFactory(client, 0)
	src := translate.Sources{
		Services:       f.Core().V1().Services().Lister(),
		EndpointSlices: f.Discovery().V1().EndpointSlices().Lister(),
		Nodes:          f.Core().V1().Nodes().Lister(),
		Ingresses:      f.Networking().V1().Ingresses().Lister(),
		IngressClasses: f.Networking().V1().IngressClasses().Lister(),
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	f.Start(ctx.Done())
	t.Cleanup(func() { cancel(); f.Shutdown() })
	for typ, ok := range f.WaitForCacheSync(ctx.Done()) {
		if !ok {
			t.Fatalf("informer for %v did not sync", typ)
		}
	}
	return src
}

func ptr[T any](v T) *T { return &v }

func node(name, ip string, ready bool, labels map[string]string) *corev1.Node {
	st := corev1.ConditionFalse
	if ready {
		st = corev1.ConditionTrue
	}
	return &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels},
		Status: corev1.NodeStatus{
			Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: st}},
			Addresses: []corev1.NodeAddress{
				{Type: corev1.NodeHostName, Address: name},
				{Type: corev1.NodeExternalIP, Address: "203.0.113.9"},
				{Type: corev1.NodeInternalIP, Address: ip},
			},
		},
	}
}

var nodes = []runtime.Object{
	node("n1", "10.20.0.11", true, nil),
	node("n2", "10.20.0.12", true, nil),
	node("n3", "10.20.0.13", false, nil),
	node("n4", "10.20.0.14", true, map[string]string{"node.kubernetes.io/exclude-from-external-load-balancers": ""}),
}

type svcOpt func(*corev1.Service)

func service(ns, name string, opts ...svcOpt) *corev1.Service {
	s := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Annotations: map[string]string{}},
		Spec: corev1.ServiceSpec{
			Type:              corev1.ServiceTypeLoadBalancer,
			LoadBalancerClass: ptr(translate.LoadBalancerClass),
			Ports:             []corev1.ServicePort{{Name: "http", Port: 80, Protocol: corev1.ProtocolTCP, NodePort: 30080, TargetPort: intstr.FromInt32(8080)}},
		},
	}
	for _, o := range opts {
		o(s)
	}
	return s
}

func slice(ns, name, svc, port string, portNum int32, eps ...discoveryv1.Endpoint) *discoveryv1.EndpointSlice {
	return &discoveryv1.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Namespace: ns, Name: name, Labels: map[string]string{discoveryv1.LabelServiceName: svc}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Ports:       []discoveryv1.EndpointPort{{Name: ptr(port), Port: ptr(portNum), Protocol: ptr(corev1.ProtocolTCP)}},
		Endpoints:   eps,
	}
}

func ep(ready *bool, addrs ...string) discoveryv1.Endpoint {
	return discoveryv1.Endpoint{Addresses: addrs, Conditions: discoveryv1.EndpointConditions{Ready: ready}}
}

func members(addrs ...string) []*pb.Member {
	out := make([]*pb.Member, len(addrs))
	for i, a := range addrs {
		out[i] = &pb.Member{Address: a}
	}
	return out
}

func tcpLB(name string, vip *pb.VIPRequest, pools map[string]*pb.BackendPool, ports ...*pb.Listener) *pb.LoadBalancer {
	return &pb.LoadBalancer{Name: name, Vip: vip, Listeners: ports, Pools: pools}
}

func TestService(t *testing.T) {
	opts := translate.Options{DefaultPool: "public"}
	pods := translate.Options{DefaultPool: "public", PodsRoutable: true}
	clientSrc := translate.Options{DefaultPool: "public", PodsRoutable: true, ClientSource: true}
	vip := &pb.VIPRequest{Pool: "public"}
	http80 := &pb.Listener{Port: 80, Protocol: "tcp", Pool: "http"}
	tests := []struct {
		name      string
		objs      []runtime.Object
		svc       *corev1.Service
		opts      translate.Options
		want      *pb.LoadBalancer
		proxyMode bool
		warnings  []string
		refused   string
	}{
		{
			name: "nodeport mode: ready, not excluded nodes with the nodePort",
			objs: nodes, svc: service("shop", "web"), opts: opts,
			want: tcpLB("svc-shop-web", vip, map[string]*pb.BackendPool{"http": {Members: members("10.20.0.11:30080", "10.20.0.12:30080")}}, http80),
		},
		{
			name: "externalTrafficPolicy Local checks healthCheckNodePort",
			objs: nodes, opts: opts,
			svc: service("shop", "web", func(s *corev1.Service) {
				s.Spec.ExternalTrafficPolicy = corev1.ServiceExternalTrafficPolicyLocal
				s.Spec.HealthCheckNodePort = 32000
			}),
			want: tcpLB("svc-shop-web", vip, map[string]*pb.BackendPool{"http": {
				Members:     members("10.20.0.11:30080", "10.20.0.12:30080"),
				HealthCheck: &pb.HealthCheck{Http: &pb.HTTPCheck{Path: "/healthz"}, Port: 32000},
			}}, http80),
		},
		{
			name: "pod mode: ready endpoints of every slice, by port name, deduplicated",
			objs: []runtime.Object{
				slice("shop", "web-a", "web", "http", 8080, ep(nil, "10.244.1.5"), ep(ptr(true), "10.244.2.7"), ep(ptr(false), "10.244.3.9")),
				slice("shop", "web-b", "web", "http", 8080, ep(nil, "10.244.1.5"), ep(nil, "10.244.0.3")),
				slice("shop", "web-metrics", "web", "metrics", 9090, ep(nil, "10.244.9.9")),
				slice("shop", "other", "other", "http", 8080, ep(nil, "10.244.7.7")),
			},
			svc: service("shop", "web"), opts: pods,
			want: tcpLB("svc-shop-web", vip, map[string]*pb.BackendPool{"http": {
				Members: members("10.244.0.3:8080", "10.244.1.5:8080", "10.244.2.7:8080"),
			}}, http80),
		},
		{
			name: "pod mode: client-source makes the pods' connections come from the client",
			objs: []runtime.Object{slice("shop", "web-a", "web", "http", 8080, ep(nil, "10.244.1.5"))},
			svc:  service("shop", "web", func(s *corev1.Service) { s.Annotations[translate.AnnotationClientSource] = "true" }),
			opts: clientSrc,
			want: tcpLB("svc-shop-web", vip, map[string]*pb.BackendPool{"http": {ClientSource: true, Members: members("10.244.1.5:8080")}}, http80),
		},
		{
			name: "client-source false and unset are the same",
			objs: []runtime.Object{slice("shop", "web-a", "web", "http", 8080, ep(nil, "10.244.1.5"))},
			svc:  service("shop", "web", func(s *corev1.Service) { s.Annotations[translate.AnnotationClientSource] = "false" }),
			opts: clientSrc,
			want: tcpLB("svc-shop-web", vip, map[string]*pb.BackendPool{"http": {Members: members("10.244.1.5:8080")}}, http80),
		},
		{
			name: "client-source is refused for node ports",
			objs: nodes, opts: func() translate.Options { o := clientSrc; o.PodsRoutable = false; return o }(),
			svc:      service("shop", "web", func(s *corev1.Service) { s.Annotations[translate.AnnotationClientSource] = "true" }),
			want:     tcpLB("svc-shop-web", vip, map[string]*pb.BackendPool{"http": {Members: members("10.20.0.11:30080", "10.20.0.12:30080")}}, http80),
			warnings: []string{"teapot-lb.io/client-source: the members are node ports, where kube-proxy rewrites the client's address"},
		},
		{
			name: "client-source is refused with PROXY protocol, which is kept",
			objs: []runtime.Object{slice("shop", "web-a", "web", "http", 8080, ep(nil, "10.244.1.5"))},
			svc: service("shop", "web", func(s *corev1.Service) {
				s.Annotations[translate.AnnotationClientSource] = "true"
				s.Annotations[translate.AnnotationProxyProtocol] = "v2"
			}),
			opts:      clientSrc,
			want:      tcpLB("svc-shop-web", vip, map[string]*pb.BackendPool{"http": {ProxyProtocol: "v2", Members: members("10.244.1.5:8080")}}, http80),
			proxyMode: true,
			warnings:  []string{"not applied with teapot-lb.io/proxy-protocol"},
		},
		{
			name:     "client-source is refused by an LB cluster below its feature level",
			objs:     []runtime.Object{slice("shop", "web-a", "web", "http", 8080, ep(nil, "10.244.1.5"))},
			svc:      service("shop", "web", func(s *corev1.Service) { s.Annotations[translate.AnnotationClientSource] = "true" }),
			opts:     pods,
			want:     tcpLB("svc-shop-web", vip, map[string]*pb.BackendPool{"http": {Members: members("10.244.1.5:8080")}}, http80),
			warnings: []string{"the LB cluster does not dial from clients' addresses yet (feature level 7 on every host)"},
		},
		{
			name:     "client-source not a boolean",
			objs:     []runtime.Object{slice("shop", "web-a", "web", "http", 8080, ep(nil, "10.244.1.5"))},
			svc:      service("shop", "web", func(s *corev1.Service) { s.Annotations[translate.AnnotationClientSource] = "yes" }),
			opts:     clientSrc,
			want:     tcpLB("svc-shop-web", vip, map[string]*pb.BackendPool{"http": {Members: members("10.244.1.5:8080")}}, http80),
			warnings: []string{`"yes" is not true or false`},
		},
		{
			name: "a Service may ask for nodeport members when pods are routable",
			objs: nodes, opts: pods,
			svc:  service("shop", "web", func(s *corev1.Service) { s.Annotations[translate.AnnotationMembers] = "nodeport" }),
			want: tcpLB("svc-shop-web", vip, map[string]*pb.BackendPool{"http": {Members: members("10.20.0.11:30080", "10.20.0.12:30080")}}, http80),
		},
		{
			name: "annotations: pool, address, sharing key, PROXY protocol, algorithm, health check",
			objs: nodes, opts: opts,
			svc: service("shop", "web", func(s *corev1.Service) {
				s.Annotations[translate.AnnotationPool] = "private"
				s.Annotations[translate.AnnotationIPs] = "192.0.2.10, 2001:db8::10"
				s.Annotations[translate.AnnotationSharingKey] = "shop"
				s.Annotations[translate.AnnotationProxyProtocol] = "v2"
				s.Annotations[translate.AnnotationAlgorithm] = "least-request"
				s.Annotations[translate.AnnotationHealthCheckPath] = "/ready"
			}),
			want: tcpLB("svc-shop-web", &pb.VIPRequest{Pool: "private", Address: "192.0.2.10", SharingKey: "shop"},
				map[string]*pb.BackendPool{"http": {
					Algorithm: "least-request", ProxyProtocol: "v2",
					HealthCheck: &pb.HealthCheck{Http: &pb.HTTPCheck{Path: "/ready"}},
					Members:     members("10.20.0.11:30080", "10.20.0.12:30080"),
				}}, http80),
			proxyMode: true,
			warnings:  []string{"lists 2 addresses"},
		},
		{
			name: "hostnames from teapot-lb.io/hostname and external-dns's annotation",
			objs: nodes, opts: opts,
			svc: service("shop", "web", func(s *corev1.Service) {
				s.Annotations[translate.AnnotationHostname] = "Web.Acme.Example., *.apps.acme.example"
				s.Annotations[translate.AnnotationExternalDNSHostname] = "web.acme.example,db.acme.example"
			}),
			want: func() *pb.LoadBalancer {
				lb := tcpLB("svc-shop-web", vip, map[string]*pb.BackendPool{"http": {Members: members("10.20.0.11:30080", "10.20.0.12:30080")}}, http80)
				lb.Hostnames = []string{"web.acme.example", "*.apps.acme.example", "db.acme.example"}
				return lb
			}(),
		},
		{
			name: "spec.loadBalancerIP is honoured",
			objs: nodes, opts: opts,
			svc:  service("shop", "web", func(s *corev1.Service) { s.Spec.LoadBalancerIP = "192.0.2.20" }),
			want: tcpLB("svc-shop-web", &pb.VIPRequest{Pool: "public", Address: "192.0.2.20"}, map[string]*pb.BackendPool{"http": {Members: members("10.20.0.11:30080", "10.20.0.12:30080")}}, http80),
		},
		{
			name: "udp and unnamed ports; SCTP is left out with a warning; no PROXY protocol to UDP",
			objs: nodes, opts: opts,
			svc: service("dns", "resolver", func(s *corev1.Service) {
				s.Annotations[translate.AnnotationProxyProtocol] = "v1"
				s.Spec.Ports = []corev1.ServicePort{
					{Name: "dns-udp", Port: 53, Protocol: corev1.ProtocolUDP, NodePort: 30053},
					{Name: "dns-tcp", Port: 53, Protocol: corev1.ProtocolTCP, NodePort: 30054},
					{Name: "sig", Port: 2905, Protocol: corev1.ProtocolSCTP, NodePort: 30055},
				}
			}),
			want: tcpLB("svc-dns-resolver", vip, map[string]*pb.BackendPool{
				"dns-udp": {Members: members("10.20.0.11:30053", "10.20.0.12:30053")},
				"dns-tcp": {ProxyProtocol: "v1", Members: members("10.20.0.11:30054", "10.20.0.12:30054")},
			}, &pb.Listener{Port: 53, Protocol: "udp", Pool: "dns-udp"}, &pb.Listener{Port: 53, Protocol: "tcp", Pool: "dns-tcp"}),
			proxyMode: true,
			warnings:  []string{"SCTP is not supported"},
		},
		{
			name: "single unnamed port; no nodePort is a warning",
			objs: nodes, opts: opts,
			svc: service("shop", "web", func(s *corev1.Service) {
				s.Spec.Ports = []corev1.ServicePort{{Port: 443, Protocol: corev1.ProtocolTCP}}
			}),
			want:     tcpLB("svc-shop-web", vip, map[string]*pb.BackendPool{"tcp-443": {}}, &pb.Listener{Port: 443, Protocol: "tcp", Pool: "tcp-443"}),
			warnings: []string{"has no nodePort"},
		},
		{
			name: "allocateLoadBalancerNodePorts false without pod mode is refused",
			objs: nodes, opts: opts,
			svc: service("shop", "web", func(s *corev1.Service) {
				s.Spec.AllocateLoadBalancerNodePorts = ptr(false)
				s.Spec.Ports = []corev1.ServicePort{{Name: "http", Port: 80, Protocol: corev1.ProtocolTCP}}
			}),
			want:    tcpLB("svc-shop-web", vip, map[string]*pb.BackendPool{"http": {}}, http80),
			refused: "port 80/TCP has no nodePort because allocateLoadBalancerNodePorts is false",
		},
		{
			name: "allocateLoadBalancerNodePorts false in pod mode: the pods are members",
			objs: []runtime.Object{slice("shop", "web-1", "web", "http", 8080, ep(nil, "10.20.1.5"))},
			opts: pods,
			svc: service("shop", "web", func(s *corev1.Service) {
				s.Spec.AllocateLoadBalancerNodePorts = ptr(false)
				s.Spec.Ports = []corev1.ServicePort{{Name: "http", Port: 80, Protocol: corev1.ProtocolTCP}}
			}),
			want: tcpLB("svc-shop-web", vip, map[string]*pb.BackendPool{"http": {Members: members("10.20.1.5:8080")}}, http80),
		},
		{
			name: "single-stack IPv6 asks for an IPv6 VIP",
			objs: nodes, opts: opts,
			svc:  service("shop", "web", func(s *corev1.Service) { s.Spec.IPFamilies = []corev1.IPFamily{corev1.IPv6Protocol} }),
			want: tcpLB("svc-shop-web", &pb.VIPRequest{Pool: "public", Family: "ipv6"}, map[string]*pb.BackendPool{"http": {Members: members("10.20.0.11:30080", "10.20.0.12:30080")}}, http80),
		},
		{
			name: "pod mode asked without routable pods falls back to nodeport",
			objs: nodes, opts: opts,
			svc:      service("shop", "web", func(s *corev1.Service) { s.Annotations[translate.AnnotationMembers] = "pod" }),
			want:     tcpLB("svc-shop-web", vip, map[string]*pb.BackendPool{"http": {Members: members("10.20.0.11:30080", "10.20.0.12:30080")}}, http80),
			warnings: []string{"not routable"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			src := sources(t, append(tt.objs, tt.svc)...)
			if !translate.WantsService(tt.svc, tt.opts) {
				t.Fatal("WantsService = false")
			}
			d := translate.Service(tt.svc, src, tt.opts)
			check(t, d, tt.want, tt.warnings)
			if (tt.refused == "") != (d.Refused == "") || !strings.Contains(d.Refused, tt.refused) {
				t.Errorf("Refused = %q, want %q", d.Refused, tt.refused)
			}
			if d.ProxyMode != tt.proxyMode {
				t.Errorf("ProxyMode = %t, want %t", d.ProxyMode, tt.proxyMode)
			}
			if d.Source != (translate.Source{Kind: translate.KindService, Namespace: tt.svc.Namespace, Name: tt.svc.Name}) {
				t.Errorf("Source = %v", d.Source)
			}
		})
	}
}

// check compares a translation with the wanted load balancer and warnings
// (each a substring of one warning, in order).
func check(t *testing.T, d *translate.Desired, want *pb.LoadBalancer, warnings []string) {
	t.Helper()
	if !proto.Equal(d.LB, want) {
		t.Errorf("load balancer\n got %s\nwant %s", protojson.Format(d.LB), protojson.Format(want))
	}
	if d.Version != syncspec.Version(want) {
		t.Errorf("Version = %s, want %s", d.Version, syncspec.Version(want))
	}
	if len(d.Warnings) != len(warnings) {
		t.Fatalf("warnings = %q, want %d matching %q", d.Warnings, len(warnings), warnings)
	}
	for i, w := range warnings {
		if !strings.Contains(d.Warnings[i], w) {
			t.Errorf("warnings[%d] = %q, want it to mention %q", i, d.Warnings[i], w)
		}
	}
}

func TestWantsService(t *testing.T) {
	tests := []struct {
		name         string
		svc          *corev1.Service
		defaultClass bool
		want         bool
	}{
		{"our class", service("a", "b"), false, true},
		{"another class", service("a", "b", func(s *corev1.Service) { s.Spec.LoadBalancerClass = ptr("metallb.io/metallb") }), true, false},
		{"no class without --default-class", service("a", "b", func(s *corev1.Service) { s.Spec.LoadBalancerClass = nil }), false, false},
		{"no class with --default-class", service("a", "b", func(s *corev1.Service) { s.Spec.LoadBalancerClass = nil }), true, true},
		{"not a LoadBalancer", service("a", "b", func(s *corev1.Service) { s.Spec.Type = corev1.ServiceTypeNodePort }), true, false},
		{"being deleted", service("a", "b", func(s *corev1.Service) { s.DeletionTimestamp = &metav1.Time{Time: time.Unix(1, 0)} }), true, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := translate.WantsService(tt.svc, translate.Options{DefaultClass: tt.defaultClass}); got != tt.want {
				t.Errorf("WantsService = %t, want %t", got, tt.want)
			}
		})
	}
}
