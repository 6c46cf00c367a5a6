package agent

import (
	"context"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/selection"

	"github.com/teapot-lb/teapot-lb/tenantsync/translate"
)

// ownedBy selects the Services the agent made that carry the label key
// (LabelNodePortFor, LabelGatewayFor): each kind is converged apart.
func ownedBy(key string) labels.Selector {
	sel := labels.SelectorFromSet(labels.Set{translate.LabelManagedBy: translate.ManagedByAgent})
	req, err := labels.NewRequirement(key, selection.Exists, nil)
	if err != nil {
		panic(err) // a constant key
	}
	return sel.Add(*req)
}

// syncGatewayServices makes the Services of the Gateways the agent serves
// (translate.Desired.GatewayService) equal to what they want, and deletes
// its Services of Gateways it does not serve; failures are logged and
// retried at the next wake or tick of runNodePorts.
func (a *Agent) syncGatewayServices(ctx context.Context) {
	type key struct{ ns, gw string }
	need := map[key]*corev1.Service{}
	for _, d := range a.set.versions() {
		if d.GatewayService != nil {
			need[key{d.Source.Namespace, d.Source.Name}] = d.GatewayService
		}
	}
	owned, err := a.src.Services.List(ownedBy(translate.LabelGatewayFor))
	if err != nil {
		a.log.Warn("list the agent's Gateway Services", "err", err)
		return
	}
	current := map[key]*corev1.Service{}
	for _, s := range owned {
		k := key{s.Namespace, s.Labels[translate.LabelGatewayFor]}
		if want := need[k]; want == nil || s.Name != want.Name {
			a.deleteOwnedService(ctx, s, "the Service of a Gateway that is not served")
			continue
		}
		current[k] = s
	}
	for k, want := range need {
		cur := current[k]
		if cur == nil {
			if c, err := a.src.Services.Services(k.ns).Get(want.Name); err == nil {
				if !translate.IsGatewayServiceFor(c, k.gw) {
					a.log.Warn("a Service that the agent does not own has the name of a Gateway's Service; not touched",
						"namespace", k.ns, "name", c.Name, "gateway", k.gw)
					continue
				}
				cur = c
			}
		}
		cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		err = nil
		switch {
		case cur == nil:
			_, err = a.kube.CoreV1().Services(k.ns).Create(cctx, want, metav1.CreateOptions{})
			if err == nil {
				a.log.Info("created the Service of a Gateway", "namespace", k.ns, "name", want.Name, "gateway", k.gw)
			}
		case translate.GatewayServiceChanged(cur, want):
			if cur.Spec.ClusterIP != corev1.ClusterIPNone {
				// A cluster IP cannot be taken away: make it again.
				uid := cur.UID
				err = a.kube.CoreV1().Services(k.ns).Delete(cctx, cur.Name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &uid}})
				break
			}
			upd := cur.DeepCopy()
			upd.Labels, upd.Annotations, upd.OwnerReferences = want.Labels, want.Annotations, want.OwnerReferences
			upd.Spec.Selector, upd.Spec.Ports = nil, nil
			_, err = a.kube.CoreV1().Services(k.ns).Update(cctx, upd, metav1.UpdateOptions{})
		}
		cancel()
		if err != nil && !apierrors.IsAlreadyExists(err) {
			a.log.Warn("write the Service of a Gateway", "namespace", k.ns, "gateway", k.gw, "err", err)
		}
	}
}

// deleteOwnedService deletes a Service the agent made (the one it read:
// a UID precondition) that is no longer needed; what says which kind
// ("a NodePort Service no Ingress needs") for the log.
func (a *Agent) deleteOwnedService(ctx context.Context, s *corev1.Service, what string) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	uid := s.UID
	err := a.kube.CoreV1().Services(s.Namespace).Delete(ctx, s.Name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &uid}})
	if err != nil && !apierrors.IsNotFound(err) {
		a.log.Warn("delete "+what, "namespace", s.Namespace, "name", s.Name, "err", err)
		return
	}
	a.log.Info("deleted "+what, "namespace", s.Namespace, "name", s.Name)
}
