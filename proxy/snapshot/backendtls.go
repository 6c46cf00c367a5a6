package snapshot

import (
	"crypto/x509"
	"slices"
	"strings"

	"github.com/teapot-lb/teapot-lb/api"
	pb "github.com/teapot-lb/teapot-lb/api/proto/teapotv1"
)

// BackendTLS is how a pool verifies its TLS members (BackendPool.tls).
type BackendTLS struct {
	// CAPEM is the CA bundle as written; Roots its certificates (nil
	// with SystemRoots: the host's roots).
	CAPEM       string
	Roots       *x509.CertPool
	SystemRoots bool
	ServerName  string
	// DNSNames and URIs are the accepted subject alternative names.
	DNSNames, URIs []string
	// ClientCertificate names the tenant's uploaded certificate presented
	// to members that ask for one ("": none).
	ClientCertificate string
	// Refused, when set, says why the pool's tls did not compile: every
	// dial to its members fails verification, so that a broken setting
	// never dials unverified.
	Refused string
}

// Equal reports whether a and b verify members alike.
func (a *BackendTLS) Equal(b *BackendTLS) bool {
	if a == nil || b == nil {
		return a == b
	}
	return a.CAPEM == b.CAPEM && a.SystemRoots == b.SystemRoots && a.ServerName == b.ServerName &&
		slices.Equal(a.DNSNames, b.DNSNames) && slices.Equal(a.URIs, b.URIs) && a.Refused == b.Refused &&
		a.ClientCertificate == b.ClientCertificate
}

// backendTLS compiles a pool's tls (nil: none). A setting the API edge
// would refuse is reported and compiles to a refusing BackendTLS.
func (b *lbCompile) backendTLS(f string, errs []api.FieldError, t *pb.BackendTLS) *BackendTLS {
	if t == nil {
		return nil
	}
	for _, e := range errs {
		if strings.HasPrefix(e.Field, ".tls") {
			return &BackendTLS{Refused: "pool " + f + ": " + e.Field[1:] + ": " + e.Reason}
		}
	}
	out := &BackendTLS{CAPEM: t.GetCaPem(), SystemRoots: t.GetSystemRoots(), ServerName: t.GetServerName(), ClientCertificate: t.GetClientCertificate()}
	if out.CAPEM != "" {
		out.Roots = x509.NewCertPool()
		if !out.Roots.AppendCertsFromPEM([]byte(out.CAPEM)) {
			return &BackendTLS{Refused: "pool " + f + ": tls.caPem holds no certificate"}
		}
	}
	for _, s := range t.GetSubjectAltNames() {
		if h := s.GetHostname(); h != "" {
			out.DNSNames = append(out.DNSNames, h)
		} else if u := s.GetUri(); u != "" {
			out.URIs = append(out.URIs, u)
		}
	}
	return out
}
