package translate_test

import (
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"

	pb "github.com/teapot-lb/teapot-lb/api/proto/teapotv1"
	"github.com/teapot-lb/teapot-lb/tenantsync/syncspec"
	"github.com/teapot-lb/teapot-lb/tenantsync/translate"
)

// TestGatewayListenerStatus is the table of listener conditions: protocol,
// TLS mode, certificateRefs and ReferenceGrants, allowed kinds, conflicts.
func TestGatewayListenerStatus(t *testing.T) {
	https := func(name string, port int32, host string, refs ...gwv1.SecretObjectReference) gwv1.Listener {
		l := listener(name, gwv1.HTTPSProtocolType, port, host)
		l.TLS = &gwv1.ListenerTLSConfig{CertificateRefs: refs}
		return l
	}
	secret := func(ns, name string) gwv1.SecretObjectReference {
		r := gwv1.SecretObjectReference{Name: gwv1.ObjectName(name)}
		if ns != "" {
			r.Namespace = ptr(gwv1.Namespace(ns))
		}
		return r
	}
	type want struct {
		listener                 string
		accepted, resolved, prog string // condition reasons
		conflicted               bool
		kinds                    []string
	}
	tests := []struct {
		name      string
		core      []runtime.Object
		gw        []runtime.Object
		listeners []gwv1.Listener
		want      []want
		lbL       []*pb.Listener
		certs     []translate.CertificateSource
	}{
		{
			name:      "HTTPS with a Secret of the Gateway's namespace",
			core:      []runtime.Object{tlsSecret(t, "shop", "shop-tls")},
			listeners: []gwv1.Listener{https("https", 443, "shop.acme.example", secret("", "shop-tls"))},
			want:      []want{{"https", "Accepted", "ResolvedRefs", "Programmed", false, []string{"HTTPRoute", "GRPCRoute"}}},
			lbL:       []*pb.Listener{{Port: 443, Protocol: "https", Tls: &pb.TLSPolicy{Certificates: []string{"k8s-shop-shop-tls"}}}},
			certs:     []translate.CertificateSource{{Name: "k8s-shop-shop-tls", Namespace: "shop", Secret: "shop-tls"}},
		},
		{
			name:      "a missing Secret, a Secret in another namespace without a grant",
			core:      []runtime.Object{tlsSecret(t, "certs", "wild")},
			listeners: []gwv1.Listener{https("missing", 443, "a.acme.example", secret("", "nope")), https("other", 443, "b.acme.example", secret("certs", "wild"))},
			want: []want{
				{"missing", "Accepted", "InvalidCertificateRef", "Invalid", false, []string{"HTTPRoute", "GRPCRoute"}},
				{"other", "Accepted", "RefNotPermitted", "Invalid", false, []string{"HTTPRoute", "GRPCRoute"}},
			},
		},
		{
			name:      "a ReferenceGrant lets the Gateway use a Secret of another namespace",
			core:      []runtime.Object{tlsSecret(t, "certs", "wild")},
			gw:        []runtime.Object{grant("certs", "Gateway", "shop", "Secret")},
			listeners: []gwv1.Listener{https("https", 443, "*.acme.example", secret("certs", "wild"))},
			want:      []want{{"https", "Accepted", "ResolvedRefs", "Programmed", false, []string{"HTTPRoute", "GRPCRoute"}}},
			lbL:       []*pb.Listener{{Port: 443, Protocol: "https", Tls: &pb.TLSPolicy{Certificates: []string{"k8s-certs-wild"}}}},
			certs:     []translate.CertificateSource{{Name: "k8s-certs-wild", Namespace: "certs", Secret: "wild"}},
		},
		{
			name: "a Secret that holds no key pair",
			core: []runtime.Object{&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "bad"}, Type: corev1.SecretTypeTLS,
				Data: map[string][]byte{corev1.TLSCertKey: []byte("x"), corev1.TLSPrivateKeyKey: []byte("y")}}},
			listeners: []gwv1.Listener{https("https", 443, "", secret("", "bad"))},
			want:      []want{{"https", "Accepted", "InvalidCertificateRef", "Invalid", false, []string{"HTTPRoute", "GRPCRoute"}}},
		},
		{
			name: "unsupported protocol, TLS without passthrough, kinds that cannot attach",
			listeners: func() []gwv1.Listener {
				tls := listener("tls-term", gwv1.TLSProtocolType, 8443, "")
				kinds := listener("kinds", gwv1.HTTPProtocolType, 80, "")
				kinds.AllowedRoutes = &gwv1.AllowedRoutes{Kinds: []gwv1.RouteGroupKind{{Kind: "TCPRoute"}, {Kind: "HTTPRoute"}}}
				return []gwv1.Listener{listener("sctp", "SCTP", 9, ""), tls, kinds}
			}(),
			want: []want{
				{"sctp", "UnsupportedProtocol", "ResolvedRefs", "Invalid", false, []string{}},
				{"tls-term", "UnsupportedValue", "ResolvedRefs", "Invalid", false, []string{}}, // not accepted: no route kind
				{"kinds", "Accepted", "InvalidRouteKinds", "Programmed", false, []string{"HTTPRoute"}},
			},
			lbL: []*pb.Listener{{Port: 80, Protocol: "http"}},
		},
		{
			name: "conflicts: HTTP and HTTPS on one port, two HTTP listeners of one hostname; TCP and UDP share a port",
			core: []runtime.Object{tlsSecret(t, "shop", "shop-tls")},
			listeners: []gwv1.Listener{
				listener("a", gwv1.HTTPProtocolType, 80, "a.acme.example"),
				listener("b", gwv1.HTTPProtocolType, 80, "b.acme.example"),
				listener("a-again", gwv1.HTTPProtocolType, 80, "a.acme.example"),
				https("tls-on-80", 80, "c.acme.example", secret("", "shop-tls")),
				listener("tcp", gwv1.TCPProtocolType, 53, ""),
				listener("udp", gwv1.UDPProtocolType, 53, ""),
			},
			want: []want{
				{"a", "Accepted", "ResolvedRefs", "Programmed", false, []string{"HTTPRoute", "GRPCRoute"}},
				{"b", "Accepted", "ResolvedRefs", "Programmed", false, []string{"HTTPRoute", "GRPCRoute"}},
				{"a-again", "Accepted", "ResolvedRefs", "Invalid", true, []string{"HTTPRoute", "GRPCRoute"}},
				{"tls-on-80", "Accepted", "ResolvedRefs", "Invalid", true, []string{"HTTPRoute", "GRPCRoute"}},
				{"tcp", "Accepted", "ResolvedRefs", "Programmed", false, []string{"TCPRoute"}},
				{"udp", "Accepted", "ResolvedRefs", "Programmed", false, []string{"UDPRoute"}},
			},
			// TCP and UDP without a route forward to the empty pool.
			lbL: []*pb.Listener{{Port: 53, Protocol: "tcp", Pool: translate.UnroutedPool}, {Port: 53, Protocol: "udp", Pool: translate.UnroutedPool}, {Port: 80, Protocol: "http"}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			gw := gateway("shop", "gw", tt.listeners...)
			src := gwSources(t, backendObjs(tt.core...), append(tt.gw, gwClass("teapot", translate.GatewayController), gw)...)
			d := translate.Gateway(gw, src, gwOpts)
			res := d.Gateway
			if len(res.Listeners) != len(tt.want) {
				t.Fatalf("%d listener statuses, want %d", len(res.Listeners), len(tt.want))
			}
			for i, w := range tt.want {
				l := res.Listeners[i]
				if string(l.Name) != w.listener {
					t.Errorf("listeners[%d] = %s, want %s", i, l.Name, w.listener)
				}
				for typ, reason := range map[string]string{"Accepted": w.accepted, "ResolvedRefs": w.resolved, "Programmed": w.prog} {
					c := condOf(l.Conditions, typ)
					if c.Reason != reason || c.ObservedGeneration != 3 {
						t.Errorf("listener %s %s = %s (gen %d) %q, want reason %s, generation 3", w.listener, typ, c.Reason, c.ObservedGeneration, c.Message, reason)
					}
				}
				if c := condOf(l.Conditions, "Conflicted"); (c.Status == metav1.ConditionTrue) != w.conflicted {
					t.Errorf("listener %s Conflicted = %s %s, want %v", w.listener, c.Status, c.Reason, w.conflicted)
				}
				var kinds []string
				for _, k := range l.SupportedKinds {
					kinds = append(kinds, string(k.Kind))
				}
				if !slices.Equal(kinds, w.kinds) && !(len(kinds) == 0 && len(w.kinds) == 0) {
					t.Errorf("listener %s supportedKinds = %v, want %v", w.listener, kinds, w.kinds)
				}
			}
			if len(d.LB.Listeners) != len(tt.lbL) {
				t.Fatalf("LB listeners = %v, want %v", d.LB.Listeners, tt.lbL)
			}
			for i := range tt.lbL {
				if d.LB.Listeners[i].String() != tt.lbL[i].String() {
					t.Errorf("LB listeners[%d] = %v, want %v", i, d.LB.Listeners[i], tt.lbL[i])
				}
			}
			if !slices.Equal(res.Certificates, tt.certs) {
				t.Errorf("certificates = %v, want %v", res.Certificates, tt.certs)
			}
		})
	}
}

// TestGatewayRouteStatus is the table of a route's parent conditions:
// sectionName and port, allowedRoutes namespaces and kinds, hostnames,
// backend references and ReferenceGrants, unsupported filters.
func TestGatewayRouteStatus(t *testing.T) {
	all := gwv1.NamespacesFromAll
	sel := gwv1.NamespacesFromSelector
	sameNS := listener("same", gwv1.HTTPProtocolType, 80, "*.acme.example")
	allNS := listener("all", gwv1.HTTPProtocolType, 8080, "")
	allNS.AllowedRoutes = &gwv1.AllowedRoutes{Namespaces: &gwv1.RouteNamespaces{From: &all}}
	selNS := listener("selected", gwv1.HTTPProtocolType, 8081, "")
	selNS.AllowedRoutes = &gwv1.AllowedRoutes{Namespaces: &gwv1.RouteNamespaces{From: &sel, Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"gw": "yes"}}}}
	tcpOnly := listener("tcp", gwv1.TCPProtocolType, 9000, "")
	gw := gateway("shop", "gw", sameNS, allNS, selNS, tcpOnly)
	ns := func(name string, labels map[string]string) *corev1.Namespace {
		return &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels}}
	}
	web := httpBackends(bref("web", 80, nil))
	rule := gwv1.HTTPRouteRule{BackendRefs: web}
	withPort := func(p gwv1.ParentReference, port int32) gwv1.ParentReference { p.Port = &port; return p }
	crossNS := func(name string) gwv1.BackendRef {
		b := bref(name, 5432, nil)
		b.Namespace = ptr(gwv1.Namespace("other"))
		return b
	}
	tests := []struct {
		name               string
		route              *gwv1.HTTPRoute
		extra              []runtime.Object
		accepted, resolved []string // reasons per parentRef
		attached           []int32  // per listener
	}{
		{"attached to one listener by sectionName", httpRoute("shop", "r", 1, []gwv1.ParentReference{parent("gw", "same")}, nil, rule), nil,
			[]string{"Accepted"}, []string{"ResolvedRefs"}, []int32{1, 0, 0, 0}},
		{"no sectionName: every listener that allows it", httpRoute("shop", "r", 1, []gwv1.ParentReference{parent("gw", "")}, nil, rule), nil,
			[]string{"Accepted"}, []string{"ResolvedRefs"}, []int32{1, 1, 0, 0}},
		{"port selects the listener", httpRoute("shop", "r", 1, []gwv1.ParentReference{withPort(parent("gw", ""), 8080)}, nil, rule), nil,
			[]string{"Accepted"}, []string{"ResolvedRefs"}, []int32{0, 1, 0, 0}},
		{"a port no listener has", httpRoute("shop", "r", 1, []gwv1.ParentReference{withPort(parent("gw", ""), 81)}, nil, rule), nil,
			[]string{"NoMatchingParent"}, []string{"ResolvedRefs"}, []int32{0, 0, 0, 0}},
		{"an unknown sectionName", httpRoute("shop", "r", 1, []gwv1.ParentReference{parent("gw", "nope")}, nil, rule), nil,
			[]string{"NoMatchingParent"}, []string{"ResolvedRefs"}, []int32{0, 0, 0, 0}},
		{"another namespace: Same refuses, All takes, Selector takes a labelled namespace", httpRoute("team", "r", 1, []gwv1.ParentReference{{Name: "gw", Namespace: ptr(gwv1.Namespace("shop"))}}, nil, rule),
			[]runtime.Object{ns("team", map[string]string{"gw": "yes"})},
			[]string{"Accepted"}, []string{"BackendNotFound"}, []int32{0, 1, 1, 0}},
		{"another namespace only the Same listener named", httpRoute("team", "r", 1, []gwv1.ParentReference{{Name: "gw", Namespace: ptr(gwv1.Namespace("shop")), SectionName: ptr(gwv1.SectionName("same"))}}, nil, rule), nil,
			[]string{"NotAllowedByListeners"}, []string{"BackendNotFound"}, []int32{0, 0, 0, 0}},
		{"a kind the listener does not take", httpRoute("shop", "r", 1, []gwv1.ParentReference{parent("gw", "tcp")}, nil, rule), nil,
			[]string{"NotAllowedByListeners"}, []string{"ResolvedRefs"}, []int32{0, 0, 0, 0}},
		{"no hostname in common", httpRoute("shop", "r", 1, []gwv1.ParentReference{parent("gw", "same")}, []string{"shop.other.example"}, rule), nil,
			[]string{"NoMatchingListenerHostname"}, []string{"ResolvedRefs"}, []int32{0, 0, 0, 0}},
		{"two parentRefs, each with its own verdict", httpRoute("shop", "r", 1, []gwv1.ParentReference{parent("gw", "same"), parent("gw", "tcp")}, nil, rule), nil,
			[]string{"Accepted", "NotAllowedByListeners"}, []string{"ResolvedRefs", "ResolvedRefs"}, []int32{1, 0, 0, 0}},
		{"a backend in another namespace without a grant", httpRoute("shop", "r", 1, []gwv1.ParentReference{parent("gw", "same")}, nil, gwv1.HTTPRouteRule{BackendRefs: httpBackends(crossNS("db"))}), nil,
			[]string{"Accepted"}, []string{"RefNotPermitted"}, []int32{1, 0, 0, 0}},
		{"a backend in another namespace with a grant", httpRoute("shop", "r", 1, []gwv1.ParentReference{parent("gw", "same")}, nil, gwv1.HTTPRouteRule{BackendRefs: httpBackends(crossNS("db"))}),
			[]runtime.Object{grant("other", "HTTPRoute", "shop", "Service")},
			[]string{"Accepted"}, []string{"ResolvedRefs"}, []int32{1, 0, 0, 0}},
		{"a backend of another kind", httpRoute("shop", "r", 1, []gwv1.ParentReference{parent("gw", "same")}, nil, gwv1.HTTPRouteRule{BackendRefs: func() []gwv1.HTTPBackendRef {
			b := bref("web", 80, nil)
			b.Group, b.Kind = ptr(gwv1.Group("example.com")), ptr(gwv1.Kind("Bucket"))
			return httpBackends(b)
		}()}), nil,
			[]string{"Accepted"}, []string{"InvalidKind"}, []int32{1, 0, 0, 0}},
		{"an extension filter", httpRoute("shop", "r", 1, []gwv1.ParentReference{parent("gw", "same")}, nil, gwv1.HTTPRouteRule{BackendRefs: web,
			Filters: []gwv1.HTTPRouteFilter{{Type: gwv1.HTTPRouteFilterExtensionRef, ExtensionRef: &gwv1.LocalObjectReference{Group: "x.example", Kind: "F", Name: "f"}}}}), nil,
			[]string{"UnsupportedValue"}, []string{"ResolvedRefs"}, []int32{0, 0, 0, 0}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var core, gws []runtime.Object
			for _, o := range tt.extra {
				if _, ok := o.(*gwv1.ReferenceGrant); ok {
					gws = append(gws, o)
				} else {
					core = append(core, o)
				}
			}
			src := gwSources(t, backendObjs(core...), append(gws, gwClass("teapot", translate.GatewayController), gw, tt.route)...)
			d := translate.Gateway(gw, src, gwOpts)
			ps := d.Gateway.Routes[translate.RouteKey{Kind: translate.KindHTTPRoute, Namespace: tt.route.Namespace, Name: tt.route.Name}]
			if len(ps) != len(tt.accepted) {
				t.Fatalf("%d parent statuses, want %d: %+v", len(ps), len(tt.accepted), ps)
			}
			for i, p := range ps {
				if string(p.ControllerName) != translate.GatewayController || p.ParentRef.Name != "gw" {
					t.Errorf("parents[%d] = %s %s, want the agent's controller and gw", i, p.ControllerName, p.ParentRef.Name)
				}
				acc, res := condOf(p.Conditions, "Accepted"), condOf(p.Conditions, "ResolvedRefs")
				if acc.Reason != tt.accepted[i] || res.Reason != tt.resolved[i] {
					t.Errorf("parents[%d]: Accepted %s (%q), ResolvedRefs %s (%q); want %s, %s", i, acc.Reason, acc.Message, res.Reason, res.Message, tt.accepted[i], tt.resolved[i])
				}
				if (acc.Status == metav1.ConditionTrue) != (tt.accepted[i] == "Accepted") || acc.ObservedGeneration != 3 {
					t.Errorf("parents[%d]: Accepted status %s generation %d", i, acc.Status, acc.ObservedGeneration)
				}
			}
			for i, w := range tt.attached {
				if got := d.Gateway.Listeners[i].AttachedRoutes; got != w {
					t.Errorf("listener %s attachedRoutes = %d, want %d", d.Gateway.Listeners[i].Name, got, w)
				}
			}
		})
	}
}

// TestGatewayAddressesAndClass: spec.addresses become the requested VIP;
// what cannot be served refuses the Gateway; only the agent's classes are
// taken.
func TestGatewayAddressesAndClass(t *testing.T) {
	l := listener("http", gwv1.HTTPProtocolType, 80, "")
	ok := gateway("shop", "gw", l)
	ok.Spec.Addresses = []gwv1.GatewaySpecAddress{{Type: ptr(gwv1.IPAddressType), Value: "192.0.2.10"}}
	named := gateway("shop", "named", l)
	named.Spec.Addresses = []gwv1.GatewaySpecAddress{{Type: ptr(gwv1.HostnameAddressType), Value: "lb.acme.example"}}
	noListener := gateway("shop", "none", listener("sctp", "SCTP", 9, ""))
	other := gateway("shop", "other", l)
	other.Spec.GatewayClassName = "someone-else"
	src := gwSources(t, backendObjs(), gwClass("teapot", translate.GatewayController), gwClass("someone-else", "example.com/gw"), ok, named, noListener, other)

	d := translate.Gateway(ok, src, gwOpts)
	if d.LB.GetVip().GetAddress() != "192.0.2.10" || d.Refused != "" || d.Gateway.Accepted.Reason != "Accepted" {
		t.Errorf("addresses: vip %v refused %q accepted %+v", d.LB.GetVip(), d.Refused, d.Gateway.Accepted)
	}
	if d.LB.GetName() != syncspec.GatewayName("shop", "gw") {
		t.Errorf("name %s", d.LB.GetName())
	}
	d = translate.Gateway(named, src, gwOpts)
	if d.Gateway.Accepted.Reason != "UnsupportedAddress" || d.Refused == "" {
		t.Errorf("hostname address: accepted %+v refused %q", d.Gateway.Accepted, d.Refused)
	}
	// Several IP addresses: accepted, but one VIP cannot serve them all.
	two := gateway("shop", "two", l)
	two.Spec.Addresses = []gwv1.GatewaySpecAddress{{Value: "203.0.113.9"}, {Type: ptr(gwv1.IPAddressType), Value: "192.0.2.10"}}
	d = translate.Gateway(two, src, gwOpts)
	if d.Gateway.Accepted.Reason != "Accepted" || d.Gateway.AddressNotUsable == "" || d.Refused == "" || d.LB.GetVip().GetAddress() != "203.0.113.9" {
		t.Errorf("two addresses: accepted %+v not usable %q refused %q vip %v", d.Gateway.Accepted, d.Gateway.AddressNotUsable, d.Refused, d.LB.GetVip())
	}
	// An unsupported type anywhere in the list refuses the Gateway.
	two.Spec.Addresses = append(two.Spec.Addresses, gwv1.GatewaySpecAddress{Type: ptr(gwv1.AddressType("test/fake-invalid-type")), Value: "x"})
	if d = translate.Gateway(two, src, gwOpts); d.Gateway.Accepted.Reason != "UnsupportedAddress" || d.Gateway.AddressNotUsable != "" {
		t.Errorf("an unsupported type: accepted %+v not usable %q", d.Gateway.Accepted, d.Gateway.AddressNotUsable)
	}
	d = translate.Gateway(noListener, src, gwOpts)
	if d.Gateway.Accepted.Reason != "ListenersNotValid" || d.Refused == "" {
		t.Errorf("no valid listener: accepted %+v refused %q", d.Gateway.Accepted, d.Refused)
	}
	if !translate.WantsGateway(ok, src, gwOpts) || translate.WantsGateway(other, src, gwOpts) {
		t.Errorf("WantsGateway: ours %v, another controller's %v", translate.WantsGateway(ok, src, gwOpts), translate.WantsGateway(other, src, gwOpts))
	}
	if translate.WantsGateway(ok, translate.Sources{}, gwOpts) {
		t.Error("WantsGateway without the Gateway API")
	}
}

// TestGatewayRouteOnAnUnservedListener: a route attaches to an HTTPS
// listener whose certificate does not resolve and counts in its
// attachedRoutes, as the spec asks, but the listener is not served and the
// route adds no LB route (not even on the Gateway's HTTP listener).
func TestGatewayRouteOnAnUnservedListener(t *testing.T) {
	https := listener("https", gwv1.HTTPSProtocolType, 443, "")
	https.TLS = &gwv1.ListenerTLSConfig{CertificateRefs: []gwv1.SecretObjectReference{{Name: "does-not-exist"}}}
	gw := gateway("shop", "gw", https, listener("http", gwv1.HTTPProtocolType, 80, ""))
	route := httpRoute("shop", "r", 1, []gwv1.ParentReference{parent("gw", "https")}, nil, gwv1.HTTPRouteRule{BackendRefs: httpBackends(bref("web", 80, nil))})
	src := gwSources(t, backendObjs(), gwClass("teapot", translate.GatewayController), gw, route)
	d := translate.Gateway(gw, src, gwOpts)
	l := d.Gateway.Listeners[0]
	if l.AttachedRoutes != 1 {
		t.Errorf("attachedRoutes = %d, want 1", l.AttachedRoutes)
	}
	if c := condOf(l.Conditions, "ResolvedRefs"); c.Status != metav1.ConditionFalse {
		t.Errorf("ResolvedRefs %s %s, want False", c.Status, c.Reason)
	}
	if c := condOf(l.Conditions, "Programmed"); c.Status != metav1.ConditionFalse {
		t.Errorf("Programmed %s %s, want False", c.Status, c.Reason)
	}
	ps := d.Gateway.Routes[translate.RouteKey{Kind: translate.KindHTTPRoute, Namespace: "shop", Name: "r"}]
	if len(ps) != 1 || condOf(ps[0].Conditions, "Accepted").Status != metav1.ConditionTrue {
		t.Errorf("route parents %+v, want one, Accepted", ps)
	}
	for _, ll := range d.LB.GetListeners() {
		if ll.GetPort() == 443 {
			t.Errorf("the listener without a certificate is served: %v", ll)
		}
	}
	if n := len(d.LB.GetRoutes()); n != 0 {
		t.Errorf("%d LB routes, want none: the route's only listener is not served", n)
	}
}

// TestGatewayAcceptedWithInvalidListeners: a Gateway served without some
// of its listeners is Accepted with reason ListenersNotValid; one without
// any valid listener is not accepted.
func TestGatewayAcceptedWithInvalidListeners(t *testing.T) {
	for _, tt := range []struct {
		name      string
		listeners []gwv1.Listener
		status    metav1.ConditionStatus
		reason    string
	}{
		{"all valid", []gwv1.Listener{listener("http", gwv1.HTTPProtocolType, 80, "")}, metav1.ConditionTrue, "Accepted"},
		{"one of two valid", []gwv1.Listener{listener("http", gwv1.HTTPProtocolType, 80, ""), listener("bad", "INVALID", 1111, "")}, metav1.ConditionTrue, "ListenersNotValid"},
		{"none valid", []gwv1.Listener{listener("bad", "INVALID", 1111, "")}, metav1.ConditionFalse, "ListenersNotValid"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			gw := gateway("shop", "gw", tt.listeners...)
			d := translate.Gateway(gw, gwSources(t, backendObjs(), gwClass("teapot", translate.GatewayController), gw), gwOpts)
			if a := d.Gateway.Accepted; a.Status != tt.status || a.Reason != tt.reason {
				t.Errorf("Accepted %s %s (%q), want %s %s", a.Status, a.Reason, a.Message, tt.status, tt.reason)
			}
		})
	}
}
