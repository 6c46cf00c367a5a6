package translate

import (
	"fmt"
	"unicode/utf8"

	gwv1 "sigs.k8s.io/gateway-api/apis/v1"
)

// reasonUnsupportedValue is the Gateway's Accepted reason for a field the
// LB cannot serve (the Gateway API names it for listeners and routes).
const reasonUnsupportedValue = "UnsupportedValue"

// gatewayUnsupported says why a Gateway asks for what the LB cannot do
// and must not be served without ("" when it does not): infrastructure
// parameters.
func gatewayUnsupported(gw *gwv1.Gateway) (reason, msg string) {
	if inf := gw.Spec.Infrastructure; inf != nil && inf.ParametersRef != nil {
		return string(gwv1.GatewayReasonInvalidParameters), "spec.infrastructure.parametersRef: teapot-lb reads no parameters; the Gateway is not served: remove it"
	}
	return "", ""
}

// gatewayWarnings says which fields of a served Gateway are not applied.
func gatewayWarnings(gw *gwv1.Gateway, d *Desired, setsWatched bool) {
	if al := gw.Spec.AllowedListeners; !setsWatched && al != nil && al.Namespaces != nil && al.Namespaces.From != nil && *al.Namespaces.From != gwv1.NamespacesFromNone {
		d.Warnings = append(d.Warnings, "spec.allowedListeners: ListenerSets are not watched (their CRD is missing), so none attach; the Gateway serves its own listeners")
	}
	if gw.Spec.DefaultScope != "" && gw.Spec.DefaultScope != gwv1.GatewayDefaultScopeNone {
		d.Warnings = append(d.Warnings, fmt.Sprintf("spec.defaultScope %.32q: a teapot-lb Gateway is never a default Gateway; routes attach by parentRefs only", gw.Spec.DefaultScope))
	}
	for i, l := range gw.Spec.Listeners {
		if l.TLS != nil && len(l.TLS.Options) > 0 {
			d.Warnings = append(d.Warnings, fmt.Sprintf("spec.listeners[%d].tls.options: %d options are not read; the listener is served with teapot-lb's TLS settings", i, len(l.TLS.Options)))
		}
	}
}

// boundText cuts s to at most n bytes, on a character boundary.
func boundText(s string, n int) string {
	if len(s) <= n {
		return s
	}
	cut := n - len("…")
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "…"
}
