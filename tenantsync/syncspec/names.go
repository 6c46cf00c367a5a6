package syncspec

import (
	"crypto/sha256"
	"encoding/binary"
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
// uploads from kubernetes.io/tls Secret namespace/name. The names of two
// different Secrets never meet: k8s-NAMESPACE-NAME is used only when the
// namespace holds no '-' (so the first '-' after the prefix ends it) and
// the whole is a DNS label; every other Secret gets UniqueName, which
// starts with "k8s--", a start no namespace can give.
func SecretCertificateName(namespace, name string) string {
	raw := CertificatePrefix + namespace + "-" + name
	if !strings.Contains(namespace, "-") && len(raw) <= maxName && clean(raw) == raw {
		return raw
	}
	return UniqueName(CertificatePrefix, "Secret", namespace, name)
}

// HashedName is the older hashed form of a derived name: the readable
// part cut short and 32 bits of a hash of the object's kind, namespace
// and name. It is the name of load balancers whose plain name is too long
// or not a DNS label, kept so that their names do not change; it is not
// unique on its own (a plain name may spell it, and 32 bits can be
// searched), so the agent's desired set gives a name to one object only
// and moves the others to UniqueName.
func HashedName(prefix, kind, namespace, name string) string {
	sum := sha256.Sum256([]byte(kind + "/" + namespace + "/" + name))
	suffix := "-" + hex.EncodeToString(sum[:4])
	readable := clean(prefix + namespace + "-" + name)
	if len(readable) > maxName-len(suffix) {
		readable = strings.TrimRight(readable[:maxName-len(suffix)], "-")
	}
	return readable + suffix
}

// UniqueName is a derived name that no other object's can be:
// prefix, '-', a readable part, '-' and 64 bits of SHA-256 over the
// kind, namespace and name (each length-prefixed). Plain names start with
// prefix and a namespace, which never starts with '-', so a unique name
// ("svc--…") is never a plain or HashedName one, and two unique names
// meet only if SHA-256 does.
func UniqueName(prefix, kind, namespace, name string) string {
	suffix := "-" + Hash64(kind, namespace, name)
	head := prefix + "-"
	readable := clean(namespace + "-" + name)
	if room := maxName - len(head) - len(suffix); len(readable) > room {
		readable = strings.TrimRight(readable[:room], "-")
	}
	if readable == "" {
		return strings.TrimSuffix(head, "-") + suffix
	}
	return head + readable + suffix
}

// Hash64 is 64 bits of SHA-256 over parts, each prefixed by its length,
// in 16 hex digits: two different lists of parts never give one input.
func Hash64(parts ...string) string {
	h := sha256.New()
	var n [4]byte
	for _, p := range parts {
		binary.BigEndian.PutUint32(n[:], uint32(len(p)))
		h.Write(n[:])
		h.Write([]byte(p))
	}
	return hex.EncodeToString(h.Sum(nil)[:8])
}

// Key is a map key (a pool of a load balancer) for a tuple of parts: a
// readable part and Hash64 of kind and parts. It ends in 16 hex digits,
// so it never reads as a NAME-PORT key (a port has at most 5 digits) or
// one ending in -h2c, and two keys meet only if SHA-256 does.
func Key(readable, kind string, parts ...string) string {
	suffix := "-" + Hash64(append([]string{kind}, parts...)...)
	readable = clean(readable)
	if room := maxName - len(suffix); len(readable) > room {
		readable = strings.TrimRight(readable[:room], "-")
	}
	if readable == "" {
		return suffix[1:]
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
