package api

import (
	"fmt"
	"net/url"
	"strconv"
	"strings"

	pb "github.com/teapot-lb/teapot-lb/api/proto/teapotv1"
)

// Bounds of a pool's backend TLS (BackendPool.tls).
const (
	// MaxBackendCAPEMLen bounds tls.caPem, as an HTTPS check's caPem;
	// MaxCheckCACerts bounds its certificates.
	MaxBackendCAPEMLen = MaxCheckCAPEMLen
	// MaxBackendSANs bounds tls.subjectAltNames (the Gateway API allows
	// 5 per BackendTLSPolicy).
	MaxBackendSANs = 16
	// MaxSANURILen bounds one subjectAltNames[].uri.
	MaxSANURILen = 2048
)

// checkBackendTLS checks a pool's tls: it needs a TLS backendProtocol,
// exactly one source of CAs, a server name, and well-formed, bounded
// subject alternative names.
func checkBackendTLS(ck *checker, f string, bp *pb.BackendPool) {
	t := bp.GetTls()
	if t == nil {
		return
	}
	f += ".tls"
	switch bp.GetBackendProtocol() {
	case "tls", "h2":
	default:
		ck.invalidf(f, "verifies members that speak TLS, and backendProtocol is %q; set backendProtocol: tls (or h2), or remove tls", cmpOr(bp.GetBackendProtocol(), "http1"))
	}
	ca := t.GetCaPem()
	switch {
	case tooLong(ck, f+".caPem", ca, MaxBackendCAPEMLen):
	case ca != "" && t.GetSystemRoots():
		ck.invalidf(f+".systemRoots", "is set together with caPem; keep one: caPem to trust your own CAs, systemRoots to trust the LB host's system roots")
	case ca == "" && !t.GetSystemRoots():
		ck.invalidf(f+".caPem", "is empty; give the PEM CA bundle that signed the members' certificates, or set systemRoots: true")
	case ca != "":
		if why := CAPEMProblem(ca); why != "" {
			ck.invalidf(f+".caPem", "%s", why)
		}
	}
	if sn := t.GetServerName(); sn == "" {
		ck.invalidf(f+".serverName", "is empty; give the DNS name sent to the members (SNI) and verified in their certificates")
	} else if why := DNSNameProblem(sn); why != "" {
		ck.invalidf(f+".serverName", "%s", why)
	}
	sans := t.GetSubjectAltNames()
	if tooMany(ck, f+".subjectAltNames", len(sans), MaxBackendSANs) {
		return
	}
	for i, s := range sans {
		sf := f + ".subjectAltNames[" + strconv.Itoa(i) + "]"
		h, u := s.GetHostname(), s.GetUri()
		switch {
		case h != "" && u != "":
			ck.invalidf(sf, "sets both hostname and uri; give one per entry")
		case h == "" && u == "":
			ck.invalidf(sf, "is empty; give a hostname or a uri")
		case h != "":
			if why := DNSNameProblem(strings.TrimPrefix(h, "*.")); why != "" {
				ck.invalidf(sf+".hostname", "%s", why)
			}
		default:
			if tooLong(ck, sf+".uri", u, MaxSANURILen) {
				continue
			}
			if p, err := url.Parse(u); err != nil || p.Scheme == "" || !p.IsAbs() {
				ck.invalidf(sf+".uri", "%s is not an absolute URI like spiffe://acme.example/web", Excerpt(u))
			}
		}
	}
}

func cmpOr(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

// checkBackendClientCert checks that a pool's tls.clientCertificate names
// a certificate of the tenant.
func checkBackendClientCert(ck *checker, f string, bp *pb.BackendPool, tenant string, c Catalog) {
	name := bp.GetTls().GetClientCertificate()
	if name == "" {
		return
	}
	f += ".tls.clientCertificate"
	if !IsLabel(name) {
		ck.invalidf(f, "%s is not a certificate name: %s", Excerpt(name), nameRule)
		return
	}
	if certs, ok := c.(CertificateCatalog); ok && certs.Certificate(tenant, name) == nil {
		ck.invalidf(f, "certificate %s/%s does not exist; upload it first", tenant, name)
	}
}

// checkBackendTLSUse refuses a pool's tls when a listener that forwards
// bytes as they come (tcp, udp, tls-passthrough, its sniRoutes) uses the
// pool: the load balancer speaks no TLS of its own there, so the tls would
// verify nothing.
func checkBackendTLSUse(ck *checker, f string, lb *pb.LoadBalancer, pool string) {
	if lb.GetPools()[pool].GetTls() == nil {
		return
	}
	for i, l := range lb.GetListeners() {
		switch l.GetProtocol() {
		case "tcp", "udp", "tls-passthrough":
		default:
			continue
		}
		use := ""
		if l.GetPool() == pool {
			use = fmt.Sprintf("listeners[%d]", i)
		}
		for j, r := range l.GetSniRoutes() {
			if use == "" && r.GetPool() == pool {
				use = fmt.Sprintf("listeners[%d].sniRoutes[%d]", i, j)
			}
		}
		if use != "" {
			ck.invalidf(f+".tls", "%s (%s) forwards bytes to this pool as they come and speaks no TLS to its members, so tls would verify nothing; give that listener a pool without tls", use, l.GetProtocol())
			return
		}
	}
}
