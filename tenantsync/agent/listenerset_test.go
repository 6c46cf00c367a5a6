package agent

import (
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/teapot-lb/teapot-lb/tenantsync/translate"
)

// TestListenerSetStatus: a ListenerSet and its listeners are programmed
// only while the parent Gateway is (the translation assumes it); the
// transition time of a condition that did not change is kept.
func TestListenerSetStatus(t *testing.T) {
	t.Parallel()
	c := func(typ string, ok bool, reason string) metav1.Condition {
		st := metav1.ConditionFalse
		if ok {
			st = metav1.ConditionTrue
		}
		return metav1.Condition{Type: typ, Status: st, Reason: reason, ObservedGeneration: 2}
	}
	res := &translate.ListenerSetResult{
		Generation: 2,
		Accepted:   c("Accepted", true, "Accepted"),
		Programmed: c("Programmed", true, "Programmed"),
		Listeners: []gwv1.ListenerEntryStatus{{Name: "l", AttachedRoutes: 1, Conditions: []metav1.Condition{
			c("Accepted", true, "Accepted"), c("Programmed", true, "Programmed"),
		}}},
	}
	pending := []metav1.Condition{c("Accepted", true, "Accepted"), c("Programmed", false, "Pending")}
	got := listenerSetStatus(gwv1.ListenerSetStatus{}, res, pending)
	if p := find(got.Conditions, "Programmed"); p.Status != metav1.ConditionFalse || p.Reason != "Pending" {
		t.Errorf("set Programmed = %s/%s while the Gateway is pending, want False/Pending", p.Status, p.Reason)
	}
	if p := find(got.Listeners[0].Conditions, "Programmed"); p.Status != metav1.ConditionFalse {
		t.Errorf("listener Programmed = %s while the Gateway is pending, want False", p.Status)
	}
	if res.Programmed.Status != metav1.ConditionTrue {
		t.Errorf("the translation's result was changed")
	}
	then := metav1.NewTime(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	cur := gwv1.ListenerSetStatus{Conditions: []metav1.Condition{c("Accepted", true, "Accepted")}}
	cur.Conditions[0].LastTransitionTime = then
	programmed := []metav1.Condition{c("Accepted", true, "Accepted"), c("Programmed", true, "Programmed")}
	got = listenerSetStatus(cur, res, programmed)
	if p := find(got.Conditions, "Programmed"); p.Status != metav1.ConditionTrue {
		t.Errorf("set Programmed = %s with the Gateway programmed, want True", p.Status)
	}
	if a := find(got.Conditions, "Accepted"); !a.LastTransitionTime.Equal(&then) {
		t.Errorf("Accepted transition time %v, want the unchanged %v", a.LastTransitionTime, then)
	}
	if got.Listeners[0].AttachedRoutes != 1 {
		t.Errorf("attachedRoutes = %d, want 1", got.Listeners[0].AttachedRoutes)
	}
}
