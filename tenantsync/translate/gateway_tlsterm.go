package translate

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"
)

// tlsListener checks a TLS listener's mode. Passthrough: the connections
// go to the routes' members untouched. Terminate (the spec's default): the
// LB listener terminates the routes' server names with the listener's
// certificates (tls.certificateRefs, resolved as for HTTPS) and forwards
// the decrypted stream (sniRoutes[].terminate); listeners of both modes
// may share a port, each serving its own names. It returns the Accepted
// condition when the listener is not accepted, else the ResolvedRefs
// condition when its certificates do not resolve (nil, nil when fine).
func (g *gwBuild) tlsListener(ls *listenerState) (accepted, resolved *metav1.Condition) {
	gen := g.gw.Generation
	l := ls.spec
	if l.TLS != nil && l.TLS.Mode != nil && *l.TLS.Mode == gwv1.TLSModePassthrough {
		return nil, nil
	}
	if !g.o.TLSTerminate {
		c := cond(string(gwv1.ListenerConditionAccepted), false, string(gwv1.ListenerReasonUnsupportedValue),
			"the LB cluster does not terminate TLS listeners yet (it needs feature level 5 on every host); set tls.mode: Passthrough, or use HTTPS", gen)
		return &c, nil
	}
	ls.terminate = true
	if l.TLS == nil || len(l.TLS.CertificateRefs) == 0 {
		c := cond(string(gwv1.ListenerConditionResolvedRefs), false, string(gwv1.ListenerReasonInvalidCertificateRef),
			"a TLS listener in Terminate mode needs tls.certificateRefs (or tls.mode: Passthrough)", gen)
		return nil, &c
	}
	return nil, g.listenerCerts(ls)
}
