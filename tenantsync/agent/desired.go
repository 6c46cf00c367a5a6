package agent

import (
	"slices"
	"strings"
	"sync"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/teapot-lb/teapot-lb/tenantsync"
	"github.com/teapot-lb/teapot-lb/tenantsync/translate"
)

// objKey names a Service or Ingress; Name "*" stands for every Ingress of
// the namespace.
type objKey struct{ kind, ns, name string }

func (k objKey) source() translate.Source {
	return translate.Source{Kind: k.kind, Namespace: k.ns, Name: k.name}
}

func keyOf(s translate.Source) objKey { return objKey{s.Kind, s.Namespace, s.Name} }

// desiredSet is the load balancers the agent wants, kept up to date from
// the informers' events: handlers mark objects dirty, recompute translates
// only those (or everything after a change that touches all).
type desiredSet struct {
	mu     sync.Mutex
	byName map[string]*translate.Desired
	nameOf map[objKey]string
	dirty  map[objKey]bool
	all    bool
	notify chan struct{}
}

func newDesiredSet() *desiredSet {
	return &desiredSet{
		byName: map[string]*translate.Desired{},
		nameOf: map[objKey]string{},
		dirty:  map[objKey]bool{},
		all:    true,
		notify: make(chan struct{}, 1),
	}
}

func (s *desiredSet) wake() {
	select {
	case s.notify <- struct{}{}:
	default:
	}
}

// mark makes keys dirty.
func (s *desiredSet) mark(keys ...objKey) {
	s.mu.Lock()
	for _, k := range keys {
		s.dirty[k] = true
	}
	s.mu.Unlock()
	s.wake()
}

// markAll makes everything dirty.
func (s *desiredSet) markAll() {
	s.mu.Lock()
	s.all = true
	s.mu.Unlock()
	s.wake()
}

// markService marks a Service and the Ingresses of its namespace (which
// may use it as a backend).
func (s *desiredSet) markService(ns, name string) {
	s.mark(objKey{translate.KindService, ns, name}, objKey{translate.KindIngress, ns, "*"})
}

// recompute translates what is dirty and returns the keys whose desired
// load balancer changed (for the status writer).
func (s *desiredSet) recompute(src translate.Sources, o translate.Options) []objKey {
	s.mu.Lock()
	defer s.mu.Unlock()
	keys := s.takeDirty(src)
	var changed []objKey
	for _, k := range keys {
		if s.update(k, translate1(k, src, o)) {
			changed = append(changed, k)
		}
	}
	return changed
}

// takeDirty expands and clears the dirty set, oldest objects first so
// that a name clash is settled the same way on every run.
func (s *desiredSet) takeDirty(src translate.Sources) []objKey {
	set := map[objKey]bool{}
	if s.all {
		for k := range s.nameOf {
			set[k] = true
		}
		if svcs, err := src.Services.List(labels.Everything()); err == nil {
			for _, svc := range svcs {
				set[objKey{translate.KindService, svc.Namespace, svc.Name}] = true
			}
		}
		if ings, err := src.Ingresses.List(labels.Everything()); err == nil {
			for _, ing := range ings {
				set[objKey{translate.KindIngress, ing.Namespace, ing.Name}] = true
			}
		}
	}
	for k := range s.dirty {
		if k.kind == translate.KindIngress && k.name == "*" {
			for known := range s.nameOf {
				if known.kind == translate.KindIngress && known.ns == k.ns {
					set[known] = true
				}
			}
			if ings, err := src.Ingresses.Ingresses(k.ns).List(labels.Everything()); err == nil {
				for _, ing := range ings {
					set[objKey{translate.KindIngress, ing.Namespace, ing.Name}] = true
				}
			}
			continue
		}
		set[k] = true
	}
	s.all = false
	clear(s.dirty)
	keys := make([]objKey, 0, len(set))
	created := map[objKey]int64{}
	for k := range set {
		keys = append(keys, k)
		created[k] = creation(k, src)
	}
	slices.SortFunc(keys, func(a, b objKey) int {
		if ca, cb := created[a], created[b]; ca != cb {
			if ca < cb {
				return -1
			}
			return 1
		}
		return strings.Compare(a.kind+"/"+a.ns+"/"+a.name, b.kind+"/"+b.ns+"/"+b.name)
	})
	return keys
}

func creation(k objKey, src translate.Sources) int64 {
	switch k.kind {
	case translate.KindService:
		if svc, err := src.Services.Services(k.ns).Get(k.name); err == nil {
			return svc.CreationTimestamp.UnixNano()
		}
	case translate.KindIngress:
		if ing, err := src.Ingresses.Ingresses(k.ns).Get(k.name); err == nil {
			return ing.CreationTimestamp.UnixNano()
		}
	}
	return 0
}

// translate1 translates one object, or returns nil when the agent does not
// take it (any more).
func translate1(k objKey, src translate.Sources, o translate.Options) *translate.Desired {
	switch k.kind {
	case translate.KindService:
		svc, err := src.Services.Services(k.ns).Get(k.name)
		if err != nil || !translate.WantsService(svc, o) {
			return nil
		}
		return translate.Service(svc, src, o)
	case translate.KindIngress:
		ing, err := src.Ingresses.Ingresses(k.ns).Get(k.name)
		if err != nil || !translate.WantsIngress(ing, src, o) {
			return nil
		}
		return translate.Ingress(ing, src, o)
	}
	return nil
}

// update records k's desired load balancer (nil: none) and reports a
// change. A name already taken by another object gets the hashed form.
func (s *desiredSet) update(k objKey, d *translate.Desired) bool {
	old := s.nameOf[k]
	if d == nil {
		if old == "" {
			return false
		}
		delete(s.byName, old)
		delete(s.nameOf, k)
		return true
	}
	name := d.LB.GetName()
	if holder := s.byName[name]; holder != nil && keyOf(holder.Source) != k {
		prefix := tenantsync.ServicePrefix
		if k.kind == translate.KindIngress {
			prefix = tenantsync.IngressPrefix
		}
		d.LB.Name = tenantsync.HashedName(prefix, k.kind, k.ns, k.name)
		d.Version = tenantsync.Version(d.LB)
		name = d.LB.Name
	}
	if old != "" && old != name {
		delete(s.byName, old)
	}
	prev := s.byName[name]
	s.byName[name] = d
	s.nameOf[k] = name
	return prev == nil || prev.Version != d.Version || !slices.Equal(prev.Warnings, d.Warnings) ||
		!slices.Equal(prev.NodePorts, d.NodePorts) || prev.Refused != d.Refused
}

// versions returns the load balancers to ask the LB cluster for, by
// name: the desired ones that are not refused.
func (s *desiredSet) versions() map[string]*translate.Desired {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make(map[string]*translate.Desired, len(s.byName))
	for n, d := range s.byName {
		if d.Refused == "" {
			out[n] = d
		}
	}
	return out
}

// lookup returns the desired load balancer of k and its name.
func (s *desiredSet) lookup(k objKey) (*translate.Desired, string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	name := s.nameOf[k]
	return s.byName[name], name
}

// sourceOf returns the object a load balancer name comes from.
func (s *desiredSet) sourceOf(name string) (objKey, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	d := s.byName[name]
	if d == nil {
		return objKey{}, false
	}
	return keyOf(d.Source), true
}

// nodeChanged reports whether a Node update matters to load balancers.
func nodeChanged(a, b *corev1.Node) bool {
	ready := func(n *corev1.Node) bool {
		for _, c := range n.Status.Conditions {
			if c.Type == corev1.NodeReady {
				return c.Status == corev1.ConditionTrue
			}
		}
		return false
	}
	_, ea := a.Labels["node.kubernetes.io/exclude-from-external-load-balancers"]
	_, eb := b.Labels["node.kubernetes.io/exclude-from-external-load-balancers"]
	return ready(a) != ready(b) || ea != eb || !slices.Equal(a.Status.Addresses, b.Status.Addresses)
}
