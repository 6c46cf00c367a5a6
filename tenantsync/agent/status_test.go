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
