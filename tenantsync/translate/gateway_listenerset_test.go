package translate_test

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/teapot-lb/teapot-lb/tenantsync/translate"
)

func listenerSet(ns, name string, sec int, gwNS, gw string, ls ...gwv1.Listener) *gwv1.ListenerSet {
	s := &gwv1.ListenerSet{ObjectMeta: meta(ns, name, sec)}
	s.Spec.ParentRef = gwv1.ParentGatewayReference{Name: gwv1.ObjectName(gw), Namespace: ptr(gwv1.Namespace(gwNS))}
	for _, l := range ls {
		s.Spec.Listeners = append(s.Spec.Listeners, gwv1.ListenerEntry{Name: l.Name, Hostname: l.Hostname, Port: l.Port, Protocol: l.Protocol, TLS: l.TLS, AllowedRoutes: l.AllowedRoutes})
	}
	return s
}

func allowListeners(gw *gwv1.Gateway, from gwv1.FromNamespaces, sel map[string]string) *gwv1.Gateway {
	gw.Spec.AllowedListeners = &gwv1.AllowedListeners{Namespaces: &gwv1.ListenerNamespaces{From: &from}}
	if sel != nil {
		gw.Spec.AllowedListeners.Namespaces.Selector = &metav1.LabelSelector{MatchLabels: sel}
	}
	return gw
}

func setKey(ns, name string) translate.RouteKey {
	return translate.RouteKey{Kind: translate.KindListenerSet, Namespace: ns, Name: name}
}

func entry(t *testing.T, r *translate.ListenerSetResult, name string) gwv1.ListenerEntryStatus {
	t.Helper()
	for _, l := range r.Listeners {
		if string(l.Name) == name {
			return l
		}
	}
	t.Fatalf("no listener %s in %+v", name, r.Listeners)
	return gwv1.ListenerEntryStatus{}
}

func wantCond(t *testing.T, what string, cs []metav1.Condition, typ string, st metav1.ConditionStatus, reason string) {
	t.Helper()
	c := condOf(cs, typ)
	if c.Status != st || (reason != "" && c.Reason != reason) {
		t.Errorf("%s: %s = %s/%s, want %s/%s", what, typ, c.Status, c.Reason, st, reason)
	}
}

// TestListenerSetAllowedNamespaces: spec.allowedListeners admits
// ListenerSets from no namespace by default, the Gateway's own (Same), a
// label selector's, or all; the others are not accepted (NotAllowed) and
// add no listener to the load balancer.
func TestListenerSetAllowedNamespaces(t *testing.T) {
	t.Parallel()
	nss := []runtime.Object{
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "shop"}},
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "blue", Labels: map[string]string{"team": "blue"}}},
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "red"}},
	}
	tests := []struct {
		name    string
		from    gwv1.FromNamespaces // "" leaves allowedListeners unset
		sel     map[string]string
		allowed []string // namespaces whose ListenerSet attaches
	}{
		{name: "unset is None", allowed: nil},
		{name: "None", from: gwv1.NamespacesFromNone, allowed: nil},
		{name: "Same", from: gwv1.NamespacesFromSame, allowed: []string{"shop"}},
		{name: "Selector", from: gwv1.NamespacesFromSelector, sel: map[string]string{"team": "blue"}, allowed: []string{"blue"}},
		{name: "All", from: gwv1.NamespacesFromAll, allowed: []string{"shop", "blue", "red"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			gw := gateway("shop", "gw", listener("http", gwv1.HTTPProtocolType, 80, ""))
			if tt.from != "" {
				allowListeners(gw, tt.from, tt.sel)
			}
			var objs []runtime.Object
			objs = append(objs, gwClass("teapot", translate.GatewayController), gw)
			ports := map[string]int32{"shop": 8081, "blue": 8082, "red": 8083}
			for ns, port := range ports {
				objs = append(objs, listenerSet(ns, "ls", 1, "shop", "gw", listener("extra", gwv1.HTTPProtocolType, port, "")))
			}
			d := translate.Gateway(gw, gwSources(t, backendObjs(nss...), objs...), gwOpts)
			if d.Refused != "" {
				t.Fatalf("Refused = %q", d.Refused)
			}
			if strings.Contains(strings.Join(d.Warnings, ";"), "allowedListeners") {
				t.Errorf("warnings %q still say allowedListeners is not applied", d.Warnings)
			}
			if got := d.Gateway.AttachedListenerSets; got != int32(len(tt.allowed)) {
				t.Errorf("attachedListenerSets = %d, want %d", got, len(tt.allowed))
			}
			for ns, port := range ports {
				r := d.Gateway.ListenerSets[setKey(ns, "ls")]
				if r == nil {
					t.Fatalf("no status for ListenerSet %s/ls", ns)
				}
				served := false
				for _, l := range d.LB.Listeners {
					served = served || l.Port == uint32(port)
				}
				if contains(tt.allowed, ns) {
					wantCond(t, ns, []metav1.Condition{r.Accepted, r.Programmed}, "Accepted", metav1.ConditionTrue, "Accepted")
					wantCond(t, ns, []metav1.Condition{r.Accepted, r.Programmed}, "Programmed", metav1.ConditionTrue, "Programmed")
					if !served {
						t.Errorf("port %d of ListenerSet %s/ls is not served: %v", port, ns, d.LB.Listeners)
					}
				} else {
					wantCond(t, ns, []metav1.Condition{r.Accepted}, "Accepted", metav1.ConditionFalse, "NotAllowed")
					if served {
						t.Errorf("port %d of not allowed ListenerSet %s/ls is served", port, ns)
					}
				}
			}
			if len(d.Gateway.Listeners) != 1 {
				t.Errorf("Gateway listener status = %d entries, want its own 1", len(d.Gateway.Listeners))
			}
		})
	}
}

func contains(s []string, v string) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}

// TestListenerSetConflicts: the Gateway's listeners come first, then the
// ListenerSets oldest first, then by namespace/name; a later listener of
// the same port and hostname (HostnameConflict) or of another protocol
// on the port (ProtocolConflict) is conflicted, not accepted and not
// served, and a ListenerSet with no valid listener is not accepted.
func TestListenerSetConflicts(t *testing.T) {
	t.Parallel()
	gw := allowListeners(gateway("shop", "gw", listener("gw-http", gwv1.HTTPProtocolType, 80, "a.example")), gwv1.NamespacesFromSame, nil)
	// Same creation time: b-set comes after a-set by name. c-old is older.
	a := listenerSet("shop", "a-set", 5, "shop", "gw",
		listener("dup-gw", gwv1.HTTPProtocolType, 80, "a.example"), // conflicts with the Gateway
		listener("own", gwv1.HTTPProtocolType, 80, "b.example"))    // conflicts with c-old
	b := listenerSet("shop", "b-set", 5, "shop", "gw",
		listener("dup-a", gwv1.HTTPProtocolType, 80, "b.example")) // conflicts with c-old too
	c := listenerSet("shop", "c-old", 1, "shop", "gw",
		listener("first", gwv1.HTTPProtocolType, 80, "b.example"),
		listener("tcp", gwv1.TCPProtocolType, 9000, ""))
	dproto := listenerSet("shop", "d-proto", 9, "shop", "gw",
		listener("udp-ok", gwv1.UDPProtocolType, 9000, ""),             // another transport: no conflict
		listener("http-on-tcp", gwv1.HTTPProtocolType, 9000, ""),       // tcp port 9000 is tcp
		listener("tcp-on-http", gwv1.TCPProtocolType, 80, ""),          // tcp port 80 is http
		listener("http-after", gwv1.HTTPProtocolType, 80, "d.example")) // the conflicted tcp-on-http takes no port
	d := translate.Gateway(gw, gwSources(t, backendObjs(), gwClass("teapot", translate.GatewayController), gw, a, b, c, dproto), gwOpts)
	if d.Refused != "" {
		t.Fatalf("Refused = %q", d.Refused)
	}
	ls := d.Gateway.ListenerSets
	conflicted := func(set, name, reason string) {
		t.Helper()
		e := entry(t, ls[setKey("shop", set)], name)
		wantCond(t, set+"/"+name, e.Conditions, "Conflicted", metav1.ConditionTrue, reason)
		wantCond(t, set+"/"+name, e.Conditions, "Accepted", metav1.ConditionFalse, reason)
		wantCond(t, set+"/"+name, e.Conditions, "Programmed", metav1.ConditionFalse, reason)
	}
	fine := func(set, name string) {
		t.Helper()
		e := entry(t, ls[setKey("shop", set)], name)
		wantCond(t, set+"/"+name, e.Conditions, "Conflicted", metav1.ConditionFalse, "NoConflicts")
		wantCond(t, set+"/"+name, e.Conditions, "Accepted", metav1.ConditionTrue, "Accepted")
		wantCond(t, set+"/"+name, e.Conditions, "Programmed", metav1.ConditionTrue, "Programmed")
	}
	fine("c-old", "first")
	fine("c-old", "tcp")
	conflicted("a-set", "dup-gw", "HostnameConflict")
	conflicted("a-set", "own", "HostnameConflict")
	conflicted("b-set", "dup-a", "HostnameConflict")
	fine("d-proto", "udp-ok")
	conflicted("d-proto", "http-on-tcp", "ProtocolConflict")
	conflicted("d-proto", "tcp-on-http", "ProtocolConflict")
	fine("d-proto", "http-after")
	wantCond(t, "gw-http", d.Gateway.Listeners[0].Conditions, "Conflicted", metav1.ConditionFalse, "NoConflicts")

	for set, ok := range map[string]bool{"c-old": true, "a-set": false, "b-set": false, "d-proto": true} {
		r := ls[setKey("shop", set)]
		reason := "ListenersNotValid"
		if ok {
			reason = "Accepted"
		}
		wantCond(t, set, []metav1.Condition{r.Accepted}, "Accepted", map[bool]metav1.ConditionStatus{true: metav1.ConditionTrue, false: metav1.ConditionFalse}[ok], reason)
	}
	if n := d.Gateway.AttachedListenerSets; n != 2 {
		t.Errorf("attachedListenerSets = %d, want 2", n)
	}
	var got []string
	for _, l := range d.LB.Listeners {
		got = append(got, l.Protocol+":"+itoa(l.Port))
	}
	if want := "http:80 tcp:9000 udp:9000"; strings.Join(got, " ") != want {
		t.Errorf("LB listeners = %v, want %s", got, want)
	}
}

func itoa(p uint32) string {
	const digits = "0123456789"
	if p < 10 {
		return digits[p : p+1]
	}
	return itoa(p/10) + digits[p%10:p%10+1]
}

// TestListenerSetRoutes: a route whose parentRef is a ListenerSet attaches
// to that set's listeners only (by sectionName too), not to the
// Gateway's; one naming the Gateway does not attach to the set's
// listeners; a parentRef to a ListenerSet the Gateway does not admit is
// not accepted. Each parent status is the parentRef's own.
func TestListenerSetRoutes(t *testing.T) {
	t.Parallel()
	gw := allowListeners(gateway("shop", "gw", listener("http", gwv1.HTTPProtocolType, 80, "gw.example")), gwv1.NamespacesFromSame, nil)
	set := listenerSet("shop", "ls", 1, "shop", "gw",
		listener("http", gwv1.HTTPProtocolType, 80, "set.example"),
		listener("other", gwv1.HTTPProtocolType, 8080, "set.example"))
	denied := listenerSet("red", "ls", 1, "shop", "gw", listener("http", gwv1.HTTPProtocolType, 81, ""))
	toSet := gwv1.ParentReference{Kind: ptr(gwv1.Kind("ListenerSet")), Name: "ls", SectionName: ptr(gwv1.SectionName("http"))}
	toDenied := gwv1.ParentReference{Kind: ptr(gwv1.Kind("ListenerSet")), Namespace: ptr(gwv1.Namespace("red")), Name: "ls"}
	rule := gwv1.HTTPRouteRule{BackendRefs: httpBackends(bref("web", 80, nil))}
	both := httpRoute("shop", "both", 1, []gwv1.ParentReference{parent("gw", ""), toSet, toDenied}, nil, rule)
	d := translate.Gateway(gw, gwSources(t, backendObjs(), gwClass("teapot", translate.GatewayController), gw, set, denied, both), gwOpts)
	if d.Refused != "" {
		t.Fatalf("Refused = %q", d.Refused)
	}
	ps := d.Gateway.Routes[translate.RouteKey{Kind: translate.KindHTTPRoute, Namespace: "shop", Name: "both"}]
	if len(ps) != 3 {
		t.Fatalf("route parents = %+v, want 3", ps)
	}
	wantCond(t, "parent Gateway", ps[0].Conditions, "Accepted", metav1.ConditionTrue, "Accepted")
	wantCond(t, "parent ListenerSet", ps[1].Conditions, "Accepted", metav1.ConditionTrue, "Accepted")
	if ps[1].ParentRef.Kind == nil || *ps[1].ParentRef.Kind != "ListenerSet" {
		t.Errorf("second parent status is for %+v, want the ListenerSet parentRef", ps[1].ParentRef)
	}
	wantCond(t, "parent denied ListenerSet", ps[2].Conditions, "Accepted", metav1.ConditionFalse, "NotAllowedByListeners")
	if n := d.Gateway.Listeners[0].AttachedRoutes; n != 1 {
		t.Errorf("Gateway listener attachedRoutes = %d, want 1", n)
	}
	r := d.Gateway.ListenerSets[setKey("shop", "ls")]
	if n := entry(t, r, "http").AttachedRoutes; n != 1 {
		t.Errorf("ListenerSet listener http attachedRoutes = %d, want 1", n)
	}
	if n := entry(t, r, "other").AttachedRoutes; n != 0 {
		t.Errorf("ListenerSet listener other attachedRoutes = %d, want 0 (sectionName http)", n)
	}
	var hosts []string
	for _, lr := range d.LB.Routes {
		hosts = append(hosts, lr.Host)
	}
	if got := strings.Join(hosts, " "); !strings.Contains(got, "gw.example") || !strings.Contains(got, "set.example") {
		t.Errorf("LB route hosts = %q, want gw.example and set.example", got)
	}
	for _, lr := range d.LB.Listeners {
		if lr.Port == 81 {
			t.Errorf("port 81 of a ListenerSet the Gateway does not admit is served")
		}
	}
}

// TestListenerSetCertificateRefs: an HTTPS listener of a ListenerSet
// refers to a Secret of another namespace only through a ReferenceGrant
// from kind ListenerSet (one from Gateways does not do); without it the
// listener's refs do not resolve (RefNotPermitted), it is not served, and
// a ListenerSet with no other listener is not accepted (ListenersNotValid).
func TestListenerSetCertificateRefs(t *testing.T) {
	t.Parallel()
	https := func(name, host string) gwv1.Listener {
		l := listener(name, gwv1.HTTPSProtocolType, 443, host)
		l.TLS = &gwv1.ListenerTLSConfig{CertificateRefs: []gwv1.SecretObjectReference{{Name: "cert", Namespace: ptr(gwv1.Namespace("certs"))}}}
		return l
	}
	for _, tt := range []struct {
		name     string
		grant    *gwv1.ReferenceGrant
		resolved bool
	}{
		{"grant from ListenerSet", grant("certs", "ListenerSet", "apps", "Secret"), true},
		{"grant from Gateway only", grant("certs", "Gateway", "apps", "Secret"), false},
		{"no grant", nil, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			gw := allowListeners(gateway("shop", "gw", listener("http", gwv1.HTTPProtocolType, 80, "")), gwv1.NamespacesFromAll, nil)
			set := listenerSet("apps", "ls", 1, "shop", "gw", https("tls", "apps.example"))
			objs := []runtime.Object{gwClass("teapot", translate.GatewayController), gw, set}
			if tt.grant != nil {
				objs = append(objs, tt.grant)
			}
			d := translate.Gateway(gw, gwSources(t, backendObjs(tlsSecret(t, "certs", "cert")), objs...), gwOpts)
			r := d.Gateway.ListenerSets[setKey("apps", "ls")]
			e := entry(t, r, "tls")
			served := false
			for _, l := range d.LB.Listeners {
				served = served || l.Port == 443
			}
			if tt.resolved {
				wantCond(t, "listener", e.Conditions, "ResolvedRefs", metav1.ConditionTrue, "ResolvedRefs")
				wantCond(t, "set", []metav1.Condition{r.Accepted}, "Accepted", metav1.ConditionTrue, "Accepted")
				if !served || len(d.Gateway.Certificates) != 1 {
					t.Errorf("port 443 served %v with certificates %v, want served with certs/cert", served, d.Gateway.Certificates)
				}
				return
			}
			wantCond(t, "listener", e.Conditions, "ResolvedRefs", metav1.ConditionFalse, "RefNotPermitted")
			wantCond(t, "set", []metav1.Condition{r.Accepted}, "Accepted", metav1.ConditionFalse, "ListenersNotValid")
			wantCond(t, "set", []metav1.Condition{r.Programmed}, "Programmed", metav1.ConditionFalse, "ListenersNotValid")
			if served {
				t.Errorf("port 443 is served without a permitted certificate")
			}
		})
	}
}
