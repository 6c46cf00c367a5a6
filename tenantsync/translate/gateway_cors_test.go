package translate_test

import (
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"

	pb "github.com/teapot-lb/teapot-lb/api/proto/teapotv1"
	"github.com/teapot-lb/teapot-lb/tenantsync/translate"
)

// An HTTPRoute's CORS filter becomes the route's cors filter; one the LB
// cluster would refuse leaves the route not accepted, the Gateway served.
func TestGatewayCORSFilter(t *testing.T) {
	t.Parallel()
	gw := gateway("shop", "gw", listener("http", gwv1.HTTPProtocolType, 80, ""))
	cors := func(c gwv1.HTTPCORSFilter) *gwv1.HTTPRoute {
		return httpRoute("shop", "r", 1, []gwv1.ParentReference{parent("gw", "")}, nil, gwv1.HTTPRouteRule{
			Filters:     []gwv1.HTTPRouteFilter{{Type: gwv1.HTTPRouteFilterCORS, CORS: &c}},
			BackendRefs: httpBackends(bref("web", 80, nil)),
		})
	}
	ok := cors(gwv1.HTTPCORSFilter{
		AllowOrigins: []gwv1.CORSOrigin{"https://www.foo.com", "https://*.bar.com"}, AllowMethods: []gwv1.HTTPMethodWithWildcard{"GET", "OPTIONS"},
		AllowHeaders: []gwv1.HTTPHeaderName{"x-header-1"}, ExposeHeaders: []gwv1.HTTPHeaderName{"x-header-3"}, AllowCredentials: ptr(true), MaxAge: 3600,
	})
	d := translate.Gateway(gw, gwSources(t, backendObjs(), gwClass("teapot", translate.GatewayController), gw, ok), gwOpts)
	want := &pb.RouteFilter{Cors: &pb.CORS{AllowOrigins: []string{"https://www.foo.com", "https://*.bar.com"}, AllowMethods: []string{"GET", "OPTIONS"},
		AllowHeaders: []string{"x-header-1"}, ExposeHeaders: []string{"x-header-3"}, AllowCredentials: true, MaxAge: 3600}}
	if d.Refused != "" || len(d.LB.GetRoutes()) != 1 || len(d.LB.Routes[0].Filters) != 1 || !proto.Equal(d.LB.Routes[0].Filters[0], want) {
		t.Fatalf("refused %q, routes %v", d.Refused, d.LB.GetRoutes())
	}

	bad := cors(gwv1.HTTPCORSFilter{AllowOrigins: []gwv1.CORSOrigin{"*"}, ExposeHeaders: []gwv1.HTTPHeaderName{"*"}, AllowCredentials: ptr(true)})
	d = translate.Gateway(gw, gwSources(t, backendObjs(), gwClass("teapot", translate.GatewayController), gw, bad), gwOpts)
	ps := d.Gateway.Routes[translate.RouteKey{Kind: translate.KindHTTPRoute, Namespace: "shop", Name: "r"}]
	if d.Refused != "" || len(d.LB.GetRoutes()) != 0 || len(ps) != 1 {
		t.Fatalf("refused %q, routes %v, parents %+v", d.Refused, d.LB.GetRoutes(), ps)
	}
	if c := condOf(ps[0].Conditions, "Accepted"); c.Status != metav1.ConditionFalse || c.Reason != "UnsupportedValue" || !strings.Contains(c.Message, "exposeHeaders") {
		t.Errorf("Accepted = %+v", c)
	}
}
