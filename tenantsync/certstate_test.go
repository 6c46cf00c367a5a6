package tenantsync

import (
	"fmt"
	"testing"

	pb "github.com/teapot-lb/teapot-lb/api/proto/teapotv1"
)

func TestCertificateStates(t *testing.T) {
	t.Parallel()
	certs := []*pb.Certificate{
		{Name: "wild", Hosts: []string{"*.acme.example"}, State: "valid", Issuer: "ca"},
		{Name: "shop", Hosts: []string{"shop.acme.example"}, State: "pending"},
		{Name: "api-old", Hosts: []string{"api.acme.example"}, State: "failed", LastError: "challenge failed"},
		{Name: "api-new", Hosts: []string{"api.acme.example"}, State: "valid"},
		{Name: "www", Hosts: []string{"www.acme.example"}, State: "valid"},
	}
	tests := []struct {
		host, want string
	}{
		{"shop.acme.example", "wild/valid"},   // a valid wildcard serves while the exact one is pending
		{"api.acme.example", "api-new/valid"}, // of two exact, the valid one
		{"www.acme.example", "www/valid"},     // of two valid, the exact one
		{"new.acme.example", "wild/valid"},    // a wildcard covers one label
		{"a.b.acme.example", "/missing"},      // not two
		{"acme.example", "/missing"},          // nor the apex
		{"other.example", "/missing"},         // nor another domain
	}
	for _, tt := range tests {
		t.Run(tt.host, func(t *testing.T) {
			got := certificateStates([]string{tt.host}, certs)[0]
			if s := got.GetCertificate() + "/" + got.GetState(); s != tt.want {
				t.Fatalf("%s, want %s", s, tt.want)
			}
		})
	}
}

func TestTLSHosts(t *testing.T) {
	t.Parallel()
	lb := &pb.LoadBalancer{
		Listeners: []*pb.Listener{{Port: 443, Protocol: "https"}},
		Routes:    []*pb.Route{{Host: "b.acme.example"}, {Host: "A.acme.example"}, {Host: "b.acme.example", Path: "/x"}, {Host: ""}},
	}
	if got := fmt.Sprint(tlsHosts(lb)); got != "[a.acme.example b.acme.example]" {
		t.Fatalf("hosts %s", got)
	}
	lb.Listeners[0].Protocol = "http"
	if got := tlsHosts(lb); got != nil {
		t.Fatalf("http only: %v", got)
	}
}
