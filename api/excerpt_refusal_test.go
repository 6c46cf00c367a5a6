package api

import (
	"errors"
	"strings"
	"testing"

	pb "github.com/teapot-lb/teapot-lb/api/proto/teapotv1"
)

// A refusal of a long value quotes an excerpt of it, whatever field and
// path it is in.
func TestRefusalsNeverEchoALongValue(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("x", 100<<10)
	lb := &pb.LoadBalancer{
		Name: "shop", Tenant: "acme",
		Listeners: []*pb.Listener{{Port: 80, Protocol: long, Pool: long}},
		Pools:     map[string]*pb.BackendPool{long: {Algorithm: long, ProxyProtocol: long, BackendProtocol: long, Members: []*pb.Member{{Address: long}}}},
		Routes:    []*pb.Route{{Host: long, Path: long, PathType: long, Pool: long}},
	}
	err := ValidateLoadBalancer(lb, baseCatalog())
	if err == nil {
		t.Fatal("accepted")
	}
	if n := len(err.Error()); n > 10*(MaxReason+MaxFieldPath+64) {
		t.Fatalf("refusal of %d bytes", n)
	}
	var ve *ValidationError
	if !errors.As(err, &ve) {
		t.Fatalf("%T: %.200v", err, err)
	}
	for _, fe := range ve.Errors {
		if len(fe.Reason) > MaxReason+32 || len(fe.Field) > MaxFieldPath+32 {
			t.Errorf("%d-byte field, %d-byte reason: %.200s", len(fe.Field), len(fe.Reason), fe.String())
		}
	}
}
