package translate

import (
	"crypto/tls"
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/teapot-lb/teapot-lb/api"
	"github.com/teapot-lb/teapot-lb/tenantsync/syncspec"
)

// appProtocolH2C marks a Service port that speaks HTTP/2 without TLS.
const appProtocolH2C = "kubernetes.io/h2c"

// granted reports whether a ReferenceGrant in toNS lets objects of kind
// fromKind in fromNS refer to the core object toKind/toName.
func (g *gwBuild) granted(fromKind, fromNS, toKind, toNS, toName string) bool {
	if g.src.Gateway == nil || g.src.Gateway.ReferenceGrants == nil {
		return false
	}
	grants, err := g.src.Gateway.ReferenceGrants.ReferenceGrants(toNS).List(labels.Everything())
	if err != nil {
		return false
	}
	for _, rg := range grants {
		from := slices.ContainsFunc(rg.Spec.From, func(f gwv1.ReferenceGrantFrom) bool {
			return string(f.Group) == gatewayGroup && string(f.Kind) == fromKind && string(f.Namespace) == fromNS
		})
		to := slices.ContainsFunc(rg.Spec.To, func(t gwv1.ReferenceGrantTo) bool {
			return t.Group == "" && string(t.Kind) == toKind && (t.Name == nil || string(*t.Name) == toName)
		})
		if from && to {
			return true
		}
	}
	return false
}

// backendProblem says why a backendRef cannot be used: the route's
// ResolvedRefs reason and a message; "" when it can.
func (g *gwBuild) backendProblem(r *routeObj, ref gwv1.BackendObjectReference) (reason, msg string) {
	grp, kind := "", "Service"
	if ref.Group != nil {
		grp = string(*ref.Group)
	}
	if ref.Kind != nil {
		kind = string(*ref.Kind)
	}
	if grp != "" || kind != "Service" {
		return string(gwv1.RouteReasonInvalidKind), fmt.Sprintf("backendRef %s: kind %s is not supported; use a core Service", ref.Name, strings.TrimPrefix(grp+"/"+kind, "/"))
	}
	ns := r.key.Namespace
	if ref.Namespace != nil {
		ns = string(*ref.Namespace)
	}
	if ns != r.key.Namespace && !g.granted(r.key.Kind, r.key.Namespace, "Service", ns, string(ref.Name)) {
		return string(gwv1.RouteReasonRefNotPermitted), fmt.Sprintf("backendRef %s/%s: no ReferenceGrant in namespace %s lets %s of namespace %s refer to it", ns, ref.Name, ns, r.key.Kind, r.key.Namespace)
	}
	if ref.Port == nil {
		return string(gwv1.RouteReasonUnsupportedValue), fmt.Sprintf("backendRef %s/%s: port is required for a Service", ns, ref.Name)
	}
	if g.src.Services == nil {
		return string(gwv1.RouteReasonBackendNotFound), fmt.Sprintf("backendRef %s/%s: Service not found", ns, ref.Name)
	}
	svc, err := g.src.Services.Services(ns).Get(string(ref.Name))
	if err != nil {
		return string(gwv1.RouteReasonBackendNotFound), fmt.Sprintf("backendRef %s/%s: Service not found", ns, ref.Name)
	}
	if !slices.ContainsFunc(svc.Spec.Ports, func(p corev1.ServicePort) bool { return p.Port == *ref.Port }) {
		return string(gwv1.RouteReasonBackendNotFound), fmt.Sprintf("backendRef %s/%s: the Service has no port %d", ns, ref.Name, *ref.Port)
	}
	return "", ""
}

// routeRefs is a route's ResolvedRefs condition: the first backendRef
// that cannot be used, over all its rules.
func (g *gwBuild) routeRefs(r *routeObj) metav1.Condition {
	var refs []gwv1.BackendObjectReference
	switch {
	case r.http != nil:
		for _, rule := range r.http.Spec.Rules {
			for _, b := range rule.BackendRefs {
				refs = append(refs, b.BackendObjectReference)
			}
			for _, f := range rule.Filters {
				if f.RequestMirror != nil {
					refs = append(refs, f.RequestMirror.BackendRef)
				}
			}
		}
	case r.grpc != nil:
		for _, rule := range r.grpc.Spec.Rules {
			for _, b := range rule.BackendRefs {
				refs = append(refs, b.BackendObjectReference)
			}
		}
	default:
		for _, rule := range r.l4 {
			for _, b := range rule {
				refs = append(refs, b.BackendObjectReference)
			}
		}
	}
	for _, ref := range refs {
		if reason, msg := g.backendProblem(r, ref); reason != "" {
			return cond(string(gwv1.RouteConditionResolvedRefs), false, reason, msg, r.meta.Generation)
		}
	}
	return cond(string(gwv1.RouteConditionResolvedRefs), true, string(gwv1.RouteReasonResolvedRefs), "", r.meta.Generation)
}

// backendPool returns the key of the LB pool of a usable backendRef,
// creating it, or "" when the ref cannot be used. h2c asks for HTTP/2
// towards the members (gRPC).
func (g *gwBuild) backendPool(r *routeObj, ref gwv1.BackendObjectReference, h2c bool) string {
	if reason, _ := g.backendProblem(r, ref); reason != "" {
		return ""
	}
	ns := r.key.Namespace
	if ref.Namespace != nil {
		ns = string(*ref.Namespace)
	}
	svc, err := g.src.Services.Services(ns).Get(string(ref.Name))
	if err != nil {
		return ""
	}
	port := svc.Spec.Ports[slices.IndexFunc(svc.Spec.Ports, func(p corev1.ServicePort) bool { return p.Port == *ref.Port })]
	if port.AppProtocol != nil && *port.AppProtocol == appProtocolH2C {
		h2c = true
	}
	key := backendKey(g.gw.Namespace, ns, string(ref.Name), *ref.Port, h2c)
	if _, ok := g.lb.Pools[key]; ok {
		return key
	}
	bp := backendPool(g.gw.Annotations, g.d)
	if h2c {
		bp.BackendProtocol = "h2c"
	}
	isb := &backendSvc{namespace: ns, name: string(ref.Name), port: *ref.Port}
	bp.Members = serviceMembers(g.src, isb, g.podMode, g.nodes, g.d)
	g.backendTLS(bp, ns, svc, port)
	g.lb.Pools[key] = bp
	g.newPools = append(g.newPools, key)
	return key
}

// backendKey names the pool of Service ns/name port port (h2c: HTTP/2
// towards the members) in a load balancer of a Gateway of namespace gwNS.
// No two backends share a key: a Service of the Gateway's namespace is
// NAME-PORT or NAME-PORT-h2c (read from the right, the port and the h2c
// mark end it), and every other backend (another namespace, or a name
// that does not make a DNS label) is syncspec.Key of namespace, name,
// port and h2c, which ends in 16 hex digits, never in a port or h2c.
// Joining namespace and name with '-' would not do: namespace a-b with
// Service c and namespace a with Service b-c would share a pool.
func backendKey(gwNS, ns, name string, port int32, h2c bool) string {
	raw := fmt.Sprintf("%s-%d", name, port)
	mark := ""
	if h2c {
		raw, mark = raw+"-h2c", "h2c"
	}
	if ns == gwNS && api.IsLabel(raw) {
		return raw
	}
	return syncspec.Key(ns+"-"+raw, "Backend", ns, name, fmt.Sprint(port), mark)
}

// certificateName is the tenant certificate uploaded from Secret ns/name.
func certificateName(ns, name string) string {
	return syncspec.SecretCertificateName(ns, name)
}

// listenerCerts resolves an HTTPS listener's certificateRefs into the
// certificates to serve; it returns the listener's ResolvedRefs condition
// when a ref does not resolve.
func (g *gwBuild) listenerCerts(ls *listenerState) *metav1.Condition {
	gen := ls.gen(g)
	ownNS, ownKind := ls.owner(g)
	var refs []gwv1.SecretObjectReference
	if ls.spec.TLS != nil {
		refs = ls.spec.TLS.CertificateRefs
	}
	fail := func(reason, msg string) *metav1.Condition {
		c := cond(string(gwv1.ListenerConditionResolvedRefs), false, reason, msg, gen)
		return &c
	}
	if len(refs) == 0 {
		return fail(string(gwv1.ListenerReasonInvalidCertificateRef), "an HTTPS listener needs tls.certificateRefs")
	}
	var problem *metav1.Condition
	for i, ref := range refs {
		grp, kind := "", "Secret"
		if ref.Group != nil {
			grp = string(*ref.Group)
		}
		if ref.Kind != nil {
			kind = string(*ref.Kind)
		}
		ns := ownNS
		if ref.Namespace != nil {
			ns = string(*ref.Namespace)
		}
		f := fmt.Sprintf("tls.certificateRefs[%d]", i)
		var p *metav1.Condition
		switch {
		case grp != "" || kind != "Secret":
			p = fail(string(gwv1.ListenerReasonInvalidCertificateRef), fmt.Sprintf("%s: kind %s is not supported; use a core Secret", f, strings.TrimPrefix(grp+"/"+kind, "/")))
		case ns != ownNS && !g.granted(ownKind, ownNS, "Secret", ns, string(ref.Name)):
			p = fail(string(gwv1.ListenerReasonRefNotPermitted), fmt.Sprintf("%s: no ReferenceGrant in namespace %s lets %ss of namespace %s refer to Secret %s", f, ns, ownKind, ownNS, ref.Name))
		default:
			if msg := g.secretProblem(ns, string(ref.Name)); msg != "" {
				p = fail(string(gwv1.ListenerReasonInvalidCertificateRef), f+": "+msg)
			}
		}
		if p != nil {
			if problem == nil {
				problem = p
			}
			continue
		}
		ls.certs = append(ls.certs, CertificateSource{Name: certificateName(ns, string(ref.Name)), Namespace: ns, Secret: string(ref.Name)})
	}
	return problem
}

// secretProblem says why Secret ns/name cannot serve as a certificate.
func (g *gwBuild) secretProblem(ns, name string) string {
	if g.src.Gateway.Secrets == nil {
		return "the agent does not read Secrets"
	}
	s, err := g.src.Gateway.Secrets.Secrets(ns).Get(name)
	if apierrors.IsNotFound(err) {
		return fmt.Sprintf("Secret %s/%s does not exist", ns, name)
	} else if err != nil {
		return fmt.Sprintf("Secret %s/%s: %v", ns, name, err)
	}
	crt, key := s.Data[corev1.TLSCertKey], s.Data[corev1.TLSPrivateKeyKey]
	if len(crt) == 0 || len(key) == 0 {
		return fmt.Sprintf("Secret %s/%s has no %s and %s", ns, name, corev1.TLSCertKey, corev1.TLSPrivateKeyKey)
	}
	if _, err := tls.X509KeyPair(crt, key); err != nil {
		return fmt.Sprintf("Secret %s/%s does not hold a certificate and its key: %v", ns, name, err)
	}
	return ""
}
