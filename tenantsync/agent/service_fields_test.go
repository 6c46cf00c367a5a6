package agent

import (
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/record"

	pb "github.com/teapot-lb/teapot-lb/api/proto/teapotv1"
	"github.com/teapot-lb/teapot-lb/tenantsync/translate"
)

// TestRestrictedServiceIsNotServed: a Service whose owner restricted its
// clients with source ranges the LB cannot enforce as written (a
// malformed entry of the load-balancer-source-ranges annotation) and
// that the LB served before loses its load balancer: it is not asked of
// the LB cluster (the next sync removes it), its status loses the
// address, and it carries a Warning Event and a False
// teapot-lb.io/Accepted condition naming the field. When the owner
// corrects the entry and asks PreferDualStack, it is served, restricted
// to the ranges, with a True condition that says what it gets instead;
// served as asked, the condition goes.
func TestRestrictedServiceIsNotServed(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	svc := lbService("shop", "admin", time.Now())
	svc.Annotations = map[string]string{translate.AnnotationSourceRanges: "198.51.100.0/24,office"}
	svc.Status.LoadBalancer.Ingress = []corev1.LoadBalancerIngress{{IP: "192.0.2.7"}}
	src, client := sources(t, svc)
	rec := record.NewFakeRecorder(10)
	a := &Agent{kube: client, events: rec, book: newStatusBook()}
	o := translate.Options{DefaultPool: "public"}
	k := objKey{translate.KindService, "shop", "admin"}

	set := newDesiredSet()
	set.recompute(src, o)
	d, _ := set.lookup(k)
	if d == nil || !strings.Contains(d.Refused, translate.AnnotationSourceRanges+"[1]") {
		t.Fatalf("desired %+v; want refused naming the annotation's entry", d)
	}
	if v := set.versions(); len(v) != 0 {
		t.Fatalf("load balancers to ask for %v; want none", keys(v))
	}
	get := func() *corev1.Service {
		t.Helper()
		s, err := client.CoreV1().Services("shop").Get(ctx, "admin", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	if _, err := a.writeService(ctx, svc, d, nil); err != nil {
		t.Fatal(err)
	}
	a.recordEvents(k, svc, d, nil, false)
	got := get()
	if len(got.Status.LoadBalancer.Ingress) != 0 {
		t.Errorf("status still has %v", got.Status.LoadBalancer.Ingress)
	}
	c := apimeta.FindStatusCondition(got.Status.Conditions, ConditionAccepted)
	if c == nil || c.Status != metav1.ConditionFalse || c.Reason != ReasonConditionRefused || !strings.Contains(c.Message, translate.AnnotationSourceRanges) || !strings.Contains(c.Message, "no load balancer") {
		t.Errorf("condition %+v; want False %s naming the field and what the LB does", c, ReasonConditionRefused)
	}
	if ev := drain(rec); len(ev) != 1 || !strings.Contains(ev[0], "Warning "+ReasonRefused) || !strings.Contains(ev[0], translate.AnnotationSourceRanges) {
		t.Errorf("events %q; want one Warning %s naming the field", ev, ReasonRefused)
	}
	// Written once: the same verdict writes nothing more.
	before := len(client.Actions())
	if _, err := a.writeService(ctx, got, d, nil); err != nil || len(client.Actions()) != before {
		t.Errorf("an unchanged refusal wrote the status again (%d actions, %d before)", len(client.Actions()), before)
	}

	// The owner drops the restriction and asks for dual-stack.
	served := got.DeepCopy()
	served.Annotations[translate.AnnotationSourceRanges] = "198.51.100.0/24"
	policy := corev1.IPFamilyPolicyPreferDualStack
	served.Spec.IPFamilyPolicy, served.Spec.IPFamilies = &policy, []corev1.IPFamily{corev1.IPv4Protocol, corev1.IPv6Protocol}
	d2 := translate.Service(served, src, o)
	if d2.Refused != "" {
		t.Fatalf("refused %q", d2.Refused)
	}
	if src := d2.LB.GetListeners()[0].GetAllowedSources(); len(src) != 1 || src[0] != "198.51.100.0/24" {
		t.Fatalf("allowedSources %q; want the annotation's range", src)
	}
	st := &pb.ObjectStatus{Name: d2.LB.GetName(), Address: "192.0.2.7"}
	if wrote, err := a.writeService(ctx, served, d2, st); err != nil || !wrote {
		t.Fatalf("write: %t %v", wrote, err)
	}
	got = get()
	c = apimeta.FindStatusCondition(got.Status.Conditions, ConditionAccepted)
	if len(got.Status.LoadBalancer.Ingress) != 1 || c == nil || c.Status != metav1.ConditionTrue || c.Reason != ReasonAcceptedWithChanges || !strings.Contains(c.Message, "PreferDualStack") {
		t.Errorf("status %v condition %+v; want the address and True %s naming PreferDualStack", got.Status.LoadBalancer.Ingress, c, ReasonAcceptedWithChanges)
	}
	// Served as asked: the condition goes, the address stays.
	plain := got.DeepCopy()
	plain.Spec.IPFamilyPolicy, plain.Spec.IPFamilies = nil, nil
	d3 := translate.Service(plain, src, o)
	if _, err := a.writeService(ctx, plain, d3, st); err != nil {
		t.Fatal(err)
	}
	got = get()
	if c := apimeta.FindStatusCondition(got.Status.Conditions, ConditionAccepted); c != nil || len(got.Status.LoadBalancer.Ingress) != 1 {
		t.Errorf("condition %+v, ingress %v; want no condition and the address", c, got.Status.LoadBalancer.Ingress)
	}
}

func drain(rec *record.FakeRecorder) []string {
	var out []string
	for len(rec.Events) > 0 {
		out = append(out, <-rec.Events)
	}
	return out
}
