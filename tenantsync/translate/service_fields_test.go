package translate_test

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/teapot-lb/teapot-lb/api"
	pb "github.com/teapot-lb/teapot-lb/api/proto/teapotv1"
	"github.com/teapot-lb/teapot-lb/tenantsync/translate"
)

// TestServiceFieldsHonouredOrRefused is the table of the Service fields
// that cloud load balancers honour: loadBalancerSourceRanges (or its
// annotation) become every listener's allowedSources, and a list the LB
// cannot enforce refuses the Service,
// sessionAffinity ClientIP hashes the client address (the timeout is not
// applied, which a warning says), and a dual-stack policy asks for a VIP
// of each family (required or preferred), or on an LB cluster without
// dual-stack gets one VIP (RequireDualStack is refused, PreferDualStack
// warned).
func TestServiceFieldsHonouredOrRefused(t *testing.T) {
	t.Parallel()
	twoPorts := func(s *corev1.Service) {
		s.Spec.Ports = append(s.Spec.Ports, corev1.ServicePort{Name: "dns", Port: 53, Protocol: corev1.ProtocolUDP, NodePort: 30053})
	}
	clientIP := func(timeout int32) svcOpt {
		return func(s *corev1.Service) {
			s.Spec.SessionAffinity = corev1.ServiceAffinityClientIP
			if timeout > 0 {
				s.Spec.SessionAffinityConfig = &corev1.SessionAffinityConfig{ClientIP: &corev1.ClientIPConfig{TimeoutSeconds: ptr(timeout)}}
			}
		}
	}
	families := func(p corev1.IPFamilyPolicy, fs ...corev1.IPFamily) svcOpt {
		return func(s *corev1.Service) { s.Spec.IPFamilyPolicy, s.Spec.IPFamilies = &p, fs }
	}
	tests := []struct {
		name     string
		opts     []svcOpt
		refused  []string // words of the refusal; nil: served
		warnings []string // words one warning each holds, in order
		hashed   bool     // every pool hashes the client address
		family   string
		dual     bool     // the LB cluster serves dual-stack (Options.DualStack)
		families []string // vip.families
		policy   string   // vip.familyPolicy
		sources  []string // every listener's allowedSources
	}{
		{name: "plain Service: served as asked"},
		{name: "loadBalancerSourceRanges: every listener allows them", opts: []svcOpt{twoPorts, func(s *corev1.Service) { s.Spec.LoadBalancerSourceRanges = []string{"192.0.2.0/24", "2001:db8::/32"} }},
			sources: []string{"192.0.2.0/24", "2001:db8::/32"}},
		{name: "source-ranges annotation: every listener allows them", opts: []svcOpt{func(s *corev1.Service) {
			s.Annotations[translate.AnnotationSourceRanges] = " 192.0.2.0/24, 198.51.100.7/32"
		}},
			sources: []string{"192.0.2.0/24", "198.51.100.7/32"}},
		{name: "the field wins over the annotation", opts: []svcOpt{func(s *corev1.Service) {
			s.Spec.LoadBalancerSourceRanges = []string{"192.0.2.0/24"}
			s.Annotations[translate.AnnotationSourceRanges] = "0.0.0.0/0"
		}}, sources: []string{"192.0.2.0/24"}},
		{name: "a malformed annotation: refused, never served open", opts: []svcOpt{func(s *corev1.Service) { s.Annotations[translate.AnnotationSourceRanges] = "192.0.2.0/24,office" }},
			refused: []string{"annotation " + translate.AnnotationSourceRanges + "[1]", `"office" is not a CIDR`, "no load balancer and no VIP"}},
		{name: "source ranges win over another refusal", opts: []svcOpt{families(corev1.IPFamilyPolicyRequireDualStack, corev1.IPv4Protocol, corev1.IPv6Protocol), func(s *corev1.Service) { s.Spec.LoadBalancerSourceRanges = []string{"192.0.2.0/24", "192.0.2.300/32"} }},
			refused: []string{"spec.loadBalancerSourceRanges[1]"}, warnings: nil},
		{name: "ClientIP with a timeout: every pool hashes the client address", opts: []svcOpt{twoPorts, clientIP(600)},
			hashed: true, warnings: []string{"spec.sessionAffinityConfig.clientIP.timeoutSeconds (600) is not applied"}},
		{name: "ClientIP without a config: the default timeout is named", opts: []svcOpt{clientIP(0)},
			hashed: true, warnings: []string{"timeoutSeconds (10800) is not applied"}},
		{name: "ClientIP overrides an algorithm annotation", opts: []svcOpt{clientIP(60), func(s *corev1.Service) { s.Annotations[translate.AnnotationAlgorithm] = "least-request" }},
			hashed: true, warnings: []string{`teapot-lb.io/algorithm "least-request" is overridden by spec.sessionAffinity ClientIP`, "timeoutSeconds (60)"}},
		{name: "RequireDualStack: a VIP of each family, required", dual: true, opts: []svcOpt{families(corev1.IPFamilyPolicyRequireDualStack, corev1.IPv4Protocol, corev1.IPv6Protocol)},
			families: []string{"ipv4", "ipv6"}},
		{name: "PreferDualStack IPv6 first: a VIP of each family, IPv6 first, preferred", dual: true, opts: []svcOpt{families(corev1.IPFamilyPolicyPreferDualStack, corev1.IPv6Protocol, corev1.IPv4Protocol)},
			families: []string{"ipv6", "ipv4"}, policy: "prefer"},
		{name: "PreferDualStack in a single-stack cluster: both families all the same", dual: true, opts: []svcOpt{families(corev1.IPFamilyPolicyPreferDualStack, corev1.IPv4Protocol)},
			families: []string{"ipv4", "ipv6"}, policy: "prefer"},
		{name: "RequireDualStack on an older LB cluster: refused", opts: []svcOpt{families(corev1.IPFamilyPolicyRequireDualStack, corev1.IPv4Protocol, corev1.IPv6Protocol)},
			refused: []string{"spec.ipFamilyPolicy RequireDualStack", "below feature level 4"}},
		{name: "PreferDualStack IPv6 first on an older LB cluster: one IPv6 VIP", opts: []svcOpt{families(corev1.IPFamilyPolicyPreferDualStack, corev1.IPv6Protocol, corev1.IPv4Protocol)},
			family: "ipv6", warnings: []string{"spec.ipFamilyPolicy PreferDualStack: served on one IPv6 VIP"}},
		{name: "PreferDualStack IPv4 first on an older LB cluster: one IPv4 VIP", opts: []svcOpt{families(corev1.IPFamilyPolicyPreferDualStack, corev1.IPv4Protocol, corev1.IPv6Protocol)},
			warnings: []string{"served on one IPv4 VIP"}},
		{name: "SingleStack IPv6", dual: true, opts: []svcOpt{families(corev1.IPFamilyPolicySingleStack, corev1.IPv6Protocol)}, family: "ipv6"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			svc := service("shop", "web", tt.opts...)
			d := translate.Service(svc, sources(t, append([]runtime.Object{svc}, nodes...)...), translate.Options{DefaultPool: "public", DualStack: tt.dual})
			for _, w := range tt.refused {
				if !strings.Contains(d.Refused, w) {
					t.Errorf("refused %q; want it to say %q", d.Refused, w)
				}
			}
			if tt.refused == nil && d.Refused != "" {
				t.Errorf("refused %q; want it served", d.Refused)
			}
			if tt.refused == nil {
				if len(d.Warnings) != len(tt.warnings) {
					t.Fatalf("warnings %q; want %d", d.Warnings, len(tt.warnings))
				}
				for i, w := range tt.warnings {
					if !strings.Contains(d.Warnings[i], w) {
						t.Errorf("warning %d %q; want it to say %q", i, d.Warnings[i], w)
					}
				}
			}
			if len(d.LB.GetPools()) == 0 {
				t.Fatal("no pools")
			}
			for key, p := range d.LB.GetPools() {
				if hashed := p.GetAlgorithm() == "hash" && p.GetHashOn() == "client-ip"; hashed != tt.hashed {
					t.Errorf("pool %s: algorithm %q hash_on %q; want hashing the client address %t", key, p.GetAlgorithm(), p.GetHashOn(), tt.hashed)
				}
			}
			for i, l := range d.LB.GetListeners() {
				if !slices.Equal(l.GetAllowedSources(), tt.sources) {
					t.Errorf("listeners[%d].allowedSources %q, want %q", i, l.GetAllowedSources(), tt.sources)
				}
			}
			if got := d.LB.GetVip().GetFamily(); got != tt.family {
				t.Errorf("VIP family %q, want %q", got, tt.family)
			}
			if got := d.LB.GetVip().GetFamilies(); !slices.Equal(got, tt.families) || d.LB.GetVip().GetFamilyPolicy() != tt.policy {
				t.Errorf("VIP families %q policy %q, want %q %q", got, d.LB.GetVip().GetFamilyPolicy(), tt.families, tt.policy)
			}
			// The LB cluster takes the pools and the VIP request (the
			// tenant and VIP pool are not in this test's catalog).
			var ve *api.ValidationError
			if err := api.ValidateLoadBalancer(d.LB, nil); errors.As(err, &ve) {
				for _, fe := range ve.Errors {
					if strings.HasPrefix(fe.Field, "pools") || strings.HasPrefix(fe.Field, "vip.family") || strings.Contains(fe.Field, "Sources") {
						t.Errorf("the LB cluster refuses the load balancer: %s: %s", fe.Field, fe.Reason)
					}
				}
			}
		})
	}
}

// TestIngressTLSFieldsNotReadAreWarned: an Ingress's tls secretName is
// not read and a TLS host without a rule gets no certificate; each is a
// warning naming the field.
func TestIngressTLSFieldsNotReadAreWarned(t *testing.T) {
	t.Parallel()
	ing := ingress("shop", "main", func(i *networkingv1.Ingress) {
		i.Spec.TLS = []networkingv1.IngressTLS{{Hosts: []string{"shop.acme.example", "www.acme.example"}, SecretName: "shop-tls"}}
	})
	objs := append(append([]runtime.Object{class("teapot", translate.IngressController, false), ing}, nodes...), backendServices()...)
	d := translate.Ingress(ing, sources(t, objs...), translate.Options{DefaultPool: "public"})
	want := []string{`spec.tls[].hosts: 1 hosts ("www.acme.example" first) have no rule`, "spec.tls: 1 secretName entries are not read"}
	if len(d.Warnings) != len(want) {
		t.Fatalf("warnings %q; want %d", d.Warnings, len(want))
	}
	for i, w := range want {
		if !strings.Contains(d.Warnings[i], w) {
			t.Errorf("warning %q; want it to say %q", d.Warnings[i], w)
		}
	}
}

// TestEdgeSourceAnnotations: an Ingress takes teapot-lb.io/allowed-sources
// and ingress-nginx's allowlist/whitelist/denylist spellings onto every
// listener; a malformed list refuses it; a Gateway takes the teapot-lb.io
// annotations, and a malformed one makes it not accepted.
func TestEdgeSourceAnnotations(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name           string
		ann            map[string]string
		allowed        []string
		denied         []string
		refused, warns string
	}{
		{name: "teapot-lb.io", ann: map[string]string{translate.AnnotationAllowedSources: "192.0.2.0/24", translate.AnnotationDeniedSources: "192.0.2.9"},
			allowed: []string{"192.0.2.0/24"}, denied: []string{"192.0.2.9"}},
		{name: "nginx allowlist", ann: map[string]string{translate.NginxAllowlistSourceRange: "10.0.0.0/8, 2001:db8::/32"}, allowed: []string{"10.0.0.0/8", "2001:db8::/32"}},
		{name: "nginx whitelist and denylist", ann: map[string]string{translate.NginxWhitelistSourceRange: "10.0.0.0/8", translate.NginxDenylistSourceRange: "10.1.0.0/16"},
			allowed: []string{"10.0.0.0/8"}, denied: []string{"10.1.0.0/16"}},
		{name: "teapot-lb.io wins", ann: map[string]string{translate.AnnotationAllowedSources: "10.0.0.0/8", translate.NginxWhitelistSourceRange: "0.0.0.0/0"},
			allowed: []string{"10.0.0.0/8"}, warns: translate.NginxWhitelistSourceRange + " is not read"},
		{name: "malformed", ann: map[string]string{translate.NginxDenylistSourceRange: "10.0.0.0/8,evil"}, refused: translate.NginxDenylistSourceRange + "[1]"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			ing := ingress("shop", "main", func(i *networkingv1.Ingress) {
				i.Annotations = tt.ann
				i.Spec.TLS = []networkingv1.IngressTLS{{Hosts: []string{"shop.acme.example"}}}
			})
			objs := append(append([]runtime.Object{class("teapot", translate.IngressController, false), ing}, nodes...), backendServices()...)
			d := translate.Ingress(ing, sources(t, objs...), translate.Options{DefaultPool: "public"})
			if tt.refused != "" {
				if !strings.Contains(d.Refused, tt.refused) {
					t.Fatalf("refused %q; want it to name %s", d.Refused, tt.refused)
				}
				return
			}
			if d.Refused != "" {
				t.Fatalf("refused %q", d.Refused)
			}
			if len(d.LB.GetListeners()) != 2 {
				t.Fatalf("listeners %v", d.LB.GetListeners())
			}
			for i, l := range d.LB.GetListeners() {
				if !slices.Equal(l.GetAllowedSources(), tt.allowed) || !slices.Equal(l.GetDeniedSources(), tt.denied) {
					t.Errorf("listeners[%d]: allowed %q denied %q; want %q %q", i, l.GetAllowedSources(), l.GetDeniedSources(), tt.allowed, tt.denied)
				}
			}
			if tt.warns != "" && !slices.ContainsFunc(d.Warnings, func(w string) bool { return strings.Contains(w, tt.warns) }) {
				t.Errorf("warnings %q; want one saying %q", d.Warnings, tt.warns)
			}
		})
	}
}

// TestEdgeRateAnnotations: an Ingress's rate-limit annotations (and
// ingress-nginx's limit-rps with its burst multiplier) limit each route;
// connections per second limit the listeners; what teapot-lb cannot
// apply is a warning naming the annotation.
func TestEdgeRateAnnotations(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name        string
		ann         map[string]string
		route, lsnr *pb.RateLimit
		waf         *pb.WAF
		warns       string
	}{
		{name: "teapot-lb.io", ann: map[string]string{translate.AnnotationRateLimitRPS: "50", translate.AnnotationRateLimitBurst: "80", translate.AnnotationRateLimitConnections: "10", translate.AnnotationRateLimitKey: "total"},
			route: &pb.RateLimit{RequestsPerSecond: 50, Burst: 80, Key: "total"}, lsnr: &pb.RateLimit{ConnectionsPerSecond: 10, Burst: 80, Key: "total"}},
		{name: "per API key", ann: map[string]string{translate.AnnotationRateLimitRPS: "5", translate.AnnotationRateLimitConnections: "10", translate.AnnotationRateLimitKey: "header", translate.AnnotationRateLimitHeader: "X-API-Key"},
			route: &pb.RateLimit{RequestsPerSecond: 5, Key: "header", Header: "X-API-Key"}, lsnr: &pb.RateLimit{ConnectionsPerSecond: 10, Key: "header", Header: "X-API-Key"}},
		{name: "header key without a header", ann: map[string]string{translate.AnnotationRateLimitRPS: "5", translate.AnnotationRateLimitKey: "header"},
			route: &pb.RateLimit{RequestsPerSecond: 5}, warns: translate.AnnotationRateLimitHeader + " are not applied (is required"},
		{name: "header without key header", ann: map[string]string{translate.AnnotationRateLimitRPS: "5", translate.AnnotationRateLimitHeader: "X-API-Key"},
			route: &pb.RateLimit{RequestsPerSecond: 5}, warns: translate.AnnotationRateLimitHeader + " is not applied without"},
		{name: "nginx limit-rps", ann: map[string]string{translate.NginxLimitRPS: "20", translate.NginxLimitBurstMultiplier: "3"},
			route: &pb.RateLimit{RequestsPerSecond: 20, Burst: 60}},
		{name: "nginx limit-rps default multiplier", ann: map[string]string{translate.NginxLimitRPS: "20"}, route: &pb.RateLimit{RequestsPerSecond: 20, Burst: 100}},
		{name: "nginx limit-connections", ann: map[string]string{translate.NginxLimitConnections: "5"}, warns: translate.NginxLimitConnections + " is not applied"},
		{name: "waf", ann: map[string]string{translate.AnnotationWAF: "block", translate.AnnotationWAFParanoia: "2"}, waf: &pb.WAF{Mode: "block", ParanoiaLevel: 2}},
		{name: "waf exclusions", ann: map[string]string{translate.AnnotationWAF: "block", translate.AnnotationWAFExcludeRules: "942100, 920350"},
			waf: &pb.WAF{Mode: "block", ExcludeRules: []uint32{942100, 920350}}},
		{name: "waf exclusion not a rule id", ann: map[string]string{translate.AnnotationWAF: "block", translate.AnnotationWAFExcludeRules: "942100,sqli"},
			waf: &pb.WAF{Mode: "block"}, warns: translate.AnnotationWAFExcludeRules + " is not applied"},
		{name: "nginx modsecurity with the CRS", ann: map[string]string{translate.NginxEnableModSecurity: "true", translate.NginxEnableOWASPRules: "true", translate.NginxModSecuritySnippet: "SecRuleEngine On"},
			waf: &pb.WAF{Mode: "detect"}, warns: translate.NginxModSecuritySnippet + " is not read"},
		{name: "malformed", ann: map[string]string{translate.AnnotationRateLimitRPS: "lots"}, warns: translate.AnnotationRateLimitRPS + ` "lots" is not applied`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			ing := ingress("shop", "main", func(i *networkingv1.Ingress) { i.Annotations = tt.ann })
			objs := append(append([]runtime.Object{class("teapot", translate.IngressController, false), ing}, nodes...), backendServices()...)
			d := translate.Ingress(ing, sources(t, objs...), translate.Options{DefaultPool: "public"})
			if d.Refused != "" || len(d.LB.GetRoutes()) == 0 {
				t.Fatalf("refused %q routes %v", d.Refused, d.LB.GetRoutes())
			}
			for i, r := range d.LB.GetRoutes() {
				if !proto.Equal(r.GetRateLimit(), tt.route) {
					t.Errorf("routes[%d].rateLimit %v, want %v", i, r.GetRateLimit(), tt.route)
				}
				if !proto.Equal(r.GetWaf(), tt.waf) {
					t.Errorf("routes[%d].waf %v, want %v", i, r.GetWaf(), tt.waf)
				}
			}
			for i, l := range d.LB.GetListeners() {
				if !proto.Equal(l.GetRateLimit(), tt.lsnr) {
					t.Errorf("listeners[%d].rateLimit %v, want %v", i, l.GetRateLimit(), tt.lsnr)
				}
			}
			if tt.warns != "" && !slices.ContainsFunc(d.Warnings, func(w string) bool { return strings.Contains(w, tt.warns) }) {
				t.Errorf("warnings %q; want one saying %q", d.Warnings, tt.warns)
			}
			if err := api.ValidateLoadBalancer(d.LB, nil); err != nil && strings.Contains(err.Error(), "rateLimit") {
				t.Errorf("the LB cluster refuses the rate limits: %v", err)
			}
		})
	}
}
