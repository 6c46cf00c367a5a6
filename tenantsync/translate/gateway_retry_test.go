package translate_test

import (
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/teapot-lb/teapot-lb/api"
	pb "github.com/teapot-lb/teapot-lb/api/proto/teapotv1"
	"github.com/teapot-lb/teapot-lb/tenantsync/translate"
)

// A rule's retry and its backendRefs' RequestHeaderModifier filters
// become the LB route's retry and its backends' requestHeaderModifier;
// what is past the API's bounds, or a backendRef filter of another type,
// leaves the route not accepted (UnsupportedValue) with the field named.
func TestGatewayHTTPRetryAndBackendFilters(t *testing.T) {
	t.Parallel()
	gw := gateway("shop", "gw", listener("http", gwv1.HTTPProtocolType, 80, ""))
	headers := func(name, value string) []gwv1.HTTPRouteFilter {
		return []gwv1.HTTPRouteFilter{{Type: gwv1.HTTPRouteFilterRequestHeaderModifier, RequestHeaderModifier: &gwv1.HTTPHeaderFilter{
			Set: []gwv1.HTTPHeader{{Name: gwv1.HTTPHeaderName(name), Value: value}}}}}
	}
	refs := func() []gwv1.HTTPBackendRef {
		bs := httpBackends(bref("web", 80, nil), bref("api", 8080, nil), bref("gone", 80, nil))
		bs[0].Filters = headers("X-Backend", "web")
		bs[2].Filters = headers("X-Backend", "gone")
		return bs
	}
	okRule := gwv1.HTTPRouteRule{BackendRefs: refs(), Retry: &gwv1.HTTPRouteRetry{
		Codes: []gwv1.HTTPRouteRetryStatusCode{500, 502}, Attempts: ptr(3), Backoff: ptr(gwv1.Duration("100ms"))}}
	t.Run("translated", func(t *testing.T) {
		route := httpRoute("shop", "r", 1, []gwv1.ParentReference{parent("gw", "")}, nil, okRule)
		d := translate.Gateway(gw, gwSources(t, backendObjs(), gwClass("teapot", translate.GatewayController), gw, route), gwOpts)
		want := &pb.LoadBalancer{Name: "gw-shop-gw", Vip: &pb.VIPRequest{Pool: "public"}, Listeners: []*pb.Listener{{Port: 80, Protocol: "http"}},
			Routes: []*pb.Route{{
				Matches: []*pb.RouteMatch{{Path: "/", PathType: "prefix"}},
				Backends: []*pb.RouteBackend{
					{Pool: "web-80", Weight: proto.Uint32(1), RequestHeaderModifier: &pb.HeaderModifier{Set: []*pb.HeaderValue{{Name: "X-Backend", Value: "web"}}}},
					rb("api-8080", 1),
					{Unavailable: true, Weight: proto.Uint32(1)}, // sends nothing: its filter has nothing to change
				},
				Retry: &pb.RouteRetry{Codes: []uint32{500, 502}, Attempts: proto.Uint32(3), Backoff: durationpb.New(100 * time.Millisecond)},
			}},
			Pools: map[string]*pb.BackendPool{"web-80": webPool, "api-8080": apiPool}}
		check(t, d, want, nil)
	})
	for _, tc := range []struct {
		name string
		mut  func(r *gwv1.HTTPRouteRule)
		why  string
	}{
		{"attempts over the bound", func(r *gwv1.HTTPRouteRule) { r.Retry.Attempts = ptr(api.MaxRetryAttempts + 1) }, "rules[0].retry.attempts: must be from 1 to 5, got 6"},
		{"backoff over the bound", func(r *gwv1.HTTPRouteRule) { r.Retry.Backoff = ptr(gwv1.Duration("1m")) }, "rules[0].retry.backoff: must be a duration from 0 to 10s"},
		{"a code outside 400-599", func(r *gwv1.HTTPRouteRule) { r.Retry.Codes = []gwv1.HTTPRouteRetryStatusCode{302} }, "rules[0].retry.codes[0]: must be a status from 400 to 599, got 302"},
		{"another filter type on a backendRef", func(r *gwv1.HTTPRouteRule) {
			r.BackendRefs[1].Filters = []gwv1.HTTPRouteFilter{{Type: gwv1.HTTPRouteFilterResponseHeaderModifier, ResponseHeaderModifier: &gwv1.HTTPHeaderFilter{}}}
		}, "rules[0].backendRefs[1].filters[0]: filter type ResponseHeaderModifier is not supported on a backendRef"},
		{"the request id set on a backendRef", func(r *gwv1.HTTPRouteRule) {
			r.BackendRefs[0].Filters = headers("X-Request-Id", "fixed")
		}, "rules[0].backends[0].requestHeaderModifier.set[0].name: X-Request-Id is the request id the proxy fixes"},
		{"the request id removed by the rule", func(r *gwv1.HTTPRouteRule) {
			r.Filters = []gwv1.HTTPRouteFilter{{Type: gwv1.HTTPRouteFilterRequestHeaderModifier, RequestHeaderModifier: &gwv1.HTTPHeaderFilter{
				Remove: []string{"x-request-id"}}}}
		}, "rules[0].filters[0].requestHeaderModifier.remove[0]: x-request-id is the request id the proxy fixes"},
		{"two header modifiers on a backendRef", func(r *gwv1.HTTPRouteRule) {
			r.BackendRefs[0].Filters = append(r.BackendRefs[0].Filters, headers("X-Other", "1")...)
		}, "rules[0].backendRefs[0].filters[1]: a second RequestHeaderModifier"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rule := *okRule.DeepCopy()
			tc.mut(&rule)
			route := httpRoute("shop", "r", 1, []gwv1.ParentReference{parent("gw", "")}, nil, rule)
			d := translate.Gateway(gw, gwSources(t, backendObjs(), gwClass("teapot", translate.GatewayController), gw, route), gwOpts)
			if len(d.LB.GetRoutes()) != 0 {
				t.Errorf("routes %v, want none", d.LB.GetRoutes())
			}
			ps := d.Gateway.Routes[translate.RouteKey{Kind: translate.KindHTTPRoute, Namespace: "shop", Name: "r"}]
			if len(ps) != 1 {
				t.Fatalf("route parents %+v", ps)
			}
			if c := condOf(ps[0].Conditions, "Accepted"); c.Reason != string(gwv1.RouteReasonUnsupportedValue) || !strings.HasPrefix(c.Message, tc.why) {
				t.Errorf("Accepted %s %q, want UnsupportedValue %q", c.Reason, c.Message, tc.why)
			}
		})
	}
}

// A rule that redirects sends nothing to a backend: its retry is not
// applied, and a warning says so.
func TestGatewayHTTPRetryOnARedirectRuleWarns(t *testing.T) {
	t.Parallel()
	gw := gateway("shop", "gw", listener("http", gwv1.HTTPProtocolType, 80, ""))
	rule := gwv1.HTTPRouteRule{
		Filters: []gwv1.HTTPRouteFilter{{Type: gwv1.HTTPRouteFilterRequestRedirect, RequestRedirect: &gwv1.HTTPRequestRedirectFilter{StatusCode: ptr(301)}}},
		Retry:   &gwv1.HTTPRouteRetry{Codes: []gwv1.HTTPRouteRetryStatusCode{502}, Attempts: ptr(2)},
	}
	route := httpRoute("shop", "r", 1, []gwv1.ParentReference{parent("gw", "")}, nil, rule)
	d := translate.Gateway(gw, gwSources(t, backendObjs(), gwClass("teapot", translate.GatewayController), gw, route), gwOpts)
	if len(d.LB.GetRoutes()) != 1 || d.LB.GetRoutes()[0].GetRetry() != nil {
		t.Fatalf("routes %v, want one redirect without retry", d.LB.GetRoutes())
	}
	if !slices.ContainsFunc(d.Warnings, func(w string) bool { return strings.Contains(w, "its retry is not applied") }) {
		t.Errorf("warnings %q, want one saying the retry is not applied", d.Warnings)
	}
}
