package translate_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/teapot-lb/teapot-lb/api"
	pb "github.com/teapot-lb/teapot-lb/api/proto/teapotv1"
	"github.com/teapot-lb/teapot-lb/tenantsync/translate"
)

var gwOpts = translate.Options{DefaultPool: "public"}

// backendObjs are the nodes and the NodePort Services routes send to.
func backendObjs(extra ...runtime.Object) []runtime.Object {
	out := append([]runtime.Object{}, nodes...)
	out = append(out, nodePortSvc("shop", "web", 80, 30080), nodePortSvc("shop", "api", 8080, 30808), nodePortSvc("other", "db", 5432, 30432))
	return append(out, extra...)
}

func rb(pool string, w uint32) *pb.RouteBackend {
	return &pb.RouteBackend{Pool: pool, Weight: proto.Uint32(w)}
}

var webPool = &pb.BackendPool{Members: members("10.20.0.11:30080", "10.20.0.12:30080")}
var apiPool = &pb.BackendPool{Members: members("10.20.0.11:30808", "10.20.0.12:30808")}

// TestGatewayHTTPRoutes is the translation table of HTTPRoute matches,
// backends and filters into load balancer routes.
func TestGatewayHTTPRoutes(t *testing.T) {
	gw := gateway("shop", "gw", listener("http", gwv1.HTTPProtocolType, 80, ""))
	httpL := []*pb.Listener{{Port: 80, Protocol: "http"}}
	prefix := func(p string) gwv1.HTTPRouteMatch {
		return gwv1.HTTPRouteMatch{Path: &gwv1.HTTPPathMatch{Type: ptr(gwv1.PathMatchPathPrefix), Value: ptr(p)}}
	}
	rule := func(ms []gwv1.HTTPRouteMatch, fs []gwv1.HTTPRouteFilter, refs ...gwv1.BackendRef) gwv1.HTTPRouteRule {
		return gwv1.HTTPRouteRule{Matches: ms, Filters: fs, BackendRefs: httpBackends(refs...)}
	}
	web := bref("web", 80, nil)
	tests := []struct {
		name   string
		route  *gwv1.HTTPRoute
		routes []*pb.Route
		pools  map[string]*pb.BackendPool
	}{
		{
			name:   "no matches is a prefix match on /",
			route:  httpRoute("shop", "r", 1, []gwv1.ParentReference{parent("gw", "")}, []string{"shop.acme.example"}, rule(nil, nil, web)),
			routes: []*pb.Route{{Host: "shop.acme.example", Matches: []*pb.RouteMatch{{Path: "/", PathType: "prefix"}}, Backends: []*pb.RouteBackend{rb("web-80", 1)}}},
			pools:  map[string]*pb.BackendPool{"web-80": webPool},
		},
		{
			name: "path, headers, query parameters and method; weighted backends",
			route: httpRoute("shop", "r", 1, []gwv1.ParentReference{parent("gw", "")}, []string{"shop.acme.example", "*.shop.acme.example"}, rule(
				[]gwv1.HTTPRouteMatch{
					{
						Path:        &gwv1.HTTPPathMatch{Type: ptr(gwv1.PathMatchExact), Value: ptr("/cart")},
						Headers:     []gwv1.HTTPHeaderMatch{{Name: "X-Env", Value: "canary"}, {Type: ptr(gwv1.HeaderMatchRegularExpression), Name: "x-v", Value: "v[0-9]+"}},
						QueryParams: []gwv1.HTTPQueryParamMatch{{Name: "q", Value: "1"}, {Type: ptr(gwv1.QueryParamMatchRegularExpression), Name: "r", Value: "a.*"}},
						Method:      ptr(gwv1.HTTPMethodPost),
					},
					{Path: &gwv1.HTTPPathMatch{Type: ptr(gwv1.PathMatchRegularExpression), Value: ptr("/v[0-9]+/.*")}},
				}, nil, bref("web", 80, ptr(int32(3))), bref("api", 8080, ptr(int32(1))), bref("api", 8080, ptr(int32(0))))),
			routes: func() []*pb.Route {
				ms := []*pb.RouteMatch{
					{
						Path: "/cart", PathType: "exact",
						Headers:     []*pb.ValueMatch{{Name: "X-Env", Value: "canary", Type: "exact"}, {Name: "x-v", Value: "v[0-9]+", Type: "regex"}},
						QueryParams: []*pb.ValueMatch{{Name: "q", Value: "1", Type: "exact"}, {Name: "r", Value: "a.*", Type: "regex"}},
						Method:      "POST",
					},
					{Path: "/v[0-9]+/.*", PathType: "regex"},
				}
				bs := []*pb.RouteBackend{rb("web-80", 3), rb("api-8080", 1), rb("api-8080", 0)}
				return []*pb.Route{
					{Host: "*.shop.acme.example", Matches: ms, Backends: bs},
					{Host: "shop.acme.example", Matches: ms, Backends: bs},
				}
			}(),
			pools: map[string]*pb.BackendPool{"web-80": webPool, "api-8080": apiPool},
		},
		{
			name: "header modifiers, URL rewrite, mirror and timeouts",
			route: func() *gwv1.HTTPRoute {
				r := httpRoute("shop", "r", 1, []gwv1.ParentReference{parent("gw", "")}, nil, rule([]gwv1.HTTPRouteMatch{prefix("/shop")}, []gwv1.HTTPRouteFilter{
					{Type: gwv1.HTTPRouteFilterRequestHeaderModifier, RequestHeaderModifier: &gwv1.HTTPHeaderFilter{
						Set: []gwv1.HTTPHeader{{Name: "X-Set", Value: "1"}}, Add: []gwv1.HTTPHeader{{Name: "X-Add", Value: "2"}}, Remove: []string{"X-Drop"}}},
					{Type: gwv1.HTTPRouteFilterResponseHeaderModifier, ResponseHeaderModifier: &gwv1.HTTPHeaderFilter{Set: []gwv1.HTTPHeader{{Name: "X-Resp", Value: "3"}}}},
					{Type: gwv1.HTTPRouteFilterURLRewrite, URLRewrite: &gwv1.HTTPURLRewriteFilter{
						Hostname: ptr(gwv1.PreciseHostname("internal.acme.example")),
						Path:     &gwv1.HTTPPathModifier{Type: gwv1.PrefixMatchHTTPPathModifier, ReplacePrefixMatch: ptr("/")}}},
					{Type: gwv1.HTTPRouteFilterRequestMirror, RequestMirror: &gwv1.HTTPRequestMirrorFilter{
						BackendRef: gwv1.BackendObjectReference{Name: "api", Port: ptr(int32(8080))}, Percent: ptr(int32(25))}},
					{Type: gwv1.HTTPRouteFilterRequestMirror, RequestMirror: &gwv1.HTTPRequestMirrorFilter{
						BackendRef: gwv1.BackendObjectReference{Name: "api", Port: ptr(int32(8080))}, Fraction: &gwv1.Fraction{Numerator: 1, Denominator: ptr(int32(3))}}},
				}, web))
				r.Spec.Rules[0].Timeouts = &gwv1.HTTPRouteTimeouts{Request: ptr(gwv1.Duration("10s")), BackendRequest: ptr(gwv1.Duration("500ms"))}
				return r
			}(),
			routes: []*pb.Route{{
				Matches: []*pb.RouteMatch{{Path: "/shop", PathType: "prefix"}},
				Filters: []*pb.RouteFilter{
					{RequestHeaderModifier: &pb.HeaderModifier{Set: []*pb.HeaderValue{{Name: "X-Set", Value: "1"}}, Add: []*pb.HeaderValue{{Name: "X-Add", Value: "2"}}, Remove: []string{"X-Drop"}}},
					{ResponseHeaderModifier: &pb.HeaderModifier{Set: []*pb.HeaderValue{{Name: "X-Resp", Value: "3"}}}},
					{UrlRewrite: &pb.URLRewrite{Hostname: "internal.acme.example", Path: &pb.PathModifier{ReplacePrefixMatch: proto.String("/")}}},
					{RequestMirror: &pb.RequestMirror{Pool: "api-8080", Percent: proto.Uint32(25)}},
					{RequestMirror: &pb.RequestMirror{Pool: "api-8080", Fraction: &pb.Fraction{Numerator: 1, Denominator: 3}}},
				},
				Backends: []*pb.RouteBackend{rb("web-80", 1)},
				Timeouts: &pb.RouteTimeouts{Request: durationpb.New(10 * time.Second), BackendRequest: durationpb.New(500 * time.Millisecond)},
			}},
			pools: map[string]*pb.BackendPool{"web-80": webPool, "api-8080": apiPool},
		},
		{
			name: "a redirect answers at the LB: no backends",
			route: httpRoute("shop", "r", 1, []gwv1.ParentReference{parent("gw", "")}, nil, rule(nil, []gwv1.HTTPRouteFilter{
				{Type: gwv1.HTTPRouteFilterRequestRedirect, RequestRedirect: &gwv1.HTTPRequestRedirectFilter{
					Scheme: ptr("https"), Hostname: ptr(gwv1.PreciseHostname("www.acme.example")), Port: ptr(int32(8443)),
					Path: &gwv1.HTTPPathModifier{Type: gwv1.FullPathHTTPPathModifier, ReplaceFullPath: ptr("/new")}, StatusCode: ptr(301)}},
			})),
			routes: []*pb.Route{{
				Matches: []*pb.RouteMatch{{Path: "/", PathType: "prefix"}},
				Filters: []*pb.RouteFilter{{RequestRedirect: &pb.RequestRedirect{Scheme: "https", Hostname: "www.acme.example", Port: proto.Uint32(8443),
					Path: &pb.PathModifier{ReplaceFullPath: proto.String("/new")}, StatusCode: 301}}},
			}},
			pools: map[string]*pb.BackendPool{},
		},
		{
			name:  "a backend that does not resolve keeps its share as 500s; no backends at all is all 500s",
			route: httpRoute("shop", "r", 1, []gwv1.ParentReference{parent("gw", "")}, nil, rule(nil, nil, bref("gone", 80, ptr(int32(2))), web), rule([]gwv1.HTTPRouteMatch{prefix("/x")}, nil)),
			routes: []*pb.Route{
				{Matches: []*pb.RouteMatch{{Path: "/", PathType: "prefix"}}, Backends: []*pb.RouteBackend{{Unavailable: true, Weight: proto.Uint32(2)}, rb("web-80", 1)}},
				{Matches: []*pb.RouteMatch{{Path: "/x", PathType: "prefix"}}, Backends: []*pb.RouteBackend{{Unavailable: true}}},
			},
			pools: map[string]*pb.BackendPool{"web-80": webPool},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			src := gwSources(t, backendObjs(), gwClass("teapot", translate.GatewayController), gw, tt.route)
			d := translate.Gateway(gw, src, gwOpts)
			want := &pb.LoadBalancer{Name: "gw-shop-gw", Vip: &pb.VIPRequest{Pool: "public"}, Listeners: httpL, Routes: tt.routes, Pools: tt.pools}
			check(t, d, want, nil)
			if d.Refused != "" {
				t.Errorf("Refused = %q", d.Refused)
			}
			if n := d.Gateway.Listeners[0].AttachedRoutes; n != 1 {
				t.Errorf("attachedRoutes = %d, want 1", n)
			}
			ps := d.Gateway.Routes[translate.RouteKey{Kind: translate.KindHTTPRoute, Namespace: "shop", Name: "r"}]
			if len(ps) != 1 || condOf(ps[0].Conditions, "Accepted").Status != metav1.ConditionTrue {
				t.Errorf("route parents = %+v, want one Accepted", ps)
			}
		})
	}
}

// TestGatewayRoutePrecedence: routes of the same host and matches keep
// the oldest route's rule, and LB routes follow route creation order.
func TestGatewayRoutePrecedence(t *testing.T) {
	gw := gateway("shop", "gw", listener("http", gwv1.HTTPProtocolType, 80, ""))
	older := httpRoute("shop", "b-older", 1, []gwv1.ParentReference{parent("gw", "")}, nil, gwv1.HTTPRouteRule{BackendRefs: httpBackends(bref("web", 80, nil))})
	newer := httpRoute("shop", "a-newer", 2, []gwv1.ParentReference{parent("gw", "")}, nil, gwv1.HTTPRouteRule{BackendRefs: httpBackends(bref("api", 8080, nil))},
		gwv1.HTTPRouteRule{Matches: []gwv1.HTTPRouteMatch{{Path: &gwv1.HTTPPathMatch{Type: ptr(gwv1.PathMatchExact), Value: ptr("/api")}}}, BackendRefs: httpBackends(bref("api", 8080, nil))})
	src := gwSources(t, backendObjs(), gwClass("teapot", translate.GatewayController), gw, newer, older)
	d := translate.Gateway(gw, src, gwOpts)
	want := []*pb.Route{
		{Matches: []*pb.RouteMatch{{Path: "/", PathType: "prefix"}}, Backends: []*pb.RouteBackend{rb("web-80", 1)}},
		{Matches: []*pb.RouteMatch{{Path: "/api", PathType: "exact"}}, Backends: []*pb.RouteBackend{rb("api-8080", 1)}},
	}
	if len(d.LB.Routes) != len(want) {
		t.Fatalf("routes = %v, want %v", d.LB.Routes, want)
	}
	for i := range want {
		if !proto.Equal(d.LB.Routes[i], want[i]) {
			t.Errorf("routes[%d] = %v, want %v", i, d.LB.Routes[i], want[i])
		}
	}
}

// TestGatewayGRPCRoute: method and header matches, and h2c towards the
// members.
func TestGatewayGRPCRoute(t *testing.T) {
	gw := gateway("shop", "gw", listener("http", gwv1.HTTPProtocolType, 80, ""))
	r := &gwv1.GRPCRoute{ObjectMeta: meta("shop", "g", 1)}
	r.Spec.ParentRefs = []gwv1.ParentReference{parent("gw", "")}
	r.Spec.Hostnames = []gwv1.Hostname{"grpc.acme.example"}
	r.Spec.Rules = []gwv1.GRPCRouteRule{{
		Matches: []gwv1.GRPCRouteMatch{
			{Method: &gwv1.GRPCMethodMatch{Service: ptr("shop.v1.Cart"), Method: ptr("Add")}, Headers: []gwv1.GRPCHeaderMatch{{Name: "x-tenant", Value: "a"}}},
			{Method: &gwv1.GRPCMethodMatch{Type: ptr(gwv1.GRPCMethodMatchRegularExpression), Service: ptr("shop\\..*")}},
		},
		Filters:     []gwv1.GRPCRouteFilter{{Type: gwv1.GRPCRouteFilterRequestHeaderModifier, RequestHeaderModifier: &gwv1.HTTPHeaderFilter{Add: []gwv1.HTTPHeader{{Name: "x-from", Value: "lb"}}}}},
		BackendRefs: []gwv1.GRPCBackendRef{{BackendRef: bref("api", 8080, nil)}},
	}}
	src := gwSources(t, backendObjs(), gwClass("teapot", translate.GatewayController), gw, r)
	d := translate.Gateway(gw, src, gwOpts)
	want := &pb.LoadBalancer{
		Name: "gw-shop-gw", Vip: &pb.VIPRequest{Pool: "public"}, Listeners: []*pb.Listener{{Port: 80, Protocol: "http"}},
		Routes: []*pb.Route{{
			Host: "grpc.acme.example",
			Matches: []*pb.RouteMatch{
				{Grpc: &pb.GRPCMethodMatch{Service: "shop.v1.Cart", Method: "Add", Type: "exact"}, Headers: []*pb.ValueMatch{{Name: "x-tenant", Value: "a", Type: "exact"}}},
				{Grpc: &pb.GRPCMethodMatch{Service: "shop\\..*", Type: "regex"}},
			},
			Filters:  []*pb.RouteFilter{{RequestHeaderModifier: &pb.HeaderModifier{Add: []*pb.HeaderValue{{Name: "x-from", Value: "lb"}}}}},
			Backends: []*pb.RouteBackend{rb("api-8080-h2c", 1)},
		}},
		Pools: map[string]*pb.BackendPool{"api-8080-h2c": {BackendProtocol: "h2c", Members: apiPool.Members}},
	}
	check(t, d, want, nil)
}

// TestGatewayL4Routes: TLS passthrough, TCP and UDP listeners take the
// backends of their route (TLS by server name); several backendRefs merge
// into one weighted pool; a second TCP route on a taken port is accepted
// and gets no traffic.
func TestGatewayL4Routes(t *testing.T) {
	tlsL := listener("tls", gwv1.TLSProtocolType, 443, "*.acme.example")
	tlsL.TLS = &gwv1.ListenerTLSConfig{Mode: ptr(gwv1.TLSModePassthrough)}
	gw := gateway("shop", "gw", tlsL, listener("tcp", gwv1.TCPProtocolType, 5432, ""), listener("udp", gwv1.UDPProtocolType, 53, ""), listener("idle", gwv1.TCPProtocolType, 9000, ""))
	tlsR := &gwv1.TLSRoute{ObjectMeta: meta("shop", "t", 1)}
	tlsR.Spec.ParentRefs = []gwv1.ParentReference{parent("gw", "tls")}
	tlsR.Spec.Hostnames = []gwv1.Hostname{"shop.acme.example"}
	tlsR.Spec.Rules = []gwv1.TLSRouteRule{{BackendRefs: []gwv1.BackendRef{bref("web", 80, nil)}}}
	tcpR := &gwv1.TCPRoute{ObjectMeta: meta("shop", "c", 2)}
	tcpR.Spec.ParentRefs = []gwv1.ParentReference{parent("gw", "tcp")}
	tcpR.Spec.Rules = []gwv1.TCPRouteRule{{BackendRefs: []gwv1.BackendRef{bref("web", 80, ptr(int32(3))), bref("api", 8080, nil)}}}
	late := &gwv1.TCPRoute{ObjectMeta: meta("shop", "late", 3)}
	late.Spec.ParentRefs = []gwv1.ParentReference{parent("gw", "tcp")}
	late.Spec.Rules = []gwv1.TCPRouteRule{{BackendRefs: []gwv1.BackendRef{bref("api", 8080, nil)}}}
	udpR := &gwv1.UDPRoute{ObjectMeta: meta("shop", "u", 4)}
	udpR.Spec.ParentRefs = []gwv1.ParentReference{parent("gw", "udp")}
	udpR.Spec.Rules = []gwv1.UDPRouteRule{{BackendRefs: []gwv1.BackendRef{bref("api", 8080, nil)}}}
	src := gwSources(t, backendObjs(), gwClass("teapot", translate.GatewayController), gw, tlsR, tcpR, late, udpR)
	d := translate.Gateway(gw, src, gwOpts)
	// The pool of TCPRoute shop/c's two backends: readable part and 64
	// bits of a hash of kind, namespace and name.
	merged := "shop-c-d212526b1e6c6365"
	want := &pb.LoadBalancer{
		Name: "gw-shop-gw", Vip: &pb.VIPRequest{Pool: "public"},
		Listeners: []*pb.Listener{
			{Port: 53, Protocol: "udp", Pool: "api-8080"},
			// Its route's name goes to its backends, the others nowhere.
			{Port: 443, Protocol: "tls-passthrough", Pool: translate.UnroutedPool, SniRoutes: []*pb.SNIRoute{{Host: "shop.acme.example", Pool: "web-80"}}},
			{Port: 5432, Protocol: "tcp", Pool: merged},
			// No route: the empty pool, so that the listener is served.
			{Port: 9000, Protocol: "tcp", Pool: translate.UnroutedPool},
		},
		Pools: map[string]*pb.BackendPool{
			"web-80": webPool, "api-8080": apiPool, translate.UnroutedPool: {},
			merged: {Members: []*pb.Member{
				{Address: "10.20.0.11:30080", Weight: proto.Uint32(3)}, {Address: "10.20.0.12:30080", Weight: proto.Uint32(3)},
				{Address: "10.20.0.11:30808"}, {Address: "10.20.0.12:30808"},
			}},
		},
	}
	check(t, d, want, nil)
	// The LB cluster takes the listeners and the empty pool (the tenant
	// and VIP pool are not in this test's catalog).
	var ve *api.ValidationError
	if err := api.ValidateLoadBalancer(d.LB, nil); errors.As(err, &ve) {
		for _, fe := range ve.Errors {
			if strings.HasPrefix(fe.Field, "listeners") || strings.HasPrefix(fe.Field, "pools") {
				t.Errorf("the LB cluster refuses the load balancer: %s: %s", fe.Field, fe.Reason)
			}
		}
	}
	lateSt := d.Gateway.Routes[translate.RouteKey{Kind: translate.KindTCPRoute, Namespace: "shop", Name: "late"}]
	// A later TCPRoute is accepted and counted, and gets no traffic: the
	// listener keeps the older route's pool (want above).
	if len(lateSt) != 1 || condOf(lateSt[0].Conditions, "Accepted").Status != metav1.ConditionTrue {
		t.Errorf("late TCPRoute parents = %+v, want Accepted", lateSt)
	}
	for i, want := range []int32{1, 2, 1, 0} {
		if got := d.Gateway.Listeners[i].AttachedRoutes; got != want {
			t.Errorf("listener %s attachedRoutes = %d, want %d", d.Gateway.Listeners[i].Name, got, want)
		}
	}
}
