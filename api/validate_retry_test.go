package api

import (
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	pb "github.com/teapot-lb/teapot-lb/api/proto/teapotv1"
)

// routes[].retry and routes[].backends[].requestHeaderModifier are
// checked at the API edge, with refusals naming the field and the bound.
func TestValidateRouteRetry(t *testing.T) {
	t.Parallel()
	r := func(lb *pb.LoadBalancer) *pb.Route { return lb.Routes[2] }
	const f = "routes[2]"
	tests := []struct {
		name string
		mut  func(lb *pb.LoadBalancer)
		want expect
	}{
		{"retry", func(lb *pb.LoadBalancer) {
			r(lb).Retry = &pb.RouteRetry{Codes: []uint32{500, 502, 503, 504}, Attempts: proto.Uint32(3), Backoff: dur(100 * time.Millisecond)}
		}, pass()},
		{"retry defaults", func(lb *pb.LoadBalancer) { r(lb).Retry = &pb.RouteRetry{} }, pass()},
		{"attempts 0", func(lb *pb.LoadBalancer) { r(lb).Retry = &pb.RouteRetry{Attempts: proto.Uint32(0)} }, bad(f+".retry.attempts", "from 1 to 5, got 0")},
		{"attempts over the bound", func(lb *pb.LoadBalancer) {
			r(lb).Retry = &pb.RouteRetry{Attempts: proto.Uint32(MaxRetryAttempts + 1)}
		}, bad(f+".retry.attempts", "from 1 to 5, got 6")},
		{"code below 400", func(lb *pb.LoadBalancer) { r(lb).Retry = &pb.RouteRetry{Codes: []uint32{500, 302}} }, bad(f+".retry.codes[1]", "from 400 to 599, got 302")},
		{"code twice", func(lb *pb.LoadBalancer) { r(lb).Retry = &pb.RouteRetry{Codes: []uint32{503, 503}} }, bad(f+".retry.codes[1]", "listed twice")},
		{"too many codes", func(lb *pb.LoadBalancer) {
			rt := &pb.RouteRetry{}
			for c := range uint32(MaxRetryCodes + 1) {
				rt.Codes = append(rt.Codes, 500+c)
			}
			r(lb).Retry = rt
		}, bad(f+".retry.codes", "at most 32")},
		{"backoff too long", func(lb *pb.LoadBalancer) { r(lb).Retry = &pb.RouteRetry{Backoff: dur(time.Minute)} }, bad(f+".retry.backoff", "from 0 to 10s")},
		{"backoff negative", func(lb *pb.LoadBalancer) { r(lb).Retry = &pb.RouteRetry{Backoff: dur(-time.Second)} }, bad(f+".retry.backoff", "from 0 to 10s")},
		{"retry on a redirect", func(lb *pb.LoadBalancer) {
			r(lb).Backends = nil
			r(lb).Filters = []*pb.RouteFilter{{RequestRedirect: &pb.RequestRedirect{Scheme: "https"}}}
			r(lb).Retry = &pb.RouteRetry{}
		}, bad(f+".retry", "nothing to retry")},
		{"retry on a notFound route", func(lb *pb.LoadBalancer) {
			lb.Routes[2] = &pb.Route{Host: "shop.acme.example", Path: "/gone", NotFound: true, Retry: &pb.RouteRetry{}}
		}, bad(f+".retry", "leave it out with notFound")},
		{"backend headers", func(lb *pb.LoadBalancer) {
			r(lb).Backends[1].RequestHeaderModifier = &pb.HeaderModifier{Set: []*pb.HeaderValue{{Name: "X-Canary", Value: "1"}}, Remove: []string{"X-Debug"}}
		}, pass()},
		{"backend headers reserved", func(lb *pb.LoadBalancer) {
			r(lb).Backends[1].RequestHeaderModifier = &pb.HeaderModifier{Set: []*pb.HeaderValue{{Name: "Content-Length", Value: "1"}}}
		}, bad(f+".backends[1].requestHeaderModifier.set[0].name", "frames the message")},
		{"backend headers request id", func(lb *pb.LoadBalancer) {
			r(lb).Backends[1].RequestHeaderModifier = &pb.HeaderModifier{Set: []*pb.HeaderValue{{Name: "X-Request-Id", Value: "1"}}}
		}, bad(f+".backends[1].requestHeaderModifier.set[0].name", "request id the proxy fixes")},
		{"backend headers value", func(lb *pb.LoadBalancer) {
			r(lb).Backends[0].RequestHeaderModifier = &pb.HeaderModifier{Add: []*pb.HeaderValue{{Name: "X-A", Value: strings.Repeat("v", MaxHeaderValueLen+1)}}}
		}, bad(f+".backends[0].requestHeaderModifier.add[0].value", "at most 4096")},
		{"backend headers bounded", func(lb *pb.LoadBalancer) {
			m := &pb.HeaderModifier{}
			for i := range MaxHeaderEdits + 1 {
				m.Remove = append(m.Remove, "X-R"+strings.Repeat("r", i))
			}
			r(lb).Backends[0].RequestHeaderModifier = m
		}, bad(f+".backends[0].requestHeaderModifier.remove", "at most 16")},
		{"backend headers on an unavailable backend", func(lb *pb.LoadBalancer) {
			r(lb).Backends[1] = &pb.RouteBackend{Unavailable: true, RequestHeaderModifier: &pb.HeaderModifier{Remove: []string{"X-A"}}}
		}, bad(f+".backends[1].requestHeaderModifier", "sends nothing")},
	}
	c := baseCatalog()
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			lb := gwLB()
			tt.mut(lb)
			check(t, ValidateLoadBalancer(lb, c), tt.want)
		})
	}
}

// A route's retry and a backend's header changes need feature level 5:
// a host of an earlier release would ignore them.
func TestRetryFeaturesUsed(t *testing.T) {
	t.Parallel()
	lb := gwLB()
	lb.Routes[2].Retry = &pb.RouteRetry{}
	lb.Routes[2].Backends[1].RequestHeaderModifier = &pb.HeaderModifier{Remove: []string{"X-A"}}
	uses := FeaturesUsed(&pb.Object{Kind: &pb.Object_LoadBalancer{LoadBalancer: lb}})
	var got []string
	for _, u := range uses {
		if u.Feature == FeatureRouteRetry || u.Feature == FeatureBackendHeaders {
			got = append(got, u.String())
		}
	}
	want := []string{"LoadBalancer acme/shop: routes[2].retry (route-retry)", "LoadBalancer acme/shop: routes[2].backends[1].requestHeaderModifier (backend-headers)"}
	if strings.Join(got, "; ") != strings.Join(want, "; ") {
		t.Errorf("features used %q, want %q", got, want)
	}
	if LevelNeeded(uses) != 5 || FeatureLevel < 5 {
		t.Errorf("level needed %d (release level %d), want 5", LevelNeeded(uses), FeatureLevel)
	}
}
