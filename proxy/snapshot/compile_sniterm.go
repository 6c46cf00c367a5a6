package snapshot

import (
	"crypto/tls"

	pb "github.com/teapot-lb/teapot-lb/api/proto/teapotv1"
)

// terminateTLS is the TLS policy of a tls-passthrough listener whose
// server-name routes terminate (nil when none does): its uploaded
// certificates and minimum version.
func terminateTLS(l *pb.Listener) *TLS {
	term := false
	for _, r := range l.GetSniRoutes() {
		term = term || r.GetTerminate()
	}
	if !term {
		return nil
	}
	out := &TLS{Certificates: l.GetTls().GetCertificates(), MinVersion: tls.VersionTLS12}
	if l.GetTls().GetMinVersion() == "tls1.3" {
		out.MinVersion = tls.VersionTLS13
	}
	return out
}
