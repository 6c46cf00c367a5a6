package agent

import (
	"fmt"
	"slices"
	"testing"

	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	discoverylisters "k8s.io/client-go/listers/discovery/v1"
	"k8s.io/client-go/tools/cache"
)

// countingSlices counts the lists that read a namespace's slices.
type countingSlices struct {
	discoverylisters.EndpointSliceLister
	lists *int
}

func (c countingSlices) EndpointSlices(ns string) discoverylisters.EndpointSliceNamespaceLister {
	return countingNamespace{c.EndpointSliceLister.EndpointSlices(ns), c.lists}
}

type countingNamespace struct {
	discoverylisters.EndpointSliceNamespaceLister
	lists *int
}

func (c countingNamespace) List(sel labels.Selector) ([]*discoveryv1.EndpointSlice, error) {
	*c.lists++
	return c.EndpointSliceNamespaceLister.List(sel)
}

// TestServiceSlicesComeFromTheIndex: with 10,000 Services of two slices
// each in one namespace, a Service's slices (the selector translate uses)
// come from the index without listing the namespace, and are the ones a
// list by label finds; another selector still lists.
func TestServiceSlicesComeFromTheIndex(t *testing.T) {
	idx := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{
		cache.NamespaceIndex: cache.MetaNamespaceIndexFunc, byService: sliceService,
	})
	add := func(ns, name, svc string) {
		es := &discoveryv1.EndpointSlice{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}
		if svc != "" {
			es.Labels = map[string]string{discoveryv1.LabelServiceName: svc}
		}
		if err := idx.Add(es); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 10000 {
		add("bulk", fmt.Sprintf("svc-%d-a", i), fmt.Sprintf("svc-%d", i))
		add("bulk", fmt.Sprintf("svc-%d-b", i), fmt.Sprintf("svc-%d", i))
	}
	add("other", "svc-7-a", "svc-7") // same Service name, another namespace
	add("bulk", "orphan", "")
	lists := 0
	plain := discoverylisters.NewEndpointSliceLister(idx)
	l := indexedSlices{EndpointSliceLister: countingSlices{plain, &lists}, idx: idx}

	names := func(ess []*discoveryv1.EndpointSlice) []string {
		var out []string
		for _, es := range ess {
			out = append(out, es.Namespace+"/"+es.Name)
		}
		slices.Sort(out)
		return out
	}
	sel := labels.SelectorFromSet(labels.Set{discoveryv1.LabelServiceName: "svc-7"})
	got, err := l.EndpointSlices("bulk").List(sel)
	if err != nil {
		t.Fatal(err)
	}
	want, _ := plain.EndpointSlices("bulk").List(sel)
	if !slices.Equal(names(got), names(want)) || len(got) != 2 {
		t.Errorf("svc-7's slices: %v, want %v", names(got), names(want))
	}
	if lists != 0 {
		t.Errorf("a Service's slices listed the namespace %d times, want 0", lists)
	}
	if all, _ := l.EndpointSlices("bulk").List(labels.Everything()); len(all) != 20001 || lists != 1 {
		t.Errorf("every slice: %d in %d lists, want 20001 in 1", len(all), lists)
	}
}
