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

// TestDualStackServiceStatus: a dual-stack Service gets every VIP the LB
// cluster gave in status.loadBalancer.ingress (the first family first)
// and an Event naming both; PreferDualStack served on one family carries
// a True Accepted condition and a Warning Event saying which family is
// missing and why; RequireDualStack refused by the cluster has no address,
// a False Accepted condition and a Warning Event with the cluster's
// reason.
func TestDualStackServiceStatus(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	svc := lbService("shop", "web", time.Now())
	src, client := sources(t, svc)
	rec := record.NewFakeRecorder(20)
	a := &Agent{kube: client, events: rec, book: newStatusBook()}
	o := translate.Options{DefaultPool: "public", DualStack: true}
	k := objKey{translate.KindService, "shop", "web"}
	get := func() *corev1.Service {
		t.Helper()
		s, err := client.CoreV1().Services("shop").Get(ctx, "web", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	with := func(p corev1.IPFamilyPolicy, fams ...corev1.IPFamily) (*corev1.Service, *translate.Desired) {
		s := get()
		s.Spec.IPFamilyPolicy, s.Spec.IPFamilies = &p, fams
		return s, translate.Service(s, src, o)
	}
	ips := func(s *corev1.Service) string {
		var out []string
		for _, in := range s.Status.LoadBalancer.Ingress {
			out = append(out, in.IP)
		}
		return strings.Join(out, " ")
	}

	// Both families.
	s, d := with(corev1.IPFamilyPolicyRequireDualStack, corev1.IPv6Protocol, corev1.IPv4Protocol)
	st := &pb.ObjectStatus{Name: d.LB.GetName(), Address: "2001:db8:10::1", Addresses: []string{"2001:db8:10::1", "192.0.2.1"}}
	wrote, err := a.writeService(ctx, s, d, st)
	if err != nil || !wrote {
		t.Fatalf("write: %t %v", wrote, err)
	}
	a.recordEvents(k, s, d, st, wrote)
	got := get()
	if ips(got) != "2001:db8:10::1 192.0.2.1" || apimeta.FindStatusCondition(got.Status.Conditions, ConditionAccepted) != nil {
		t.Fatalf("ingress %q conditions %v; want both VIPs, IPv6 first, and no condition", ips(got), got.Status.Conditions)
	}
	if ev := drain(rec); len(ev) != 1 || !strings.Contains(ev[0], "VIPs 2001:db8:10::1 and 192.0.2.1") {
		t.Fatalf("events %q; want one naming both VIPs", ev)
	}

	// PreferDualStack with no IPv6 left: one VIP, and why.
	s, d = with(corev1.IPFamilyPolicyPreferDualStack, corev1.IPv4Protocol, corev1.IPv6Protocol)
	why := "no ipv6 VIP: pool public had no free ipv6 address when the load balancer was written (familyPolicy prefer), so it is served on IPv4 alone"
	st = &pb.ObjectStatus{Name: d.LB.GetName(), Address: "192.0.2.1", Addresses: []string{"192.0.2.1"}, Problems: []*pb.Problem{{Field: "vip.families", Reason: why}}}
	if _, err := a.writeService(ctx, s, d, st); err != nil {
		t.Fatal(err)
	}
	a.recordEvents(k, s, d, st, true)
	got = get()
	c := apimeta.FindStatusCondition(got.Status.Conditions, ConditionAccepted)
	if ips(got) != "192.0.2.1" || c == nil || c.Status != metav1.ConditionTrue || c.Reason != ReasonAcceptedWithChanges || !strings.Contains(c.Message, "PreferDualStack: "+why) {
		t.Fatalf("ingress %q condition %+v; want the IPv4 VIP and True %s saying why there is no IPv6 VIP", ips(got), c, ReasonAcceptedWithChanges)
	}
	if ev := drain(rec); !containsAll(ev, "Warning "+ReasonProblem, "vip.families: "+why) {
		t.Fatalf("events %q; want a Warning %s saying why", ev, ReasonProblem)
	}

	// RequireDualStack refused by the cluster: no address, False.
	s, d = with(corev1.IPFamilyPolicyRequireDualStack, corev1.IPv4Protocol, corev1.IPv6Protocol)
	refusal := "vip.families: VIP pool public has no IPv6 addresses, and familyPolicy require needs one VIP of each listed family"
	st = &pb.ObjectStatus{Name: d.LB.GetName(), Error: refusal}
	if _, err := a.writeService(ctx, s, d, st); err != nil {
		t.Fatal(err)
	}
	a.recordEvents(k, s, d, st, false)
	got = get()
	c = apimeta.FindStatusCondition(got.Status.Conditions, ConditionAccepted)
	if ips(got) != "" || c == nil || c.Status != metav1.ConditionFalse || c.Reason != ReasonConditionRefused || !strings.Contains(c.Message, refusal) {
		t.Fatalf("ingress %q condition %+v; want no address and False %s with the cluster's reason", ips(got), c, ReasonConditionRefused)
	}
	if ev := drain(rec); !containsAll(ev, "Warning "+ReasonRefused, refusal) {
		t.Fatalf("events %q; want a Warning %s with the cluster's reason", ev, ReasonRefused)
	}
}

// containsAll reports whether one of events holds every word.
func containsAll(events []string, words ...string) bool {
	for _, e := range events {
		ok := true
		for _, w := range words {
			ok = ok && strings.Contains(e, w)
		}
		if ok {
			return true
		}
	}
	return false
}
