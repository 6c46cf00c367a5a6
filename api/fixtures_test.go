package api

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/teapot-lb/teapot-lb/api/catalogtest"
	pb "github.com/teapot-lb/teapot-lb/api/proto/teapotv1"
	"google.golang.org/protobuf/types/known/durationpb"
)

var (
	_ Catalog            = (*catalogtest.Catalog)(nil)
	_ NodeCatalog        = (*catalogtest.Catalog)(nil)
	_ CertificateCatalog = (*catalogtest.Catalog)(nil)
	_ JoinTokenCatalog   = (*catalogtest.Catalog)(nil)
)

func publicPool() *pb.VIPPool {
	return &pb.VIPPool{Name: "public", Cidrs: []string{"192.0.2.0/28", "2001:db8:10::/124"}, Mode: "arp"}
}

func sharedPool() *pb.VIPPool {
	return &pb.VIPPool{Name: "shared", Cidrs: []string{"198.51.100.0/29"}, Mode: "bgp", AllowShared: true}
}

func acmeTenant() *pb.Tenant {
	return &pb.Tenant{
		Name:     "acme",
		Domains:  []string{"acme.example"},
		Networks: []string{"10.20.0.0/16", "fd00:20::/64"},
		Pools:    []string{"public", "shared"},
	}
}

func otherTenant() *pb.Tenant {
	return &pb.Tenant{Name: "other", Domains: []string{"other.example"}, Networks: []string{"10.30.0.0/16"}, Pools: []string{"public"}}
}

// baseCatalog holds two pools and two tenants, no load balancers.
func baseCatalog() *catalogtest.Catalog {
	return catalogtest.New(publicPool(), sharedPool(), acmeTenant(), otherTenant())
}

func dur(d time.Duration) *durationpb.Duration { return durationpb.New(d) }

func weight(w uint32) *uint32 { return &w }

// shopLB is a valid load balancer of tenant acme in pool public.
func shopLB() *pb.LoadBalancer {
	return &pb.LoadBalancer{
		Name:   "shop",
		Tenant: "acme",
		Vip:    &pb.VIPRequest{Pool: "public"},
		Listeners: []*pb.Listener{
			{Port: 443, Protocol: "https", Tls: &pb.TLSPolicy{Acme: true}},
			{Port: 80, Protocol: "http", RedirectToHttps: true},
			{Port: 5432, Protocol: "tcp", Pool: "db"},
		},
		Routes: []*pb.Route{
			{Host: "shop.acme.example", Path: "/", Pool: "web"},
			{Host: "shop.acme.example", Path: "/api", PathType: "exact", Pool: "web"},
		},
		Pools: map[string]*pb.BackendPool{
			"web": {
				Algorithm: "least-request",
				Members: []*pb.Member{
					{Address: "10.20.0.11:30080"},
					{Address: "[fd00:20::12]:30080", Weight: weight(5)},
				},
				HealthCheck: &pb.HealthCheck{Http: &pb.HTTPCheck{Path: "/healthz"}, Interval: dur(2 * time.Second), Timeout: dur(time.Second)},
			},
			"db": {Members: []*pb.Member{{Address: "10.20.1.5:5432"}}, ProxyProtocol: "v2"},
		},
	}
}

// udpLB is a small L4 load balancer in pool shared.
func udpLB(name, key string, port uint32) *pb.LoadBalancer {
	return &pb.LoadBalancer{
		Name:      name,
		Tenant:    "acme",
		Vip:       &pb.VIPRequest{Pool: "shared", SharingKey: key},
		Listeners: []*pb.Listener{{Port: port, Protocol: "udp", Pool: "dns"}},
		Pools:     map[string]*pb.BackendPool{"dns": {Members: []*pb.Member{{Address: "10.20.0.53:53"}}}},
	}
}

// withAddr sets status.address and returns lb.
func withAddr(lb *pb.LoadBalancer, addr string) *pb.LoadBalancer {
	lb.Status = &pb.LoadBalancerStatus{Address: addr}
	return lb
}

// expect describes an expected outcome: no error when field and msg are
// empty; else an error naming field with msg in its reason.
type expect struct {
	field    string
	msg      string
	conflict bool
}

func pass() expect                 { return expect{} }
func bad(field, msg string) expect { return expect{field: field, msg: msg} }
func clash(field, msg string) expect {
	return expect{field: field, msg: msg, conflict: true}
}

// check compares err with want, requiring the field to be named.
func check(t *testing.T, err error, want expect) {
	t.Helper()
	if want.field == "" && want.msg == "" {
		if err != nil {
			t.Fatalf("unexpected error: %v", err)
		}
		return
	}
	if err == nil {
		t.Fatalf("no error; want %s: ...%s...", want.field, want.msg)
	}
	var ve *ValidationError
	if !errors.As(err, &ve) {
		t.Fatalf("error %T %v is not a *ValidationError", err, err)
	}
	found := false
	for _, fe := range ve.Errors {
		if fe.Field == want.field && strings.Contains(fe.Reason, want.msg) {
			found = true
		}
	}
	if !found {
		t.Fatalf("error %q has no %s: ...%s...", err, want.field, want.msg)
	}
	if want.conflict {
		if !errors.Is(err, ErrConflict) || errors.Is(err, ErrInvalid) {
			t.Errorf("error %q: want ErrConflict only", err)
		}
	} else if !errors.Is(err, ErrInvalid) {
		t.Errorf("error %q: want ErrInvalid", err)
	}
	if !strings.Contains(err.Error(), fmt.Sprintf("%s: ", want.field)) {
		t.Errorf("message %q does not name %s", err, want.field)
	}
}
