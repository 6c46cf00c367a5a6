package snapshot

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"testing"
	"time"

	pb "github.com/teapot-lb/teapot-lb/api/proto/teapotv1"
)

// An https listener's client validation compiles into its TLS: the CA
// pool of the bundle, the mode and the canonical header name; a route's
// CORS filter into its filters, with maxAge defaulted.
func TestCompileClientValidationAndCORS(t *testing.T) {
	t.Parallel()
	priv, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(7), Subject: pkix.Name{CommonName: "clients"}, IsCA: true, BasicConstraintsValid: true,
		NotBefore: time.Now(), NotAfter: time.Now().Add(time.Hour)}
	der, _ := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &priv.PublicKey, priv)
	ca, _ := x509.ParseCertificate(der)
	bundle := string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}))
	lb := tcpLB("web", "192.0.2.1", 5432, "10.20.0.1:5432")
	lb.Listeners = append(lb.Listeners,
		&pb.Listener{Port: 443, Protocol: "https", Tls: &pb.TLSPolicy{Acme: true, ClientValidation: &pb.ClientValidation{CaBundle: bundle, SubjectHeader: "x-client-subject"}}},
		&pb.Listener{Port: 8443, Protocol: "https", Tls: &pb.TLSPolicy{Acme: true, ClientValidation: &pb.ClientValidation{CaBundle: bundle, Mode: "optional"}}})
	lb.Routes = []*pb.Route{{Host: "shop.acme.example", Path: "/", Pool: "app", Filters: []*pb.RouteFilter{{Cors: &pb.CORS{AllowOrigins: []string{"*"}}}}}}
	s := Compile(objs(lb), 1, Defaults{}, nil)
	req, opt := s.Listener(key("192.0.2.1:443", TCP)), s.Listener(key("192.0.2.1:8443", TCP))
	if req == nil || opt == nil {
		t.Fatalf("not compiled; problems %v", s.Problems)
	}
	c := req.TLS.Client
	if c == nil || !c.Required || c.SubjectHeader != "X-Client-Subject" || c.Bundle != bundle || !c.CAs.Equal(poolOf(ca)) {
		t.Errorf("443: %+v", c)
	}
	if c := opt.TLS.Client; c == nil || c.Required || c.SubjectHeader != "" {
		t.Errorf("8443: %+v", c)
	}
	rs := req.Routes.Routes()
	if len(rs) != 1 || rs[0].Ext == nil || rs[0].Ext.Filters == nil || rs[0].Ext.Filters.CORS == nil || rs[0].Ext.Filters.CORS.MaxAge != 5 {
		t.Fatalf("routes %+v", rs)
	}
}

func poolOf(c *x509.Certificate) *x509.CertPool {
	p := x509.NewCertPool()
	p.AddCert(c)
	return p
}
