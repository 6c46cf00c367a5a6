package translate_test

import (
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/teapot-lb/teapot-lb/tenantsync/translate"
)

// TestGatewayFieldsHonouredOrRefused: a Gateway that asks for client
// certificate validation or infrastructure parameters is not accepted (and not served) rather than
// served without them; ListenerSets when their CRD is missing, a default scope and listener TLS
// options are not applied, which a warning and the Accepted condition's
// message say.
func TestGatewayFieldsHonouredOrRefused(t *testing.T) {
	t.Parallel()
	all := gwv1.NamespacesFromAll
	tests := []struct {
		name   string
		edit   func(*gwv1.Gateway)
		reason string // Accepted False reason; "" accepted
		words  string // in the refusal, or in a warning and the Accepted message
	}{
		{"plain Gateway", func(*gwv1.Gateway) {}, "", ""},
		{"client certificate validation without any (see TestGatewayFrontendValidation)", func(g *gwv1.Gateway) {
			g.Spec.TLS = &gwv1.GatewayTLSConfig{Frontend: &gwv1.FrontendTLSConfig{}}
		}, "", ""},
		{"infrastructure parameters", func(g *gwv1.Gateway) {
			g.Spec.Infrastructure = &gwv1.GatewayInfrastructure{ParametersRef: &gwv1.LocalParametersReference{Kind: "ConfigMap", Name: "p"}}
		}, string(gwv1.GatewayReasonInvalidParameters), "spec.infrastructure.parametersRef"},
		{"infrastructure labels (see TestGatewayService)", func(g *gwv1.Gateway) {
			g.Spec.Infrastructure = &gwv1.GatewayInfrastructure{Labels: map[gwv1.LabelKey]gwv1.LabelValue{"a": "b"}}
		}, "", ""},
		{"infrastructure labels of the agent's own keys", func(g *gwv1.Gateway) {
			g.Spec.Infrastructure = &gwv1.GatewayInfrastructure{Labels: map[gwv1.LabelKey]gwv1.LabelValue{translate.LabelManagedBy: "me"}}
		}, "", "spec.infrastructure.labels[\"app.kubernetes.io/managed-by\"]: the agent sets this label"},
		{"ListenerSets without their CRD", func(g *gwv1.Gateway) {
			g.Spec.AllowedListeners = &gwv1.AllowedListeners{Namespaces: &gwv1.ListenerNamespaces{From: &all}}
		}, "", "spec.allowedListeners: ListenerSets are not watched"},
		{"default scope", func(g *gwv1.Gateway) { g.Spec.DefaultScope = gwv1.GatewayDefaultScopeAll }, "", "spec.defaultScope \"All\""},
		{"default scope None", func(g *gwv1.Gateway) { g.Spec.DefaultScope = gwv1.GatewayDefaultScopeNone }, "", ""},
		{"listener TLS options", func(g *gwv1.Gateway) {
			g.Spec.Listeners[0].TLS = &gwv1.ListenerTLSConfig{Options: map[gwv1.AnnotationKey]gwv1.AnnotationValue{"x/min-version": "1.3"}}
		}, "", "spec.listeners[0].tls.options: 1 options are not read"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			gw := gateway("shop", "gw", listener("http", gwv1.HTTPProtocolType, 80, ""))
			tt.edit(gw)
			src := gwSources(t, backendObjs(), gwClass("teapot", translate.GatewayController), gw)
			if tt.name == "ListenerSets without their CRD" {
				src.Gateway.ListenerSets = nil
			}
			d := translate.Gateway(gw, src, gwOpts)
			acc := d.Gateway.Accepted
			if tt.reason != "" {
				if acc.Status != metav1.ConditionFalse || acc.Reason != tt.reason || !strings.Contains(acc.Message, tt.words) || !strings.Contains(d.Refused, tt.words) {
					t.Errorf("Accepted %s %s %q, refused %q; want False %s naming %s", acc.Status, acc.Reason, acc.Message, d.Refused, tt.reason, tt.words)
				}
				return
			}
			if acc.Status != metav1.ConditionTrue || d.Refused != "" {
				t.Fatalf("Accepted %s %s %q, refused %q; want served", acc.Status, acc.Reason, acc.Message, d.Refused)
			}
			if tt.words == "" {
				if len(d.Warnings) != 0 {
					t.Errorf("warnings %q; want none", d.Warnings)
				}
				return
			}
			if len(d.Warnings) != 1 || !strings.Contains(d.Warnings[0], tt.words) || !strings.Contains(acc.Message, tt.words) {
				t.Errorf("warnings %q, Accepted message %q; want one warning naming %s, also in the message", d.Warnings, acc.Message, tt.words)
			}
		})
	}
}
