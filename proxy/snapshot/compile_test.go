package snapshot

import (
	"maps"
	"net/netip"
	"slices"
	"testing"
	"time"

	pb "github.com/teapot-lb/teapot-lb/api/proto/teapotv1"
	"github.com/teapot-lb/teapot-lb/proxy/internal/pmap"
	"google.golang.org/protobuf/proto"
)

func key(s string, n Network) Key { return Key{Addr: netip.MustParseAddrPort(s), Network: n} }

func TestCompileListenersAndPools(t *testing.T) {
	t0 := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	tests := []struct {
		name string
		lbs  []*pb.LoadBalancer
		// want maps listen keys to the load balancer serving them.
		want     map[Key]string
		problems map[string][]Problem
	}{
		{
			name:     "one tcp listener",
			lbs:      []*pb.LoadBalancer{tcpLB("db", "192.0.2.1", 5432, "10.20.0.1:5432")},
			want:     map[Key]string{key("192.0.2.1:5432", TCP): "acme/db"},
			problems: map[string][]Problem{"acme/db": {}},
		},
		{
			name:     "no address yet: not served, no problem",
			lbs:      []*pb.LoadBalancer{tcpLB("db", "", 5432, "10.20.0.1:5432")},
			want:     map[Key]string{},
			problems: map[string][]Problem{"acme/db": {}},
		},
		{
			name: "address outside every VIP pool",
			lbs:  []*pb.LoadBalancer{tcpLB("db", "198.51.100.1", 5432, "10.20.0.1:5432")},
			want: map[Key]string{},
			problems: map[string][]Problem{"acme/db": {{"status.address",
				"198.51.100.1 is not inside any VIP pool; nothing of this load balancer is served"}}},
		},
		{
			name: "unknown tenant",
			lbs: []*pb.LoadBalancer{func() *pb.LoadBalancer {
				lb := tcpLB("db", "192.0.2.1", 5432, "10.20.0.1:5432")
				lb.Tenant = "ghost"
				return lb
			}()},
			want: map[Key]string{},
			problems: map[string][]Problem{"ghost/db": {{"tenant",
				"tenant ghost does not exist; nothing of this load balancer is served"}}},
		},
		{
			name: "two load balancers on one port: the older keeps it, the other's other listener still serves",
			lbs: []*pb.LoadBalancer{
				withCreated(tcpLB("young", "192.0.2.1", 80, "10.20.0.1:80"), t0.Add(time.Hour)),
				func() *pb.LoadBalancer {
					lb := withCreated(tcpLB("old", "192.0.2.1", 80, "10.20.0.2:80"), t0)
					lb.Listeners = append(lb.Listeners, &pb.Listener{Port: 81, Protocol: "tcp", Pool: "app"})
					return lb
				}(),
			},
			want: map[Key]string{key("192.0.2.1:80", TCP): "acme/old", key("192.0.2.1:81", TCP): "acme/old"},
			problems: map[string][]Problem{
				"acme/old": {},
				"acme/young": {{"listeners[0]",
					"192.0.2.1:80/tcp is already served by LoadBalancer acme/old; use another port or address"}},
			},
		},
		{
			name: "tcp and udp on one port are separate listeners",
			lbs: []*pb.LoadBalancer{func() *pb.LoadBalancer {
				lb := tcpLB("dns", "192.0.2.1", 53, "10.20.0.1:53")
				lb.Listeners = append(lb.Listeners, &pb.Listener{Port: 53, Protocol: "udp", Pool: "app"})
				return lb
			}()},
			want:     map[Key]string{key("192.0.2.1:53", TCP): "acme/dns", key("192.0.2.1:53", UDP): "acme/dns"},
			problems: map[string][]Problem{"acme/dns": {}},
		},
		{
			name: "one load balancer listing a port twice",
			lbs: []*pb.LoadBalancer{func() *pb.LoadBalancer {
				lb := tcpLB("db", "192.0.2.1", 80, "10.20.0.1:80")
				lb.Listeners = append(lb.Listeners, &pb.Listener{Port: 80, Protocol: "tls-passthrough", Pool: "app"})
				return lb
			}()},
			want: map[Key]string{key("192.0.2.1:80", TCP): "acme/db"},
			problems: map[string][]Problem{"acme/db": {{"listeners[1].port",
				"192.0.2.1:80/tcp duplicates listeners[0]; use another port"}}},
		},
		{
			name:     "IPv6 VIP",
			lbs:      []*pb.LoadBalancer{tcpLB("v6", "2001:db8:10::5", 443, "[2001:db8:20::1]:443")},
			want:     map[Key]string{key("[2001:db8:10::5]:443", TCP): "acme/v6"},
			problems: map[string][]Problem{"acme/v6": {}},
		},
		{
			name: "listener to a missing pool and a bad protocol",
			lbs: []*pb.LoadBalancer{func() *pb.LoadBalancer {
				lb := tcpLB("db", "192.0.2.1", 80, "10.20.0.1:80")
				lb.Listeners = append(lb.Listeners,
					&pb.Listener{Port: 81, Protocol: "tcp", Pool: "nope"},
					&pb.Listener{Port: 82, Protocol: "sctp", Pool: "app"},
					&pb.Listener{Port: 83, Protocol: "https"})
				return lb
			}()},
			want: map[Key]string{key("192.0.2.1:80", TCP): "acme/db"},
			problems: map[string][]Problem{"acme/db": {
				{"listeners[1].pool", "backend pool nope is not defined in pools; listener skipped"},
				{"listeners[2].protocol", `"sctp" is not one of tcp, udp, http, https, tls-passthrough; listener skipped`},
				{"listeners[3].tls", "https listeners need tls.acme: true or tls.certificates; listener skipped"},
			}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := Compile(objs(tt.lbs...), 7, Defaults{}, nil)
			got := map[Key]string{}
			for k, l := range s.Listeners.All() {
				got[k] = l.LB
				if l.Key != k || l.Name != k.String() {
					t.Errorf("listener at %s has key %s, name %s", k, l.Key, l.Name)
				}
			}
			if !mapsEqual(got, tt.want) {
				t.Errorf("listeners = %v, want %v", got, tt.want)
			}
			if s.Problems.Len() != len(tt.problems) {
				t.Errorf("problems = %v, want %v", maps.Collect(s.Problems.All()), tt.problems)
			}
			for lb, want := range tt.problems {
				if g, ok := s.Problems.Get(lb); !ok || !slices.Equal(g, want) {
					t.Errorf("problems[%s] = %q, want %q", lb, g, want)
				}
			}
		})
	}
}

func mapsEqual[K comparable, V comparable](a, b map[K]V) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}

func TestCompilePoolDefaultsAndMembers(t *testing.T) {
	tests := []struct {
		name     string
		tenant   []string // networks
		pool     *pb.BackendPool
		want     *Pool
		problems []Problem
	}{
		{
			name: "defaults",
			pool: &pb.BackendPool{Members: members("10.20.0.1:80", "[2001:db8:20::1]:80")},
			want: &Pool{Algorithm: RoundRobin, BackendProtocol: "http1", ConnectTimeout: 5 * time.Second,
				Members: []Member{{netip.MustParseAddrPort("10.20.0.1:80"), 1}, {netip.MustParseAddrPort("[2001:db8:20::1]:80"), 1}}},
		},
		{
			name: "broken members are skipped, the rest serve",
			pool: &pb.BackendPool{Members: []*pb.Member{
				{Address: "10.20.0.1"}, {Address: "10.20.0.2:80"}, {Address: "10.20.0.2:80"},
				{Address: "10.99.0.1:80"}, {Address: "[fe80::1%eth0]:80"}, weighted("10.20.0.3:80", 1001),
				weighted("10.20.0.4:80", 0), {Address: "127.0.0.1:80"},
			}},
			want: &Pool{Algorithm: RoundRobin, BackendProtocol: "http1", ConnectTimeout: 5 * time.Second,
				Members: []Member{{netip.MustParseAddrPort("10.20.0.2:80"), 1}, {netip.MustParseAddrPort("10.20.0.4:80"), 0}}},
			problems: []Problem{
				{"pools.app.members[0]", `"10.20.0.1" is not IP:port (like 10.20.0.11:30080 or [2001:db8::1]:80); member skipped`},
				{"pools.app.members[2]", "10.20.0.2:80 duplicates members[1]; member skipped"},
				{"pools.app.members[3]", "10.99.0.1 is outside the tenant's networks (10.20.0.0/16, 2001:db8:20::/64); member skipped"},
				{"pools.app.members[4]", "[fe80::1%eth0]:80: zones are not allowed; member skipped"},
				{"pools.app.members[5].weight", "must be at most 1000, got 1001; member skipped"},
				{"pools.app.members[7]", "127.0.0.1 is a loopback address, refused unless a tenant network lies inside 127.0.0.0/8; member skipped"},
			},
		},
		{
			name:   "loopback only where the operator names it",
			tenant: []string{"0.0.0.0/0", "127.0.0.0/24"},
			pool:   &pb.BackendPool{Members: members("127.0.0.1:80", "127.0.1.1:80", "10.1.1.1:80")},
			want: &Pool{Algorithm: RoundRobin, BackendProtocol: "http1", ConnectTimeout: 5 * time.Second,
				Members: []Member{{netip.MustParseAddrPort("127.0.0.1:80"), 1}, {netip.MustParseAddrPort("10.1.1.1:80"), 1}}},
			problems: []Problem{{"pools.app.members[1]",
				"127.0.1.1 is a loopback address, refused unless a tenant network lies inside 127.0.0.0/8; member skipped"}},
		},
		{
			name: "hash on a header, PROXY v2, health check defaults",
			pool: &pb.BackendPool{Algorithm: "hash", HashOn: "header:x-user", ProxyProtocol: "v2",
				ConnectTimeout: dur(time.Second),
				HealthCheck:    &pb.HealthCheck{Http: &pb.HTTPCheck{}, Interval: dur(time.Second), Port: 10256}},
			want: &Pool{Algorithm: Hash, HashHeader: "X-User", ProxyProtocol: 2, BackendProtocol: "http1",
				ConnectTimeout: time.Second, Members: []Member{},
				Health: &HealthCheck{HTTP: true, Path: "/", Interval: time.Second, Timeout: time.Second, Rise: 2, Fall: 3, Port: 10256}},
		},
		{
			// Stored before the API refused it: hashing the request id,
			// one for each request, spread requests at random; the pool
			// hashes the client's address instead, as with hashOn unset.
			name: "hash on the request id hashes the client IP",
			pool: &pb.BackendPool{Algorithm: "hash", HashOn: "header:X-Request-Id"},
			want: &Pool{Algorithm: Hash, BackendProtocol: "http1", ConnectTimeout: 5 * time.Second, Members: []Member{}},
			problems: []Problem{{"pools.app.hashOn", "X-Request-Id is the request id, one for each request (the proxy makes one when no trusted proxy sent it), " +
				"so hashing it sends each request to a member at random and no client keeps one; hash on client-ip, or on a header that names the client or its session (like header:X-User); hashing the client IP"}},
		},
		{
			name: "https check keeps its TLS settings",
			pool: &pb.BackendPool{Algorithm: "least-request",
				HealthCheck: &pb.HealthCheck{Https: &pb.HTTPSCheck{Path: "/readyz", ExpectStatus: 200, Host: "api.acme.example",
					ServerName: "kubernetes.default.svc", CaPem: "CA", ClientCertPem: "CERT", ClientKeyPem: "KEY"},
					Interval: dur(time.Second), CloseOnDown: true}},
			want: &Pool{Algorithm: LeastRequest, BackendProtocol: "http1", ConnectTimeout: 5 * time.Second, Members: []Member{},
				Health: &HealthCheck{HTTP: true, TLS: true, Path: "/readyz", ExpectStatus: 200, Host: "api.acme.example",
					ServerName: "kubernetes.default.svc", CAPEM: "CA", ClientCertPEM: "CERT", ClientKeyPEM: "KEY", CloseOnDown: true,
					Interval: time.Second, Timeout: time.Second, Rise: 2, Fall: 3}},
		},
		{
			name: "https check wins over http, with a problem",
			pool: &pb.BackendPool{HealthCheck: &pb.HealthCheck{Http: &pb.HTTPCheck{Path: "/healthz"},
				Https: &pb.HTTPSCheck{InsecureSkipVerify: true, ServerName: "bad name"}, Interval: dur(time.Second)}},
			want: &Pool{Algorithm: RoundRobin, BackendProtocol: "http1", ConnectTimeout: 5 * time.Second, Members: []Member{},
				Health: &HealthCheck{HTTP: true, TLS: true, Path: "/", InsecureSkipVerify: true,
					Interval: time.Second, Timeout: time.Second, Rise: 2, Fall: 3}},
			problems: []Problem{
				{"pools.app.healthCheck", "set one of tcp, http or https, not several; checking by https"},
				{"pools.app.healthCheck.https.serverName", `"bad name" is not a DNS name: each dot-separated label must be 1 to 63 lowercase letters, digits or '-', starting and ending with a letter or digit; verifying the member address`},
			},
		},
		{
			name: "members dialled from the client's address",
			pool: &pb.BackendPool{ClientSource: true, Members: members("10.20.0.1:80")},
			want: &Pool{Algorithm: RoundRobin, BackendProtocol: "http1", ConnectTimeout: 5 * time.Second, ClientSource: true,
				Members: []Member{{netip.MustParseAddrPort("10.20.0.1:80"), 1}}},
		},
		{
			name: "members dialled from the host's address when the pool also sends PROXY protocol",
			pool: &pb.BackendPool{ClientSource: true, ProxyProtocol: "v1"},
			want: &Pool{Algorithm: RoundRobin, BackendProtocol: "http1", ConnectTimeout: 5 * time.Second, ProxyProtocol: 1, Members: []Member{}},
			problems: []Problem{{"pools.app.clientSource",
				"with clientSource the member sees the client's own address; PROXY protocol (proxyProtocol v1) would announce it twice: remove one of them; members are dialled from the host's address"}},
		},
		{
			name: "broken settings fall back to defaults",
			pool: &pb.BackendPool{Algorithm: "random", ProxyProtocol: "v3", BackendProtocol: "h3",
				HealthCheck: &pb.HealthCheck{Interval: dur(time.Second), Timeout: dur(3 * time.Second), Rise: 500}},
			want: &Pool{Algorithm: RoundRobin, BackendProtocol: "http1", ConnectTimeout: 5 * time.Second, Members: []Member{},
				Health: &HealthCheck{Interval: time.Second, Timeout: time.Second, Rise: 100, Fall: 3}},
			problems: []Problem{
				{"pools.app.algorithm", `"random" is not one of round-robin, least-request, hash; using round-robin`},
				{"pools.app.proxyProtocol", `"v3" is not one of v1, v2 (or empty for none); sending no PROXY header`},
				{"pools.app.backendProtocol", `"h3" is not one of http1, h2c, tls, h2; using http1`},
				{"pools.app.healthCheck.timeout", "3s is longer than interval 1s; make it shorter than the interval; using 1s"},
				{"pools.app.healthCheck.rise", "must be at most 100, got 500; using 100"},
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			nets := tt.tenant
			if nets == nil {
				nets = []string{"10.20.0.0/16", "2001:db8:20::/64"}
			}
			lb := tcpLB("db", "192.0.2.1", 80)
			lb.Pools["app"] = tt.pool
			in := []*pb.Object{tenantObj("acme", nil, nets), vipPoolObj("public", "192.0.2.0/24"), lbObj(lb)}
			s := Compile(in, 1, Defaults{}, nil)
			l := s.Listener(key("192.0.2.1:80", TCP))
			if l == nil {
				t.Fatalf("listener not compiled; problems %v", maps.Collect(s.Problems.All()))
			}
			tt.want.LB, tt.want.Name = "acme/db", "app"
			if !l.Pool.Equal(tt.want) {
				t.Errorf("pool = %+v (health %+v), want %+v (health %+v)", l.Pool, l.Pool.Health, tt.want, tt.want.Health)
			}
			if got := problemsOf(s, "acme/db"); !slices.Equal(got, tt.problems) && len(got)+len(tt.problems) > 0 {
				t.Errorf("problems = %q\nwant %q", got, tt.problems)
			}
		})
	}
}

func TestCompileListenerLimits(t *testing.T) {
	lb := tcpLB("dns", "192.0.2.1", 53, "10.20.0.1:53")
	lb.Listeners = append(lb.Listeners,
		&pb.Listener{Port: 53, Protocol: "udp", Pool: "app"},
		&pb.Listener{Port: 80, Protocol: "http", RedirectToHttps: true, MaxConnections: 10, IdleTimeout: dur(time.Minute)},
		&pb.Listener{Port: 443, Protocol: "https", Tls: &pb.TLSPolicy{Acme: true, MinVersion: "tls1.3"}})
	d := Defaults{UDPIdleTimeout: time.Second, MaxUDPFlows: 5}
	s := Compile(objs(lb), 1, d, nil)
	tests := []struct {
		key      Key
		limits   Limits
		redirect bool
		tls      *TLS
	}{
		{key("192.0.2.1:53", TCP), Limits{MaxConnections: 65536, IdleTimeout: time.Hour}, false, nil},
		{key("192.0.2.1:53", UDP), Limits{MaxConnections: 5, IdleTimeout: time.Second}, false, nil},
		{key("192.0.2.1:80", TCP), Limits{MaxConnections: 10, IdleTimeout: time.Minute}, true, nil},
		{key("192.0.2.1:443", TCP), Limits{MaxConnections: 65536, IdleTimeout: time.Minute}, false, &TLS{ACME: true, MinVersion: 0x0304}},
	}
	for _, tt := range tests {
		t.Run(tt.key.String(), func(t *testing.T) {
			l := s.Listener(tt.key)
			if l == nil {
				t.Fatalf("not compiled; problems %v", maps.Collect(s.Problems.All()))
			}
			if l.Limits != tt.limits || l.RedirectToHTTPS != tt.redirect || !equalTLS(l.TLS, tt.tls) {
				t.Errorf("got limits %+v redirect %v tls %+v, want %+v %v %+v", l.Limits, l.RedirectToHTTPS, l.TLS, tt.limits, tt.redirect, tt.tls)
			}
		})
	}
	if http, https := s.Listener(key("192.0.2.1:80", TCP)), s.Listener(key("192.0.2.1:443", TCP)); http.Routes != https.Routes {
		t.Error("the http listeners of one load balancer should share one route table")
	}
}

func TestCompileRoutesProblems(t *testing.T) {
	lb := tcpLB("web", "192.0.2.1", 22, "10.20.0.1:22")
	lb.Listeners = append(lb.Listeners, &pb.Listener{Port: 80, Protocol: "http"})
	lb.Routes = []*pb.Route{
		{Host: "shop.acme.example", Path: "/", Pool: "app"},
		{Host: "shop.other.example", Path: "/", Pool: "app"},
		{Host: "*.acme.example", Path: "api", Pool: "app"},
		{Host: "Shop.acme.example", Path: "/", Pool: "app"},
		{Host: "x.acme.example", Path: "/", Pool: "nope"},
		{Host: "x.acme.example", Path: "/", PathType: "glob", Pool: "app"},
		{Host: "*.acme.example", Path: "/api/", Pool: "app"},
		// Stored before the API refused an edit of the request id.
		{Host: "x.acme.example", Path: "/id/", Pool: "app", Filters: []*pb.RouteFilter{{RequestHeaderModifier: &pb.HeaderModifier{
			Set: []*pb.HeaderValue{{Name: "X-Request-Id", Value: "fixed"}}}}}},
		// Stored before the API refused a limit counted by the request id.
		{Host: "x.acme.example", Path: "/rid/", Pool: "app", RateLimit: &pb.RateLimit{RequestsPerSecond: 5, Key: "header", Header: "X-Request-Id"}},
	}
	s := Compile(objs(lb), 1, Defaults{}, nil)
	want := []Problem{
		{"routes[1].host", "shop.other.example is not inside the tenant's domains (acme.example); route skipped"},
		{"routes[2].path", `"api" must start with /; route skipped`},
		{"routes[3].host", `"Shop.acme.example" must be lowercase; use shop.acme.example; route skipped`},
		{"routes[4].pool", "backend pool nope is not defined in pools; route skipped"},
		{"routes[5].pathType", `"glob" is not one of prefix, exact, regex; route skipped`},
		{"routes[7].filters[0].requestHeaderModifier.set[0].name", "X-Request-Id is the request id the proxy fixes before a route is chosen and writes to the access log: " +
			"the member receives a trusted proxy's id or one the proxy makes, and a route cannot change it; remove this edit; route skipped"},
		{"routes[8].rateLimit.header", "X-Request-Id is the request id, one for each request (the proxy makes one when no trusted proxy sent it), " +
			"so a limit counted by it limits nothing and fills the limiter's table; count by another header; requestsPerSecond not enforced"},
	}
	if got := problemsOf(s, "acme/web"); !slices.Equal(got, want) {
		t.Errorf("problems = %q\nwant %q", got, want)
	}
	rt := s.Listener(key("192.0.2.1:80", TCP)).Routes
	var got []string
	for _, r := range rt.Routes() {
		got = append(got, r.Host+r.Path)
		if r.Rate.Set() {
			t.Errorf("route %s%s limited by %+v, want no limit", r.Host, r.Path, r.Rate)
		}
	}
	// The route limited by the request id is served, without its limit.
	if want := []string{"shop.acme.example/", "*.acme.example/api", "x.acme.example/rid"}; !slices.Equal(got, want) {
		t.Errorf("routes = %q, want %q", got, want)
	}
}

// TestCompileRequestIDRateLimit: a listener whose rate limit is counted
// by X-Request-Id, stored before the API refused it, is served without
// its requestsPerSecond (which limited no request: each has its own id),
// keeps its connectionsPerSecond, and its problems say so; a listener
// whose rate limit is broken otherwise is still not served.
func TestCompileRequestIDRateLimit(t *testing.T) {
	const why = "X-Request-Id is the request id, one for each request (the proxy makes one when no trusted proxy sent it), " +
		"so a limit counted by it limits nothing and fills the limiter's table; count by another header; "
	tests := []struct {
		name    string
		rl      *pb.RateLimit
		want    *RateSpec // nil: the listener is skipped
		problem Problem
	}{
		{"requests", &pb.RateLimit{RequestsPerSecond: 5, Key: "header", Header: "X-Request-Id"},
			&RateSpec{}, Problem{"listeners[1].rateLimit.header", why + "requestsPerSecond not enforced"}},
		{"requests and connections", &pb.RateLimit{RequestsPerSecond: 5, ConnectionsPerSecond: 3, Burst: 7, Key: "header", Header: "x_request-ID"},
			&RateSpec{Conns: 3, Burst: 7}, Problem{"listeners[1].rateLimit.header", "x_request-ID" + why[len("X-Request-Id"):] +
				"requestsPerSecond not enforced; connectionsPerSecond counted by client address"}},
		{"connections", &pb.RateLimit{ConnectionsPerSecond: 3, Key: "header", Header: "X-Request-Id"},
			&RateSpec{Conns: 3}, Problem{"listeners[1].rateLimit.header", why + "connectionsPerSecond counted by client address"}},
		{"another broken header", &pb.RateLimit{RequestsPerSecond: 5, Key: "header", Header: "Host"},
			nil, Problem{"listeners[1].rateLimit.header", "Host is the route's; count by another header, or use one route per host; listener skipped"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			lb := tcpLB("web", "192.0.2.1", 22, "10.20.0.1:22")
			lb.Listeners = append(lb.Listeners, &pb.Listener{Port: 80, Protocol: "http", RateLimit: tt.rl})
			lb.Routes = []*pb.Route{{Host: "shop.acme.example", Path: "/", Pool: "app"}}
			s := Compile(objs(lb), 1, Defaults{}, nil)
			if got := problemsOf(s, "acme/web"); !slices.Equal(got, []Problem{tt.problem}) {
				t.Errorf("problems = %q\nwant %q", got, []Problem{tt.problem})
			}
			l := s.Listener(key("192.0.2.1:80", TCP))
			switch {
			case tt.want == nil && l != nil:
				t.Errorf("listener served with rate %+v, want it skipped", l.Rate)
			case tt.want != nil && l == nil:
				t.Fatal("listener skipped, want it served")
			case tt.want != nil && l.Rate != *tt.want:
				t.Errorf("rate = %+v, want %+v", l.Rate, *tt.want)
			}
		})
	}
}

func TestCompileReusesUnchanged(t *testing.T) {
	a := tcpLB("a", "192.0.2.1", 80, "10.20.0.1:80")
	b := tcpLB("b", "192.0.2.2", 80, "10.20.0.2:80")
	s1 := Compile(objs(a, b), 1, Defaults{}, nil)
	t.Run("unchanged input returns the previous snapshot", func(t *testing.T) {
		if s2 := Compile(objs(a, b), 2, Defaults{}, s1); s2 != s1 {
			t.Error("got a new snapshot for the same input")
		}
	})
	t.Run("equal objects keep every listener and problem", func(t *testing.T) {
		a2, b2 := proto.Clone(a).(*pb.LoadBalancer), proto.Clone(b).(*pb.LoadBalancer)
		s2 := Compile(objs(a2, b2), 2, Defaults{}, s1)
		pmap.Diff(s1.Listeners, s2.Listeners, func(x, y *Listener) bool { return x == y },
			func(k Key, _ *Listener, _ bool, _ *Listener, _ bool) { t.Errorf("listener %s is new", k) })
		pmap.Diff(s1.Problems, s2.Problems, slices.Equal,
			func(lb string, _ []Problem, _ bool, _ []Problem, _ bool) { t.Errorf("problems of %s changed", lb) })
	})
	t.Run("a change keeps the other listeners and pools", func(t *testing.T) {
		b2 := proto.Clone(b).(*pb.LoadBalancer)
		b2.Pools["app"].Members = append(b2.Pools["app"].Members, &pb.Member{Address: "10.20.0.3:80"})
		s2 := Compile(objs(a, b2), 2, Defaults{}, s1)
		ka, kb := key("192.0.2.1:80", TCP), key("192.0.2.2:80", TCP)
		if s2 == s1 || s2.Revision != 2 {
			t.Fatal("expected a new snapshot at revision 2")
		}
		if s2.Listener(ka) != s1.Listener(ka) || s2.Listener(ka).Pool != s1.Listener(ka).Pool {
			t.Error("the unchanged listener or its pool was rebuilt")
		}
		if s2.Listener(kb) == s1.Listener(kb) || len(s2.Listener(kb).Pool.Members) != 2 {
			t.Error("the changed listener was not rebuilt")
		}
	})
	t.Run("the serving load balancer keeps a contested key", func(t *testing.T) {
		t0 := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
		late := withCreated(tcpLB("late", "192.0.2.9", 80, "10.20.0.1:80"), t0.Add(time.Hour))
		s1 := Compile(objs(late), 1, Defaults{}, nil)
		early := withCreated(tcpLB("early", "192.0.2.9", 80, "10.20.0.2:80"), t0)
		s2 := Compile(objs(late, early), 2, Defaults{}, s1)
		if l := s2.Listener(key("192.0.2.9:80", TCP)); l.LB != "acme/late" {
			t.Errorf("the key moved to %s", l.LB)
		}
		if s3 := Compile(objs(early, late), 3, Defaults{}, nil); s3.Listener(key("192.0.2.9:80", TCP)).LB != "acme/early" {
			t.Error("without history the older load balancer should win")
		}
	})
}

func TestCompileAccessLog(t *testing.T) {
	lb := tcpLB("shop", "192.0.2.1", 22, "10.20.0.1:22")
	lb.Listeners = append(lb.Listeners, &pb.Listener{Port: 80, Protocol: "http"})
	tests := []struct {
		name      string
		al        *pb.AccessLog
		http, tcp float64
	}{
		{"off", nil, 0, 0},
		{"enabled, every request", &pb.AccessLog{Enabled: true}, 1, 0},
		{"enabled, sampled", &pb.AccessLog{Enabled: true, Sample: 0.1}, 0.1, 0},
		{"sample without enabled", &pb.AccessLog{Sample: 0.5}, 0, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			lb.AccessLog = tt.al
			s := Compile(objs(lb), 1, Defaults{}, nil)
			h, c := s.Listener(key("192.0.2.1:80", TCP)), s.Listener(key("192.0.2.1:22", TCP))
			if h == nil || c == nil {
				t.Fatalf("not compiled; problems %v", maps.Collect(s.Problems.All()))
			}
			if h.AccessLog != tt.http || c.AccessLog != tt.tcp {
				t.Errorf("http %v tcp %v, want %v %v", h.AccessLog, c.AccessLog, tt.http, tt.tcp)
			}
		})
	}
	// Turning the access log on is a change of the listener.
	lb.AccessLog = nil
	before := Compile(objs(lb), 1, Defaults{}, nil)
	lb = proto.Clone(lb).(*pb.LoadBalancer)
	lb.AccessLog = &pb.AccessLog{Enabled: true}
	after := Compile(objs(lb), 2, Defaults{}, before)
	if after.Listener(key("192.0.2.1:80", TCP)) == before.Listener(key("192.0.2.1:80", TCP)) {
		t.Error("the http listener was reused though its access log changed")
	}
}
