package agent

import (
	"context"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/teapot-lb/teapot-lb/tenantsync/translate"
)

// nodePortResync is how often the leader checks its NodePort Services
// even when nothing changed.
const nodePortResync = time.Minute

// runNodePorts keeps the NodePort Services the agent owns equal to what
// the translated Ingresses and Gateways need (translate.NodePortService) until ctx
// ends: it creates and updates the needed ones and deletes the others.
func (a *Agent) runNodePorts(ctx context.Context) {
	tick := time.NewTicker(nodePortResync)
	defer tick.Stop()
	for {
		a.syncNodePorts(ctx)
		a.syncGatewayServices(ctx)
		select {
		case <-ctx.Done():
			return
		case <-a.nodePortWake:
		case <-tick.C:
		}
	}
}

func (a *Agent) wakeNodePorts() {
	select {
	case a.nodePortWake <- struct{}{}:
	default:
	}
}

// syncNodePorts converges once; failures are logged and retried at the
// next wake or tick.
func (a *Agent) syncNodePorts(ctx context.Context) {
	type key struct{ ns, svc string }
	need := map[key]bool{}
	for _, d := range a.set.versions() {
		for _, svc := range d.NodePorts {
			if ns, name, ok := strings.Cut(svc, "/"); ok {
				need[key{ns, name}] = true
			} else {
				need[key{d.Source.Namespace, svc}] = true
			}
		}
	}
	owned, err := a.src.Services.List(ownedBy(translate.LabelNodePortFor))
	if err != nil {
		a.log.Warn("list the agent's NodePort Services", "err", err)
		return
	}
	current := map[key]*corev1.Service{}
	for _, s := range owned {
		for_ := s.Labels[translate.LabelNodePortFor]
		k := key{s.Namespace, for_}
		if for_ == "" || !need[k] || s.Name != translate.NodePortName(for_) {
			a.deleteOwnedService(ctx, s, "a NodePort Service no Ingress needs")
			continue
		}
		current[k] = s
	}
	for k := range need {
		svc, err := a.src.Services.Services(k.ns).Get(k.svc)
		if err != nil {
			continue // gone: its Ingress is retranslated and stops needing it
		}
		cur := current[k]
		if cur == nil {
			if c, err := a.src.Services.Services(k.ns).Get(translate.NodePortName(k.svc)); err == nil {
				if !translate.IsNodePortFor(c, k.svc) {
					a.log.Warn("a Service that the agent does not own has the name of the NodePort Service it needs; not touched",
						"namespace", k.ns, "name", c.Name, "for", k.svc)
					continue
				}
				cur = c
			}
		}
		want := translate.NodePortService(svc, cur)
		cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		switch {
		case cur == nil:
			_, err = a.kube.CoreV1().Services(k.ns).Create(cctx, want, metav1.CreateOptions{})
			if err == nil {
				a.log.Info("created a NodePort Service for a ClusterIP backend", "namespace", k.ns, "name", want.Name, "for", k.svc)
			}
		case translate.NodePortServiceChanged(cur, want):
			upd := cur.DeepCopy()
			upd.Labels, upd.OwnerReferences = want.Labels, want.OwnerReferences
			upd.Spec.Type, upd.Spec.Selector, upd.Spec.Ports = want.Spec.Type, want.Spec.Selector, want.Spec.Ports
			_, err = a.kube.CoreV1().Services(k.ns).Update(cctx, upd, metav1.UpdateOptions{})
		}
		cancel()
		if err != nil && !apierrors.IsAlreadyExists(err) {
			a.log.Warn("write the NodePort Service of a ClusterIP backend", "namespace", k.ns, "for", k.svc, "err", err)
		}
	}
}
