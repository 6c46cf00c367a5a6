package tenantsync

import (
	"crypto/sha256"
	"encoding/hex"
	"strings"

	"google.golang.org/protobuf/proto"

	"github.com/teapot-lb/teapot-lb/api"
	pb "github.com/teapot-lb/teapot-lb/api/proto/teapotv1"
)

// Prefixes of the load balancer names the agent derives. The stream
// manages only load balancers named so; the operator's own load balancers
// of the same tenant are out of its reach.
const (
	ServicePrefix = api.AgentServicePrefix
	IngressPrefix = api.AgentIngressPrefix
	GatewayPrefix = api.AgentGatewayPrefix
	// CertificatePrefix starts the names of the certificates the agent
	// uploads from Secrets.
	CertificatePrefix = "k8s-"
)

// maxName is the longest load balancer name (a DNS label).
const maxName = 63

// Managed reports whether a load balancer name is one the agent derives.
func Managed(name string) bool {
	return strings.HasPrefix(name, ServicePrefix) || strings.HasPrefix(name, IngressPrefix) || strings.HasPrefix(name, GatewayPrefix)
}

// ServiceName is the load balancer name of Service namespace/name.
func ServiceName(namespace, name string) string {
	return derive(ServicePrefix, "Service", namespace, name)
}

// IngressName is the load balancer name of Ingress namespace/name.
func IngressName(namespace, name string) string {
	return derive(IngressPrefix, "Ingress", namespace, name)
}

// GatewayName is the load balancer name of Gateway namespace/name.
func GatewayName(namespace, name string) string {
	return derive(GatewayPrefix, "Gateway", namespace, name)
}

// SecretCertificateName is the name of the tenant certificate the agent
// uploads from kubernetes.io/tls Secret namespace/name.
func SecretCertificateName(namespace, name string) string {
	return derive(CertificatePrefix, "Secret", namespace, name)
}

// HashedName is the collision-free form of a derived name: the readable
// part cut short and a hash of the object's kind, namespace and name.
func HashedName(prefix, kind, namespace, name string) string {
	sum := sha256.Sum256([]byte(kind + "/" + namespace + "/" + name))
	suffix := "-" + hex.EncodeToString(sum[:4])
	readable := clean(prefix + namespace + "-" + name)
	if len(readable) > maxName-len(suffix) {
		readable = strings.TrimRight(readable[:maxName-len(suffix)], "-")
	}
	return readable + suffix
}

// derive returns prefix+namespace-name when that is a DNS label, and the
// hashed form when it is too long or had to be changed to become one.
// Kubernetes namespaces are DNS labels and Service names too; Ingress
// names may hold dots.
func derive(prefix, kind, namespace, name string) string {
	raw := prefix + namespace + "-" + name
	if len(raw) <= maxName && clean(raw) == raw {
		return raw
	}
	return HashedName(prefix, kind, namespace, name)
}

// clean lowercases s and replaces every character that may not appear in a
// DNS label by '-', folding runs of them.
func clean(s string) string {
	var b strings.Builder
	dash := false
	for _, r := range strings.ToLower(s) {
		if r >= 'a' && r <= 'z' || r >= '0' && r <= '9' {
			b.WriteRune(r)
			dash = false
			continue
		}
		if !dash {
			b.WriteByte('-')
			dash = true
		}
	}
	return strings.Trim(b.String(), "-")
}

// Version identifies a load balancer's spec: a hash of everything the
// agent sets, without the tenant (the cluster sets it), meta and status.
// The agent and the cluster compute it the same way, so a reconnecting
// agent sends only the load balancers whose version differs.
func Version(lb *pb.LoadBalancer) string {
	c := &pb.LoadBalancer{
		Name: lb.GetName(), Vip: lb.GetVip(), Listeners: lb.GetListeners(), Routes: lb.GetRoutes(), Pools: lb.GetPools(),
	}
	b, err := proto.MarshalOptions{Deterministic: true}.Marshal(c)
	if err != nil {
		return ""
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:8])
}
