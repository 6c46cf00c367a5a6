package translate_test

import (
	"slices"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/teapot-lb/teapot-lb/tenantsync/translate"
)

// policies is an EdgePolicyLister over a fixed list.
type policies []*translate.EdgePolicy

func (ps policies) EdgePolicies(ns string) []*translate.EdgePolicy {
	var out []*translate.EdgePolicy
	for _, p := range ps {
		if p.Namespace == ns {
			out = append(out, p)
		}
	}
	return out
}

// policy decodes an EdgePolicy as the agent does, from the unstructured
// form the API server returns.
func policy(ns, name string, sec int, targets []any, spec map[string]any) *translate.EdgePolicy {
	spec["targetRefs"] = targets
	return translate.DecodeEdgePolicy(map[string]any{
		"metadata": map[string]any{"namespace": ns, "name": name, "generation": int64(2),
			"creationTimestamp": epoch.Add(time.Duration(sec) * time.Second).UTC().Format(time.RFC3339)},
		"spec": spec,
	})
}

func target(kind, name string) map[string]any {
	return map[string]any{"group": gwv1.GroupName, "kind": kind, "name": name}
}

// TestEdgePolicies: an EdgePolicy targeting a Gateway sets every
// listener's source ranges and rate limit (requests only on http ones)
// and the WAF of its routes; one targeting an HTTPRoute sets the rate
// limit and WAF of the LB routes that route becomes, and wins over the
// Gateway's WAF there. Each gets Accepted True for the Gateway. A
// second policy on the same target is Conflicted, a policy asking for
// what its target cannot carry is Invalid (neither applied), and a
// Gateway policy whose allowedSources cannot be enforced keeps the
// Gateway from being served.
func TestEdgePolicies(t *testing.T) {
	gw := gateway("shop", "gw", listener("http", gwv1.HTTPProtocolType, 80, ""), listener("tcp", gwv1.TCPProtocolType, 5432, ""))
	rules := gwv1.HTTPRouteRule{BackendRefs: httpBackends(bref("web", 80, nil))}
	api := httpRoute("shop", "api", 1, []gwv1.ParentReference{parent("gw", "http")}, []string{"api.shop.example"}, rules)
	site := httpRoute("shop", "site", 2, []gwv1.ParentReference{parent("gw", "http")}, []string{"www.shop.example"}, rules)
	ps := policies{
		policy("shop", "edge", 0, []any{target("Gateway", "gw")}, map[string]any{
			"allowedSources": []any{"192.0.2.0/24"}, "deniedSources": []any{"192.0.2.9/32"},
			"rateLimit": map[string]any{"requestsPerSecond": int64(100), "connectionsPerSecond": int64(20)},
			"waf":       map[string]any{"mode": "detect"},
		}),
		policy("shop", "api-waf", 1, []any{target("HTTPRoute", "api")}, map[string]any{
			"rateLimit": map[string]any{"requestsPerSecond": int64(5), "burst": int64(10), "key": "header", "header": "X-API-Key"},
			"waf": map[string]any{"mode": "block", "paranoiaLevel": int64(2), "excludeRules": []any{int64(942100)},
				"rules": []any{`SecRule REQUEST_HEADERS:X-Evil "@streq yes" "id:1001,phase:1,deny,msg:'evil'"`}},
		}),
		policy("shop", "late", 5, []any{target("HTTPRoute", "api")}, map[string]any{"waf": map[string]any{"mode": "detect"}}),
		policy("shop", "conns-on-route", 6, []any{target("HTTPRoute", "site")}, map[string]any{
			"rateLimit": map[string]any{"connectionsPerSecond": int64(5)}}),
		policy("other", "elsewhere", 0, []any{target("Gateway", "gw")}, map[string]any{"waf": map[string]any{"mode": "block"}}),
	}
	src := gwSources(t, backendObjs(), gwClass("teapot", translate.GatewayController), gw, api, site)
	src.Gateway.EdgePolicies = ps
	d := translate.Gateway(gw, src, gwOpts)
	if d.Refused != "" {
		t.Fatalf("refused: %s", d.Refused)
	}
	for _, l := range d.LB.GetListeners() {
		if !slices.Equal(l.GetAllowedSources(), []string{"192.0.2.0/24"}) || !slices.Equal(l.GetDeniedSources(), []string{"192.0.2.9/32"}) {
			t.Errorf("listener %d sources %q %q", l.GetPort(), l.GetAllowedSources(), l.GetDeniedSources())
		}
		want := uint32(0)
		if l.GetProtocol() == "http" {
			want = 100
		}
		if rl := l.GetRateLimit(); rl.GetRequestsPerSecond() != want || rl.GetConnectionsPerSecond() != 20 {
			t.Errorf("listener %d rate limit %v", l.GetPort(), rl)
		}
	}
	for _, r := range d.LB.GetRoutes() {
		switch r.GetHost() {
		case "api.shop.example":
			if r.GetWaf().GetMode() != "block" || r.GetWaf().GetParanoiaLevel() != 2 || !slices.Equal(r.GetWaf().GetExcludeRules(), []uint32{942100}) || len(r.GetWaf().GetRules()) != 1 ||
				r.GetRateLimit().GetRequestsPerSecond() != 5 || r.GetRateLimit().GetBurst() != 10 || r.GetRateLimit().GetHeader() != "X-API-Key" {
				t.Errorf("api route: waf %v, rate limit %v", r.GetWaf(), r.GetRateLimit())
			}
		case "www.shop.example":
			if r.GetWaf().GetMode() != "detect" || r.GetRateLimit() != nil {
				t.Errorf("site route: waf %v, rate limit %v", r.GetWaf(), r.GetRateLimit())
			}
		default:
			t.Errorf("route %v", r)
		}
	}
	want := map[string]string{"edge": "Accepted", "api-waf": "Accepted", "late": "Conflicted", "conns-on-route": "Invalid"}
	if len(d.Gateway.EdgePolicies) != len(want) {
		t.Errorf("policies %+v", d.Gateway.EdgePolicies)
	}
	for _, s := range d.Gateway.EdgePolicies {
		if s.Accepted.Reason != want[s.Name] || (s.Accepted.Status == metav1.ConditionTrue) != (want[s.Name] == "Accepted") || s.Accepted.ObservedGeneration != 2 {
			t.Errorf("%s: %+v, want %s", s.Name, s.Accepted, want[s.Name])
		}
		if s.Name == "conns-on-route" && !strings.Contains(s.Accepted.Message, "connectionsPerSecond") {
			t.Errorf("the refusal does not name the field: %q", s.Accepted.Message)
		}
	}

	// Refusals a tenant can act on.
	for _, tc := range []struct {
		name    string
		target  map[string]any
		spec    map[string]any
		want    string
		refused bool // the Gateway itself is not served
	}{
		{"sources on a route", target("HTTPRoute", "api"), map[string]any{"allowedSources": []any{"192.0.2.0/24"}}, "target the Gateway", false},
		{"bad mode", target("Gateway", "gw"), map[string]any{"waf": map[string]any{"mode": "deny"}}, "spec.waf.mode", false},
		{"exclusion", target("HTTPRoute", "api"), map[string]any{"waf": map[string]any{"mode": "block", "excludeRules": []any{int64(42)}}}, "spec.waf.excludeRules[0]", false},
		{"rule with exec", target("HTTPRoute", "api"), map[string]any{"waf": map[string]any{"mode": "block", "rules": []any{`SecAction "id:1,pass,exec:/bin/sh"`}}}, "spec.waf.rules[0]", false},
		{"paranoia", target("HTTPRoute", "api"), map[string]any{"waf": map[string]any{"mode": "block", "paranoiaLevel": int64(7)}}, "spec.waf.paranoiaLevel", false},
		{"empty", target("Gateway", "gw"), map[string]any{}, "sets nothing", false},
		{"header key without header", target("HTTPRoute", "api"), map[string]any{"rateLimit": map[string]any{"requestsPerSecond": int64(5), "key": "header"}}, "spec.rateLimit.header", false},
		{"bad header", target("Gateway", "gw"), map[string]any{"rateLimit": map[string]any{"connectionsPerSecond": int64(5), "key": "header", "header": "x y"}}, "spec.rateLimit.header", false},
		{"section", map[string]any{"group": gwv1.GroupName, "kind": "Gateway", "name": "gw", "sectionName": "nope"}, map[string]any{"waf": map[string]any{"mode": "block"}}, "no listener named nope", false},
		{"wrong type", target("Gateway", "gw"), map[string]any{"rateLimit": "fast"}, "spec", false},
		{"bad allowed", target("Gateway", "gw"), map[string]any{"allowedSources": []any{"192.0.2.0/24", "office"}}, "spec.allowedSources[1]", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			src := gwSources(t, backendObjs(), gwClass("teapot", translate.GatewayController), gw, api, site)
			src.Gateway.EdgePolicies = policies{policy("shop", "p", 0, []any{tc.target}, tc.spec)}
			d := translate.Gateway(gw, src, gwOpts)
			if tc.refused {
				if d.Refused == "" || !strings.Contains(d.Gateway.Accepted.Message, tc.want) {
					t.Fatalf("Gateway served (%q); accepted %+v", d.Refused, d.Gateway.Accepted)
				}
				return
			}
			if d.Refused != "" {
				t.Fatalf("Gateway refused: %s", d.Refused)
			}
			if len(d.Gateway.EdgePolicies) != 1 || d.Gateway.EdgePolicies[0].Accepted.Status != metav1.ConditionFalse ||
				!strings.Contains(d.Gateway.EdgePolicies[0].Accepted.Message, tc.want) {
				t.Fatalf("policies %+v, want refused naming %q", d.Gateway.EdgePolicies, tc.want)
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
