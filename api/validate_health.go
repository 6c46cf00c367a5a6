package api

import (
	"crypto"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"net/netip"
	"strings"

	"google.golang.org/protobuf/proto"

	pb "github.com/teapot-lb/teapot-lb/api/proto/teapotv1"
)

// Bounds of an HTTPS health check's PEM fields: a CA bundle of a few
// certificates, a client certificate chain and its key.
const (
	MaxCheckCAPEMLen         = 64 << 10
	MaxCheckClientCertPEMLen = 16 << 10
	MaxCheckClientKeyPEMLen  = 8 << 10
	// MaxCheckCACerts bounds the certificates of an HTTPS check's CA
	// bundle.
	MaxCheckCACerts = 32
	// MaxCheckClientRSABits bounds an RSA client key: every check signs
	// with it (see MaxRSAKeyBits, the one bound of every key the hosts
	// sign with).
	MaxCheckClientRSABits = MaxRSAKeyBits
	// MaxRiseFall bounds a health check's rise and fall counts.
	MaxRiseFall = 100
)

// CheckHealthCheck checks the health check at field
// ("pools.web.healthCheck") as validation does, but for what the PEM
// fields hold (certificates and keys are parsed when the object is
// written, not again each time it is compiled). It returns the rules
// broken, with the field paths of the manifest.
func CheckHealthCheck(field string, hc *pb.HealthCheck) []FieldError {
	var ck checker
	checkHealthCheck(&ck, field, hc, false)
	return ck.errs
}

// checkHealthCheck checks a health check; pem: what its PEM fields hold
// too.
func checkHealthCheck(ck *checker, f string, hc *pb.HealthCheck, pem bool) {
	if hc == nil {
		return
	}
	kinds := 0
	for _, set := range []bool{hc.GetTcp() != nil, hc.GetHttp() != nil, hc.GetHttps() != nil} {
		if set {
			kinds++
		}
	}
	if kinds > 1 {
		ck.invalidf(f, "set one of tcp, http or https, not several")
	}
	if h := hc.GetHttp(); h != nil {
		checkHTTPRequest(ck, f+".http", h.GetPath(), h.GetExpectStatus(), h.GetHost())
	}
	if h := hc.GetHttps(); h != nil {
		checkHTTPSCheck(ck, f+".https", h, pem)
	}
	checkPositive(ck, f+".interval", hc.GetInterval())
	checkPositive(ck, f+".timeout", hc.GetTimeout())
	iv := DefaultHealthInterval
	if d := hc.GetInterval(); d != nil && d.CheckValid() == nil && d.AsDuration() > 0 {
		iv = d.AsDuration()
		switch {
		case iv < MinHealthInterval:
			ck.invalidf(f+".interval", "%s is shorter than %s; checks run at most once a second per member", iv, MinHealthInterval)
		case iv > MaxHealthInterval:
			ck.invalidf(f+".interval", "%s is longer than %s", iv, MaxHealthInterval)
		}
	}
	if d := hc.GetTimeout(); d != nil && d.CheckValid() == nil && d.AsDuration() > 0 {
		to := d.AsDuration()
		switch {
		case to > MaxHealthTimeout:
			ck.invalidf(f+".timeout", "%s is longer than %s; a check that takes longer counts as failed", to, MaxHealthTimeout)
		case to > iv && hc.GetInterval() != nil:
			ck.invalidf(f+".timeout", "%s is longer than interval %s; make it shorter than the interval", to, iv)
		case to == iv && hc.GetInterval() != nil:
			ck.invalidf(f+".timeout", "%s equals the interval; make it shorter than the interval", to)
		case to >= iv:
			ck.invalidf(f+".timeout", "%s is not shorter than the default interval %s; make it shorter or set interval", to, iv)
		}
	}
	if hc.GetRise() > MaxRiseFall {
		ck.invalidf(f+".rise", "must be at most %d, got %d", MaxRiseFall, hc.GetRise())
	}
	if hc.GetFall() > MaxRiseFall {
		ck.invalidf(f+".fall", "must be at most %d, got %d", MaxRiseFall, hc.GetFall())
	}
	if hc.GetPort() > 65535 {
		ck.invalidf(f+".port", "must be between 0 (the member's port) and 65535, got %d", hc.GetPort())
	}
}

// checkHTTPRequest checks the request of an http or https check.
func checkHTTPRequest(ck *checker, f, path string, status uint32, host string) {
	switch {
	case tooLong(ck, f+".path", path, MaxPathLen):
	case path != "" && !strings.HasPrefix(path, "/"):
		ck.invalidf(f+".path", "%q must start with /", path)
	case strings.ContainsAny(path, " \t\r\n"):
		ck.invalidf(f+".path", "%q must not contain spaces", path)
	}
	if status != 0 && (status < 100 || status > 599) {
		ck.invalidf(f+".expectStatus", "must be an HTTP status from 100 to 599, got %d", status)
	}
	checkHostOrIP(ck, f+".host", host)
}

// checkHostOrIP accepts "", an IP address or a DNS name.
func checkHostOrIP(ck *checker, f, host string) {
	if host == "" {
		return
	}
	if _, err := netip.ParseAddr(host); err == nil {
		return
	}
	if why := DNSNameProblem(host); why != "" {
		ck.invalidf(f, "%s", why)
	}
}

func checkHTTPSCheck(ck *checker, f string, h *pb.HTTPSCheck, pem bool) {
	checkHTTPRequest(ck, f, h.GetPath(), h.GetExpectStatus(), h.GetHost())
	checkHostOrIP(ck, f+".serverName", h.GetServerName())
	ca := h.GetCaPem()
	switch {
	case tooLong(ck, f+".caPem", ca, MaxCheckCAPEMLen):
	case ca != "" && h.GetInsecureSkipVerify():
		ck.invalidf(f+".insecureSkipVerify", "is set together with caPem, which it would ignore; keep caPem to verify the members, or remove it to accept any certificate")
	case ca == "" && !h.GetInsecureSkipVerify():
		ck.invalidf(f+".caPem", "is empty; give the PEM CA bundle that signed the members' certificates, or set insecureSkipVerify: true to accept any certificate (the check then proves only that TLS and HTTP answer)")
	case ca != "" && pem:
		if why := CAPEMProblem(ca); why != "" {
			ck.invalidf(f+".caPem", "%s", why)
		}
	}
	cert, key := h.GetClientCertPem(), h.GetClientKeyPem()
	longCert := tooLong(ck, f+".clientCertPem", cert, MaxCheckClientCertPEMLen)
	longKey := tooLong(ck, f+".clientKeyPem", key, MaxCheckClientKeyPEMLen)
	switch {
	case longCert || longKey:
	case cert != "" && key == "":
		ck.invalidf(f+".clientKeyPem", "is empty but clientCertPem is set, and the load balancer stores no key for this certificate; give the certificate's private key (once stored, it is kept while clientCertPem stays the same)")
	case cert == "" && key != "":
		ck.invalidf(f+".clientCertPem", "is empty but clientKeyPem is set; give the client certificate too, or remove the key")
	case cert != "" && pem:
		// The certificate's key is checked before the private key is
		// parsed or used: a tenant's check must not cost the hosts more
		// than a usual key does.
		if why := clientCertKeyProblem(cert); why != "" {
			ck.invalidf(f+".clientCertPem", "%s", why)
			return
		}
		pair, err := tls.X509KeyPair([]byte(cert), []byte(key))
		if err != nil {
			ck.invalidf(f+".clientCertPem", "and clientKeyPem are not a PEM certificate with its private key: %v", err)
			return
		}
		if why := KeyProblem(publicOf(pair.PrivateKey)); why != "" {
			ck.invalidf(f+".clientKeyPem", "%s", why)
		}
	}
}

// clientCertKeyProblem says what is wrong with the key of the first
// certificate of a PEM chain, or "".
func clientCertKeyProblem(s string) string {
	rest := []byte(s)
	for {
		var b *pem.Block
		b, rest = pem.Decode(rest)
		if b == nil {
			return "holds no PEM certificate; give the client certificate as PEM (-----BEGIN CERTIFICATE-----), leaf first"
		}
		if b.Type != "CERTIFICATE" {
			continue
		}
		c, err := x509.ParseCertificate(b.Bytes)
		if err != nil {
			return "first certificate does not parse: " + err.Error()
		}
		return KeyProblem(c.PublicKey)
	}
}

// publicOf is the public half of a parsed private key (nil for a type
// no check signs with).
func publicOf(k any) any {
	if s, ok := k.(interface{ Public() crypto.PublicKey }); ok {
		return s.Public()
	}
	return nil
}

// RedactSecrets returns o without the secrets it may hold (the private
// keys of health checks' client certificates), for every answer that
// shows a stored object. o itself is not changed; an object without
// secrets is returned as is.
func RedactSecrets(o *pb.Object) *pb.Object {
	lb := o.GetLoadBalancer()
	if !hasSecrets(lb) {
		return o
	}
	c := proto.Clone(o).(*pb.Object)
	for _, bp := range c.GetLoadBalancer().GetPools() {
		if h := bp.GetHealthCheck().GetHttps(); h != nil && h.GetClientKeyPem() != "" {
			h.ClientKeyPem = ""
		}
	}
	return c
}

// RedactLoadBalancer is RedactSecrets for a load balancer.
func RedactLoadBalancer(lb *pb.LoadBalancer) *pb.LoadBalancer {
	if !hasSecrets(lb) {
		return lb
	}
	return RedactSecrets(Wrap(lb)).GetLoadBalancer()
}

func hasSecrets(lb *pb.LoadBalancer) bool {
	for _, bp := range lb.GetPools() {
		if bp.GetHealthCheck().GetHttps().GetClientKeyPem() != "" {
			return true
		}
	}
	return false
}
