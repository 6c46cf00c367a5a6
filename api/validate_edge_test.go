package api

import (
	"fmt"
	"net/netip"
	"strings"
	"testing"

	pb "github.com/teapot-lb/teapot-lb/api/proto/teapotv1"
)

func TestValidateEdgeFields(t *testing.T) {
	t.Parallel()
	many := make([]string, MaxListenerSources+1)
	for i := range many {
		many[i] = fmt.Sprintf("10.%d.%d.0/24", i/256, i%256)
	}
	tests := []struct {
		name string
		mut  func(lb *pb.LoadBalancer)
		want expect
	}{
		{"sources v4 and v6", func(lb *pb.LoadBalancer) {
			lb.Listeners[2].AllowedSources = []string{"192.0.2.0/24", "2001:db8::/32", "198.51.100.7"}
			lb.Listeners[2].DeniedSources = []string{"192.0.2.128/25"}
		}, pass()},
		{"source not a CIDR", func(lb *pb.LoadBalancer) { lb.Listeners[0].AllowedSources = []string{"office"} },
			bad("listeners[0].allowedSources[0]", `"office" is not a CIDR`)},
		{"denied source not a CIDR", func(lb *pb.LoadBalancer) { lb.Listeners[0].DeniedSources = []string{"10.0.0.0/33"} },
			bad("listeners[0].deniedSources[0]", "is not a CIDR")},
		{"too many sources", func(lb *pb.LoadBalancer) { lb.Listeners[0].AllowedSources = many },
			bad("listeners[0].allowedSources", fmt.Sprintf("at most %d", MaxListenerSources))},
		{"listener rate", func(lb *pb.LoadBalancer) {
			lb.Listeners[0].RateLimit = &pb.RateLimit{RequestsPerSecond: 100, ConnectionsPerSecond: 20, Burst: 50}
			lb.Listeners[2].RateLimit = &pb.RateLimit{ConnectionsPerSecond: 5, Key: "total"}
		}, pass()},
		{"requests on a tcp listener", func(lb *pb.LoadBalancer) { lb.Listeners[2].RateLimit = &pb.RateLimit{RequestsPerSecond: 5} },
			bad("listeners[2].rateLimit.requestsPerSecond", "use connectionsPerSecond")},
		{"no rate", func(lb *pb.LoadBalancer) { lb.Listeners[0].RateLimit = &pb.RateLimit{Burst: 5} },
			bad("listeners[0].rateLimit", "sets no rate")},
		{"rate too high", func(lb *pb.LoadBalancer) { lb.Routes[0].RateLimit = &pb.RateLimit{RequestsPerSecond: MaxRateLimit + 1} },
			bad("routes[0].rateLimit.requestsPerSecond", "at most")},
		{"connections on a route", func(lb *pb.LoadBalancer) { lb.Routes[0].RateLimit = &pb.RateLimit{ConnectionsPerSecond: 5} },
			bad("routes[0].rateLimit.connectionsPerSecond", "on the listener")},
		{"waf", func(lb *pb.LoadBalancer) {
			lb.Routes[0].Waf = &pb.WAF{Mode: "block", ParanoiaLevel: 2, MaxBodyBytes: 65536}
		}, pass()},
		{"waf without mode", func(lb *pb.LoadBalancer) { lb.Routes[0].Waf = &pb.WAF{} }, bad("routes[0].waf.mode", "required")},
		{"waf paranoia 5", func(lb *pb.LoadBalancer) { lb.Routes[0].Waf = &pb.WAF{Mode: "detect", ParanoiaLevel: 5} }, bad("routes[0].waf.paranoiaLevel", "from 1 to 4")},
		{"waf body too big", func(lb *pb.LoadBalancer) {
			lb.Routes[0].Waf = &pb.WAF{Mode: "detect", MaxBodyBytes: MaxWAFBodyBytes + 1}
		}, bad("routes[0].waf.maxBodyBytes", "at most")},
		{"waf exclusions", func(lb *pb.LoadBalancer) {
			lb.Routes[0].Waf = &pb.WAF{Mode: "block", ExcludeRules: []uint32{942100, 920350}}
		}, pass()},
		{"waf exclusion not a CRS id", func(lb *pb.LoadBalancer) {
			lb.Routes[0].Waf = &pb.WAF{Mode: "block", ExcludeRules: []uint32{942100, 12}}
		}, bad("routes[0].waf.excludeRules[1]", "900000 to 999999")},
		{"waf too many exclusions", func(lb *pb.LoadBalancer) {
			lb.Routes[0].Waf = &pb.WAF{Mode: "block", ExcludeRules: make([]uint32, MaxWAFExcludedRules+1)}
		}, bad("routes[0].waf.excludeRules", "at most 64")},
		{"route key bogus", func(lb *pb.LoadBalancer) {
			lb.Routes[0].RateLimit = &pb.RateLimit{RequestsPerSecond: 5, Key: "header:x"}
		},
			bad("routes[0].rateLimit.key", "not one of client, total, header")},
		{"route key header", func(lb *pb.LoadBalancer) {
			lb.Routes[0].RateLimit = &pb.RateLimit{RequestsPerSecond: 5, Key: "header", Header: "X-API-Key"}
			lb.Listeners[0].RateLimit = &pb.RateLimit{RequestsPerSecond: 50, Key: "header", Header: "authorization"}
		}, pass()},
		{"header without key header", func(lb *pb.LoadBalancer) {
			lb.Routes[0].RateLimit = &pb.RateLimit{RequestsPerSecond: 5, Header: "X-API-Key"}
		}, bad("routes[0].rateLimit.header", "only with key: header")},
		{"key header without header", func(lb *pb.LoadBalancer) {
			lb.Routes[0].RateLimit = &pb.RateLimit{RequestsPerSecond: 5, Key: "header"}
		}, bad("routes[0].rateLimit.header", "required")},
		{"header not a field name", func(lb *pb.LoadBalancer) {
			lb.Routes[0].RateLimit = &pb.RateLimit{RequestsPerSecond: 5, Key: "header", Header: "x api key"}
		}, bad("routes[0].rateLimit.header", "not a header field name")},
		{"header too long", func(lb *pb.LoadBalancer) {
			lb.Routes[0].RateLimit = &pb.RateLimit{RequestsPerSecond: 5, Key: "header", Header: strings.Repeat("x", MaxRateHeaderName+1)}
		}, bad("routes[0].rateLimit.header", "at most 64")},
		{"header host", func(lb *pb.LoadBalancer) {
			lb.Routes[0].RateLimit = &pb.RateLimit{RequestsPerSecond: 5, Key: "header", Header: "host"}
		}, bad("routes[0].rateLimit.header", "Host")},
		{"header request id", func(lb *pb.LoadBalancer) {
			lb.Routes[0].RateLimit = &pb.RateLimit{RequestsPerSecond: 5, Key: "header", Header: "X_request-ID"}
		}, bad("routes[0].rateLimit.header", "the request id")},
		{"listener header request id", func(lb *pb.LoadBalancer) {
			lb.Listeners[0].RateLimit = &pb.RateLimit{RequestsPerSecond: 5, Key: "header", Header: "x-request-id"}
		}, bad("listeners[0].rateLimit.header", "the request id")},
		{"connections with key header", func(lb *pb.LoadBalancer) {
			lb.Listeners[0].RateLimit = &pb.RateLimit{RequestsPerSecond: 5, ConnectionsPerSecond: 5, Key: "header", Header: "X-API-Key"}
		}, pass()},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			lb := shopLB()
			tt.mut(lb)
			check(t, ValidateLoadBalancer(lb, baseCatalog()), tt.want)
		})
	}
}

func TestParseSources(t *testing.T) {
	t.Parallel()
	got, err := ParseSources([]string{"192.0.2.9/24", "::ffff:198.51.100.0/120", "2001:db8::1"})
	want := []netip.Prefix{netip.MustParsePrefix("192.0.2.0/24"), netip.MustParsePrefix("198.51.100.0/24"), netip.MustParsePrefix("2001:db8::1/128")}
	if err != nil || fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("got %v, %v; want %v", got, err, want)
	}
	if _, err := ParseSources([]string{"::ffff:0.0.0.0/8"}); err == nil {
		t.Fatal("a mapped prefix shorter than /96 was accepted")
	}
}

func TestEdgeFeaturesUsed(t *testing.T) {
	t.Parallel()
	lb := shopLB()
	lb.Listeners[2].AllowedSources = []string{"192.0.2.0/24"}
	lb.Routes[1].RateLimit = &pb.RateLimit{RequestsPerSecond: 1}
	uses := FeaturesUsed(&pb.Object{Kind: &pb.Object_LoadBalancer{LoadBalancer: lb}})
	if len(uses) != 2 || uses[0].Feature != FeatureSourceRanges || uses[1].Feature != FeatureRateLimits || LevelNeeded(uses) != 4 {
		t.Fatalf("uses %v, level %d", uses, LevelNeeded(uses))
	}
	lb.Routes[1].Waf = &pb.WAF{Mode: "block", ExcludeRules: []uint32{942100}}
	uses = FeaturesUsed(&pb.Object{Kind: &pb.Object_LoadBalancer{LoadBalancer: lb}})
	if len(uses) != 4 || uses[3].Feature != FeatureWAFExclusions || !strings.HasSuffix(uses[3].Field, "routes[1].waf.excludeRules") || LevelNeeded(uses) != 5 {
		t.Fatalf("uses %v, level %d", uses, LevelNeeded(uses))
	}
	lb.Routes[1].Waf = nil
	lb.Routes[1].RateLimit = &pb.RateLimit{RequestsPerSecond: 1, Key: RateKeyHeader, Header: "X-API-Key"}
	uses = FeaturesUsed(&pb.Object{Kind: &pb.Object_LoadBalancer{LoadBalancer: lb}})
	if len(uses) != 3 || uses[2].Feature != FeatureRateLimitHeader || !strings.HasSuffix(uses[2].Field, "routes[1].rateLimit.header") || LevelNeeded(uses) != 5 {
		t.Fatalf("uses %v, level %d", uses, LevelNeeded(uses))
	}
}
