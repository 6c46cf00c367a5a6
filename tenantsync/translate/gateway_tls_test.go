package translate_test

import (
	"fmt"
	"testing"

	"google.golang.org/protobuf/proto"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"

	pb "github.com/teapot-lb/teapot-lb/api/proto/teapotv1"
	"github.com/teapot-lb/teapot-lb/tenantsync/translate"
)

// tlsRoute is a TLSRoute of namespace shop to Service web (port 80) or
// api (port 8080), attached to Gateway gw.
func tlsRoute(name string, sec int, backend string, hosts ...string) *gwv1.TLSRoute {
	r := &gwv1.TLSRoute{ObjectMeta: meta("shop", name, sec)}
	r.Spec.ParentRefs = []gwv1.ParentReference{parent("gw", "")}
	for _, h := range hosts {
		r.Spec.Hostnames = append(r.Spec.Hostnames, gwv1.Hostname(h))
	}
	port := map[string]int32{"web": 80, "api": 8080}[backend]
	r.Spec.Rules = []gwv1.TLSRouteRule{{BackendRefs: []gwv1.BackendRef{bref(backend, port, nil)}}}
	return r
}

func passthrough(name, host string) gwv1.Listener {
	l := listener(name, gwv1.TLSProtocolType, 443, host)
	l.TLS = &gwv1.ListenerTLSConfig{Mode: ptr(gwv1.TLSModePassthrough)}
	return l
}

// TestGatewayTLSRoutesBySNI is the translation table of TLSRoutes on
// passthrough listeners: each route serves the intersection of its
// hostnames with the listener's, by server name; names no route covers go
// to the empty pool (the connection is reset); an older route keeps a name
// a later one also names.
func TestGatewayTLSRoutesBySNI(t *testing.T) {
	sni := func(kv ...string) []*pb.SNIRoute {
		var out []*pb.SNIRoute
		for i := 0; i < len(kv); i += 2 {
			out = append(out, &pb.SNIRoute{Host: kv[i], Pool: kv[i+1]})
		}
		return out
	}
	type routeWant struct {
		name, reason string // reason "" for Accepted
	}
	tests := []struct {
		name      string
		listeners []gwv1.Listener
		routes    []*gwv1.TLSRoute
		pool      string // the listener's pool
		sni       []*pb.SNIRoute
		want      []routeWant
		attached  []int32
	}{
		{
			name:      "a wildcard route on an exact listener serves the listener's name",
			listeners: []gwv1.Listener{passthrough("l", "abc.acme.example")},
			routes:    []*gwv1.TLSRoute{tlsRoute("r1", 1, "web", "*.acme.example")},
			pool:      translate.UnroutedPool, sni: sni("abc.acme.example", "web-80"),
			want: []routeWant{{"r1", ""}}, attached: []int32{1},
		},
		{
			name:      "a more specific wildcard listener: the exact route and the narrowed wildcard",
			listeners: []gwv1.Listener{passthrough("l", "*.acme.example")},
			routes:    []*gwv1.TLSRoute{tlsRoute("r1", 1, "web", "abc.acme.example"), tlsRoute("r2", 2, "api", "*.example")},
			pool:      translate.UnroutedPool, sni: sni("abc.acme.example", "web-80", "*.acme.example", "api-8080"),
			want: []routeWant{{"r1", ""}, {"r2", ""}}, attached: []int32{2},
		},
		{
			name:      "a less specific wildcard listener keeps the routes' names",
			listeners: []gwv1.Listener{passthrough("l", "*.example")},
			routes:    []*gwv1.TLSRoute{tlsRoute("r1", 1, "web", "abc.acme.example"), tlsRoute("r2", 2, "api", "*.acme.example")},
			pool:      translate.UnroutedPool, sni: sni("abc.acme.example", "web-80", "*.acme.example", "api-8080"),
			want: []routeWant{{"r1", ""}, {"r2", ""}}, attached: []int32{2},
		},
		{
			name:      "a listener without hostname",
			listeners: []gwv1.Listener{passthrough("l", "")},
			routes:    []*gwv1.TLSRoute{tlsRoute("r1", 1, "web", "abc.acme.example"), tlsRoute("r2", 2, "api", "*.example")},
			pool:      translate.UnroutedPool, sni: sni("abc.acme.example", "web-80", "*.example", "api-8080"),
			want: []routeWant{{"r1", ""}, {"r2", ""}}, attached: []int32{2},
		},
		{
			name:      "a route without hostnames on a listener without one takes every other name",
			listeners: []gwv1.Listener{passthrough("l", "")},
			routes:    []*gwv1.TLSRoute{tlsRoute("r1", 1, "web", "abc.acme.example"), tlsRoute("any", 2, "api")},
			pool:      "api-8080", sni: sni("abc.acme.example", "web-80"),
			want: []routeWant{{"r1", ""}, {"any", ""}}, attached: []int32{2},
		},
		{
			name:      "no intersection",
			listeners: []gwv1.Listener{passthrough("l", "abc.acme.example")},
			routes:    []*gwv1.TLSRoute{tlsRoute("r1", 1, "web", "other.acme.example")},
			pool:      translate.UnroutedPool,
			want:      []routeWant{{"r1", string(gwv1.RouteReasonNoMatchingListenerHostname)}}, attached: []int32{0},
		},
		{
			name:      "an older route keeps a name; a later one with only that name is not accepted",
			listeners: []gwv1.Listener{passthrough("l", "")},
			routes: []*gwv1.TLSRoute{tlsRoute("old", 1, "web", "abc.acme.example"), tlsRoute("late", 2, "api", "abc.acme.example"),
				tlsRoute("more", 3, "api", "abc.acme.example", "new.acme.example")},
			pool: translate.UnroutedPool, sni: sni("abc.acme.example", "web-80", "new.acme.example", "api-8080"),
			want: []routeWant{{"old", ""}, {"late", translate.ReasonListenerTaken}, {"more", ""}}, attached: []int32{2},
		},
		{
			name:      "two listeners of one port share the LB listener",
			listeners: []gwv1.Listener{passthrough("a", "abc.acme.example"), passthrough("w", "*.shop.acme.example")},
			routes:    []*gwv1.TLSRoute{tlsRoute("r1", 1, "web")},
			pool:      translate.UnroutedPool, sni: sni("abc.acme.example", "web-80", "*.shop.acme.example", "web-80"),
			want: []routeWant{{"r1", ""}}, attached: []int32{1, 1},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			gw := gateway("shop", "gw", tc.listeners...)
			objs := []runtime.Object{gwClass("teapot", translate.GatewayController), gw}
			for _, r := range tc.routes {
				objs = append(objs, r)
			}
			d := translate.Gateway(gw, gwSources(t, backendObjs(), objs...), gwOpts)
			if len(d.LB.GetListeners()) != 1 {
				t.Fatalf("listeners %v", d.LB.GetListeners())
			}
			l := d.LB.Listeners[0]
			if l.GetProtocol() != "tls-passthrough" || l.GetPool() != tc.pool {
				t.Errorf("listener %v, want pool %s", l, tc.pool)
			}
			if len(l.GetSniRoutes()) != len(tc.sni) {
				t.Fatalf("sniRoutes %v, want %v", l.GetSniRoutes(), tc.sni)
			}
			for i := range tc.sni {
				if !proto.Equal(l.SniRoutes[i], tc.sni[i]) {
					t.Errorf("sniRoutes[%d] = %v, want %v", i, l.SniRoutes[i], tc.sni[i])
				}
			}
			for _, p := range append(tc.sni, &pb.SNIRoute{Pool: tc.pool}) {
				if d.LB.Pools[p.Pool] == nil {
					t.Errorf("pool %s is missing from %v", p.Pool, d.LB.Pools)
				}
			}
			for _, w := range tc.want {
				st := d.Gateway.Routes[translate.RouteKey{Kind: translate.KindTLSRoute, Namespace: "shop", Name: w.name}]
				if len(st) != 1 {
					t.Fatalf("route %s: parents %+v", w.name, st)
				}
				c := condOf(st[0].Conditions, "Accepted")
				if got := map[bool]string{true: "", false: c.Reason}[c.Status == metav1.ConditionTrue]; got != w.reason {
					t.Errorf("route %s: Accepted %s %s (%s), want reason %q", w.name, c.Status, c.Reason, c.Message, w.reason)
				}
			}
			var got []int32
			for _, ls := range d.Gateway.Listeners {
				got = append(got, ls.AttachedRoutes)
			}
			if fmt.Sprint(got) != fmt.Sprint(tc.attached) {
				t.Errorf("attachedRoutes %v, want %v", got, tc.attached)
			}
		})
	}
}
