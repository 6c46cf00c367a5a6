package translate_test

import (
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"

	pb "github.com/teapot-lb/teapot-lb/api/proto/teapotv1"
	"github.com/teapot-lb/teapot-lb/tenantsync/translate"
)

func clusterIP(ns, name string) *corev1.Service {
	return service(ns, name, func(s *corev1.Service) {
		s.UID = types.UID("uid-" + name)
		s.Spec.Type = corev1.ServiceTypeClusterIP
		s.Spec.LoadBalancerClass = nil
		s.Spec.Selector = map[string]string{"app": name}
		s.Spec.Ports[0].NodePort = 0
	})
}

func TestIngressClusterIPBackend(t *testing.T) {
	opts := translate.Options{DefaultPool: "public"}
	web := clusterIP("shop", "web")
	withNodePort := translate.NodePortService(web, nil)
	withNodePort.Spec.Ports[0].NodePort = 31080
	notOurs := translate.NodePortService(web, nil)
	notOurs.Labels = nil
	notOurs.Spec.Ports[0].NodePort = 31081
	headless := clusterIP("shop", "web")
	headless.Spec.ClusterIP = corev1.ClusterIPNone
	tests := []struct {
		name      string
		objs      []runtime.Object
		opts      translate.Options
		members   []*pb.Member
		nodePorts []string
		warning   string
	}{
		{"no NodePort Service yet: waits for it", []runtime.Object{web}, opts, nil, []string{"web"}, "waiting for the NodePort Service web-teapot-np"},
		{"the agent's NodePort Service", []runtime.Object{web, withNodePort}, opts, members("10.20.0.11:31080", "10.20.0.12:31080"), []string{"web"}, ""},
		{"a Service of that name the agent does not own is not used", []runtime.Object{web, notOurs}, opts, nil, []string{"web"}, "waiting for the NodePort Service"},
		{"headless: nothing to forward to", []runtime.Object{headless}, opts, nil, nil, "has no nodePort"},
		{"pod mode needs none", []runtime.Object{web}, translate.Options{DefaultPool: "public", PodsRoutable: true}, []*pb.Member{}, nil, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ing := ingress("shop", "main", func(i *networkingv1.Ingress) {
				i.Spec.Rules[0].HTTP.Paths = i.Spec.Rules[0].HTTP.Paths[:1]
			})
			objs := append([]runtime.Object{class("teapot", translate.IngressController, false), ing}, nodes...)
			src := sources(t, append(objs, tt.objs...)...)
			d := translate.Ingress(ing, src, tt.opts)
			got := d.LB.GetPools()["web-http"].GetMembers()
			if len(got) != len(tt.members) || !slices.EqualFunc(got, tt.members, func(a, b *pb.Member) bool { return a.GetAddress() == b.GetAddress() }) {
				t.Errorf("members %v, want %v", got, tt.members)
			}
			if !slices.Equal(d.NodePorts, tt.nodePorts) {
				t.Errorf("NodePorts %v, want %v", d.NodePorts, tt.nodePorts)
			}
			joined := strings.Join(d.Warnings, "\n")
			if (tt.warning == "") != (joined == "") || !strings.Contains(joined, tt.warning) {
				t.Errorf("warnings %q, want one with %q", joined, tt.warning)
			}
		})
	}
}

func TestNodePortService(t *testing.T) {
	web := clusterIP("shop", "web")
	np := translate.NodePortService(web, nil)
	if np.Name != "web-teapot-np" || np.Spec.Type != corev1.ServiceTypeNodePort || !translate.IsNodePortFor(np, "web") {
		t.Fatalf("NodePortService = %s type %s labels %v", np.Name, np.Spec.Type, np.Labels)
	}
	if len(np.OwnerReferences) != 1 || np.OwnerReferences[0].UID != web.UID || np.OwnerReferences[0].Kind != "Service" {
		t.Fatalf("owners %+v, want the ClusterIP Service", np.OwnerReferences)
	}
	np.Spec.Ports[0].NodePort = 31080
	again := translate.NodePortService(web, np)
	if again.Spec.Ports[0].NodePort != 31080 {
		t.Errorf("the node port the API server chose is not kept: %d", again.Spec.Ports[0].NodePort)
	}
	if translate.NodePortServiceChanged(np, again) {
		t.Error("an unchanged NodePort Service reads as changed")
	}
	web.Spec.Selector = map[string]string{"app": "other"}
	if !translate.NodePortServiceChanged(np, translate.NodePortService(web, np)) {
		t.Error("a changed selector reads as unchanged")
	}
	long := strings.Repeat("a", 60)
	if n := translate.NodePortName(long); len(n) > 63 || !strings.HasSuffix(n, "-teapot-np") {
		t.Errorf("NodePortName(60 chars) = %q", n)
	}
}
