package agent

import (
	"cmp"
	"context"
	"fmt"
	"reflect"
	"slices"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/teapot-lb/teapot-lb/tenantsync/translate"
)

// listenerSetStatus is what a ListenerSet's status should say, given its
// parent Gateway's translation and the Gateway's conditions as written:
// while the Gateway is not programmed, neither are the set and its
// listeners.
func listenerSetStatus(cur gwv1.ListenerSetStatus, r *translate.ListenerSetResult, gwConds []metav1.Condition) gwv1.ListenerSetStatus {
	prog := meta.FindStatusCondition(gwConds, string(gwv1.GatewayConditionProgrammed))
	lower := func(c *metav1.Condition) {
		if prog != nil && prog.Status != metav1.ConditionTrue && c.Status == metav1.ConditionTrue {
			c.Status, c.Reason, c.Message = metav1.ConditionFalse, prog.Reason, "the parent Gateway is not programmed: "+prog.Message
		}
	}
	setProg := r.Programmed
	lower(&setProg)
	out := gwv1.ListenerSetStatus{Conditions: mergeConditions(cur.Conditions, []metav1.Condition{r.Accepted, setProg})}
	for _, want := range r.Listeners {
		l := *want.DeepCopy()
		for i := range l.Conditions {
			if l.Conditions[i].Type == string(gwv1.ListenerEntryConditionProgrammed) {
				lower(&l.Conditions[i])
			}
		}
		var prev []metav1.Condition
		if i := slices.IndexFunc(cur.Listeners, func(s gwv1.ListenerEntryStatus) bool { return s.Name == l.Name }); i >= 0 {
			prev = cur.Listeners[i].Conditions
		}
		l.Conditions = mergeConditions(prev, l.Conditions)
		out.Listeners = append(out.Listeners, l)
	}
	return out
}

// writeListenerSets brings the status of the ListenerSets whose parentRef
// names a Gateway of the agent up to date.
func (a *Agent) writeListenerSets(ctx context.Context, res *translate.GatewayResult, gwConds []metav1.Condition) error {
	gs := a.src.Gateway
	if gs == nil || gs.ListenerSets == nil || len(res.ListenerSets) == 0 {
		return nil
	}
	keys := make([]translate.RouteKey, 0, len(res.ListenerSets))
	for k := range res.ListenerSets {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, func(x, y translate.RouteKey) int {
		return cmp.Or(strings.Compare(x.Namespace, y.Namespace), strings.Compare(x.Name, y.Name))
	})
	for _, k := range keys {
		s, err := gs.ListenerSets.ListenerSets(k.Namespace).Get(k.Name)
		if apierrors.IsNotFound(err) {
			continue
		} else if err != nil {
			return err
		}
		want := listenerSetStatus(s.Status, res.ListenerSets[k], gwConds)
		if reflect.DeepEqual(want, s.Status) {
			continue
		}
		c := s.DeepCopy()
		c.Status = want
		if _, err := a.gw.client.GatewayV1().ListenerSets(k.Namespace).UpdateStatus(ctx, c, metav1.UpdateOptions{}); err != nil {
			return fmt.Errorf("update status of ListenerSet %s/%s: %w", k.Namespace, k.Name, err)
		}
	}
	return nil
}
