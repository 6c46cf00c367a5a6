package agent

import (
	"context"
	"log/slog"
	"maps"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/teapot-lb/teapot-lb/tenantsync/translate"
)

// TestGatewayServices: the agent creates the Service a served Gateway
// wants, brings it back to what the Gateway says when it changes, leaves
// a Service of the same name it does not own alone, and deletes its
// Service once the Gateway is not served; the NodePort convergence, which
// shares the managed-by label, leaves Gateway Services alone.
func TestGatewayServices(t *testing.T) {
	t.Parallel()
	src, client := sources(t)
	a := &Agent{set: newDesiredSet(), kube: client, src: src, log: slog.New(slog.DiscardHandler)}
	want := func(annotation string) *corev1.Service {
		return &corev1.Service{
			ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "gw-teapot-gw",
				Labels:      map[string]string{translate.LabelManagedBy: translate.ManagedByAgent, translate.LabelGatewayFor: "gw", "key2": "value2"},
				Annotations: map[string]string{"key1": annotation}},
			Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeClusterIP, ClusterIP: corev1.ClusterIPNone},
		}
	}
	set := func(svc *corev1.Service) {
		a.set.mu.Lock()
		a.set.byName["gw-shop-gw"] = &translate.Desired{Source: translate.Source{Kind: translate.KindGateway, Namespace: "shop", Name: "gw"}, GatewayService: svc}
		a.set.mu.Unlock()
	}
	ctx := context.Background()
	get := func() *corev1.Service {
		s, err := client.CoreV1().Services("shop").Get(ctx, "gw-teapot-gw", metav1.GetOptions{})
		if err != nil {
			return nil
		}
		return s
	}
	// seen waits until the informer's lister has the Service as the
	// client has it (nil: gone).
	seen := func(s *corev1.Service) {
		t.Helper()
		for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
			got, err := src.Services.Services("shop").Get("gw-teapot-gw")
			if (s == nil && err != nil) || (s != nil && err == nil && got.ResourceVersion == s.ResourceVersion) {
				return
			}
		}
		t.Fatalf("the lister never saw %v", s)
	}

	set(want("value1"))
	a.syncGatewayServices(ctx)
	s := get()
	if s == nil || !maps.Equal(s.Annotations, map[string]string{"key1": "value1"}) || s.Labels["key2"] != "value2" {
		t.Fatalf("after the first sync: %v; want the Gateway's Service", s)
	}
	seen(s)
	a.syncNodePorts(ctx)
	if get() == nil {
		t.Fatal("the NodePort convergence deleted the Gateway's Service")
	}

	set(want("value3"))
	a.syncGatewayServices(ctx)
	if s = get(); s == nil || s.Annotations["key1"] != "value3" {
		t.Fatalf("after a change: %v; want annotation key1=value3", s)
	}
	seen(s)

	set(nil)
	a.syncGatewayServices(ctx)
	if s = get(); s != nil {
		t.Fatalf("after the Gateway stopped being served: %v; want none", s)
	}
	seen(nil)

	// A Service of the name that the agent does not own stays as it is.
	mine := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "gw-teapot-gw", Labels: map[string]string{"app": "mine"}},
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeClusterIP, ClusterIP: corev1.ClusterIPNone}}
	created, err := client.CoreV1().Services("shop").Create(ctx, mine, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	seen(created)
	set(want("value1"))
	a.syncGatewayServices(ctx)
	if s = get(); s == nil || s.Labels["app"] != "mine" || s.Labels[translate.LabelManagedBy] != "" {
		t.Fatalf("a Service the agent does not own became %v", s)
	}
}
