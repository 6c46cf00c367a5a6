package translate_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/teapot-lb/teapot-lb/api"
	"github.com/teapot-lb/teapot-lb/tenantsync/translate"
)

// TestGatewayRouteBeyondAPIBoundsIsNotAccepted: an HTTPRoute the LB
// cluster would refuse (a regular expression outside RE2 or too big,
// more matches or backends than a route takes, a timeout over an hour,
// or past what the Gateway's routes may hold together) is not accepted
// (UnsupportedValue, naming why) and adds nothing, while the Gateway's
// other routes are served; the load balancer's routes pass the LB
// cluster's checks.
func TestGatewayRouteBeyondAPIBoundsIsNotAccepted(t *testing.T) {
	gw := gateway("shop", "gw", listener("http", gwv1.HTTPProtocolType, 80, ""))
	web := httpBackends(bref("web", 80, nil))
	regexPath := func(expr string) gwv1.HTTPRouteMatch {
		return gwv1.HTTPRouteMatch{Path: &gwv1.HTTPPathMatch{Type: ptr(gwv1.PathMatchRegularExpression), Value: ptr(expr)}}
	}
	prefix := func(p string) gwv1.HTTPRouteMatch {
		return gwv1.HTTPRouteMatch{Path: &gwv1.HTTPPathMatch{Type: ptr(gwv1.PathMatchPathPrefix), Value: ptr(p)}}
	}
	route := func(name string, sec int, rules ...gwv1.HTTPRouteRule) *gwv1.HTTPRoute {
		return httpRoute("shop", name, sec, []gwv1.ParentReference{parent("gw", "")}, []string{"shop.acme.example"}, rules...)
	}
	good := route("good", 9, gwv1.HTTPRouteRule{Matches: []gwv1.HTTPRouteMatch{prefix("/good")}, BackendRefs: web})
	// bigRegex compiles to about 900 instructions (MaxRegexInsts is 1000).
	bigRegex := func(i int) string { return fmt.Sprintf("/%d/(?:a{178}){5}", i) }
	insts, err := api.CompileRouteRegex(bigRegex(100))
	if err != nil || insts > api.MaxRegexInstsPerLB/2 {
		t.Fatalf("bigRegex: %d instructions, %v; want at most half of MaxRegexInstsPerLB", insts, err)
	}
	// manyRegexes fit MaxRegexInstsPerLB alone, and take more than half
	// of it: two such routes do not fit.
	manyRegexes := func(from int) []gwv1.HTTPRouteMatch {
		var ms []gwv1.HTTPRouteMatch
		for i := range api.MaxRegexInstsPerLB / insts {
			ms = append(ms, regexPath(bigRegex(from+i)))
		}
		return ms
	}
	tests := []struct {
		name string
		bad  *gwv1.HTTPRoute
		// ok are routes before bad that stay accepted.
		ok   []*gwv1.HTTPRoute
		want string // in bad's Accepted message
	}{
		{
			name: "a regular expression outside RE2",
			bad:  route("bad", 2, gwv1.HTTPRouteRule{Matches: []gwv1.HTTPRouteMatch{regexPath("/(?=x)")}, BackendRefs: web}),
			want: "rules[0].matches[0].path",
		},
		{
			name: "a header regular expression over MaxRegexInsts",
			bad: route("bad", 2, gwv1.HTTPRouteRule{Matches: []gwv1.HTTPRouteMatch{{Headers: []gwv1.HTTPHeaderMatch{
				{Type: ptr(gwv1.HeaderMatchRegularExpression), Name: "x-v", Value: "a{1000}b{1000}"}}}}, BackendRefs: web}),
			want: "rules[0].matches[0].headers[0].value",
		},
		{
			name: "more matches than a route takes",
			bad: func() *gwv1.HTTPRoute {
				var ms []gwv1.HTTPRouteMatch
				for i := range api.MaxRouteMatches + 1 {
					ms = append(ms, prefix(fmt.Sprintf("/m%d", i)))
				}
				return route("bad", 2, gwv1.HTTPRouteRule{Matches: ms, BackendRefs: web})
			}(),
			want: "rules[0].matches",
		},
		{
			name: "more backends than a route takes",
			bad: func() *gwv1.HTTPRoute {
				var refs []gwv1.BackendRef
				for range api.MaxRouteBackends + 1 {
					refs = append(refs, bref("api", 8080, nil))
				}
				return route("bad", 2, gwv1.HTTPRouteRule{Matches: []gwv1.HTTPRouteMatch{prefix("/api")}, BackendRefs: httpBackends(refs...)})
			}(),
			want: "rules[0].backends",
		},
		{
			name: "a timeout over an hour, in the second rule",
			bad: route("bad", 2,
				gwv1.HTTPRouteRule{Matches: []gwv1.HTTPRouteMatch{prefix("/fine")}, BackendRefs: web},
				gwv1.HTTPRouteRule{Matches: []gwv1.HTTPRouteMatch{prefix("/slow")}, BackendRefs: web,
					Timeouts: &gwv1.HTTPRouteTimeouts{Request: ptr(gwv1.Duration("2h"))}}),
			want: "rules[1].timeouts.request",
		},
		{
			name: "regular expressions past the Gateway's total",
			ok:   []*gwv1.HTTPRoute{route("first", 1, gwv1.HTTPRouteRule{Matches: manyRegexes(0), BackendRefs: web})},
			bad:  route("bad", 2, gwv1.HTTPRouteRule{Matches: manyRegexes(100), BackendRefs: web}),
			want: "regular expressions compile to",
		},
		{
			name: "routes past the Gateway's total size",
			bad: func() *gwv1.HTTPRoute {
				var ms []gwv1.HTTPRouteMatch
				for i := range api.MaxRouteMatches {
					m := prefix(fmt.Sprintf("/m%d", i))
					for j := range api.MaxMatchConditions {
						m.Headers = append(m.Headers, gwv1.HTTPHeaderMatch{Name: gwv1.HTTPHeaderName(fmt.Sprintf("x-h%d", j)), Value: strings.Repeat("v", 2000)})
					}
					ms = append(ms, m)
				}
				return route("bad", 2, gwv1.HTTPRouteRule{Matches: ms, BackendRefs: web})
			}(),
			want: "the most one Gateway serves",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			objs := append(backendObjsGW(gw), tt.bad, good)
			for _, r := range tt.ok {
				objs = append(objs, r)
			}
			src := gwSources(t, backendObjs(), objs...)
			d := translate.Gateway(gw, src, gwOpts)
			if d.Refused != "" {
				t.Fatalf("Refused = %q", d.Refused)
			}
			accepted := func(name string) metav1.Condition {
				ps := d.Gateway.Routes[translate.RouteKey{Kind: translate.KindHTTPRoute, Namespace: "shop", Name: name}]
				if len(ps) != 1 {
					t.Fatalf("route %s: %d parent statuses, want 1", name, len(ps))
				}
				return condOf(ps[0].Conditions, "Accepted")
			}
			c := accepted("bad")
			if c.Status != metav1.ConditionFalse || c.Reason != string(gwv1.RouteReasonUnsupportedValue) || !strings.Contains(c.Message, tt.want) {
				t.Errorf("bad route Accepted = %s %s %q, want False UnsupportedValue naming %q", c.Status, c.Reason, c.Message, tt.want)
			}
			for _, r := range append(tt.ok, good) {
				if c := accepted(r.Name); c.Status != metav1.ConditionTrue {
					t.Errorf("route %s Accepted = %s %s %q, want True", r.Name, c.Status, c.Reason, c.Message)
				}
			}
			if n, want := d.Gateway.Listeners[0].AttachedRoutes, int32(1+len(tt.ok)); n != want {
				t.Errorf("attachedRoutes = %d, want %d (the bad route does not count)", n, want)
			}
			if want := 1 + len(tt.ok); len(d.LB.Routes) != want {
				t.Errorf("load balancer has %d routes, want %d: the bad route adds none", len(d.LB.Routes), want)
			}
			for k := range d.LB.Pools {
				if k != "web-80" {
					t.Errorf("pool %s is left from the route not accepted", k)
				}
			}
			// The LB cluster's own checks of the routes pass (the tenant and
			// VIP pool are not in this test's catalog).
			var ve *api.ValidationError
			if err := api.ValidateLoadBalancer(d.LB, nil); errors.As(err, &ve) {
				for _, fe := range ve.Errors {
					if fe.Field == "" || strings.HasPrefix(fe.Field, "routes") {
						t.Errorf("the LB cluster refuses the load balancer: %s: %s", fe.Field, fe.Reason)
					}
				}
			}
		})
	}
}

// backendObjsGW is the Gateway API objects of a test: the class and gw.
func backendObjsGW(gw *gwv1.Gateway) []runtime.Object {
	return []runtime.Object{gwClass("teapot", translate.GatewayController), gw}
}
