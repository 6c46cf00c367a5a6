package api

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/teapot-lb/teapot-lb/api/catalogtest"
	pb "github.com/teapot-lb/teapot-lb/api/proto/teapotv1"
)

func TestValidateLoadBalancerSpec(t *testing.T) {
	tests := []struct {
		name string
		mut  func(lb *pb.LoadBalancer)
		want expect
	}{
		{"valid", func(lb *pb.LoadBalancer) {}, pass()},
		{"name missing", func(lb *pb.LoadBalancer) { lb.Name = "" }, bad("name", "required")},
		{"name uppercase", func(lb *pb.LoadBalancer) { lb.Name = "Shop" }, bad("name", `use "shop"`)},
		{"name too long", func(lb *pb.LoadBalancer) { lb.Name = strings.Repeat("a", 64) }, bad("name", "1 to 63")},
		{"name ends with dash", func(lb *pb.LoadBalancer) { lb.Name = "shop-" }, bad("name", "starting and ending")},
		{"tenant missing", func(lb *pb.LoadBalancer) { lb.Tenant = "" }, bad("tenant", "required")},
		{"tenant unknown", func(lb *pb.LoadBalancer) { lb.Tenant = "nobody" }, bad("tenant", "tenant nobody does not exist")},

		{"access log sampled", func(lb *pb.LoadBalancer) { lb.AccessLog = &pb.AccessLog{Enabled: true, Sample: 0.25} }, pass()},
		{"access log sample above 1", func(lb *pb.LoadBalancer) { lb.AccessLog = &pb.AccessLog{Enabled: true, Sample: 2} }, bad("accessLog.sample", "between 0 and 1")},
		{"access log sample negative", func(lb *pb.LoadBalancer) { lb.AccessLog = &pb.AccessLog{Sample: -0.5} }, bad("accessLog.sample", "between 0 and 1")},

		// VIP request
		{"vip missing", func(lb *pb.LoadBalancer) { lb.Vip = nil }, bad("vip.pool", "required")},
		{"vip pool unknown", func(lb *pb.LoadBalancer) { lb.Vip.Pool = "private" }, bad("vip.pool", "VIP pool private does not exist")},
		{"vip address only", func(lb *pb.LoadBalancer) { lb.Vip = &pb.VIPRequest{Address: "192.0.2.5"} }, pass()},
		{"vip address v6 only", func(lb *pb.LoadBalancer) { lb.Vip = &pb.VIPRequest{Address: "2001:db8:10::5"} }, pass()},
		{"vip address in no pool", func(lb *pb.LoadBalancer) { lb.Vip = &pb.VIPRequest{Address: "100.64.0.9"} }, bad("vip.address", "100.64.0.9 is not inside any VIP pool")},
		{"vip address bad", func(lb *pb.LoadBalancer) { lb.Vip.Address = "192.0.2.300" }, bad("vip.address", "not an IP address")},
		{"vip address zone", func(lb *pb.LoadBalancer) { lb.Vip.Address = "fe80::1%eth0" }, bad("vip.address", "zones are not allowed")},
		{"vip address mapped", func(lb *pb.LoadBalancer) { lb.Vip.Address = "::ffff:192.0.2.5" }, bad("vip.address", "use 192.0.2.5")},
		{"vip address outside pool", func(lb *pb.LoadBalancer) { lb.Vip.Address = "198.51.100.7" },
			bad("vip.address", "198.51.100.7 is outside pool public (192.0.2.0/28, 2001:db8:10::/124)")},
		{"vip address network", func(lb *pb.LoadBalancer) { lb.Vip.Address = "192.0.2.0" }, bad("vip.address", "network address of 192.0.2.0/28")},
		{"vip address broadcast", func(lb *pb.LoadBalancer) { lb.Vip.Address = "192.0.2.15" }, bad("vip.address", "broadcast address")},
		{"vip address anycast", func(lb *pb.LoadBalancer) { lb.Vip.Address = "2001:db8:10::" }, bad("vip.address", "subnet-router anycast")},
		{"vip pool not the tenant's", func(lb *pb.LoadBalancer) { lb.Vip.Pool = "reserved" }, bad("vip.pool", "tenant acme may not use VIP pool reserved")},
		{"vip address in pool not the tenant's", func(lb *pb.LoadBalancer) { lb.Vip = &pb.VIPRequest{Address: "203.0.113.5"} },
			bad("vip.address", "tenant acme may not use VIP pool reserved")},
		{"vip pool restricted to others", func(lb *pb.LoadBalancer) { lb.Vip.Pool = "only-other" }, bad("vip.pool", "reserved for other tenants")},
		{"vip family ipv6", func(lb *pb.LoadBalancer) { lb.Vip.Family = "ipv6" }, pass()},
		{"vip family bad", func(lb *pb.LoadBalancer) { lb.Vip.Family = "inet6" }, bad("vip.family", `"inet6" is not one of ipv4, ipv6`)},
		{"vip family missing in pool", func(lb *pb.LoadBalancer) { lb.Vip = &pb.VIPRequest{Pool: "shared", Family: "ipv6"} },
			bad("vip.family", "VIP pool shared has no IPv6 addresses")},
		{"vip family vs address", func(lb *pb.LoadBalancer) { lb.Vip = &pb.VIPRequest{Address: "192.0.2.5", Family: "ipv6"} },
			bad("vip.family", "ipv6 does not match vip.address 192.0.2.5")},

		// listeners
		{"no listeners", func(lb *pb.LoadBalancer) { lb.Listeners = nil; lb.Routes = nil }, bad("listeners", "at least one listener")},
		{"port zero", func(lb *pb.LoadBalancer) { lb.Listeners[2].Port = 0 }, bad("listeners[2].port", "must be between 1 and 65535, got 0")},
		{"port too big", func(lb *pb.LoadBalancer) { lb.Listeners[1].Port = 70000 }, bad("listeners[1].port", "must be between 1 and 65535, got 70000")},
		{"protocol missing", func(lb *pb.LoadBalancer) { lb.Listeners[2].Protocol = "" }, bad("listeners[2].protocol", "required")},
		{"protocol bad", func(lb *pb.LoadBalancer) { lb.Listeners[2].Protocol = "sctp" }, bad("listeners[2].protocol", `"sctp" is not one of`)},
		{"same port tcp kinds clash", func(lb *pb.LoadBalancer) { lb.Listeners[2].Port = 443 }, bad("listeners[2].port", "port 443/tcp is already used by listeners[0]")},
		{"same port tls-passthrough clash", func(lb *pb.LoadBalancer) {
			lb.Listeners[2] = &pb.Listener{Port: 80, Protocol: "tls-passthrough", Pool: "db"}
		}, bad("listeners[2].port", "port 80/tcp is already used by listeners[1]")},
		{"same port udp and tcp", func(lb *pb.LoadBalancer) {
			lb.Listeners = append(lb.Listeners, &pb.Listener{Port: 443, Protocol: "udp", Pool: "dns"})
			lb.Pools["dns"] = &pb.BackendPool{Members: []*pb.Member{{Address: "10.20.0.53:53"}}}
		}, pass()},
		{"tcp without pool", func(lb *pb.LoadBalancer) { lb.Listeners[2].Pool = "" }, bad("listeners[2].pool", "required for tcp listeners")},
		{"tcp pool unknown", func(lb *pb.LoadBalancer) { lb.Listeners[2].Pool = "cache" }, bad("listeners[2].pool", "backend pool cache is not defined in pools")},
		{"http with pool", func(lb *pb.LoadBalancer) { lb.Listeners[1].Pool = "web" }, bad("listeners[1].pool", "send traffic by routes")},
		{"https without tls", func(lb *pb.LoadBalancer) { lb.Listeners[0].Tls = nil }, bad("listeners[0].tls", "need tls.acme: true or tls.certificates")},
		{"https with certificate", func(lb *pb.LoadBalancer) { lb.Listeners[0].Tls = &pb.TLSPolicy{Certificates: []string{"shop-cert"}} }, pass()},
		{"certificate missing", func(lb *pb.LoadBalancer) { lb.Listeners[0].Tls = &pb.TLSPolicy{Certificates: []string{"gone"}} },
			bad("listeners[0].tls.certificates[0]", "certificate acme/gone does not exist")},
		{"certificate name bad", func(lb *pb.LoadBalancer) { lb.Listeners[0].Tls.Certificates = []string{"Shop Cert"} },
			bad("listeners[0].tls.certificates[0]", "1 to 63")},
		{"tls on tcp", func(lb *pb.LoadBalancer) { lb.Listeners[2].Tls = &pb.TLSPolicy{Acme: true} }, bad("listeners[2].tls", "only https listeners terminate TLS")},
		{"min version 1.3", func(lb *pb.LoadBalancer) { lb.Listeners[0].Tls.MinVersion = "tls1.3" }, pass()},
		{"min version bad", func(lb *pb.LoadBalancer) { lb.Listeners[0].Tls.MinVersion = "tls1.0" }, bad("listeners[0].tls.minVersion", `"tls1.0" is not one of`)},
		{"redirect on https", func(lb *pb.LoadBalancer) { lb.Listeners[0].RedirectToHttps = true }, bad("listeners[0].redirectToHttps", "only http listeners")},
		{"idle timeout ok", func(lb *pb.LoadBalancer) { lb.Listeners[2].IdleTimeout = dur(time.Minute) }, pass()},
		{"idle timeout negative", func(lb *pb.LoadBalancer) { lb.Listeners[2].IdleTimeout = dur(-time.Second) }, bad("listeners[2].idleTimeout", "positive")},

		// routes
		{"acme with empty host", func(lb *pb.LoadBalancer) { lb.Routes[0].Host = "" }, bad("routes[0].host", "ACME, which needs a host name")},
		{"acme with wildcard", func(lb *pb.LoadBalancer) { lb.Routes[0].Host = "*.acme.example" }, pass()},
		{"wildcard with uploaded cert", func(lb *pb.LoadBalancer) {
			lb.Routes[0].Host = "*.acme.example"
			lb.Listeners[0].Tls.Certificates = []string{"shop-cert"}
		}, pass()},
		{"any host on http only", func(lb *pb.LoadBalancer) {
			lb.Listeners = lb.Listeners[1:]
			lb.Listeners[0].RedirectToHttps = false
			lb.Routes[0].Host = ""
		}, pass()},
		{"host of another domain", func(lb *pb.LoadBalancer) { lb.Routes[0].Host = "shop.other.example" },
			bad("routes[0].host", "shop.other.example is not inside the tenant's domains (acme.example)")},
		{"host is the domain", func(lb *pb.LoadBalancer) { lb.Routes[0].Host = "acme.example" }, pass()},
		{"host lookalike", func(lb *pb.LoadBalancer) { lb.Routes[0].Host = "evilacme.example" }, bad("routes[0].host", "not inside the tenant's domains")},
		{"wildcard above domain", func(lb *pb.LoadBalancer) {
			lb.Routes[0].Host = "*.example"
			lb.Listeners[0].Tls.Certificates = []string{"shop-cert"}
		}, bad("routes[0].host", "*.example is not inside")},
		{"wildcard in middle", func(lb *pb.LoadBalancer) { lb.Routes[0].Host = "a.*.acme.example" }, bad("routes[0].host", "whole first label")},
		{"host uppercase", func(lb *pb.LoadBalancer) { lb.Routes[0].Host = "Shop.acme.example" }, bad("routes[0].host", "must be lowercase")},
		{"host trailing dot", func(lb *pb.LoadBalancer) { lb.Routes[0].Host = "shop.acme.example." }, bad("routes[0].host", "trailing dot")},
		{"hostnames", func(lb *pb.LoadBalancer) { lb.Hostnames = []string{"db.acme.example", "*.apps.acme.example"} }, pass()},
		{"hostname outside the domains", func(lb *pb.LoadBalancer) { lb.Hostnames = []string{"db.other.example"} },
			bad("hostnames[0]", "db.other.example is not inside the tenant's domains (acme.example)")},
		{"hostname twice", func(lb *pb.LoadBalancer) { lb.Hostnames = []string{"db.acme.example", "db.acme.example"} }, bad("hostnames[1]", "repeats hostnames[0]")},
		{"hostname empty", func(lb *pb.LoadBalancer) { lb.Hostnames = []string{""} }, bad("hostnames[0]", "is empty")},
		{"hostname not a name", func(lb *pb.LoadBalancer) { lb.Hostnames = []string{"a b.acme.example"} }, bad("hostnames[0]", "not a DNS name")},
		{"too many hostnames", func(lb *pb.LoadBalancer) {
			for i := range MaxHostnames + 1 {
				lb.Hostnames = append(lb.Hostnames, fmt.Sprintf("h%d.acme.example", i))
			}
		}, bad("hostnames", "at most 32 per load balancer")},
		{"path without slash", func(lb *pb.LoadBalancer) { lb.Routes[1].Path = "api" }, bad("routes[1].path", `"api" must start with /`)},
		{"path with query", func(lb *pb.LoadBalancer) { lb.Routes[1].Path = "/api?x=1" }, bad("routes[1].path", "'?'")},
		{"path type bad", func(lb *pb.LoadBalancer) { lb.Routes[1].PathType = "glob" }, bad("routes[1].pathType", `"glob" is not one of prefix, exact, regex`)},
		{"duplicate route", func(lb *pb.LoadBalancer) { lb.Routes[1].Path = "/"; lb.Routes[1].PathType = "prefix" },
			bad("routes[1]", "duplicates routes[0] (host shop.acme.example, path /, prefix)")},
		{"empty path equals slash", func(lb *pb.LoadBalancer) { lb.Routes[1].Path = ""; lb.Routes[1].PathType = "" }, bad("routes[1]", "duplicates routes[0]")},
		{"same path other type", func(lb *pb.LoadBalancer) { lb.Routes[1].Path = "/" }, pass()},
		{"route pool missing", func(lb *pb.LoadBalancer) { lb.Routes[0].Pool = "" }, bad("routes[0].pool", "required")},
		{"route pool unknown", func(lb *pb.LoadBalancer) { lb.Routes[0].Pool = "api" }, bad("routes[0].pool", "backend pool api is not defined in pools")},
		{"routes without http listener", func(lb *pb.LoadBalancer) { lb.Listeners = lb.Listeners[2:] }, bad("routes", "routes need an http or https listener")},

		// backend pools
		{"pool key bad", func(lb *pb.LoadBalancer) { lb.Pools["Web_1"] = lb.Pools["web"] }, bad("pools.Web_1", "1 to 63")},
		{"algorithm bad", func(lb *pb.LoadBalancer) { lb.Pools["web"].Algorithm = "random" }, bad("pools.web.algorithm", `"random" is not one of`)},
		{"hash on header", func(lb *pb.LoadBalancer) {
			lb.Pools["web"].Algorithm = "hash"
			lb.Pools["web"].HashOn = "header:X-User"
		}, pass()},
		{"hash on client ip", func(lb *pb.LoadBalancer) { lb.Pools["web"].Algorithm = "hash"; lb.Pools["web"].HashOn = "client-ip" }, pass()},
		{"hash on bad", func(lb *pb.LoadBalancer) { lb.Pools["web"].Algorithm = "hash"; lb.Pools["web"].HashOn = "header:" }, bad("pools.web.hashOn", "client-ip or header:NAME")},
		{"hash on the request id", func(lb *pb.LoadBalancer) {
			lb.Pools["web"].Algorithm = "hash"
			lb.Pools["web"].HashOn = "header:x_request-ID"
		}, bad("pools.web.hashOn", "x_request-ID is the request id, one for each request")},
		{"hash on without hash", func(lb *pb.LoadBalancer) { lb.Pools["web"].HashOn = "client-ip" }, bad("pools.web.hashOn", "only used with algorithm: hash")},
		{"member bad", func(lb *pb.LoadBalancer) { lb.Pools["web"].Members[0].Address = "10.20.0.11" }, bad("pools.web.members[0]", "is not IP:port")},
		{"member hostname", func(lb *pb.LoadBalancer) { lb.Pools["web"].Members[0].Address = "web.acme.example:80" }, bad("pools.web.members[0]", "is not IP:port")},
		{"member port zero", func(lb *pb.LoadBalancer) { lb.Pools["web"].Members[0].Address = "10.20.0.11:0" }, bad("pools.web.members[0]", "port must be between 1 and 65535")},
		{"member port too big", func(lb *pb.LoadBalancer) { lb.Pools["web"].Members[0].Address = "10.20.0.11:65536" }, bad("pools.web.members[0]", "is not IP:port")},
		{"member mapped", func(lb *pb.LoadBalancer) { lb.Pools["web"].Members[0].Address = "[::ffff:10.20.0.11]:80" }, bad("pools.web.members[0]", "use 10.20.0.11:80")},
		{"member duplicate", func(lb *pb.LoadBalancer) { lb.Pools["web"].Members[1].Address = "10.20.0.11:30080" }, bad("pools.web.members[1]", "duplicates members[0]")},
		{"member outside networks", func(lb *pb.LoadBalancer) { lb.Pools["web"].Members[1].Address = "192.168.1.5:80" },
			bad("pools.web.members[1]", "192.168.1.5 is outside the tenant's networks (10.20.0.0/16, fd00:20::/64)")},
		{"member v6 outside networks", func(lb *pb.LoadBalancer) { lb.Pools["web"].Members[1].Address = "[2001:db8::1]:80" },
			bad("pools.web.members[1]", "2001:db8::1 is outside")},
		{"member loopback", func(lb *pb.LoadBalancer) { lb.Pools["web"].Members[0].Address = "127.0.0.1:80" }, bad("pools.web.members[0]", "127.0.0.1 is a loopback address")},
		{"member link-local", func(lb *pb.LoadBalancer) { lb.Pools["web"].Members[0].Address = "[fe80::1]:80" }, bad("pools.web.members[0]", "link-local")},
		{"member multicast", func(lb *pb.LoadBalancer) { lb.Pools["web"].Members[0].Address = "239.1.1.1:80" }, bad("pools.web.members[0]", "multicast")},
		{"member unspecified", func(lb *pb.LoadBalancer) { lb.Pools["web"].Members[0].Address = "0.0.0.0:80" }, bad("pools.web.members[0]", "unspecified")},
		{"member weight max", func(lb *pb.LoadBalancer) { lb.Pools["web"].Members[0].Weight = weight(1000) }, pass()},
		{"member weight zero drains", func(lb *pb.LoadBalancer) { lb.Pools["web"].Members[0].Weight = weight(0) }, pass()},
		{"member weight too big", func(lb *pb.LoadBalancer) { lb.Pools["web"].Members[0].Weight = weight(1001) },
			bad("pools.web.members[0].weight", "must be at most 1000, got 1001")},
		{"empty pool", func(lb *pb.LoadBalancer) { lb.Pools["db"].Members = nil }, pass()},
		{"health tcp and http", func(lb *pb.LoadBalancer) { lb.Pools["web"].HealthCheck.Tcp = &pb.TCPCheck{} }, bad("pools.web.healthCheck", "one of tcp, http or https, not several")},
		{"health path", func(lb *pb.LoadBalancer) { lb.Pools["web"].HealthCheck.Http.Path = "healthz" }, bad("pools.web.healthCheck.http.path", "must start with /")},
		{"health status", func(lb *pb.LoadBalancer) { lb.Pools["web"].HealthCheck.Http.ExpectStatus = 99 }, bad("pools.web.healthCheck.http.expectStatus", "got 99")},
		{"health host", func(lb *pb.LoadBalancer) { lb.Pools["web"].HealthCheck.Http.Host = "bad host" }, bad("pools.web.healthCheck.http.host", "not a DNS name")},
		{"health interval zero", func(lb *pb.LoadBalancer) { lb.Pools["web"].HealthCheck.Interval = dur(0) }, bad("pools.web.healthCheck.interval", "positive")},
		{"health timeout negative", func(lb *pb.LoadBalancer) { lb.Pools["web"].HealthCheck.Timeout = dur(-1) }, bad("pools.web.healthCheck.timeout", "positive")},
		{"health timeout over interval", func(lb *pb.LoadBalancer) { lb.Pools["web"].HealthCheck.Timeout = dur(3 * time.Second) },
			bad("pools.web.healthCheck.timeout", "3s is longer than interval 2s")},
		{"health rise", func(lb *pb.LoadBalancer) { lb.Pools["web"].HealthCheck.Rise = 101 }, bad("pools.web.healthCheck.rise", "at most 100")},
		{"health fall", func(lb *pb.LoadBalancer) { lb.Pools["web"].HealthCheck.Fall = 101 }, bad("pools.web.healthCheck.fall", "at most 100")},
		{"health port", func(lb *pb.LoadBalancer) { lb.Pools["web"].HealthCheck.Port = 65536 }, bad("pools.web.healthCheck.port", "65535")},
		{"health node port", func(lb *pb.LoadBalancer) {
			lb.Pools["web"].HealthCheck.Port = 32000
			lb.Pools["web"].HealthCheck.Rise = 100
		}, pass()},
		{"proxy protocol bad", func(lb *pb.LoadBalancer) { lb.Pools["db"].ProxyProtocol = "v3" }, bad("pools.db.proxyProtocol", `"v3" is not one of v1, v2`)},
		{"proxy protocol udp", func(lb *pb.LoadBalancer) { lb.Listeners[2].Protocol = "udp" }, bad("pools.db.proxyProtocol", "udp listeners[2] uses this pool")},
		{"client source tcp", func(lb *pb.LoadBalancer) { lb.Pools["db"].ProxyProtocol, lb.Pools["db"].ClientSource = "", true }, pass()},
		{"client source udp", func(lb *pb.LoadBalancer) {
			lb.Pools["db"].ProxyProtocol, lb.Pools["db"].ClientSource, lb.Listeners[2].Protocol = "", true, "udp"
		}, pass()},
		{"client source tls-passthrough", func(lb *pb.LoadBalancer) {
			lb.Pools["db"].ProxyProtocol, lb.Pools["db"].ClientSource, lb.Listeners[2].Protocol = "", true, "tls-passthrough"
		}, pass()},
		{"client source with proxy protocol", func(lb *pb.LoadBalancer) { lb.Pools["db"].ClientSource = true },
			bad("pools.db.clientSource", "PROXY protocol (proxyProtocol v2) would announce it twice")},
		{"client source of routes", func(lb *pb.LoadBalancer) { lb.Pools["web"].ClientSource = true },
			bad("pools.web.clientSource", "routes[0] sends HTTP requests to this pool")},
		{"client source of a mirror", func(lb *pb.LoadBalancer) {
			lb.Pools["db"].ProxyProtocol, lb.Pools["db"].ClientSource = "", true
			lb.Routes[1].Filters = []*pb.RouteFilter{{RequestMirror: &pb.RequestMirror{Pool: "db"}}}
		}, bad("pools.db.clientSource", "routes[1] sends HTTP requests to this pool")},
		{"backend protocol h2c", func(lb *pb.LoadBalancer) { lb.Pools["web"].BackendProtocol = "h2c" }, pass()},
		{"backend protocol h2", func(lb *pb.LoadBalancer) { lb.Pools["web"].BackendProtocol = "h2" }, pass()},
		{"backend protocol bad", func(lb *pb.LoadBalancer) { lb.Pools["web"].BackendProtocol = "h3" }, bad("pools.web.backendProtocol", `"h3" is not one of`)},
		{"connect timeout", func(lb *pb.LoadBalancer) { lb.Pools["web"].ConnectTimeout = dur(0) }, bad("pools.web.connectTimeout", "positive")},
	}
	c := baseCatalog()
	c.Put(
		&pb.VIPPool{Name: "reserved", Cidrs: []string{"203.0.113.0/24"}, Mode: "static"},
		&pb.VIPPool{Name: "only-other", Cidrs: []string{"203.0.114.0/24"}, Mode: "bgp", Tenants: []string{"other"}},
		&pb.Certificate{Name: "shop-cert", Tenant: "acme", Source: "uploaded"},
	)
	acme := acmeTenant()
	acme.Pools = append(acme.Pools, "only-other")
	c.Put(acme)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			lb := shopLB()
			tt.mut(lb)
			check(t, ValidateLoadBalancer(lb, c), tt.want)
		})
	}
}

func TestValidateLoadBalancerSpecialNetworks(t *testing.T) {
	tests := []struct {
		name     string
		networks []string
		member   string
		want     expect
	}{
		{"loopback network allows loopback", []string{"127.0.0.0/8"}, "127.0.0.1:8080", pass()},
		{"v6 loopback explicit", []string{"::1/128"}, "[::1]:8080", pass()},
		{"catch-all does not allow loopback", []string{"0.0.0.0/0"}, "127.0.0.1:8080", bad("pools.web.members[0]", "loopback")},
		{"catch-all allows public", []string{"0.0.0.0/0"}, "192.0.2.200:80", pass()},
		{"link-local explicit", []string{"169.254.10.0/24"}, "169.254.10.1:80", pass()},
		{"link-local other block", []string{"169.254.10.0/24"}, "169.254.11.1:80", bad("pools.web.members[0]", "link-local")},
		{"no networks", nil, "10.20.0.1:80", bad("pools.web.members[0]", "the tenant has none")},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tenant := acmeTenant()
			tenant.Networks = tt.networks
			c := catalogtest.New(publicPool(), tenant)
			lb := &pb.LoadBalancer{
				Name: "lab", Tenant: "acme", Vip: &pb.VIPRequest{Pool: "public"},
				Listeners: []*pb.Listener{{Port: 80, Protocol: "tcp", Pool: "web"}},
				Pools:     map[string]*pb.BackendPool{"web": {Members: []*pb.Member{{Address: tt.member}}}},
			}
			check(t, ValidateLoadBalancer(lb, c), tt.want)
		})
	}
}

func TestValidateLoadBalancerStatus(t *testing.T) {
	web := withAddr(udpLB("web", "k", 53), "198.51.100.1")
	tests := []struct {
		name  string
		extra []any
		lb    *pb.LoadBalancer
		want  expect
	}{
		{"free address", nil, withAddr(shopLB(), "192.0.2.1"), pass()},
		{"v6 address", nil, withAddr(shopLB(), "2001:db8:10::1"), pass()},
		{"malformed", nil, withAddr(shopLB(), "192.0.2"), bad("status.address", "not an IP address")},
		{"outside pool", nil, withAddr(shopLB(), "198.51.100.7"), bad("status.address", "198.51.100.7 is outside pool public (192.0.2.0/28, 2001:db8:10::/124)")},
		{"broadcast", nil, withAddr(shopLB(), "192.0.2.15"), bad("status.address", "broadcast address of 192.0.2.0/28")},
		{"differs from request", nil, func() *pb.LoadBalancer {
			lb := withAddr(shopLB(), "192.0.2.1")
			lb.Vip.Address = "192.0.2.2"
			return lb
		}(), bad("status.address", "differs from vip.address 192.0.2.2")},
		{"family mismatch", nil, func() *pb.LoadBalancer {
			lb := withAddr(shopLB(), "192.0.2.1")
			lb.Vip.Family = "ipv6"
			return lb
		}(), bad("status.address", "not an IPv6 address")},
		{"taken in unshared pool", []any{withAddr(func() *pb.LoadBalancer { lb := shopLB(); lb.Name = "web"; return lb }(), "192.0.2.1")},
			withAddr(shopLB(), "192.0.2.1"), clash("status.address", "address 192.0.2.1 is in use by LoadBalancer acme/web")},
		{"same object keeps address", []any{withAddr(shopLB(), "192.0.2.1")}, withAddr(shopLB(), "192.0.2.1"), pass()},
		{"shared with same key", []any{web}, withAddr(udpLB("dns", "k", 5353), "198.51.100.1"), pass()},
		{"shared port clash", []any{web}, withAddr(udpLB("dns", "k", 53), "198.51.100.1"), clash("status.address", "both listen on 53/udp")},
		{"shared other key", []any{web}, withAddr(udpLB("dns", "x", 5353), "198.51.100.1"), clash("status.address", "same vip.sharingKey")},
		{"shared no key", []any{web}, withAddr(udpLB("dns", "", 5353), "198.51.100.1"), clash("status.address", "same vip.sharingKey")},
		{"shared other tenant", []any{web, func() *pb.Tenant { t := otherTenant(); t.Pools = []string{"shared"}; return t }()},
			func() *pb.LoadBalancer {
				lb := withAddr(udpLB("dns", "k", 5353), "198.51.100.1")
				lb.Tenant = "other"
				lb.Pools["dns"].Members[0].Address = "10.30.0.53:53"
				return lb
			}(), clash("status.address", "address 198.51.100.1 is taken")},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := baseCatalog()
			c.Put(tt.extra...)
			check(t, ValidateLoadBalancer(tt.lb, c), tt.want)
		})
	}
}

func TestValidateLoadBalancerQuotas(t *testing.T) {
	tenant := acmeTenant()
	tenant.Quotas = &pb.Quotas{LoadBalancers: 2, Addresses: 2}
	a := withAddr(udpLB("a", "k", 53), "198.51.100.1")
	b := withAddr(udpLB("b", "k", 54), "198.51.100.2")
	tests := []struct {
		name string
		have []any
		lb   *pb.LoadBalancer
		want expect
	}{
		{"under quota", []any{a}, withAddr(udpLB("b", "k", 54), "198.51.100.2"), pass()},
		{"load balancer quota", []any{a, b}, udpLB("c", "k", 55), clash("tenant", "quota of 2 load balancers")},
		{"update at quota", []any{a, b}, withAddr(udpLB("b", "k", 60), "198.51.100.2"), pass()},
		{"address quota", []any{a, withAddr(udpLB("b", "", 54), "198.51.100.2")},
			withAddr(udpLB("c", "", 55), "198.51.100.3"), clash("status.address", "quota of 2 addresses")},
		{"moving keeps count", []any{a, withAddr(udpLB("b", "", 54), "198.51.100.2")},
			withAddr(udpLB("b", "", 54), "198.51.100.3"), pass()},
		{"address quota shared ok", []any{a, b}, withAddr(udpLB("b", "k", 54), "198.51.100.1"), pass()},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := baseCatalog()
			c.Put(tenant)
			c.Put(tt.have...)
			check(t, ValidateLoadBalancer(tt.lb, c), tt.want)
		})
	}
	t.Run("third address refused", func(t *testing.T) {
		c := baseCatalog()
		c.Put(tenant, a)
		c.Put(withAddr(&pb.LoadBalancer{Name: "x", Tenant: "acme", Vip: &pb.VIPRequest{Pool: "public"},
			Listeners: []*pb.Listener{{Port: 1, Protocol: "tcp", Pool: "p"}}, Pools: map[string]*pb.BackendPool{"p": {}}}, "192.0.2.1"))
		tenant2 := acmeTenant()
		tenant2.Quotas = &pb.Quotas{Addresses: 2}
		c.Put(tenant2)
		check(t, ValidateLoadBalancer(withAddr(udpLB("c", "", 53), "198.51.100.3"), c), clash("status.address", "quota of 2 addresses"))
	})
}

func TestLoadBalancerProblems(t *testing.T) {
	lb := shopLB()
	if p := LoadBalancerProblems(lb); len(p) != 0 {
		t.Fatalf("problems of a tidy load balancer: %v", p)
	}
	lb.Pools["spare"] = &pb.BackendPool{}
	lb.Pools["old"] = &pb.BackendPool{}
	lb.Routes = nil
	got := LoadBalancerProblems(lb)
	want := []string{"listeners[0]", "pools.old", "pools.spare", "pools.web"}
	if len(got) != len(want) {
		t.Fatalf("problems = %v, want fields %v", got, want)
	}
	for i, p := range got {
		if p.GetField() != want[i] {
			t.Errorf("problem %d field = %s, want %s", i, p.GetField(), want[i])
		}
		if strings.HasPrefix(p.GetField(), "pools.") && !strings.HasPrefix(p.GetReason(), "unused") {
			t.Errorf("problem %s reason = %q, want unused", p.GetField(), p.GetReason())
		}
	}
}

func TestValidationErrorMessage(t *testing.T) {
	lb := shopLB()
	lb.Listeners[1].Port = 70000
	lb.Routes[0].Host = "shop.other.example"
	err := ValidateLoadBalancer(lb, baseCatalog())
	want := "LoadBalancer acme/shop: listeners[1].port: must be between 1 and 65535, got 70000; " +
		"routes[0].host: shop.other.example is not inside the tenant's domains (acme.example)"
	if err == nil || err.Error() != want {
		t.Fatalf("got  %v\nwant %s", err, want)
	}
	for i := 0; i < 20; i++ {
		if again := ValidateLoadBalancer(lb, baseCatalog()); again.Error() != err.Error() {
			t.Fatalf("message not deterministic:\n%s\n%s", again, err)
		}
	}
	if !errors.Is(err, ErrInvalid) || errors.Is(err, ErrConflict) {
		t.Errorf("errors.Is: want ErrInvalid only")
	}
}

func TestValidateNil(t *testing.T) {
	for name, err := range map[string]error{
		"tenant":        ValidateTenant(nil, nil),
		"pool":          ValidatePool(nil, nil),
		"load balancer": ValidateLoadBalancer(nil, nil),
	} {
		if !errors.Is(err, ErrInvalid) {
			t.Errorf("%s: %v, want ErrInvalid", name, err)
		}
	}
	if _, err := AllocateAddress(nil, nil); !errors.Is(err, ErrInvalid) {
		t.Errorf("allocate: %v, want ErrInvalid", err)
	}
}

// A route with matches counts once per match against routesPerLb and
// routes: a tenant cannot multiply its routes by 64 through matches.
func TestRouteQuotasCountMatches(t *testing.T) {
	tenant := acmeTenant()
	tenant.Quotas = &pb.Quotas{RoutesPerLb: 10, Routes: 15}
	matches := func(n int) []*pb.RouteMatch {
		out := make([]*pb.RouteMatch, n)
		for i := range out {
			out[i] = &pb.RouteMatch{Path: fmt.Sprintf("/m%d", i)}
		}
		return out
	}
	withMatches := func(name string, counts ...int) *pb.LoadBalancer {
		lb := shopLB()
		lb.Name = name
		lb.Routes = nil
		for i, n := range counts {
			lb.Routes = append(lb.Routes, &pb.Route{Host: fmt.Sprintf("r%d.acme.example", i), Pool: "web", Matches: matches(n)})
		}
		return lb
	}
	tests := []struct {
		name string
		have []any
		lb   *pb.LoadBalancer
		want expect
	}{
		{"matches within routesPerLb", nil, withMatches("shop", 4, 0, 5), pass()},
		{"matches over routesPerLb", nil, withMatches("shop", 11), clash("routes", "has 11 routes (a route counts once per match); at most 10 (quotas.routesPerLb")},
		{"two routes of many matches", nil, withMatches("shop", 6, 6), clash("routes", "has 12 routes")},
		{"matches over the tenant's routes", []any{withMatches("a", 8)}, withMatches("shop", 8),
			clash("routes", "would have 16 routes (a route counts once per match) in all; at most 15 (quotas.routes")},
		{"tenant total within routes", []any{withMatches("a", 7)}, withMatches("shop", 8), pass()},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := baseCatalog()
			c.Put(tenant)
			c.Put(tt.have...)
			check(t, ValidateLoadBalancer(tt.lb, c), tt.want)
		})
	}
	if u := LoadBalancerUsage(withMatches("x", 3, 0, 2)); u.Routes != 6 {
		t.Errorf("usage counts %d routes for routes of 3, 0 and 2 matches, want 6", u.Routes)
	}
}

// TestClientSourceAttachedTenant: a tenant attached through a namespace
// of its own cannot have its members dialled from clients' addresses.
func TestClientSourceAttachedTenant(t *testing.T) {
	tenant := acmeTenant()
	tenant.Attachment = &pb.TenantAttachment{}
	lb := shopLB()
	lb.Pools["db"].ProxyProtocol, lb.Pools["db"].ClientSource = "", true
	if why := ClientSourceProblem(lb, "db", tenant); !strings.Contains(why, "tenant acme is attached through a namespace of its own") {
		t.Fatalf("attached: %q", why)
	}
	if why := ClientSourceProblem(lb, "db", acmeTenant()); why != "" {
		t.Fatalf("not attached: %q", why)
	}
	if why := ClientSourceProblem(lb, "web", tenant); why != "" {
		t.Fatalf("a pool that does not ask: %q", why)
	}
}

// Attaching a tenant whose load balancers dial members from clients'
// addresses is refused, naming the load balancer and the pool: inside the
// attachment's namespace the hosts would dial from their own address, and
// the members would silently stop seeing the client.
func TestAttachingRefusedWhileClientSource(t *testing.T) {
	t.Parallel()
	lb := shopLB()
	lb.Pools["db"].ProxyProtocol, lb.Pools["db"].ClientSource = "", true
	c := baseCatalog()
	c.Put(lb)
	tenant := acmeTenant()
	tenant.Attachment = &pb.TenantAttachment{
		Vxlan: &pb.AttachmentVXLAN{Vni: 100, Remotes: []string{"192.0.2.7"}},
		Hosts: map[string]string{"lb1": "10.20.0.2/16"},
	}
	check(t, ValidateTenant(tenant, c), clash("attachment", "LoadBalancer acme/shop dials the members of pool db from clients' addresses (clientSource)"))

	lb.Pools["db"].ClientSource = false
	c.Put(lb)
	check(t, ValidateTenant(tenant, c), pass())
}
