package agent

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/record"

	pb "github.com/teapot-lb/teapot-lb/api/proto/teapotv1"
	"github.com/teapot-lb/teapot-lb/tenantsync/translate"
)

func TestCertificateProblemsBecomeEvents(t *testing.T) {
	rec := record.NewFakeRecorder(10)
	a := &Agent{events: rec, book: newStatusBook()}
	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "web"}}
	k := objKey{kind: "Service", ns: "shop", name: "web"}
	st := &pb.ObjectStatus{Name: "ing-shop-web", Address: "192.0.2.1", Certificates: []*pb.CertificateState{
		{Host: "a.acme.example", State: "valid"},
		{Host: "b.acme.example", State: "failed", LastError: "HTTP-01 challenge: connection refused"},
	}}
	a.recordEvents(k, svc, &translate.Desired{}, st, false)
	a.recordEvents(k, svc, &translate.Desired{}, st, false) // the same status is reported once
	var got []string
	for len(rec.Events) > 0 {
		got = append(got, <-rec.Events)
	}
	if len(got) != 1 || !strings.Contains(got[0], ReasonCertificate) || !strings.Contains(got[0], "b.acme.example: certificate failed: HTTP-01 challenge: connection refused") || strings.Contains(got[0], "a.acme.example") {
		t.Fatalf("events %q", got)
	}
}

func TestNoHealthyMemberBecomesAnEvent(t *testing.T) {
	rec := record.NewFakeRecorder(10)
	a := &Agent{events: rec, book: newStatusBook()}
	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "web"}}
	k := objKey{kind: "Service", ns: "shop", name: "web"}
	st := &pb.ObjectStatus{Name: "svc-shop-web", Address: "192.0.2.1", Members: []*pb.MemberState{
		{Pool: "web", Address: "10.20.0.1:30080"}, {Pool: "web", Address: "10.20.0.2:30080"},
	}}
	a.recordEvents(k, svc, &translate.Desired{}, st, false)
	var got []string
	for len(rec.Events) > 0 {
		got = append(got, <-rec.Events)
	}
	if len(got) != 1 || !strings.Contains(got[0], ReasonProblem) || !strings.Contains(got[0], "none of the 2 members") {
		t.Fatalf("events %q", got)
	}
	// One healthy member: no such problem.
	st.Members[1].Healthy = true
	a.recordEvents(k, svc, &translate.Desired{}, st, false)
	for len(rec.Events) > 0 {
		if e := <-rec.Events; strings.Contains(e, "none of") {
			t.Fatalf("unexpected event %q", e)
		}
	}
}

// TestRefusedServiceIsNotSent: a Service the agent cannot serve as it is
// (allocateLoadBalancerNodePorts false without pod mode) is never asked of
// the LB cluster, and the tenant reads why in one Warning Event.
func TestRefusedServiceIsNotSent(t *testing.T) {
	s := newDesiredSet()
	k := objKey{kind: translate.KindService, ns: "shop", name: "web"}
	d := &translate.Desired{LB: &pb.LoadBalancer{Name: "svc-shop-web"}, Version: "v1",
		Source:  translate.Source{Kind: translate.KindService, Namespace: "shop", Name: "web"},
		Refused: "port 80/TCP has no nodePort because allocateLoadBalancerNodePorts is false"}
	if !s.update(k, d) {
		t.Fatal("a new refused object is not a change (no status write would follow)")
	}
	if got := s.versions(); len(got) != 0 {
		t.Fatalf("versions to send %v; want none", got)
	}
	rec := record.NewFakeRecorder(10)
	a := &Agent{events: rec, book: newStatusBook()}
	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "web"}}
	a.recordEvents(k, svc, d, nil, false)
	a.recordEvents(k, svc, d, nil, false)
	var got []string
	for len(rec.Events) > 0 {
		got = append(got, <-rec.Events)
	}
	if len(got) != 1 || !strings.Contains(got[0], "Warning "+ReasonRefused) || !strings.Contains(got[0], "allocateLoadBalancerNodePorts is false") {
		t.Fatalf("events %q; want one Warning %s naming allocateLoadBalancerNodePorts", got, ReasonRefused)
	}
	// Fixed by the tenant: sent again.
	ok := *d
	ok.Refused, ok.Version = "", "v2"
	if !s.update(k, &ok) || len(s.versions()) != 1 {
		t.Fatalf("after the fix, versions to send %v; want svc-shop-web", s.versions())
	}
}
