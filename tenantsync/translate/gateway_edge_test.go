package translate_test

import (
	"slices"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/teapot-lb/teapot-lb/tenantsync/translate"
)

// TestGatewaySourceAnnotations: a Gateway's teapot-lb.io/allowed-sources
// and denied-sources restrict every listener; a malformed list makes the
// Gateway not accepted (and not served), naming the entry.
func TestGatewaySourceAnnotations(t *testing.T) {
	gw := gateway("shop", "gw", listener("http", gwv1.HTTPProtocolType, 80, ""), listener("tcp", gwv1.TCPProtocolType, 5432, ""))
	gw.Annotations = map[string]string{translate.AnnotationAllowedSources: "192.0.2.0/24", translate.AnnotationDeniedSources: "192.0.2.7/32"}
	src := gwSources(t, backendObjs(), gwClass("teapot", translate.GatewayController), gw)
	d := translate.Gateway(gw, src, gwOpts)
	if d.Refused != "" || len(d.LB.GetListeners()) == 0 {
		t.Fatalf("refused %q, listeners %v", d.Refused, d.LB.GetListeners())
	}
	for i, l := range d.LB.GetListeners() {
		if !slices.Equal(l.GetAllowedSources(), []string{"192.0.2.0/24"}) || !slices.Equal(l.GetDeniedSources(), []string{"192.0.2.7/32"}) {
			t.Errorf("listeners[%d]: %q %q", i, l.GetAllowedSources(), l.GetDeniedSources())
		}
	}
	gw = gw.DeepCopy()
	gw.Annotations[translate.AnnotationAllowedSources] = "192.0.2.0/24,nope"
	d = translate.Gateway(gw, gwSources(t, backendObjs(), gwClass("teapot", translate.GatewayController), gw), gwOpts)
	c := d.Gateway.Accepted
	if d.Refused == "" || c.Status != metav1.ConditionFalse || !strings.Contains(c.Message, translate.AnnotationAllowedSources+"[1]") {
		t.Fatalf("refused %q, accepted %+v", d.Refused, c)
	}
}
