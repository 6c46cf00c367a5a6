package translate_test

import (
	"fmt"
	"testing"

	gwv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/teapot-lb/teapot-lb/tenantsync/translate"
)

// TestGatewayRoutePorts: an HTTPRoute is served on the ports of the
// listeners it attached to (parentRefs port and sectionName), and on every
// port (no ports) when it attached to all of the Gateway's http listeners.
func TestGatewayRoutePorts(t *testing.T) {
	gw := gateway("shop", "gw",
		listener("l1", gwv1.HTTPProtocolType, 80, "foo.acme.example"),
		listener("l2", gwv1.HTTPProtocolType, 8080, "foo.acme.example"),
		listener("l3", gwv1.HTTPProtocolType, 8080, "bar.acme.example"),
		listener("l4", gwv1.HTTPProtocolType, 8090, "foo.acme.example"),
		listener("l5", gwv1.HTTPProtocolType, 8090, "bar.acme.example"))
	byPort := func(name string, sec int, port int32, section string) *gwv1.HTTPRoute {
		p := parent("gw", section)
		if port != 0 {
			p.Port = &port
		}
		return httpRoute("shop", name, sec, []gwv1.ParentReference{p}, nil, gwv1.HTTPRouteRule{BackendRefs: httpBackends(bref("web", 80, nil))})
	}
	src := gwSources(t, backendObjs(), gwClass("teapot", translate.GatewayController), gw,
		byPort("v1", 1, 80, ""), byPort("v2", 2, 8080, ""), byPort("v3", 3, 8090, "l4"), byPort("all", 4, 0, ""))
	d := translate.Gateway(gw, src, gwOpts)
	var got []string
	for _, r := range d.LB.GetRoutes() {
		got = append(got, fmt.Sprintf("%s%v", r.GetHost(), r.GetPorts()))
	}
	want := []string{
		"foo.acme.example[80]",        // v1
		"bar.acme.example[8080]",      // v2, on l3
		"foo.acme.example[8080]",      // v2, on l2
		"foo.acme.example[8090]",      // v3: l4 only
		"bar.acme.example[8080 8090]", // all, where bar is a listener's name
		"foo.acme.example[]",          // all: every port has a foo listener
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("routes %v\nwant   %v", got, want)
	}
}
