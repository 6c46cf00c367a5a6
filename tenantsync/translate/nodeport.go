package translate

import (
	"crypto/sha256"
	"encoding/hex"
	"maps"
	"slices"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// The NodePort Services the agent creates: an Ingress backend that is a
// ClusterIP Service has no port on the nodes for the LB hosts to reach,
// so (outside pod mode) the agent creates a Service of type NodePort with
// the same selector and ports, named NodePortName, labelled
// LabelManagedBy=ManagedByAgent and LabelNodePortFor=<the Service>, and
// owned by the ClusterIP Service (the garbage collector removes it with
// it). The agent deletes it when no Ingress uses the Service any more.
const (
	LabelManagedBy   = "app.kubernetes.io/managed-by"
	ManagedByAgent   = "teapot-lb-agent"
	LabelNodePortFor = "teapot-lb.io/nodeport-for"
)

// NodePortName names the NodePort Service the agent creates for the
// ClusterIP Service svc: svc + "-teapot-np", or a hashed form when that is
// longer than a DNS label.
func NodePortName(svc string) string { return agentServiceName(svc, "-teapot-np") }

// agentServiceName is name + suffix, or, when that is longer than a DNS
// label, name cut short with a hash of it before suffix.
func agentServiceName(name, suffix string) string {
	if len(name)+len(suffix) <= 63 {
		return name + suffix
	}
	sum := sha256.Sum256([]byte(name))
	return name[:63-len(suffix)-9] + "-" + hex.EncodeToString(sum[:4]) + suffix
}

// IsNodePortFor reports whether s is the agent's NodePort Service for the
// Service named svc.
func IsNodePortFor(s *corev1.Service, svc string) bool {
	return s.Labels[LabelManagedBy] == ManagedByAgent && s.Labels[LabelNodePortFor] == svc && s.Spec.Type == corev1.ServiceTypeNodePort
}

// needsNodePort reports whether an Ingress backend on svc needs the
// agent's NodePort Service: a ClusterIP Service with a selector (a
// headless Service or one without a selector has nothing a NodePort
// Service could forward to).
func needsNodePort(svc *corev1.Service) bool {
	return svc.Spec.Type == corev1.ServiceTypeClusterIP && svc.Spec.ClusterIP != corev1.ClusterIPNone && len(svc.Spec.Selector) > 0
}

// NodePortService is the NodePort Service for the ClusterIP Service svc;
// the node ports of current (the one that exists, or nil) are kept.
func NodePortService(svc, current *corev1.Service) *corev1.Service {
	kept := map[string]int32{}
	if current != nil {
		for _, p := range current.Spec.Ports {
			kept[p.Name+"/"+string(p.Protocol)] = p.NodePort
		}
	}
	out := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: svc.Namespace,
			Name:      NodePortName(svc.Name),
			Labels:    map[string]string{LabelManagedBy: ManagedByAgent, LabelNodePortFor: svc.Name},
			OwnerReferences: []metav1.OwnerReference{{
				APIVersion: "v1", Kind: "Service", Name: svc.Name, UID: svc.UID,
			}},
		},
		Spec: corev1.ServiceSpec{
			Type:     corev1.ServiceTypeNodePort,
			Selector: maps.Clone(svc.Spec.Selector),
		},
	}
	for _, p := range svc.Spec.Ports {
		out.Spec.Ports = append(out.Spec.Ports, corev1.ServicePort{
			Name: p.Name, Protocol: p.Protocol, Port: p.Port, TargetPort: p.TargetPort,
			NodePort: kept[p.Name+"/"+string(p.Protocol)],
		})
	}
	return out
}

// NodePortServiceChanged reports whether current differs from want in
// what the agent sets (labels, owner, selector, ports; not node ports the
// API server chose).
func NodePortServiceChanged(current, want *corev1.Service) bool {
	if current.Spec.Type != want.Spec.Type || !maps.Equal(current.Spec.Selector, want.Spec.Selector) ||
		!IsNodePortFor(current, want.Labels[LabelNodePortFor]) {
		return true
	}
	if !slices.EqualFunc(current.OwnerReferences, want.OwnerReferences, func(a, b metav1.OwnerReference) bool {
		return a.Kind == b.Kind && a.Name == b.Name && a.UID == b.UID
	}) {
		return true
	}
	return !slices.EqualFunc(current.Spec.Ports, want.Spec.Ports, func(a, b corev1.ServicePort) bool {
		return a.Name == b.Name && a.Protocol == b.Protocol && a.Port == b.Port && a.TargetPort == b.TargetPort &&
			(b.NodePort == 0 || a.NodePort == b.NodePort)
	})
}
