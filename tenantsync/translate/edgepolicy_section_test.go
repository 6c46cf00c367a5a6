package translate_test

import (
	"slices"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/teapot-lb/teapot-lb/tenantsync/translate"
)

func section(kind, name, sec string) map[string]any {
	t := target(kind, name)
	t["sectionName"] = sec
	return t
}

// TestEdgePolicySections: a policy whose targetRef names a listener of a
// Gateway (sectionName) applies to that listener's LB listener and the
// routes served on its port alone, replacing there the fields it sets
// of the Gateway's own policy; one naming a rule of an HTTPRoute applies
// to that rule's LB routes alone. A sectionName that names nothing, a
// listener that shares its port with another, and what the listener
// cannot carry are refused with a condition naming the field, and
// nothing of such a policy is applied.
func TestEdgePolicySections(t *testing.T) {
	t.Parallel()
	gw := gateway("shop", "gw",
		listener("http", gwv1.HTTPProtocolType, 80, ""),
		listener("admin", gwv1.HTTPProtocolType, 8080, ""),
		listener("db", gwv1.TCPProtocolType, 5432, ""),
		listener("a", gwv1.HTTPProtocolType, 9000, "a.shop.example"),
		listener("b", gwv1.HTTPProtocolType, 9000, "b.shop.example"))
	login := gwv1.SectionName("login")
	rule := func(name *gwv1.SectionName, path string) gwv1.HTTPRouteRule {
		p := path
		return gwv1.HTTPRouteRule{Name: name, BackendRefs: httpBackends(bref("web", 80, nil)),
			Matches: []gwv1.HTTPRouteMatch{{Path: &gwv1.HTTPPathMatch{Value: &p}}}}
	}
	api := httpRoute("shop", "api", 1, []gwv1.ParentReference{parent("gw", "http")}, []string{"api.shop.example"}, rule(&login, "/login"), rule(nil, "/"))
	adm := httpRoute("shop", "adm", 2, []gwv1.ParentReference{parent("gw", "admin")}, []string{"admin.shop.example"}, rule(nil, "/"))
	both := httpRoute("shop", "both", 3, []gwv1.ParentReference{parent("gw", "http"), parent("gw", "admin")}, []string{"both.shop.example"}, rule(nil, "/"))
	whole := policy("shop", "edge", 0, []any{target("Gateway", "gw")}, map[string]any{
		"allowedSources": []any{"192.0.2.0/24"},
		"rateLimit":      map[string]any{"requestsPerSecond": int64(100), "connectionsPerSecond": int64(20)},
		"waf":            map[string]any{"mode": "detect"},
	})
	build := func(t *testing.T, ps policies, routes ...*gwv1.HTTPRoute) *translate.Desired {
		objs := []runtime.Object{gwClass("teapot", translate.GatewayController), gw}
		for _, r := range routes {
			objs = append(objs, r)
		}
		src := gwSources(t, backendObjs(), objs...)
		src.Gateway.EdgePolicies = ps
		d := translate.Gateway(gw, src, gwOpts)
		if d.Refused != "" {
			t.Fatalf("refused: %s", d.Refused)
		}
		return d
	}
	status := func(d *translate.Desired, name string) metav1.Condition {
		for _, s := range d.Gateway.EdgePolicies {
			if s.Name == name {
				return s.Accepted
			}
		}
		return metav1.Condition{}
	}

	t.Run("honoured", func(t *testing.T) {
		t.Parallel()
		d := build(t, policies{whole,
			policy("shop", "admin-only", 1, []any{section("Gateway", "gw", "admin")}, map[string]any{
				"allowedSources": []any{"198.51.100.0/24"}, "waf": map[string]any{"mode": "block", "paranoiaLevel": int64(2)}}),
			policy("shop", "db-conns", 2, []any{section("Gateway", "gw", "db")}, map[string]any{
				"rateLimit": map[string]any{"connectionsPerSecond": int64(5)}}),
			policy("shop", "login-rule", 3, []any{section("HTTPRoute", "api", "login")}, map[string]any{
				"rateLimit": map[string]any{"requestsPerSecond": int64(2)}}),
		}, api, adm)
		for _, name := range []string{"edge", "admin-only", "db-conns", "login-rule"} {
			if c := status(d, name); c.Status != metav1.ConditionTrue {
				t.Errorf("%s: %+v", name, c)
			}
		}
		for _, l := range d.LB.GetListeners() {
			allowed, rps, conns := []string{"192.0.2.0/24"}, uint32(100), uint32(20)
			switch l.GetPort() {
			case 8080:
				allowed = []string{"198.51.100.0/24"} // the listener's policy, the Gateway's rate limit
			case 5432:
				rps, conns = 0, 5
			}
			if !slices.Equal(l.GetAllowedSources(), allowed) || l.GetRateLimit().GetRequestsPerSecond() != rps || l.GetRateLimit().GetConnectionsPerSecond() != conns {
				t.Errorf("listener %d: sources %q rate limit %v; want %q %d/%d", l.GetPort(), l.GetAllowedSources(), l.GetRateLimit(), allowed, rps, conns)
			}
		}
		for _, r := range d.LB.GetRoutes() {
			mode, paranoia, rps := "detect", uint32(0), uint32(0)
			if r.GetHost() == "admin.shop.example" {
				mode, paranoia = "block", 2
			}
			if r.GetHost() == "api.shop.example" && r.GetMatches()[0].GetPath() == "/login" {
				rps = 2
			}
			if r.GetWaf().GetMode() != mode || r.GetWaf().GetParanoiaLevel() != paranoia || r.GetRateLimit().GetRequestsPerSecond() != rps {
				t.Errorf("route %s %v: waf %v rate limit %v; want %s/%d, %d r/s", r.GetHost(), r.GetMatches(), r.GetWaf(), r.GetRateLimit(), mode, paranoia, rps)
			}
		}
	})

	for _, tc := range []struct {
		name   string
		target map[string]any
		spec   map[string]any
		reason string
		want   string
	}{
		{"no such listener", section("Gateway", "gw", "nope"), map[string]any{"waf": map[string]any{"mode": "block"}}, "TargetNotFound", "no listener named nope"},
		{"no such rule", section("HTTPRoute", "api", "logout"), map[string]any{"waf": map[string]any{"mode": "block"}}, "TargetNotFound", "no rule named logout"},
		{"shared port", section("Gateway", "gw", "a"), map[string]any{"allowedSources": []any{"198.51.100.0/24"}}, "Invalid", "shares port 9000 with listener b"},
		{"requests on tcp", section("Gateway", "gw", "db"), map[string]any{"rateLimit": map[string]any{"requestsPerSecond": int64(5)}}, "Invalid", "spec.rateLimit.requestsPerSecond"},
		{"waf on tcp", section("Gateway", "gw", "db"), map[string]any{"waf": map[string]any{"mode": "block"}}, "Invalid", "spec.waf"},
		{"waf on a route of two ports", section("Gateway", "gw", "admin"), map[string]any{"waf": map[string]any{"mode": "block"}}, "Invalid", "both.shop.example"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			d := build(t, policies{policy("shop", "p", 0, []any{tc.target}, tc.spec)}, api, adm, both)
			c := status(d, "p")
			if c.Status != metav1.ConditionFalse || c.Reason != tc.reason || !strings.Contains(c.Message, tc.want) {
				t.Fatalf("condition %+v; want %s naming %q", c, tc.reason, tc.want)
			}
			for _, r := range d.LB.GetRoutes() {
				if r.GetWaf() != nil || r.GetRateLimit() != nil {
					t.Errorf("a refused policy applied: %v", r)
				}
			}
			for _, l := range d.LB.GetListeners() {
				if len(l.GetAllowedSources()) > 0 || l.GetRateLimit() != nil {
					t.Errorf("a refused policy applied: %v", l)
				}
			}
		})
	}
}
