package certs

import (
	"strings"
	"testing"

	pb "github.com/teapot-lb/teapot-lb/api/proto/teapotv1"
)

// TestWildcardsOnlyInServedZones: a wildcard route host of an ACME
// listener is managed when its name lies in a zone the LB hosts answer
// (DNS-01 from their own DNS), counts against the tenant's certificate
// quota like any host, and is otherwise refused with a reason naming
// --dns-zones; exact hosts are managed whatever the zones.
func TestWildcardsOnlyInServedZones(t *testing.T) {
	t.Parallel()
	objs := func(quota uint32, hosts ...string) []*pb.Object {
		lb := &pb.LoadBalancer{Name: "web", Tenant: "acme", Status: &pb.LoadBalancerStatus{Address: "192.0.2.1"},
			Listeners: []*pb.Listener{{Port: 443, Protocol: "https", Tls: &pb.TLSPolicy{Acme: true}}}}
		for _, h := range hosts {
			lb.Routes = append(lb.Routes, &pb.Route{Host: h, Pool: "app"})
		}
		tn := &pb.Tenant{Name: "acme", Domains: []string{"acme.example", "other.example"}}
		if quota > 0 {
			tn.Quotas = &pb.Quotas{Certificates: quota}
		}
		return []*pb.Object{{Kind: &pb.Object_Tenant{Tenant: tn}}, {Kind: &pb.Object_LoadBalancer{LoadBalancer: lb}}}
	}
	for _, c := range []struct {
		name    string
		zones   []string
		quota   uint32
		hosts   []string
		managed []string
		refused map[string]string // host -> part of the reason
	}{
		{"wildcard in a zone", []string{"acme.example"}, 0, []string{"*.acme.example", "shop.acme.example"},
			[]string{"*.acme.example", "shop.acme.example"}, nil},
		{"a deeper wildcard in a zone", []string{"acme.example."}, 0, []string{"*.apps.acme.example"},
			[]string{"*.apps.acme.example"}, nil},
		{"wildcard outside the zones", []string{"lb.acme.example"}, 0, []string{"*.acme.example", "shop.acme.example"},
			[]string{"shop.acme.example"}, map[string]string{"*.acme.example": "--dns-zones: lb.acme.example); acme.example is in none of them"}},
		{"no zones", nil, 0, []string{"*.other.example"},
			nil, map[string]string{"*.other.example": "--dns-zones: none"}},
		{"wildcards count against the quota", []string{"acme.example"}, 1, []string{"*.acme.example", "shop.acme.example"},
			[]string{"*.acme.example"}, map[string]string{"shop.acme.example": "quota of 1 certificates"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			d := computeDesired(objs(c.quota, c.hosts...), c.zones)
			if len(d.managed) != len(c.managed) {
				t.Errorf("managed %v, want %v", d.managed, c.managed)
			}
			for _, h := range c.managed {
				if d.managed[h] != "acme" {
					t.Errorf("%s not managed: %v", h, d.managed)
				}
			}
			if len(d.refused) != len(c.refused) {
				t.Errorf("refused %v, want %v", d.refused, c.refused)
			}
			for h, why := range c.refused {
				if r := d.refused[h]; r.tenant != "acme" || !strings.Contains(r.reason, why) {
					t.Errorf("%s refused %+v, want a reason with %q", h, r, why)
				}
			}
		})
	}
}

func TestDNS01Record(t *testing.T) {
	t.Parallel()
	key := dns01Key("_acme-challenge.acme.example", "abc")
	if name, txt, ok := DNS01Record(key, []byte("abc")); !ok || name != "_acme-challenge.acme.example" || txt != "abc" {
		t.Errorf("DNS01Record(%q) = %q %q %t", key, name, txt, ok)
	}
	for _, k := range []string{"acme/x/challenges/a.json", DNS01Prefix + "name", DNS01Prefix + "/id", DNS01Prefix + "n/a/b"} {
		if _, _, ok := DNS01Record(k, []byte("abc")); ok {
			t.Errorf("DNS01Record(%q) ok", k)
		}
	}
	if dns01Key("n", "a") == dns01Key("n", "b") {
		t.Error("two texts of one name share a key")
	}
}
