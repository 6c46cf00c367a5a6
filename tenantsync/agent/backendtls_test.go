package agent

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/teapot-lb/teapot-lb/api"
	"github.com/teapot-lb/teapot-lb/tenantsync/translate"
)

// TestPolicyAncestorsKeepOtherControllers: the agent replaces only its
// own entries of a BackendTLSPolicy's status.ancestors, drops those of
// Gateways that no longer use the policy, and stamps a transition time.
func TestPolicyAncestorsKeepOtherControllers(t *testing.T) {
	t.Parallel()
	theirs := gwv1.PolicyAncestorStatus{AncestorRef: gwv1.ParentReference{Name: "their-gw"}, ControllerName: "example.com/gw"}
	stale := gwv1.PolicyAncestorStatus{AncestorRef: gwv1.ParentReference{Name: "gone"}, ControllerName: translate.GatewayController}
	ours := gwv1.PolicyAncestorStatus{AncestorRef: gwv1.ParentReference{Name: "gw"}, ControllerName: translate.GatewayController,
		Conditions: []metav1.Condition{{Type: "Accepted", Status: metav1.ConditionTrue, Reason: "Accepted", ObservedGeneration: 1}}}
	got := policyAncestorsMerged([]gwv1.PolicyAncestorStatus{theirs, stale}, []gwv1.PolicyAncestorStatus{ours}, translate.GatewayController)
	if len(got) != 2 || got[0].AncestorRef.Name != "their-gw" || got[1].AncestorRef.Name != "gw" || got[1].Conditions[0].LastTransitionTime.IsZero() {
		t.Fatalf("ancestors = %+v", got)
	}
	if got := policyAncestorsMerged([]gwv1.PolicyAncestorStatus{theirs, stale}, nil, translate.GatewayController); len(got) != 1 {
		t.Fatalf("a policy no Gateway of the agent uses keeps its entries: %+v", got)
	}
}

// TestCAConfigMapCacheHoldsOnlyBundles: the agent's ConfigMap cache keeps
// the CA bundle only, cut past the bound (so that it is still refused as
// too long), never the other keys.
func TestCAConfigMapCacheHoldsOnlyBundles(t *testing.T) {
	t.Parallel()
	big := strings.Repeat("x", 10*api.MaxBackendCAPEMLen)
	in := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "ca", Annotations: map[string]string{"a": big}},
		Data: map[string]string{translate.CACertKey: big, "other": big}, BinaryData: map[string][]byte{"bin": []byte(big)}}
	out, err := caConfigMapOnly(in)
	if err != nil {
		t.Fatal(err)
	}
	cm := out.(*corev1.ConfigMap)
	if cm.Name != "ca" || cm.Namespace != "shop" || len(cm.Annotations) != 0 || len(cm.BinaryData) != 0 || len(cm.Data) != 1 {
		t.Fatalf("cached %+v", cm.ObjectMeta)
	}
	if n := len(cm.Data[translate.CACertKey]); n != api.MaxBackendCAPEMLen+1 {
		t.Fatalf("cached %d bytes of the bundle, want %d", n, api.MaxBackendCAPEMLen+1)
	}
	plain, _ := caConfigMapOnly(&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "x"}, Data: map[string]string{"k": "v"}})
	if len(plain.(*corev1.ConfigMap).Data) != 0 {
		t.Fatal("a ConfigMap without ca.crt keeps data in the cache")
	}
}
