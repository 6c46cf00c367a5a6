package agent

import (
	"context"
	"fmt"
	"reflect"
	"slices"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/tools/cache"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"
	gwinformers "sigs.k8s.io/gateway-api/pkg/client/informers/externalversions/apis/v1"

	"github.com/teapot-lb/teapot-lb/api"
	"github.com/teapot-lb/teapot-lb/tenantsync/translate"
)

// informerReg is an informer and what its events do.
type informerReg struct {
	inf cache.SharedIndexInformer
	fn  func(any)
}

// caConfigMapOnly keeps of a ConfigMap only what a BackendTLSPolicy
// reads: its name and its CA bundle (ca.crt), cut one byte past
// api.MaxBackendCAPEMLen so that an oversized bundle is still refused.
// The agent's cache of the cluster's ConfigMaps then holds CA bundles
// only, bounded each.
func caConfigMapOnly(obj any) (any, error) {
	cm, ok := obj.(*corev1.ConfigMap)
	if !ok {
		return obj, nil
	}
	out := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: cm.Namespace, Name: cm.Name, UID: cm.UID, ResourceVersion: cm.ResourceVersion}}
	if ca, ok := cm.Data[translate.CACertKey]; ok {
		if len(ca) > api.MaxBackendCAPEMLen {
			ca = ca[:api.MaxBackendCAPEMLen+1]
		}
		out.Data = map[string]string{translate.CACertKey: ca}
	}
	return out, nil
}

// watchBackendTLS adds the informers of BackendTLSPolicies and of the
// ConfigMaps holding their CAs, when the CRD is served and the agent may
// read both; it returns the informers to register and the factory to
// start and stop (nil when nothing is watched).
func (a *Agent) watchBackendTLS(have map[string]bool, v1 gwinformers.Interface, gs *translate.GatewaySources, allGateways func(any)) ([]informerReg, informers.SharedInformerFactory) {
	if !have["backendtlspolicies"] {
		return nil, nil
	}
	if !have["configmaps"] {
		a.log.Warn("the agent may not read ConfigMaps; BackendTLSPolicies are not served (apply the ClusterRole of packaging/k8s/10-rbac.yaml)")
		return nil, nil
	}
	cms := informers.NewSharedInformerFactoryWithOptions(a.kube, resyncPeriod, informers.WithTransform(caConfigMapOnly))
	gs.BackendTLSPolicies = v1.BackendTLSPolicies().Lister()
	gs.ConfigMaps = cms.Core().V1().ConfigMaps().Lister()
	onPolicy := func(obj any) {
		if p, ok := unwrap[*gwv1.BackendTLSPolicy](obj); ok {
			a.queue.Add(objKey{translate.KindBackendTLSPolicy, p.Namespace, p.Name})
		}
		allGateways(obj)
	}
	return []informerReg{
		{v1.BackendTLSPolicies().Informer(), onPolicy},
		{cms.Core().V1().ConfigMaps().Informer(), allGateways},
	}, cms
}

// policyAncestors returns the ancestor statuses every Gateway of the
// agent gives policy k, ordered by Gateway.
func (s *desiredSet) policyAncestors(k translate.RouteKey) []gwv1.PolicyAncestorStatus {
	s.mu.Lock()
	defer s.mu.Unlock()
	var names []string
	for n, d := range s.byName {
		if d.Gateway != nil {
			if _, ok := d.Gateway.Policies[k]; ok {
				names = append(names, n)
			}
		}
	}
	slices.Sort(names)
	out := make([]gwv1.PolicyAncestorStatus, 0, len(names))
	for _, n := range names {
		out = append(out, s.byName[n].Gateway.Policies[k])
	}
	return out
}

// policyAncestorsMerged merges the ancestor statuses the agent's Gateways
// give a policy into its current ones: entries of other controllers
// stay, the agent's are replaced, transition times kept where nothing
// changed.
func policyAncestorsMerged(cur, ours []gwv1.PolicyAncestorStatus, controller string) []gwv1.PolicyAncestorStatus {
	var out []gwv1.PolicyAncestorStatus
	for _, p := range cur {
		if string(p.ControllerName) != controller {
			out = append(out, p)
		}
	}
	for _, p := range ours {
		p = *p.DeepCopy()
		var prev []metav1.Condition
		if i := slices.IndexFunc(cur, func(c gwv1.PolicyAncestorStatus) bool {
			return string(c.ControllerName) == controller && reflect.DeepEqual(c.AncestorRef, p.AncestorRef)
		}); i >= 0 {
			prev = cur[i].Conditions
		}
		p.Conditions = mergeConditions(prev, p.Conditions)
		out = append(out, p)
	}
	// The API allows maxPolicyAncestors; with more, the agent's (last) stay.
	if len(out) > maxPolicyAncestors {
		out = out[len(out)-maxPolicyAncestors:]
	}
	return out
}

// writeBackendTLSPolicy brings the agent's entries in a
// BackendTLSPolicy's status.ancestors up to date.
func (a *Agent) writeBackendTLSPolicy(ctx context.Context, k objKey) error {
	gs := a.src.Gateway
	if gs == nil || gs.BackendTLSPolicies == nil {
		return nil
	}
	p, err := gs.BackendTLSPolicies.BackendTLSPolicies(k.ns).Get(k.name)
	if err != nil {
		return ignoreNotFound(err)
	}
	ours := a.set.policyAncestors(translate.RouteKey{Kind: k.kind, Namespace: k.ns, Name: k.name})
	want := policyAncestorsMerged(p.Status.Ancestors, ours, a.opts().GatewayControllerName())
	if len(want) == 0 && len(p.Status.Ancestors) == 0 {
		return nil
	}
	if reflect.DeepEqual(want, p.Status.Ancestors) {
		return nil
	}
	c := p.DeepCopy()
	c.Status.Ancestors = want
	if _, err := a.gw.client.GatewayV1().BackendTLSPolicies(k.ns).UpdateStatus(ctx, c, metav1.UpdateOptions{}); err != nil {
		return fmt.Errorf("update status of BackendTLSPolicy %s/%s: %w", k.ns, k.name, err)
	}
	return nil
}
