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

	pb "github.com/teapot-lb/teapot-lb/api/proto/teapotv1"
)

func TestValidateCORSAndClientValidation(t *testing.T) {
	t.Parallel()
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "clients"}, IsCA: true, BasicConstraintsValid: true,
		NotBefore: time.Now(), NotAfter: time.Now().Add(time.Hour)}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	caPEM := string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}))
	cors := func(c *pb.CORS) func(lb *pb.LoadBalancer) {
		return func(lb *pb.LoadBalancer) { lb.Routes[0].Filters = []*pb.RouteFilter{{Cors: c}} }
	}
	cv := func(v *pb.ClientValidation) func(lb *pb.LoadBalancer) {
		return func(lb *pb.LoadBalancer) { lb.Listeners[0].Tls.ClientValidation = v }
	}
	many := func(n int, f func(i int) string) []string {
		out := make([]string, n)
		for i := range out {
			out[i] = f(i)
		}
		return out
	}
	tests := []struct {
		name string
		mut  func(lb *pb.LoadBalancer)
		want expect
	}{
		{"cors", cors(&pb.CORS{AllowOrigins: []string{"https://www.acme.example", "https://*.acme.example", "http://192.0.2.1:8080", "http://[2001:db8::1]"},
			AllowMethods: []string{"GET", "PUT"}, AllowHeaders: []string{"X-A"}, ExposeHeaders: []string{"X-B"}, MaxAge: 3600, AllowCredentials: true}), pass()},
		{"cors wildcards", cors(&pb.CORS{AllowOrigins: []string{"*"}, AllowMethods: []string{"*"}, AllowHeaders: []string{"*"}, ExposeHeaders: []string{"*"}}), pass()},
		{"cors twice", func(lb *pb.LoadBalancer) {
			lb.Routes[0].Filters = []*pb.RouteFilter{{Cors: &pb.CORS{}}, {Cors: &pb.CORS{}}}
		}, bad("routes[0].filters[1]", "a second cors")},
		{"origin without scheme", cors(&pb.CORS{AllowOrigins: []string{"www.acme.example"}}), bad("routes[0].filters[0].cors.allowOrigins[0]", "scheme://host")},
		{"origin ftp", cors(&pb.CORS{AllowOrigins: []string{"ftp://a.example"}}), bad("routes[0].filters[0].cors.allowOrigins[0]", "http or https")},
		{"origin with path", cors(&pb.CORS{AllowOrigins: []string{"https://a.example/x"}}), bad("routes[0].filters[0].cors.allowOrigins[0]", "DNS name")},
		{"origin port 0", cors(&pb.CORS{AllowOrigins: []string{"https://a.example:0"}}), bad("routes[0].filters[0].cors.allowOrigins[0]", "1 to 65535")},
		{"star with others", cors(&pb.CORS{AllowOrigins: []string{"*", "https://a.example"}}), bad("routes[0].filters[0].cors.allowOrigins[0]", "cannot be listed with others")},
		{"origins over the bound", cors(&pb.CORS{AllowOrigins: many(MaxCORSOrigins+1, func(i int) string { return "https://a" + strings.Repeat("b", i) + ".example" })}),
			bad("routes[0].filters[0].cors.allowOrigins", "at most 64")},
		{"origin too long", cors(&pb.CORS{AllowOrigins: []string{"https://" + strings.Repeat("a", 300)}}), bad("routes[0].filters[0].cors.allowOrigins[0]", "at most 253")},
		{"method unknown", cors(&pb.CORS{AllowMethods: []string{"BREW"}}), bad("routes[0].filters[0].cors.allowMethods[0]", "is not one of")},
		{"methods over the bound", cors(&pb.CORS{AllowMethods: append(append([]string{}, CORSMethods...), "GET")}), bad("routes[0].filters[0].cors.allowMethods", "at most 9")},
		{"header not a token", cors(&pb.CORS{AllowHeaders: []string{"X A"}}), bad("routes[0].filters[0].cors.allowHeaders[0]", "not a header name")},
		{"headers over the bound", cors(&pb.CORS{AllowHeaders: many(MaxCORSHeaders+1, func(i int) string { return "X-" + strings.Repeat("a", i+1) })}),
			bad("routes[0].filters[0].cors.allowHeaders", "at most 64")},
		{"expose star with credentials", cors(&pb.CORS{ExposeHeaders: []string{"*"}, AllowCredentials: true}), bad("routes[0].filters[0].cors.exposeHeaders[0]", "list the names")},
		{"max age over a day", cors(&pb.CORS{MaxAge: MaxCORSMaxAge + 1}), bad("routes[0].filters[0].cors.maxAge", "more than 86400")},

		{"client validation", cv(&pb.ClientValidation{CaBundle: caPEM, Mode: "optional", SubjectHeader: "X-Client-Subject"}), pass()},
		{"client validation without CAs", cv(&pb.ClientValidation{}), bad("listeners[0].tls.clientValidation.caBundle", "required")},
		{"client validation not PEM", cv(&pb.ClientValidation{CaBundle: "hello"}), bad("listeners[0].tls.clientValidation.caBundle", "holds no PEM certificate")},
		{"client validation a key", cv(&pb.ClientValidation{CaBundle: "-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n"}),
			bad("listeners[0].tls.clientValidation.caBundle", "only CERTIFICATE blocks")},
		{"client validation too big", cv(&pb.ClientValidation{CaBundle: strings.Repeat(caPEM, MaxCABundleBytes/len(caPEM)+1)}),
			bad("listeners[0].tls.clientValidation.caBundle", "at most 65536")},
		{"client validation too many", cv(&pb.ClientValidation{CaBundle: strings.Repeat(caPEM, MaxCABundleCerts+1)}),
			bad("listeners[0].tls.clientValidation.caBundle", "more than 64")},
		{"client validation mode", cv(&pb.ClientValidation{CaBundle: caPEM, Mode: "sometimes"}), bad("listeners[0].tls.clientValidation.mode", "not one of require, optional")},
		{"subject header forwarding", cv(&pb.ClientValidation{CaBundle: caPEM, SubjectHeader: "X-Forwarded-Client"}),
			bad("listeners[0].tls.clientValidation.subjectHeader", "forwarding header")},
		{"subject header host", cv(&pb.ClientValidation{CaBundle: caPEM, SubjectHeader: "Host"}), bad("listeners[0].tls.clientValidation.subjectHeader", "cannot be changed")},
		{"client validation on http", func(lb *pb.LoadBalancer) {
			lb.Listeners[1].Tls = &pb.TLSPolicy{ClientValidation: &pb.ClientValidation{CaBundle: caPEM}}
		}, bad("listeners[1].tls", "only https listeners")},
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
