package agent

import (
	"reflect"
	"slices"
	"strings"
	"sync"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/teapot-lb/teapot-lb/tenantsync/syncspec"
	"github.com/teapot-lb/teapot-lb/tenantsync/translate"
)

// objKey names a Service, Ingress, Gateway, GatewayClass or route; Name
// "*" stands for every Ingress of the namespace, and namespace and name
// "*" for every Gateway.
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
	// held are the names the LB cluster holds (hold).
	held map[string]bool
	// addr is the address the LB cluster reports for a load balancer
	// ("" when none, or nil: none known).
	addr func(name string) string
	// carry names, per object moved to its unique name in this
	// recompute, the older name whose VIP its new load balancer asks for.
	carry  map[objKey]string
	all    bool
	notify chan struct{}
}

func newDesiredSet() *desiredSet {
	return &desiredSet{
		byName: map[string]*translate.Desired{},
		nameOf: map[objKey]string{},
		dirty:  map[objKey]bool{},
		carry:  map[objKey]string{},
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

// markService marks a Service, the Ingresses of its namespace and every
// Gateway (which may use it as a backend).
func (s *desiredSet) markService(ns, name string) {
	s.mark(objKey{translate.KindService, ns, name}, objKey{translate.KindIngress, ns, "*"}, objKey{translate.KindGateway, "*", "*"})
}

// recompute translates what is dirty and returns the keys whose desired
// load balancer changed (for the status writer).
//
// A Gateway's change also names the routes and BackendTLSPolicies whose
// status it gave or gives.
func (s *desiredSet) recompute(src translate.Sources, o translate.Options) []objKey {
	s.mu.Lock()
	defer s.mu.Unlock()
	keys := s.takeDirty(src)
	var changed []objKey
	seen := map[objKey]bool{}
	for _, k := range keys {
		prev := s.byName[s.nameOf[k]]
		d := translate1(k, src, o)
		if !s.update(k, d) {
			continue
		}
		changed = append(changed, k)
		for _, x := range []*translate.Desired{prev, d} {
			if x == nil || x.Gateway == nil {
				continue
			}
			for rk := range x.Gateway.Routes {
				if r := (objKey{rk.Kind, rk.Namespace, rk.Name}); !seen[r] {
					seen[r] = true
					changed = append(changed, r)
				}
			}
			for pk := range x.Gateway.Policies {
				if r := (objKey{pk.Kind, pk.Namespace, pk.Name}); !seen[r] {
					seen[r] = true
					changed = append(changed, r)
				}
			}
		}
	}
	s.carryAddresses()
	return changed
}

// carryAddresses keeps the VIP of a load balancer that an upgrade renames:
// an older agent gave an object whose plain name another held the older
// hashed name (syncspec.HashedName); this one gives it its unique name.
// The new load balancer asks for the old one's address, which the same
// sync frees (removals are written before upserts), unless another object
// still wants the old name. Once the cluster reports the new load
// balancer's address, the request is dropped again (an update without an
// address keeps the one the load balancer has).
func (s *desiredSet) carryAddresses() {
	for k, old := range s.carry {
		if s.byName[old] != nil {
			continue
		}
		d := s.byName[s.nameOf[k]]
		if a := s.addr(old); d != nil && a != "" && d.LB.GetVip() != nil && d.LB.Vip.Address == "" {
			d.LB.Vip.Address = a
			d.Version = syncspec.Version(d.LB)
		}
	}
	clear(s.carry)
}

// routeParents returns the parent statuses every Gateway of the agent
// gives route k, ordered by Gateway.
func (s *desiredSet) routeParents(k translate.RouteKey) []gwv1.RouteParentStatus {
	s.mu.Lock()
	defer s.mu.Unlock()
	var names []string
	for n, d := range s.byName {
		if d.Gateway != nil && len(d.Gateway.Routes[k]) > 0 {
			names = append(names, n)
		}
	}
	slices.Sort(names)
	var out []gwv1.RouteParentStatus
	for _, n := range names {
		out = append(out, s.byName[n].Gateway.Routes[k]...)
	}
	return out
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
		addGateways(set, src)
	}
	for k := range s.dirty {
		if k.kind == translate.KindGateway && k.name == "*" {
			for known := range s.nameOf {
				if known.kind == translate.KindGateway {
					set[known] = true
				}
			}
			addGateways(set, src)
			continue
		}
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

// addGateways adds every Gateway of the cluster to set.
func addGateways(set map[objKey]bool, src translate.Sources) {
	if src.Gateway == nil {
		return
	}
	if gws, err := src.Gateway.Gateways.List(labels.Everything()); err == nil {
		for _, gw := range gws {
			set[objKey{translate.KindGateway, gw.Namespace, gw.Name}] = true
		}
	}
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
	case translate.KindGateway:
		if src.Gateway == nil {
			return 0
		}
		if gw, err := src.Gateway.Gateways.Gateways(k.ns).Get(k.name); err == nil {
			return gw.CreationTimestamp.UnixNano()
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
	case translate.KindGateway:
		if src.Gateway == nil {
			return nil
		}
		gw, err := src.Gateway.Gateways.Gateways(k.ns).Get(k.name)
		if err != nil || !translate.WantsGateway(gw, src, o) {
			return nil
		}
		return translate.Gateway(gw, src, o)
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
	preferred := name
	unique := uniqueName(k)
	holder := s.byName[name]
	if old == unique || s.held[unique] || (holder != nil && keyOf(holder.Source) != k) {
		// The plain name is another object's (namespace a-b Service c
		// and namespace a Service b-c both read svc-a-b-c), or this
		// object had to leave it before: the name only it can have, kept
		// from then on so that its load balancer (and VIP) is not renamed
		// when the other object goes.
		d.LB.Name = unique
		d.Version = syncspec.Version(d.LB)
		name = unique
		if s.addr != nil && s.addr(unique) == "" {
			if older := legacyName(k); older != preferred && s.addr(older) != "" {
				s.carry[k] = older
			}
		}
	}
	if old != "" && old != name {
		delete(s.byName, old)
	}
	prev := s.byName[name]
	s.byName[name] = d
	s.nameOf[k] = name
	return prev == nil || prev.Version != d.Version || !slices.Equal(prev.Warnings, d.Warnings) ||
		!slices.Equal(prev.NodePorts, d.NodePorts) || prev.Refused != d.Refused || !reflect.DeepEqual(prev.Gateway, d.Gateway) ||
		!reflect.DeepEqual(prev.GatewayService, d.GatewayService)
}

// uniqueName is the load balancer name of k that no other object's can
// be (syncspec.UniqueName).
func uniqueName(k objKey) string {
	prefix := syncspec.ServicePrefix
	switch k.kind {
	case translate.KindIngress:
		prefix = syncspec.IngressPrefix
	case translate.KindGateway:
		prefix = syncspec.GatewayPrefix
	}
	return syncspec.UniqueName(prefix, k.kind, k.ns, k.name)
}

// legacyName is the name an older agent gave k when its plain name was
// another object's.
func legacyName(k objKey) string {
	u := uniqueName(k)
	prefix := u[:strings.Index(u, "-")+1]
	return syncspec.HashedName(prefix, k.kind, k.ns, k.name)
}

// hold records the managed load balancer names the LB cluster holds (a
// welcome), so that an object whose load balancer has its unique name
// keeps it after the agent restarts. A name the set does not give yet
// makes everything dirty.
func (s *desiredSet) hold(names []string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.held = map[string]bool{}
	for _, n := range names {
		s.held[n] = true
		if _, given := s.byName[n]; !given {
			s.all = true
		}
	}
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
