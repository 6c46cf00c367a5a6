package snapshot

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/teapot-lb/teapot-lb/api"
	pb "github.com/teapot-lb/teapot-lb/api/proto/teapotv1"
)

// TestSkippedListenerFindings: a listener that is not served, for one of
// its fields or because another listener has its listen keys, has no
// problem saying that a broken field of it is ignored or replaced by a
// default: each says the listener is skipped and for which field's
// problem. A listener that is served keeps what it says is done instead.
func TestSkippedListenerFindings(t *testing.T) {
	const (
		idle     = "must be a positive duration, got -1s; "
		sources  = "listeners[1].allowedSources[0]"
		badCIDR  = `"10.0.0.300/8" is not a CIDR (like 192.0.2.0/24 or 2001:db8::/32); `
		requests = "X-Request-Id is the request id, one for each request (the proxy makes one when no trusted proxy sent it), " +
			"so a limit counted by it limits nothing and fills the limiter's table; count by another header; "
		lost = "192.0.2.1:80/tcp is already served by LoadBalancer acme/old; use another port or address"
	)
	requestID := &pb.RateLimit{RequestsPerSecond: 5, Key: "header", Header: "X-Request-Id"}
	tests := []struct {
		name string
		l    *pb.Listener // listeners[1] of "web", beside a tcp listener on port 22
		// old, when set, is an older load balancer with a tcp listener on
		// port 80 of web's address.
		old bool
		// dual serves web on an IPv6 address as well.
		dual   bool
		served bool
		want   []Problem
	}{
		{
			name: "a default before a broken source range",
			l:    &pb.Listener{Port: 80, Protocol: "http", IdleTimeout: dur(-time.Second), AllowedSources: []string{"10.0.0.300/8"}},
			want: []Problem{
				{"listeners[1].idleTimeout", idle + "listener skipped for " + sources},
				{sources, badCIDR + "listener skipped"},
			},
		},
		{
			name: "an ignored pool and a replaced TLS version before a broken source range",
			l: &pb.Listener{Port: 443, Protocol: "https", Pool: "app", AllowedSources: []string{"10.0.0.300/8"},
				Tls: &pb.TLSPolicy{Acme: true, MinVersion: "tls1.1"}},
			want: []Problem{
				{"listeners[1].pool", "https listeners send traffic by routes; remove pool and add a route to app; listener skipped for " + sources},
				{"listeners[1].tls.minVersion", `"tls1.1" is not one of tls1.2, tls1.3; listener skipped for ` + sources},
				{sources, badCIDR + "listener skipped"},
			},
		},
		{
			name: "untrusted proxies before a broken rate limit",
			l: &pb.Listener{Port: 80, Protocol: "http", TrustedProxies: []string{"nope"},
				RateLimit: &pb.RateLimit{RequestsPerSecond: 5, Key: "header", Header: "Host"}},
			want: []Problem{
				{"listeners[1].trustedProxies[0]", `"nope" is not a CIDR (like 192.0.2.0/24); listener skipped for listeners[1].rateLimit.header`},
				{"listeners[1].rateLimit.header", "Host is the route's; count by another header, or use one route per host; listener skipped"},
			},
		},
		{
			name: "a limit by request id after a broken source range",
			l:    &pb.Listener{Port: 80, Protocol: "http", AllowedSources: []string{"10.0.0.300/8"}, RateLimit: requestID},
			want: []Problem{
				{sources, badCIDR + "listener skipped"},
				{"listeners[1].rateLimit.header", requests + "listener skipped for " + sources},
			},
		},
		{
			name: "the port of an earlier listener",
			l:    &pb.Listener{Port: 22, Protocol: "tls-passthrough", Pool: "app", IdleTimeout: dur(-time.Second)},
			want: []Problem{
				{"listeners[1].idleTimeout", idle + "listener skipped for listeners[1].port"},
				{"listeners[1].port", "192.0.2.1:22/tcp duplicates listeners[0]; use another port"},
			},
		},
		{
			name: "a limit by request id on a port another load balancer serves",
			l:    &pb.Listener{Port: 80, Protocol: "http", IdleTimeout: dur(-time.Second), RateLimit: requestID},
			old:  true,
			want: []Problem{
				{"listeners[1].idleTimeout", idle + "listener skipped for listeners[1]"},
				{"listeners[1].rateLimit.header", requests + "listener skipped for listeners[1]"},
				{"listeners[1]", lost},
			},
		},
		{
			name:   "served on its IPv6 address while another load balancer has the IPv4 one",
			l:      &pb.Listener{Port: 80, Protocol: "http", IdleTimeout: dur(-time.Second), RateLimit: requestID},
			old:    true,
			dual:   true,
			served: true,
			want: []Problem{
				{"listeners[1].idleTimeout", idle + "using the default"},
				{"listeners[1].rateLimit.header", requests + "requestsPerSecond not enforced"},
				{"listeners[1]", lost},
			},
		},
		{
			name:   "served",
			l:      &pb.Listener{Port: 80, Protocol: "http", IdleTimeout: dur(-time.Second), RateLimit: requestID},
			served: true,
			want: []Problem{
				{"listeners[1].idleTimeout", idle + "using the default"},
				{"listeners[1].rateLimit.header", requests + "requestsPerSecond not enforced"},
			},
		},
	}
	t0 := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			web := withCreated(tcpLB("web", "192.0.2.1", 22, "10.20.0.1:22"), t0.Add(time.Hour))
			web.Listeners = append(web.Listeners, tt.l)
			web.Routes = []*pb.Route{{Host: "shop.acme.example", Path: "/", Pool: "app"}}
			if tt.dual {
				web.Status = &pb.LoadBalancerStatus{Addresses: []string{"192.0.2.1", "2001:db8:10::1"}}
			}
			lbs := []*pb.LoadBalancer{web}
			if tt.old {
				lbs = append(lbs, withCreated(tcpLB("old", "192.0.2.1", 80, "10.20.0.2:80"), t0))
			}
			s := Compile(objs(lbs...), 1, Defaults{}, nil)
			if got := problemsOf(s, "acme/web"); !slices.Equal(got, tt.want) {
				t.Errorf("problems =\n%q\nwant\n%q", got, tt.want)
			}
			var keys []Key
			for k, l := range s.Listeners.All() {
				if l.LB == "acme/web" && l.Index == 1 {
					keys = append(keys, k)
				}
			}
			if served := len(keys) > 0; served != tt.served {
				t.Errorf("listeners[1] served on %v, want served %v", keys, tt.served)
			}
			if !tt.old {
				return
			}
			// Once the other load balancer is gone, the listener is served
			// and its findings say again what is done instead.
			s = Compile(objs(web), 2, Defaults{}, s)
			want := []Problem{
				{"listeners[1].idleTimeout", idle + "using the default"},
				{"listeners[1].rateLimit.header", requests + "requestsPerSecond not enforced"},
			}
			if got := problemsOf(s, "acme/web"); !slices.Equal(got, want) {
				t.Errorf("problems without the other load balancer =\n%q\nwant\n%q", got, want)
			}
		})
	}
}

// TestSkippedRouteFindings: a route limited by the request id (served
// without its requestsPerSecond) that a later check skips says it is
// skipped, not that it is served without the limit.
func TestSkippedRouteFindings(t *testing.T) {
	const requests = "X-Request-Id is the request id, one for each request (the proxy makes one when no trusted proxy sent it), " +
		"so a limit counted by it limits nothing and fills the limiter's table; count by another header; "
	requestID := &pb.RateLimit{RequestsPerSecond: 5, Key: "header", Header: "X-Request-Id"}
	// Three routes matching by big's path take the load balancer over its
	// regex budget; two do not.
	big := "/r" + strings.Repeat("[0-9]{200}", 4)
	n, err := api.CompileRouteRegex(big)
	if err != nil || n > api.MaxRegexInsts || 2*n > api.MaxRegexInstsPerLB || 3*n <= api.MaxRegexInstsPerLB {
		t.Fatalf("%s compiles to %d instructions (%v)", big, n, err)
	}
	over := api.RegexUsage{Insts: 3 * n}.CheckLB()
	regexRoute := func(rl *pb.RateLimit) *pb.Route {
		return &pb.Route{Host: "shop.acme.example", Path: big, PathType: "regex", Pool: "app", RateLimit: rl}
	}
	tests := []struct {
		name   string
		routes []*pb.Route // after a route to shop.acme.example/
		want   []Problem
	}{
		{
			name:   "a duplicate",
			routes: []*pb.Route{{Host: "shop.acme.example", Path: "/", Pool: "app", RateLimit: requestID}},
			want: []Problem{
				{"routes[1].rateLimit.header", requests + "route skipped for routes[1]"},
				{"routes[1]", "duplicates routes[0]; route skipped"},
			},
		},
		{
			name:   "over the regex budget",
			routes: []*pb.Route{regexRoute(nil), regexRoute(nil), regexRoute(requestID)},
			want: []Problem{
				{"routes[3].rateLimit.header", requests + "route skipped for routes[3]"},
				{"routes[3]", over.Error() + "; route skipped"},
			},
		},
		{
			name:   "served",
			routes: []*pb.Route{{Host: "shop.acme.example", Path: "/api/", Pool: "app", RateLimit: requestID}},
			want: []Problem{
				{"routes[1].rateLimit.header", requests + "requestsPerSecond not enforced"},
			},
		},
		{
			name:   "served by its regular expression",
			routes: []*pb.Route{regexRoute(nil), regexRoute(requestID)},
			want: []Problem{
				{"routes[2].rateLimit.header", requests + "requestsPerSecond not enforced"},
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			lb := tcpLB("web", "192.0.2.1", 22, "10.20.0.1:22")
			lb.Listeners = append(lb.Listeners, &pb.Listener{Port: 80, Protocol: "http"})
			lb.Routes = append([]*pb.Route{{Host: "shop.acme.example", Path: "/", Pool: "app"}}, tt.routes...)
			s := Compile(objs(lb), 1, Defaults{}, nil)
			if got := problemsOf(s, "acme/web"); !slices.Equal(got, tt.want) {
				t.Errorf("problems =\n%q\nwant\n%q", got, tt.want)
			}
		})
	}
}

// TestRouteFindingsWithoutAServedListener: a route limited by the request
// id is compiled without its requestsPerSecond, but served only while an
// http or https listener that carries it is. When none is (each skipped
// for a field of its own, every key of it a duplicate of an earlier
// listener's, or every key served by another load balancer), its finding
// says the route is skipped and for which listeners, not that it is
// served without the limit; once one is served again it reads as before.
func TestRouteFindingsWithoutAServedListener(t *testing.T) {
	const requests = "X-Request-Id is the request id, one for each request (the proxy makes one when no trusted proxy sent it), " +
		"so a limit counted by it limits nothing and fills the limiter's table; count by another header; "
	const enforced = requests + "requestsPerSecond not enforced"
	requestID := &pb.RateLimit{RequestsPerSecond: 5, Key: "header", Header: "X-Request-Id"}
	broken := []string{"10.0.0.300/8"}
	tests := []struct {
		name string
		ls   []*pb.Listener // listeners[1:] of "web", after a tcp listener on port 22
		// ports are the route's; old, when set, is an older load balancer
		// with a tcp listener on port 80 of web's address; dual serves web
		// on an IPv6 address as well.
		ports []uint32
		old   bool
		dual  bool
		want  string // the route's rateLimit.header finding
	}{
		{
			name: "its only listener skipped for a source range",
			ls:   []*pb.Listener{{Port: 80, Protocol: "http", AllowedSources: broken}},
			want: requests + "route skipped for listeners[1]",
		},
		{
			name: "both listeners skipped",
			ls: []*pb.Listener{{Port: 80, Protocol: "http", AllowedSources: broken},
				{Port: 443, Protocol: "https", Tls: &pb.TLSPolicy{Acme: true}, DeniedSources: broken}},
			want: requests + "route skipped for listeners[1], listeners[2]",
		},
		{
			name: "four listeners skipped",
			ls: []*pb.Listener{{Port: 80, Protocol: "http", AllowedSources: broken}, {Port: 81, Protocol: "http", AllowedSources: broken},
				{Port: 82, Protocol: "http", AllowedSources: broken}, {Port: 83, Protocol: "http", AllowedSources: broken}},
			want: requests + "route skipped for listeners[1], listeners[2], listeners[3] and 1 more",
		},
		{
			name: "its listener's port an earlier listener's",
			ls:   []*pb.Listener{{Port: 22, Protocol: "http"}},
			want: requests + "route skipped for listeners[1]",
		},
		{
			name:  "the listener of its port skipped, another served",
			ls:    []*pb.Listener{{Port: 80, Protocol: "http"}, {Port: 8080, Protocol: "http", AllowedSources: broken}},
			ports: []uint32{8080},
			want:  requests + "route skipped for listeners[2]",
		},
		{
			name: "its listener's key served by another load balancer",
			ls:   []*pb.Listener{{Port: 80, Protocol: "http"}},
			old:  true,
			want: requests + "route skipped for listeners[1]",
		},
		{
			name: "one listener skipped, another served",
			ls:   []*pb.Listener{{Port: 80, Protocol: "http", AllowedSources: broken}, {Port: 8080, Protocol: "http"}},
			want: enforced,
		},
		{
			name: "its listener served on its IPv6 address while another load balancer has the IPv4 one",
			ls:   []*pb.Listener{{Port: 80, Protocol: "http"}},
			old:  true,
			dual: true,
			want: enforced,
		},
		{
			name: "served",
			ls:   []*pb.Listener{{Port: 80, Protocol: "http"}},
			want: enforced,
		},
	}
	t0 := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	finding := func(s *Snapshot) string {
		for _, p := range problemsOf(s, "acme/web") {
			if p.Field == "routes[0].rateLimit.header" {
				return p.Reason
			}
		}
		return ""
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			web := withCreated(tcpLB("web", "192.0.2.1", 22, "10.20.0.1:22"), t0.Add(time.Hour))
			web.Listeners = append(web.Listeners, tt.ls...)
			web.Routes = []*pb.Route{{Host: "shop.acme.example", Path: "/", Pool: "app", RateLimit: requestID, Ports: tt.ports}}
			if tt.dual {
				web.Status = &pb.LoadBalancerStatus{Addresses: []string{"192.0.2.1", "2001:db8:10::1"}}
			}
			lbs := []*pb.LoadBalancer{web}
			if tt.old {
				lbs = append(lbs, withCreated(tcpLB("old", "192.0.2.1", 80, "10.20.0.2:80"), t0))
			}
			s := Compile(objs(lbs...), 1, Defaults{}, nil)
			if got := finding(s); got != tt.want {
				t.Errorf("routes[0].rateLimit.header: %q\nwant %q\n(all: %q)", got, tt.want, problemsOf(s, "acme/web"))
			}
			if !tt.old {
				return
			}
			// Once the other load balancer is gone, the route is served
			// and its finding says again what is done instead.
			s = Compile(objs(web), 2, Defaults{}, s)
			if got := finding(s); got != enforced {
				t.Errorf("without the other load balancer: %q\nwant %q", got, enforced)
			}
		})
	}
}
