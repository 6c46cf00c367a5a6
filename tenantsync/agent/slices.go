package agent

import (
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/selection"
	discoverylisters "k8s.io/client-go/listers/discovery/v1"
	"k8s.io/client-go/tools/cache"
)

// byService names the EndpointSlice informer's index of slices by the
// Service they belong to ("namespace/name").
const byService = "teapot-lb.io/service"

// sliceService indexes an EndpointSlice under its Service.
func sliceService(obj any) ([]string, error) {
	es, ok := obj.(*discoveryv1.EndpointSlice)
	if !ok {
		return nil, nil
	}
	name := es.Labels[discoveryv1.LabelServiceName]
	if name == "" {
		return nil, nil
	}
	return []string{es.Namespace + "/" + name}, nil
}

// indexedSlices is an EndpointSlice lister whose lists by Service (the
// selector translate uses) read the byService index: a Service's slices
// cost what it has, not what its namespace has. Other selectors list as
// the informer's lister does.
type indexedSlices struct {
	discoverylisters.EndpointSliceLister
	idx cache.Indexer
}

func (l indexedSlices) EndpointSlices(ns string) discoverylisters.EndpointSliceNamespaceLister {
	return indexedNamespace{EndpointSliceNamespaceLister: l.EndpointSliceLister.EndpointSlices(ns), idx: l.idx, ns: ns}
}

type indexedNamespace struct {
	discoverylisters.EndpointSliceNamespaceLister
	idx cache.Indexer
	ns  string
}

func (n indexedNamespace) List(sel labels.Selector) ([]*discoveryv1.EndpointSlice, error) {
	svc, ok := serviceOf(sel)
	if !ok {
		return n.EndpointSliceNamespaceLister.List(sel)
	}
	objs, err := n.idx.ByIndex(byService, n.ns+"/"+svc)
	if err != nil {
		return nil, err
	}
	out := make([]*discoveryv1.EndpointSlice, 0, len(objs))
	for _, o := range objs {
		if es, ok := o.(*discoveryv1.EndpointSlice); ok {
			out = append(out, es)
		}
	}
	return out, nil
}

// serviceOf returns the Service a selector asks for when it is exactly
// "kubernetes.io/service-name=NAME".
func serviceOf(sel labels.Selector) (string, bool) {
	reqs, selectable := sel.Requirements()
	if !selectable || len(reqs) != 1 || reqs[0].Key() != discoveryv1.LabelServiceName {
		return "", false
	}
	switch reqs[0].Operator() {
	case selection.Equals, selection.DoubleEquals, selection.In:
	default:
		return "", false
	}
	vals := reqs[0].Values()
	if vals.Len() != 1 {
		return "", false
	}
	return vals.UnsortedList()[0], true
}
