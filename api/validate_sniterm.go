package api

import (
	pb "github.com/teapot-lb/teapot-lb/api/proto/teapotv1"
)

// terminates reports whether a server-name route of l terminates TLS.
func terminates(l *pb.Listener) bool {
	for _, r := range l.GetSniRoutes() {
		if r.GetTerminate() {
			return true
		}
	}
	return false
}

// checkTerminateTLS checks the TLS of a tls-passthrough listener whose
// server-name routes terminate: uploaded certificates, no ACME (its
// names are not issued for tls-passthrough listeners), a known minimum
// version.
func checkTerminateTLS(ck *checker, f string, l *pb.Listener) {
	tls := l.GetTls()
	if tls.GetAcme() {
		ck.invalidf(f+".tls.acme", "ACME is not offered on tls-passthrough listeners; upload a certificate and name it in tls.certificates")
	}
	if len(tls.GetCertificates()) == 0 {
		ck.invalidf(f+".tls.certificates", "sniRoutes with terminate: true need a certificate: upload one and name it here")
	}
	if tls.GetClientValidation() != nil {
		ck.invalidf(f+".tls.clientValidation", "client certificates are checked on https listeners only; remove it, or serve these names on an https listener")
	}
	if len(tls.GetSniScopes()) > 0 {
		ck.invalidf(f+".tls.sniScopes", "requests are checked against the server name on https listeners only; remove it")
	}
	switch tls.GetMinVersion() {
	case "", "tls1.2", "tls1.3":
	default:
		ck.invalidf(f+".tls.minVersion", "%q is not one of tls1.2, tls1.3", tls.GetMinVersion())
	}
}
