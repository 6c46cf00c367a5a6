package snapshot

import (
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/teapot-lb/teapot-lb/api"
	pb "github.com/teapot-lb/teapot-lb/api/proto/teapotv1"
)

// A route's retry compiles with its defaults filled in (also on a route
// of a pool alone, which needs the extended path then), and each
// backend's request header changes compile beside Backends, in order.
func TestCompileRetryAndBackendHeaders(t *testing.T) {
	t.Parallel()
	rt := compileRoutes(t,
		&pb.Route{Path: "/r", Pool: "app", Retry: &pb.RouteRetry{}},
		&pb.Route{Path: "/c", Pool: "app", Retry: &pb.RouteRetry{Codes: []uint32{500, 503}, Attempts: proto.Uint32(3), Backoff: dur(time.Second)}},
		&pb.Route{Path: "/b", Backends: []*pb.RouteBackend{
			{Pool: "app"},
			{Pool: "other", RequestHeaderModifier: &pb.HeaderModifier{Set: []*pb.HeaderValue{{Name: "x-to", Value: "other"}}, Remove: []string{"x-drop"}}},
		}},
	)
	r := rt.Match("x.acme.example", "/r")
	if r == nil || r.Ext == nil || r.Ext.Retry == nil {
		t.Fatalf("/r = %+v, want a route with retry", r)
	}
	if got := *r.Ext.Retry; got.Attempts != api.DefaultRetryAttempts || got.Backoff != api.DefaultRetryBackoff || len(got.Codes) != 0 {
		t.Errorf("/r retry %+v, want the defaults", got)
	}
	r = rt.Match("x.acme.example", "/c")
	if got := *r.Ext.Retry; got.Attempts != 3 || got.Backoff != time.Second || len(got.Codes) != 2 || got.Codes[1] != 503 {
		t.Errorf("/c retry %+v", got)
	}
	r = rt.Match("x.acme.example", "/b")
	if r == nil || r.Ext == nil || len(r.Ext.BackendHeaders) != 2 || r.Ext.BackendHeaders[0] != nil {
		t.Fatalf("/b = %+v, want header changes for the second backend only", r)
	}
	if h := r.Ext.BackendHeaders[1]; len(h.Set) != 1 || h.Set[0] != (HeaderValue{"X-To", "other"}) || h.Remove[0] != "X-Drop" {
		t.Errorf("/b backend header changes %+v", h)
	}
}
