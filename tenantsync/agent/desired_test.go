package agent

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/teapot-lb/teapot-lb/tenantsync/syncspec"
	"github.com/teapot-lb/teapot-lb/tenantsync/translate"
)

func sources(t *testing.T, objs ...runtime.Object) (translate.Sources, *fake.Clientset) {
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
	f.WaitForCacheSync(ctx.Done())
	return src, client
}

func lbService(ns, name string, created time.Time) *corev1.Service {
	class := translate.LoadBalancerClass
	return &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, CreationTimestamp: metav1.NewTime(created)},
		Spec: corev1.ServiceSpec{
			Type: corev1.ServiceTypeLoadBalancer, LoadBalancerClass: &class,
			Ports: []corev1.ServicePort{{Name: "web", Port: 80, NodePort: 30080}},
		},
	}
}

func TestDesiredSet(t *testing.T) {
	t0 := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	// Namespace a-b with Service c and namespace a with Service b-c both
	// read "svc-a-b-c": the older keeps it, the newer gets the name only
	// it can have (svc--a-b-c-HASH64).
	older, newer := lbService("a-b", "c", t0), lbService("a", "b-c", t0.Add(time.Hour))
	other := lbService("shop", "web", t0)
	other.Spec.LoadBalancerClass = nil
	src, _ := sources(t, older, newer, other)
	s := newDesiredSet()
	o := translate.Options{DefaultPool: "public"}
	changed := s.recompute(src, o)
	if len(changed) != 2 {
		t.Errorf("first recompute changed %v, want the two Services of our class", changed)
	}
	got := s.versions()
	if d := got["svc-a-b-c"]; d == nil || d.Source.Namespace != "a-b" {
		t.Errorf("svc-a-b-c = %v, want the older Service a-b/c", d)
	}
	hashed := "svc--a-b-c-" + syncspec.Hash64(translate.KindService, "a", "b-c")
	if d := got[hashed]; d == nil || d.Source.Name != "b-c" || d.Version != syncspec.Version(d.LB) {
		t.Errorf("%s = %v, want the newer Service a/b-c with a matching version", hashed, d)
	}
	if len(got) != 2 {
		t.Errorf("desired = %d load balancers, want 2 (shop/web has no class)", len(got))
	}

	// Nothing dirty: nothing changes.
	if changed := s.recompute(src, o); len(changed) != 0 {
		t.Errorf("idle recompute changed %v", changed)
	}
	// With --default-class the Service without a class joins.
	s.markService("shop", "web")
	o.DefaultClass = true
	if changed := s.recompute(src, o); len(changed) != 1 || changed[0] != (objKey{translate.KindService, "shop", "web"}) {
		t.Errorf("recompute after marking shop/web changed %v", changed)
	}
	if k, ok := s.sourceOf("svc-shop-web"); !ok || k.name != "web" {
		t.Errorf("sourceOf(svc-shop-web) = %v %t", k, ok)
	}
	// A Service that goes away leaves the set.
	o.DefaultClass = false
	s.markAll()
	s.recompute(src, o)
	if _, ok := s.versions()["svc-shop-web"]; ok {
		t.Error("svc-shop-web is still desired after its Service left our class")
	}
}
