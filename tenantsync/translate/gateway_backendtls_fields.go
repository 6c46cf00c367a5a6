package translate

import (
	"fmt"

	"github.com/teapot-lb/teapot-lb/api"
)

var backendTLSPolicyFields = []Field{
	{"spec.targetRefs", Honoured, "the Services (core group) whose pools verify their members, for HTTPRoutes and GRPCRoutes; a TCPRoute or TLSRoute to the Service is forwarded as it comes, without the policy, and a warning says so; other kinds are not targets", false},
	{"spec.targetRefs[].group", Honoured, "only the core group (\"\")", false},
	{"spec.targetRefs[].kind", Honoured, "only Service", false},
	{"spec.targetRefs[].name", Honoured, "the Service", false},
	{"spec.targetRefs[].sectionName", Honoured, "the Service port (by name) the policy covers; a port's policy wins over the whole Service's; of two on one target, the oldest (then first by name) wins and the other is Conflicted", false},
	{"spec.validation", Honoured, "the pool's tls: backendProtocol tls (h2 for gRPC backends)", false},
	{"spec.validation.caCertificateRefs", HonouredInPart, fmt.Sprintf("ConfigMaps of the policy's namespace (their ca.crt, %d bytes together at most); another kind is InvalidKind, a missing or malformed one InvalidCACertificateRef; with none usable the policy is not accepted (NoValidCACertificate) and the Service's pool has no members (5xx)", api.MaxBackendCAPEMLen), true},
	{"spec.validation.wellKnownCACertificates", HonouredInPart, "System: the LB hosts' system roots; other values are InvalidCACertificateRef", false},
	{"spec.validation.hostname", Honoured, "the server name sent to the members (SNI), verified in their certificates when subjectAltNames is empty", false},
	{"spec.validation.subjectAltNames", Honoured, "the certificate must hold one of them (Hostname or URI) instead of the hostname", true},
	{"spec.options", Refused, "no option is supported: a policy with options is not accepted (Invalid)", false},
}
