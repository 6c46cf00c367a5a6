package api

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	pb "github.com/teapot-lb/teapot-lb/api/proto/teapotv1"
)

// selfSigned returns a self-signed certificate and its key as PEM.
func selfSigned(t *testing.T, cn string) (certPEM, keyPEM string) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: cn},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), IsCA: true, BasicConstraintsValid: true}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	kder, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	return string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})),
		string(pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: kder}))
}

func TestValidateHTTPSHealthCheck(t *testing.T) {
	ca, caKey := selfSigned(t, "cluster CA")
	cert, key := selfSigned(t, "teapot-lb-health")
	_, otherKey := selfSigned(t, "other")
	https := func(mut func(h *pb.HTTPSCheck)) func(lb *pb.LoadBalancer) {
		return func(lb *pb.LoadBalancer) {
			h := &pb.HTTPSCheck{Path: "/readyz", CaPem: ca}
			mut(h)
			lb.Pools["web"].HealthCheck = &pb.HealthCheck{Https: h}
		}
	}
	f := "pools.web.healthCheck.https"
	tests := []struct {
		name string
		mut  func(lb *pb.LoadBalancer)
		want expect
	}{
		{"verified by a CA", https(func(h *pb.HTTPSCheck) {}), pass()},
		{"with SNI, host, status and client certificate", https(func(h *pb.HTTPSCheck) {
			h.ServerName, h.Host, h.ExpectStatus = "kubernetes.default.svc", "api.acme.example", 200
			h.ClientCertPem, h.ClientKeyPem = cert, key
		}), pass()},
		{"SNI as an IP address", https(func(h *pb.HTTPSCheck) { h.ServerName = "10.20.0.11" }), pass()},
		{"insecure on purpose", https(func(h *pb.HTTPSCheck) { h.CaPem, h.InsecureSkipVerify = "", true }), pass()},
		{"neither CA nor insecure", https(func(h *pb.HTTPSCheck) { h.CaPem = "" }), bad(f+".caPem", "or set insecureSkipVerify: true")},
		{"CA and insecure", https(func(h *pb.HTTPSCheck) { h.InsecureSkipVerify = true }), bad(f+".insecureSkipVerify", "together with caPem")},
		{"CA not PEM", https(func(h *pb.HTTPSCheck) { h.CaPem = "hello" }), bad(f+".caPem", "holds no PEM certificate")},
		{"CA holds a key", https(func(h *pb.HTTPSCheck) { h.CaPem = ca + caKey }), bad(f+".caPem", "type PRIVATE KEY")},
		{"CA with trailing junk", https(func(h *pb.HTTPSCheck) { h.CaPem = ca + "junk" }), bad(f+".caPem", "not PEM")},
		{"CA too big", https(func(h *pb.HTTPSCheck) { h.CaPem = strings.Repeat(ca, MaxCheckCAPEMLen/len(ca)+1) }),
			bad(f+".caPem", "at most 65536")},
		{"client certificate without key", https(func(h *pb.HTTPSCheck) { h.ClientCertPem = cert }), bad(f+".clientKeyPem", "give the certificate's private key")},
		{"client key without certificate", https(func(h *pb.HTTPSCheck) { h.ClientKeyPem = key }), bad(f+".clientCertPem", "give the client certificate too")},
		{"client key of another certificate", https(func(h *pb.HTTPSCheck) { h.ClientCertPem, h.ClientKeyPem = cert, otherKey }),
			bad(f+".clientCertPem", "not a PEM certificate with its private key")},
		{"client key too big", https(func(h *pb.HTTPSCheck) {
			h.ClientCertPem, h.ClientKeyPem = cert, strings.Repeat("k", MaxCheckClientKeyPEMLen+1)
		}),
			bad(f+".clientKeyPem", "at most 8192")},
		{"client certificate too big", https(func(h *pb.HTTPSCheck) {
			h.ClientCertPem, h.ClientKeyPem = strings.Repeat("c", MaxCheckClientCertPEMLen+1), key
		}), bad(f+".clientCertPem", "at most 16384")},
		{"path without slash", https(func(h *pb.HTTPSCheck) { h.Path = "readyz" }), bad(f+".path", "must start with /")},
		{"status out of range", https(func(h *pb.HTTPSCheck) { h.ExpectStatus = 600 }), bad(f+".expectStatus", "got 600")},
		{"SNI not a name", https(func(h *pb.HTTPSCheck) { h.ServerName = "bad name" }), bad(f+".serverName", "is not a DNS name")},
		{"https and http", func(lb *pb.LoadBalancer) {
			lb.Pools["web"].HealthCheck.Https = &pb.HTTPSCheck{CaPem: ca}
		}, bad("pools.web.healthCheck", "one of tcp, http or https")},
	}
	c := baseCatalog()
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			lb := shopLB()
			tt.mut(lb)
			check(t, ValidateLoadBalancer(lb, c), tt.want)
		})
	}
}

func TestRedactSecretsRemovesClientKeys(t *testing.T) {
	cert, key := selfSigned(t, "teapot-lb-health")
	lb := shopLB()
	lb.Pools["web"].HealthCheck = &pb.HealthCheck{Https: &pb.HTTPSCheck{InsecureSkipVerify: true, ClientCertPem: cert, ClientKeyPem: key}}
	stored := Wrap(lb)
	before := proto.Clone(stored)

	shown := RedactSecrets(stored)
	h := shown.GetLoadBalancer().GetPools()["web"].GetHealthCheck().GetHttps()
	if h.GetClientKeyPem() != "" {
		t.Fatal("the client key is shown")
	}
	if h.GetClientCertPem() != cert || !h.GetInsecureSkipVerify() {
		t.Errorf("redaction dropped more than the key: %v", h)
	}
	if !proto.Equal(stored, before) {
		t.Error("redaction changed the stored object")
	}
	if RedactLoadBalancer(lb).GetPools()["web"].GetHealthCheck().GetHttps().GetClientKeyPem() != "" {
		t.Error("RedactLoadBalancer shows the client key")
	}

	plain := Wrap(shopLB())
	if RedactSecrets(plain) != plain {
		t.Error("an object without secrets is copied")
	}
}
