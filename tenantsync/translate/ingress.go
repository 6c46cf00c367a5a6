package translate

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/teapot-lb/teapot-lb/api"
	pb "github.com/teapot-lb/teapot-lb/api/proto/teapotv1"
	"github.com/teapot-lb/teapot-lb/tenantsync/syncspec"
)

// WantsIngress reports whether the agent takes ing: its class (by
// spec.ingressClassName, the legacy annotation, or the default class) is
// one whose controller is the agent's.
func WantsIngress(ing *networkingv1.Ingress, src Sources, o Options) bool {
	if ing.DeletionTimestamp != nil || src.IngressClasses == nil {
		return false
	}
	name := ""
	switch {
	case ing.Spec.IngressClassName != nil:
		name = *ing.Spec.IngressClassName
	case ing.Annotations[annotationIngClass] != "":
		name = ing.Annotations[annotationIngClass]
	}
	if name != "" {
		ic, err := src.IngressClasses.Get(name)
		return err == nil && ic.Spec.Controller == o.controller()
	}
	list, err := src.IngressClasses.List(labels.Everything())
	if err != nil {
		return false
	}
	for _, ic := range list {
		if parseBool(ic.Annotations[annotationDefaultIC]) {
			return ic.Spec.Controller == o.controller()
		}
	}
	return false
}

// Ingress translates one Ingress the agent takes: an http listener on 80,
// https on 443 when it lists TLS hosts, and a route per rule path.
func Ingress(ing *networkingv1.Ingress, src Sources, o Options) *Desired {
	d := &Desired{Source: Source{KindIngress, ing.Namespace, ing.Name}}
	lb := &pb.LoadBalancer{
		Name:  syncspec.IngressName(ing.Namespace, ing.Name),
		Vip:   vipRequest(ing.Annotations, "", o, d),
		Pools: map[string]*pb.BackendPool{},
	}
	d.LB = lb
	podMode := podMode(ing.Annotations, o, d)
	notL4(ing.Annotations, "an Ingress", d)
	var nodes []string
	if !podMode {
		nodes = nodeAddrs(src.Nodes)
	}
	httpL := &pb.Listener{Port: 80, Protocol: "http"}
	lb.Listeners = append(lb.Listeners, httpL)
	if len(ing.Spec.TLS) > 0 {
		tls := &pb.TLSPolicy{Acme: true}
		if certs := ing.Annotations[AnnotationTLSCertificates]; certs != "" {
			tls.Acme = false
			for _, c := range strings.Split(certs, ",") {
				if c = strings.TrimSpace(c); c != "" {
					tls.Certificates = append(tls.Certificates, c)
				}
			}
		}
		secrets := 0
		for _, t := range ing.Spec.TLS {
			if t.SecretName != "" {
				secrets++
			}
		}
		ruleHosts := map[string]bool{}
		for _, r := range ing.Spec.Rules {
			ruleHosts[r.Host] = true
		}
		var stray []string
		for _, t := range ing.Spec.TLS {
			for _, h := range t.Hosts {
				if !ruleHosts[h] && !slices.Contains(stray, h) {
					stray = append(stray, h)
				}
			}
		}
		if len(stray) > 0 {
			d.Warnings = append(d.Warnings, fmt.Sprintf("spec.tls[].hosts: %d hosts (%.64q first) have no rule: the https listener obtains certificates for the rules' hosts only; add a rule for them", len(stray), stray[0]))
		}
		if secrets > 0 {
			d.Warnings = append(d.Warnings, fmt.Sprintf("spec.tls: %d secretName entries are not read: the https listener serves certificates from ACME for the rules' hosts, or the uploaded ones %s names", secrets, AnnotationTLSCertificates))
		}
		lb.Listeners = append(lb.Listeners, &pb.Listener{Port: 443, Protocol: "https", Tls: tls})
		httpL.RedirectToHttps = parseBool(ing.Annotations[AnnotationSSLRedirect])
	}
	pool := func(b networkingv1.IngressBackend) string {
		if b.Service == nil {
			d.Warnings = append(d.Warnings, "a backend without a service is not supported (resource backends); its paths are left out")
			return ""
		}
		key := ingressBackendKey(b.Service)
		if _, ok := lb.Pools[key]; !ok {
			bp := backendPool(ing.Annotations, d)
			bp.ProxyProtocol = proxyProtocol(ing.Annotations, d)
			bp.Members = ingressMembers(src, ing.Namespace, b.Service, podMode, nodes, d)
			lb.Pools[key] = bp
		}
		return key
	}
	for _, r := range ing.Spec.Rules {
		if r.HTTP == nil {
			continue
		}
		for _, p := range r.HTTP.Paths {
			key := pool(p.Backend)
			if key == "" {
				continue
			}
			route := &pb.Route{Host: r.Host, Path: p.Path, Pool: key}
			if route.Path == "" {
				route.Path = "/"
			}
			if p.PathType != nil && *p.PathType == networkingv1.PathTypeExact {
				route.PathType = "exact"
			}
			lb.Routes = append(lb.Routes, route)
		}
	}
	if b := ing.Spec.DefaultBackend; b != nil {
		if key := pool(*b); key != "" {
			lb.Routes = append(lb.Routes, &pb.Route{Path: "/", Pool: key})
		}
	}
	edgeSources(ing.Annotations, lb, d, true)
	edgeRates(ing.Annotations, lb, d, edgeIngress)
	edgeWAF(ing.Annotations, lb, d)
	d.ProxyMode = true
	return finish(d)
}

// ingressBackendKey names the pool of an Ingress backend: SERVICE-PORT
// when the port (a number or a name) holds no '-', so that the last '-'
// ends the Service's name; otherwise syncspec.Key of Service and port
// (Service web-http port alt and Service web port http-alt must not
// share a pool).
func ingressBackendKey(b *networkingv1.IngressServiceBackend) string {
	port := b.Port.Name
	if port == "" {
		port = fmt.Sprint(b.Port.Number)
	}
	raw := b.Name + "-" + port
	if !strings.Contains(port, "-") && api.IsLabel(raw) {
		return raw
	}
	return syncspec.Key(raw, "Backend", b.Name, port)
}

// ingressMembers finds the members behind an Ingress backend.
func ingressMembers(src Sources, namespace string, b *networkingv1.IngressServiceBackend, podMode bool, nodes []string, d *Desired) []*pb.Member {
	return serviceMembers(src, &backendSvc{namespace: namespace, name: b.Name, portName: b.Port.Name, port: b.Port.Number}, podMode, nodes, d)
}

// backendSvc is a Service port that a route sends to: by port name when
// set, else by number.
type backendSvc struct {
	namespace, name, portName string
	port                      int32
}

func (b *backendSvc) portText() string {
	if b.portName != "" {
		return b.portName
	}
	return fmt.Sprint(b.port)
}

// serviceMembers finds the members behind a backend Service port: its
// nodePort on every node, or its ready pods. A ClusterIP Service outside
// pod mode is served by the NodePort Service the agent creates for it
// (listed in d.NodePorts: its name, or namespace/name when it lives in
// another namespace than d's source).
func serviceMembers(src Sources, b *backendSvc, podMode bool, nodes []string, d *Desired) []*pb.Member {
	if src.Services == nil {
		return nil
	}
	namespace := b.namespace
	svc, err := src.Services.Services(namespace).Get(b.name)
	if err != nil {
		if errors.IsNotFound(err) {
			d.Warnings = append(d.Warnings, fmt.Sprintf("backend Service %s/%s does not exist; its routes answer 503", namespace, b.name))
		}
		return nil
	}
	i := slices.IndexFunc(svc.Spec.Ports, func(p corev1.ServicePort) bool {
		if b.portName != "" {
			return p.Name == b.portName
		}
		return p.Port == b.port
	})
	if i < 0 {
		d.Warnings = append(d.Warnings, fmt.Sprintf("backend Service %s/%s has no port %s; its routes answer 503", namespace, b.name, b.portText()))
		return nil
	}
	p := svc.Spec.Ports[i]
	if podMode {
		return podMembers(src.EndpointSlices, namespace, b.name, p)
	}
	if p.NodePort == 0 && needsNodePort(svc) {
		ref := svc.Name
		if namespace != d.Source.Namespace {
			ref = namespace + "/" + svc.Name
		}
		if !slices.Contains(d.NodePorts, ref) {
			d.NodePorts = append(d.NodePorts, ref)
		}
		np, err := src.Services.Services(namespace).Get(NodePortName(svc.Name))
		if err == nil && IsNodePortFor(np, svc.Name) {
			if j := slices.IndexFunc(np.Spec.Ports, func(q corev1.ServicePort) bool {
				return q.Name == p.Name && q.Protocol == p.Protocol && q.Port == p.Port
			}); j >= 0 && np.Spec.Ports[j].NodePort != 0 {
				return nodeMembers(nodes, np.Spec.Ports[j].NodePort)
			}
		}
		d.Warnings = append(d.Warnings, fmt.Sprintf("backend Service %s/%s is of type ClusterIP: waiting for the NodePort Service %s that the agent creates for it", namespace, b.name, NodePortName(svc.Name)))
		return nil
	}
	if p.NodePort == 0 {
		d.Warnings = append(d.Warnings, fmt.Sprintf("backend Service %s/%s port %s has no nodePort; make it type NodePort, or use pod mode when pods are routable", namespace, b.name, b.portText()))
		return nil
	}
	return nodeMembers(nodes, p.NodePort)
}

// addrOf parses a status IP; an empty result means none.
func addrOf(s string) string {
	a, err := netip.ParseAddr(s)
	if err != nil {
		return ""
	}
	return a.String()
}
