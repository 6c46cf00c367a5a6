package translate

import (
	"fmt"
	"maps"
	"slices"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"
)

// The Service the agent makes for a Gateway it serves: the Gateway's
// place in its cluster, the resource that spec.infrastructure's labels
// and annotations go on (the Gateway API's GatewayInfrastructure). The
// LB itself runs outside the cluster, so the Service is headless and has
// no selector, no ports and no endpoints: it costs the cluster an object,
// no cluster IP and no proxy rules. It is named GatewayServiceName, in
// the Gateway's namespace, labelled with the infrastructure labels, then
// LabelManagedBy=ManagedByAgent, LabelGatewayFor=<the Gateway> and
// gateway.networking.k8s.io/gateway-name=<the Gateway> (these three win
// over infrastructure labels of the same keys, with a warning), carries
// the infrastructure annotations, and is owned by the Gateway (the
// garbage collector removes it with it). The agent deletes it when the
// Gateway is not served.
const LabelGatewayFor = "teapot-lb.io/gateway-for"

// GatewayServiceName names the Service the agent makes for the Gateway
// gw: gw + "-teapot-gw", or a hashed form when that is longer than a DNS
// label.
func GatewayServiceName(gw string) string { return agentServiceName(gw, "-teapot-gw") }

// IsGatewayServiceFor reports whether s is the agent's Service for the
// Gateway named gw.
func IsGatewayServiceFor(s *corev1.Service, gw string) bool {
	return s.Labels[LabelManagedBy] == ManagedByAgent && s.Labels[LabelGatewayFor] == gw
}

// gatewayService is the Service for gw, and the warnings of the
// infrastructure labels the agent's own labels replace.
func gatewayService(gw *gwv1.Gateway) (*corev1.Service, []string) {
	own := map[string]string{LabelManagedBy: ManagedByAgent, LabelGatewayFor: gw.Name, gwv1.GatewayNameLabelKey: gw.Name}
	labels := map[string]string{}
	var annotations map[string]string
	var warnings []string
	if inf := gw.Spec.Infrastructure; inf != nil {
		for k, v := range inf.Labels {
			if _, ok := own[string(k)]; ok {
				warnings = append(warnings, fmt.Sprintf("spec.infrastructure.labels[%.64q]: the agent sets this label on the Gateway's Service itself; yours is not used: remove it", k))
				continue
			}
			labels[string(k)] = string(v)
		}
		for k, v := range inf.Annotations {
			if annotations == nil {
				annotations = map[string]string{}
			}
			annotations[string(k)] = string(v)
		}
	}
	slices.Sort(warnings)
	maps.Copy(labels, own)
	return &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{
			Namespace:   gw.Namespace,
			Name:        GatewayServiceName(gw.Name),
			Labels:      labels,
			Annotations: annotations,
			OwnerReferences: []metav1.OwnerReference{{
				APIVersion: gwv1.GroupVersion.String(), Kind: "Gateway", Name: gw.Name, UID: gw.UID,
			}},
		},
		Spec: corev1.ServiceSpec{
			Type:      corev1.ServiceTypeClusterIP,
			ClusterIP: corev1.ClusterIPNone,
		},
	}, warnings
}

// GatewayServiceChanged reports whether current differs from want in
// what the agent sets: labels, annotations, owner, headlessness, no
// selector and no ports. Labels and annotations others add to the
// Service are changes too: the Service carries what the Gateway says.
func GatewayServiceChanged(current, want *corev1.Service) bool {
	if !maps.Equal(current.Labels, want.Labels) || !maps.Equal(current.Annotations, want.Annotations) ||
		current.Spec.ClusterIP != corev1.ClusterIPNone || len(current.Spec.Selector) > 0 || len(current.Spec.Ports) > 0 {
		return true
	}
	return !slices.EqualFunc(current.OwnerReferences, want.OwnerReferences, func(a, b metav1.OwnerReference) bool {
		return a.Kind == b.Kind && a.Name == b.Name && a.UID == b.UID
	})
}
