package translate_test

import (
	"testing"

	"google.golang.org/protobuf/proto"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"

	pb "github.com/teapot-lb/teapot-lb/api/proto/teapotv1"
	"github.com/teapot-lb/teapot-lb/tenantsync/translate"
)

// terminate is a TLS listener in Terminate mode with certificateRefs to
// Secrets of the Gateway's namespace.
func terminate(name, host string, secrets ...string) gwv1.Listener {
	l := listener(name, gwv1.TLSProtocolType, 443, host)
	l.TLS = &gwv1.ListenerTLSConfig{Mode: ptr(gwv1.TLSModeTerminate)}
	for _, s := range secrets {
		l.TLS.CertificateRefs = append(l.TLS.CertificateRefs, gwv1.SecretObjectReference{Name: gwv1.ObjectName(s)})
	}
	return l
}

// TestGatewayTLSTerminate: TLS listeners in Terminate mode (the v1.6
// TLSRouteModeTerminate and TLSRouteModeMixed features) become server-name
// routes with terminate on the port's tls-passthrough LB listener, which
// offers the listeners' certificates; a Passthrough listener of the same
// port keeps its names untouched. A cluster below feature level 5 gets
// the listener refused (UnsupportedValue); a Terminate listener without
// certificates is not programmed; a route for any name has nothing to
// terminate on a listener without hostname.
func TestGatewayTLSTerminate(t *testing.T) {
	t.Parallel()
	opts := gwOpts
	opts.TLSTerminate = true
	type lw struct {
		accepted, resolved, programmed string // reasons
		attached                       int32
	}
	tests := []struct {
		name      string
		opts      translate.Options
		listeners []gwv1.Listener
		routes    []*gwv1.TLSRoute
		want      map[string]lw
		lb        []*pb.Listener
		routeWant map[string]string // route -> Accepted reason ("" accepted)
	}{
		{
			name:      "mixed: one terminated name and one passed through on one port",
			opts:      opts,
			listeners: []gwv1.Listener{terminate("t", "shop.acme.example", "shop-tls"), passthrough("p", "abc.acme.example")},
			routes:    []*gwv1.TLSRoute{tlsRoute("term", 1, "web", "shop.acme.example"), tlsRoute("pass", 2, "api", "abc.acme.example")},
			want: map[string]lw{
				"t": {"Accepted", "ResolvedRefs", "Programmed", 1},
				"p": {"Accepted", "ResolvedRefs", "Programmed", 1},
			},
			lb: []*pb.Listener{{Port: 443, Protocol: "tls-passthrough", Pool: translate.UnroutedPool,
				Tls:       &pb.TLSPolicy{Certificates: []string{"k8s-shop-shop-tls"}},
				SniRoutes: []*pb.SNIRoute{{Host: "shop.acme.example", Pool: "web-80", Terminate: true}, {Host: "abc.acme.example", Pool: "api-8080"}}}},
			routeWant: map[string]string{"term": "", "pass": ""},
		},
		{
			name:      "a cluster below level 5 refuses Terminate",
			opts:      gwOpts,
			listeners: []gwv1.Listener{terminate("t", "shop.acme.example", "shop-tls")},
			routes:    []*gwv1.TLSRoute{tlsRoute("term", 1, "web", "shop.acme.example")},
			want:      map[string]lw{"t": {string(gwv1.ListenerReasonUnsupportedValue), "ResolvedRefs", "Invalid", 0}},
			routeWant: map[string]string{"term": string(gwv1.RouteReasonNotAllowedByListeners)},
		},
		{
			name:      "no certificateRefs",
			opts:      opts,
			listeners: []gwv1.Listener{terminate("t", "shop.acme.example")},
			routes:    []*gwv1.TLSRoute{tlsRoute("term", 1, "web", "shop.acme.example")},
			want:      map[string]lw{"t": {"Accepted", string(gwv1.ListenerReasonInvalidCertificateRef), "Invalid", 1}},
			routeWant: map[string]string{"term": ""},
		},
		{
			name:      "a route for any name on a listener for any name",
			opts:      opts,
			listeners: []gwv1.Listener{terminate("t", "", "shop-tls")},
			routes:    []*gwv1.TLSRoute{tlsRoute("any", 1, "web"), tlsRoute("named", 2, "api", "shop.acme.example")},
			want:      map[string]lw{"t": {"Accepted", "ResolvedRefs", "Programmed", 1}},
			lb: []*pb.Listener{{Port: 443, Protocol: "tls-passthrough", Pool: translate.UnroutedPool,
				Tls:       &pb.TLSPolicy{Certificates: []string{"k8s-shop-shop-tls"}},
				SniRoutes: []*pb.SNIRoute{{Host: "shop.acme.example", Pool: "api-8080", Terminate: true}}}},
			routeWant: map[string]string{"any": string(gwv1.RouteReasonNoMatchingListenerHostname), "named": ""},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			gw := gateway("shop", "gw", tc.listeners...)
			objs := []runtime.Object{gwClass("teapot", translate.GatewayController), gw}
			for _, r := range tc.routes {
				objs = append(objs, r)
			}
			d := translate.Gateway(gw, gwSources(t, backendObjs(tlsSecret(t, "shop", "shop-tls")), objs...), tc.opts)
			for _, ls := range d.Gateway.Listeners {
				w, ok := tc.want[string(ls.Name)]
				if !ok {
					t.Fatalf("listener %s not expected", ls.Name)
				}
				got := lw{condOf(ls.Conditions, "Accepted").Reason, condOf(ls.Conditions, "ResolvedRefs").Reason, condOf(ls.Conditions, "Programmed").Reason, ls.AttachedRoutes}
				if got != w {
					t.Errorf("listener %s: %+v, want %+v (%v)", ls.Name, got, w, ls.Conditions)
				}
				if w.accepted == "Accepted" && (len(ls.SupportedKinds) != 1 || ls.SupportedKinds[0].Kind != "TLSRoute") {
					t.Errorf("listener %s: supportedKinds %v, want TLSRoute", ls.Name, ls.SupportedKinds)
				}
			}
			if tc.lb != nil {
				if len(d.LB.GetListeners()) != len(tc.lb) {
					t.Fatalf("LB listeners %v, want %v", d.LB.GetListeners(), tc.lb)
				}
				for i := range tc.lb {
					if !proto.Equal(d.LB.Listeners[i], tc.lb[i]) {
						t.Errorf("LB listener %d:\n %v\nwant\n %v", i, d.LB.Listeners[i], tc.lb[i])
					}
				}
				if len(d.Gateway.Certificates) != 1 || d.Gateway.Certificates[0].Secret != "shop-tls" {
					t.Errorf("certificates %v, want Secret shop/shop-tls uploaded", d.Gateway.Certificates)
				}
			}
			for name, reason := range tc.routeWant {
				st := d.Gateway.Routes[translate.RouteKey{Kind: translate.KindTLSRoute, Namespace: "shop", Name: name}]
				if len(st) != 1 {
					t.Fatalf("route %s: parents %+v", name, st)
				}
				c := condOf(st[0].Conditions, "Accepted")
				if got := map[bool]string{true: "", false: c.Reason}[c.Status == metav1.ConditionTrue]; got != reason {
					t.Errorf("route %s: Accepted %s %s (%s), want reason %q", name, c.Status, c.Reason, c.Message, reason)
				}
			}
		})
	}
}
