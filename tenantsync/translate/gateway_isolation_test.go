package translate_test

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/runtime"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"

	pb "github.com/teapot-lb/teapot-lb/api/proto/teapotv1"
	"github.com/teapot-lb/teapot-lb/tenantsync/translate"
)

// isolationGateway is the Gateway of the suite's listener isolation test:
// four http listeners of port 80, from any host to one exact host, each
// with a route that names it and every hostname of the others.
func isolationGateway() (*gwv1.Gateway, []*gwv1.HTTPRoute) {
	gw := gateway("shop", "gw",
		listener("empty", gwv1.HTTPProtocolType, 80, ""),
		listener("wild", gwv1.HTTPProtocolType, 80, "*.example.com"),
		listener("wild-foo", gwv1.HTTPProtocolType, 80, "*.foo.example.com"),
		listener("abc", gwv1.HTTPProtocolType, 80, "abc.foo.example.com"),
		listener("other", gwv1.HTTPProtocolType, 8080, ""),
	)
	all := []string{"bar.com", "*.example.com", "*.foo.example.com", "abc.foo.example.com"}
	var routes []*gwv1.HTTPRoute
	for i, l := range []string{"empty", "wild", "wild-foo", "abc"} {
		routes = append(routes, httpRoute("shop", "to-"+l, i+1, []gwv1.ParentReference{parent("gw", l)}, all,
			gwv1.HTTPRouteRule{
				Matches:     []gwv1.HTTPRouteMatch{{Path: &gwv1.HTTPPathMatch{Type: ptr(gwv1.PathMatchPathPrefix), Value: ptr("/" + l)}}},
				BackendRefs: httpBackends(bref("web", 80, nil)),
			}))
	}
	return gw, routes
}

// routeSummary is "host path ports" of each LB route, "404" for notFound.
func routeSummary(rs []*pb.Route) []string {
	var out []string
	for _, r := range rs {
		path := r.GetPath()
		if len(r.GetMatches()) > 0 {
			path = r.GetMatches()[0].GetPath()
		}
		if r.GetNotFound() {
			path = "404"
		}
		out = append(out, fmt.Sprintf("%s %s %v", r.GetHost(), path, r.GetPorts()))
	}
	slices.Sort(out)
	return out
}

// TestGatewayListenerIsolation: a route serves, on its listener's port,
// only the hostnames no more specific listener of the port covers, and
// each listener hostname that a less specific one also covers ends in a
// notFound route, so that its requests never reach the other listener's
// routes.
func TestGatewayListenerIsolation(t *testing.T) {
	t.Parallel()
	gw, routes := isolationGateway()
	objs := []runtime.Object{gwClass("teapot", translate.GatewayController), gw}
	for _, r := range routes {
		objs = append(objs, r)
	}
	src := gwSources(t, backendObjs(), objs...)
	o := gwOpts
	o.NotFoundRoutes = true
	d := translate.Gateway(gw, src, o)
	if d.Refused != "" {
		t.Fatalf("refused: %s", d.Refused)
	}
	want := []string{
		"*.example.com /wild [80]",
		"*.example.com 404 [80]",
		"*.foo.example.com /wild-foo [80]",
		"*.foo.example.com 404 [80]",
		"abc.foo.example.com /abc [80]",
		"abc.foo.example.com 404 [80]",
		"bar.com /empty [80]",
	}
	if got := routeSummary(d.LB.GetRoutes()); !slices.Equal(got, want) {
		t.Errorf("routes:\n got %q\nwant %q", got, want)
	}
	// The notFound routes come after every route they stop.
	rs := d.LB.GetRoutes()
	if i := slices.IndexFunc(rs, func(r *pb.Route) bool { return r.GetNotFound() }); i < 0 || slices.ContainsFunc(rs[i:], func(r *pb.Route) bool { return !r.GetNotFound() }) {
		t.Errorf("notFound routes are not last: %q", routeSummary(rs))
	}
	// Every route is accepted and counted on its own listener.
	for _, r := range routes {
		st := d.Gateway.Routes[translate.RouteKey{Kind: translate.KindHTTPRoute, Namespace: "shop", Name: r.Name}]
		if len(st) != 1 || condOf(st[0].Conditions, "Accepted").Status != "True" {
			t.Errorf("%s: %+v, want Accepted", r.Name, st)
		}
	}
	for _, l := range d.Gateway.Listeners[:4] {
		if l.AttachedRoutes != 1 {
			t.Errorf("listener %s: attachedRoutes %d, want 1", l.Name, l.AttachedRoutes)
		}
	}
}

// TestGatewayListenerIsolationOlderCluster: on an LB cluster whose hosts
// do not all serve notFound routes, the Gateway is served without them
// and its Accepted condition says that the listeners are not isolated.
func TestGatewayListenerIsolationOlderCluster(t *testing.T) {
	t.Parallel()
	gw, routes := isolationGateway()
	objs := []runtime.Object{gwClass("teapot", translate.GatewayController), gw}
	for _, r := range routes {
		objs = append(objs, r)
	}
	d := translate.Gateway(gw, gwSources(t, backendObjs(), objs...), gwOpts)
	if slices.ContainsFunc(d.LB.GetRoutes(), func(r *pb.Route) bool { return r.GetNotFound() }) {
		t.Errorf("notFound routes sent to a cluster without them: %q", routeSummary(d.LB.GetRoutes()))
	}
	if c := d.Gateway.Accepted; c.Status != "True" || !strings.Contains(c.Message, "below feature level 5") {
		t.Errorf("Accepted %s %q, want True with the isolation warning", c.Status, c.Message)
	}
}

// TestGatewayNoIsolationWithoutOverlap: listeners whose hostnames do not
// overlap need no notFound route.
func TestGatewayNoIsolationWithoutOverlap(t *testing.T) {
	t.Parallel()
	gw := gateway("shop", "gw",
		listener("a", gwv1.HTTPProtocolType, 80, "a.example.com"),
		listener("b", gwv1.HTTPProtocolType, 80, "*.shop.example"),
		listener("any", gwv1.HTTPProtocolType, 8080, ""),
	)
	r := httpRoute("shop", "r", 1, []gwv1.ParentReference{parent("gw", "")}, nil, gwv1.HTTPRouteRule{BackendRefs: httpBackends(bref("web", 80, nil))})
	o := gwOpts
	o.NotFoundRoutes = true
	d := translate.Gateway(gw, gwSources(t, backendObjs(), gwClass("teapot", translate.GatewayController), gw, r), o)
	want := []string{"*.shop.example / [80]", "a.example.com / [80]", " / [8080]"}
	slices.Sort(want)
	if got := routeSummary(d.LB.GetRoutes()); !slices.Equal(got, want) {
		t.Errorf("routes:\n got %q\nwant %q", got, want)
	}
}

// TestGatewayListenerIsolationGRPC: a GRPCRoute of the listener without a
// hostname does not serve a name a wildcard listener of its port covers,
// on that port; on another port without such a listener it does.
func TestGatewayListenerIsolationGRPC(t *testing.T) {
	t.Parallel()
	gw := gateway("shop", "gw",
		listener("any", gwv1.HTTPProtocolType, 80, ""),
		listener("wild", gwv1.HTTPProtocolType, 80, "*.example.com"),
		listener("other", gwv1.HTTPProtocolType, 8080, ""),
	)
	r := &gwv1.GRPCRoute{ObjectMeta: meta("shop", "g", 1)}
	r.Spec.ParentRefs = []gwv1.ParentReference{parent("gw", "any"), parent("gw", "other")}
	r.Spec.Hostnames = []gwv1.Hostname{"grpc.example.com", "grpc.acme.example"}
	r.Spec.Rules = []gwv1.GRPCRouteRule{{BackendRefs: []gwv1.GRPCBackendRef{{BackendRef: bref("api", 8080, nil)}}}}
	o := gwOpts
	o.NotFoundRoutes = true
	d := translate.Gateway(gw, gwSources(t, backendObjs(), gwClass("teapot", translate.GatewayController), gw, r), o)
	want := []string{"*.example.com 404 [80]", "grpc.acme.example / []", "grpc.example.com / [8080]"}
	if got := routeSummary(d.LB.GetRoutes()); !slices.Equal(got, want) {
		t.Errorf("routes:\n got %q\nwant %q", got, want)
	}
}

// TestGatewayListenerIsolationOutsideDomains: a listener hostname outside
// the tenant's domains gets no notFound route (the LB cluster would
// refuse the whole load balancer for it); the Gateway says so.
func TestGatewayListenerIsolationOutsideDomains(t *testing.T) {
	t.Parallel()
	gw, routes := isolationGateway()
	objs := []runtime.Object{gwClass("teapot", translate.GatewayController), gw}
	for _, r := range routes {
		objs = append(objs, r)
	}
	o := gwOpts
	o.NotFoundRoutes, o.Domains = true, "foo.example.com,bar.com"
	d := translate.Gateway(gw, gwSources(t, backendObjs(), objs...), o)
	var barriers []string
	for _, r := range d.LB.GetRoutes() {
		if r.GetNotFound() {
			barriers = append(barriers, r.GetHost())
		}
	}
	if want := []string{"*.foo.example.com", "abc.foo.example.com"}; !slices.Equal(barriers, want) {
		t.Errorf("notFound routes for %q, want %q", barriers, want)
	}
	if c := d.Gateway.Accepted; c.Status != "True" || !strings.Contains(c.Message, "*.example.com is outside the tenant's domains") {
		t.Errorf("Accepted %s %q, want True with the domains warning", c.Status, c.Message)
	}
}
