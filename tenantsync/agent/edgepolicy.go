package agent

import (
	"context"
	"fmt"
	"reflect"
	"slices"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/tools/cache"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/teapot-lb/teapot-lb/tenantsync/translate"
)

// edgePolicyGVR is the resource of translate.EdgePolicy.
var edgePolicyGVR = schema.GroupVersionResource{Group: translate.EdgePolicyGroup, Version: translate.EdgePolicyVersion, Resource: translate.EdgePolicyResource}

// ReasonPolicyRefused is the reason of the Warning Event on an
// EdgePolicy that a Gateway does not apply.
const ReasonPolicyRefused = "PolicyNotAccepted"

// maxPolicyAncestors bounds status.ancestors, as the Gateway API does.
const maxPolicyAncestors = 16

// edgePolicyLister reads EdgePolicies from the dynamic informer's cache.
type edgePolicyLister struct{ l cache.GenericLister }

func (e edgePolicyLister) EdgePolicies(ns string) []*translate.EdgePolicy {
	objs, err := e.l.ByNamespace(ns).List(labels.Everything())
	if err != nil {
		return nil
	}
	out := make([]*translate.EdgePolicy, 0, len(objs))
	for _, o := range objs {
		if u, ok := o.(*unstructured.Unstructured); ok {
			out = append(out, translate.DecodeEdgePolicy(u.Object))
		}
	}
	return out
}

// watchEdgePolicies watches EdgePolicies when their CRD is installed and
// the agent may read them; every Gateway is translated again when one
// changes. It returns the informer's shutdown (nil when not watched).
func (a *Agent) watchEdgePolicies(ctx context.Context, gs *translate.GatewaySources) func() {
	if a.cfg.Dynamic == nil {
		return nil
	}
	dctx, cancel := context.WithTimeout(ctx, discoveryTimeout)
	defer cancel()
	if _, err := a.kube.Discovery().ServerResourcesForGroupVersion(edgePolicyGVR.GroupVersion().String()); err != nil {
		a.log.Info("EdgePolicy CRD not installed; Gateway API policies of teapot-lb are not read (apply packaging/k8s/15-edgepolicy-crd.yaml and restart the agent)", "reason", err)
		return nil
	}
	if _, err := a.cfg.Dynamic.Resource(edgePolicyGVR).List(dctx, metav1.ListOptions{Limit: 1}); err != nil {
		a.log.Warn("the agent may not list EdgePolicies; they are not read (apply the ClusterRole of packaging/k8s/10-rbac.yaml)", "err", err)
		return nil
	}
	f := dynamicinformer.NewDynamicSharedInformerFactory(a.cfg.Dynamic, resyncPeriod)
	inf := f.ForResource(edgePolicyGVR)
	gs.EdgePolicies = edgePolicyLister{inf.Lister()}
	_, _ = inf.Informer().AddEventHandler(both(func(any) { a.set.mark(objKey{translate.KindGateway, "*", "*"}) }))
	a.synced = append(a.synced, inf.Informer().HasSynced)
	a.edgePolicies = inf.Lister()
	f.Start(ctx.Done())
	a.log.Info("watching EdgePolicies")
	return f.Shutdown
}

// writeEdgePolicies brings the status of the EdgePolicies in gw's
// namespace up to date for gw: an ancestor entry for gw with the
// Accepted condition its translation gave each policy that reaches it,
// none for the others; entries for other Gateways and other controllers
// stay. A policy gw does not apply gets a Warning Event once per reason.
func (a *Agent) writeEdgePolicies(ctx context.Context, gw *gwv1.Gateway, d *translate.Desired) error {
	if a.edgePolicies == nil || d == nil || d.Gateway == nil {
		return nil
	}
	objs, err := a.edgePolicies.ByNamespace(gw.Namespace).List(labels.Everything())
	if err != nil {
		return err
	}
	controller := gwv1.GatewayController(a.opts().GatewayControllerName())
	ancestor := translate.PolicyAncestor(gw.Namespace, gw.Name)
	for _, o := range objs {
		u, ok := o.(*unstructured.Unstructured)
		if !ok {
			continue
		}
		var st gwv1.PolicyStatus
		if raw, ok := u.Object["status"].(map[string]any); ok {
			_ = runtime.DefaultUnstructuredConverter.FromUnstructured(raw, &st)
		}
		ours := slices.IndexFunc(st.Ancestors, func(s gwv1.PolicyAncestorStatus) bool {
			return s.ControllerName == controller && reflect.DeepEqual(s.AncestorRef, ancestor)
		})
		i := slices.IndexFunc(d.Gateway.EdgePolicies, func(p translate.PolicyStatus) bool { return p.Name == u.GetName() })
		want := slices.Clone(st.Ancestors)
		switch {
		case i < 0 && ours < 0:
			continue
		case i < 0:
			want = slices.Delete(want, ours, ours+1)
		default:
			c := d.Gateway.EdgePolicies[i].Accepted
			entry := gwv1.PolicyAncestorStatus{AncestorRef: ancestor, ControllerName: controller}
			if ours >= 0 {
				entry.Conditions = slices.Clone(want[ours].Conditions)
				want[ours] = entry
			} else if len(want) < maxPolicyAncestors {
				want = append(want, entry)
				ours = len(want) - 1
			} else {
				a.log.Warn("EdgePolicy reaches more Gateways than its status can list", "policy", u.GetNamespace()+"/"+u.GetName(), "max", maxPolicyAncestors)
				continue
			}
			want[ours].Conditions = mergeConditions(want[ours].Conditions, []metav1.Condition{c})
			if c.Status != metav1.ConditionTrue && a.book.firstReport(objKey{translate.EdgePolicyKind, u.GetNamespace(), u.GetName()}, gw.Name+"|"+c.Message) {
				a.events.Event(u, corev1.EventTypeWarning, ReasonPolicyRefused, fmt.Sprintf("Gateway %s does not apply it (%s): %s", gw.Name, c.Reason, c.Message))
			}
		}
		if reflect.DeepEqual(want, st.Ancestors) {
			continue
		}
		st.Ancestors = want
		raw, err := runtime.DefaultUnstructuredConverter.ToUnstructured(&st)
		if err != nil {
			return fmt.Errorf("status of EdgePolicy %s/%s: %w", u.GetNamespace(), u.GetName(), err)
		}
		c := u.DeepCopy()
		c.Object["status"] = raw
		if _, err := a.cfg.Dynamic.Resource(edgePolicyGVR).Namespace(u.GetNamespace()).UpdateStatus(ctx, c, metav1.UpdateOptions{}); err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("update status of EdgePolicy %s/%s: %w", u.GetNamespace(), u.GetName(), err)
		}
	}
	return nil
}
