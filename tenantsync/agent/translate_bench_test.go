package agent

import (
	"context"
	"fmt"
	"testing"
	"time"

	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/cache"

	"github.com/teapot-lb/teapot-lb/tenantsync/translate"
)

// BenchmarkFirstTranslate translates 10,000 Services of ten endpoints
// each, as an agent's first sync does, and computes their versions.
func BenchmarkFirstTranslate(b *testing.B) {
	const n = 10000
	t0 := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	var objs []runtime.Object
	ready := true
	for i := range n {
		svc := lbService("bulk", fmt.Sprintf("svc-%05d", i), t0)
		objs = append(objs, svc)
		es := &discoveryv1.EndpointSlice{
			ObjectMeta:  metav1.ObjectMeta{Namespace: "bulk", Name: fmt.Sprintf("svc-%05d-1", i), Labels: map[string]string{discoveryv1.LabelServiceName: svc.Name}},
			AddressType: discoveryv1.AddressTypeIPv4,
			Ports:       []discoveryv1.EndpointPort{{Name: ptrTo("web"), Port: ptrTo(int32(8080))}},
		}
		for j := range 10 {
			a := i*10 + j + 1
			es.Endpoints = append(es.Endpoints, discoveryv1.Endpoint{Addresses: []string{fmt.Sprintf("10.%d.%d.%d", 100+a>>16, a>>8&255, a&255)}, Conditions: discoveryv1.EndpointConditions{Ready: &ready}})
		}
		objs = append(objs, es)
	}
	client := fake.NewClientset(objs...)
	f := informers.NewSharedInformerFactory(client, 0)
	slices := f.Discovery().V1().EndpointSlices()
	if err := slices.Informer().AddIndexers(cache.Indexers{byService: sliceService}); err != nil {
		b.Fatal(err)
	}
	src := translate.Sources{
		Services:       f.Core().V1().Services().Lister(),
		EndpointSlices: indexedSlices{EndpointSliceLister: slices.Lister(), idx: slices.Informer().GetIndexer()},
		Nodes:          f.Core().V1().Nodes().Lister(),
		Ingresses:      f.Networking().V1().Ingresses().Lister(),
		IngressClasses: f.Networking().V1().IngressClasses().Lister(),
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer func() { cancel(); f.Shutdown() }()
	f.Start(ctx.Done())
	f.WaitForCacheSync(ctx.Done())
	o := translate.Options{DefaultPool: "public", PodsRoutable: true}
	b.ResetTimer()
	for range b.N {
		s := newDesiredSet()
		s.markAll()
		start := time.Now()
		if got := len(s.recompute(src, o)); got != n {
			b.Fatalf("%d translated, want %d", got, n)
		}
		translated := time.Since(start)
		v := s.versions()
		b.ReportMetric(translated.Seconds(), "s/translate")
		b.ReportMetric(time.Since(start).Seconds()-translated.Seconds(), "s/versions")
		_ = v
	}
}

func ptrTo[T any](v T) *T { return &v }
