package translate_test

import (
	"maps"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/teapot-lb/teapot-lb/tenantsync/translate"
)

// TestGatewayService: a served Gateway wants a headless Service without
// selector or ports in its namespace, owned by it, with its
// spec.infrastructure labels and annotations and the labels that name it
// (the agent's win over the Gateway's of the same key); a Gateway that is
// not served wants none.
func TestGatewayService(t *testing.T) {
	t.Parallel()
	gw := gateway("shop", "gw", listener("http", gwv1.HTTPProtocolType, 80, ""))
	gw.UID = types.UID("gw-uid")
	gw.Spec.Infrastructure = &gwv1.GatewayInfrastructure{
		Labels:      map[gwv1.LabelKey]gwv1.LabelValue{"key2": "value2", gwv1.GatewayNameLabelKey: "other"},
		Annotations: map[gwv1.AnnotationKey]gwv1.AnnotationValue{"key1": "value1"},
	}
	src := gwSources(t, backendObjs(), gwClass("teapot", translate.GatewayController), gw)
	d := translate.Gateway(gw, src, gwOpts)
	svc := d.GatewayService
	if d.Refused != "" || svc == nil {
		t.Fatalf("refused %q, Service %v; want served with a Service", d.Refused, svc)
	}
	wantLabels := map[string]string{"key2": "value2", gwv1.GatewayNameLabelKey: "gw",
		translate.LabelManagedBy: translate.ManagedByAgent, translate.LabelGatewayFor: "gw"}
	if svc.Namespace != "shop" || svc.Name != "gw-teapot-gw" || !maps.Equal(svc.Labels, wantLabels) ||
		!maps.Equal(svc.Annotations, map[string]string{"key1": "value1"}) {
		t.Errorf("Service %s/%s labels %v annotations %v; want shop/gw-teapot-gw, %v, key1=value1", svc.Namespace, svc.Name, svc.Labels, svc.Annotations, wantLabels)
	}
	if svc.Spec.ClusterIP != corev1.ClusterIPNone || len(svc.Spec.Selector) > 0 || len(svc.Spec.Ports) > 0 {
		t.Errorf("spec %+v; want headless, no selector, no ports", svc.Spec)
	}
	if o := svc.OwnerReferences; len(o) != 1 || o[0].Kind != "Gateway" || o[0].Name != "gw" || o[0].UID != "gw-uid" {
		t.Errorf("owners %+v; want the Gateway", o)
	}
	if len(d.Warnings) != 1 {
		t.Errorf("warnings %q; want one, for the gateway-name label", d.Warnings)
	}
	if translate.GatewayServiceChanged(svc, svc) {
		t.Error("a Service differs from itself")
	}
	moved := svc.DeepCopy()
	moved.Annotations["key1"] = "changed"
	if !translate.GatewayServiceChanged(moved, svc) {
		t.Error("a changed annotation is not a change")
	}

	refused := gw.DeepCopy()
	refused.Spec.Infrastructure.ParametersRef = &gwv1.LocalParametersReference{Kind: "ConfigMap", Name: "p"}
	if d := translate.Gateway(refused, src, gwOpts); d.Refused == "" || d.GatewayService != nil {
		t.Errorf("refused %q, Service %v; want refused without a Service", d.Refused, d.GatewayService)
	}
	if n := translate.GatewayServiceName(strings.Repeat("g", 60)); len(n) > 63 {
		t.Errorf("name of %d bytes", len(n))
	}
}
