package proxy

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/netip"
	"strings"
	"testing"

	pb "github.com/teapot-lb/teapot-lb/api/proto/teapotv1"
	"github.com/teapot-lb/teapot-lb/proxy/balance"
	"github.com/teapot-lb/teapot-lb/proxy/l7"
)

// hashedForwardLB spreads requests over the members bes by the
// X-Forwarded-For the member receives, on the fast paths ("/") and the
// net/http one ("/ext/", a route that edits the request). The listener
// trusts 127.0.0.3.
func hashedForwardLB(port int, bes []*routingBackend, https bool) *pb.LoadBalancer {
	var ms []*pb.Member
	for _, be := range bes {
		ms = append(ms, &pb.Member{Address: be.addr})
	}
	ls := &pb.Listener{Port: uint32(port), Protocol: "http", TrustedProxies: []string{"127.0.0.3/32"}}
	if https {
		ls.Protocol, ls.Http3, ls.Tls = "https", true, &pb.TLSPolicy{Certificates: []string{"gw"}}
	}
	return &pb.LoadBalancer{
		Name: "gw", Tenant: "acme",
		Listeners: []*pb.Listener{ls},
		Status:    &pb.LoadBalancerStatus{Address: "127.0.0.2"},
		Pools:     map[string]*pb.BackendPool{"app": {Algorithm: "hash", HashOn: "header:X-Forwarded-For", Members: ms}},
		Routes: []*pb.Route{
			{Host: "gw.acme.example", Path: "/", Pool: "app"},
			{Host: "gw.acme.example", Path: "/ext/", Pool: "app", Filters: []*pb.RouteFilter{{RequestHeaderModifier: &pb.HeaderModifier{Set: []*pb.HeaderValue{{Name: "X-Ext", Value: "1"}}}}}},
		},
	}
}

// TestHashingSeesForwardedFields: a backend hashing on X-Forwarded-For
// hashes the value its member receives, over HTTP/1.1 and HTTP/2
// (cleartext and over TLS) and HTTP/3, on the fast paths and the net/http
// one. An outside client's forged X-Forwarded-For values all land on the
// member its own address hashes to; a trusted proxy's chain, with the
// proxy's address appended, is what is hashed.
func TestHashingSeesForwardedFields(t *testing.T) {
	for _, https := range []bool{false, true} {
		var bes []*routingBackend
		for i := range 4 {
			bes = append(bes, startRoutingBackend(t, fmt.Sprintf("m%d", i)))
		}
		// The member each key hashes to, as the pool's balancer picks.
		var ms []*balance.Member
		name := map[netip.AddrPort]string{}
		for i, be := range bes {
			ap := netip.MustParseAddrPort(be.addr)
			ms = append(ms, &balance.Member{Addr: ap, Weight: 1})
			name[ap] = fmt.Sprintf("m%d", i)
		}
		ring := balance.New(balance.Hash, ms)
		memberOf := func(key string) string { return name[ring.Pick([]byte(key)).Addr] }

		srv := l7.New(l7.Config{})
		t.Cleanup(func() { srv.Close() })
		var p *Proxy
		if https {
			p, _ = newProxy(t, Config{HTTP: newH3Term(t, srv)})
		} else {
			p, _ = newProxy(t, Config{HTTP: NewHTTP(srv, nil)})
		}
		port := freePort(t)
		if err := p.Update(labObjects(hashedForwardLB(port, bes, https)), 1); err != nil {
			t.Fatal(err)
		}
		if st := p.Status()["acme/gw"]; len(st) != 0 {
			t.Fatalf("problems: %v", st)
		}
		target := vipAddr("127.0.0.2", port)
		protos := []string{"h1", "h2c"}
		scheme := "http"
		if https {
			protos, scheme = []string{"h1", "h2", "h3"}, "https"
		}
		forged := [][]string{nil, {"127.0.0.1"}, {"10.0.0.1"}, {"10.0.0.2"}, {"192.0.2.7"}, {"198.51.100.1, 203.0.113.9"},
			{"203.0.113.1", "203.0.113.2"}, {"2001:db8::1"}, {"unknown"}}
		for _, proto := range protos {
			origin := scheme + "://gw.acme.example:" + portOf(target)
			outside, trusted := forwardedClient(t, proto, "127.0.0.4", target), forwardedClient(t, proto, "127.0.0.3", target)
			for _, path := range []string{"/a", "/ext/a"} {
				t.Run(scheme+"/"+proto+path, func(t *testing.T) {
					for _, xff := range forged {
						s := hashedGet(t, outside, origin+path, xff)
						if got := strings.Join(s.Header.Values("X-Forwarded-For"), ", "); got != "127.0.0.4" {
							t.Errorf("forged %q: member saw X-Forwarded-For %q, want 127.0.0.4", xff, got)
						}
						if want := memberOf("127.0.0.4"); s.Backend != want {
							t.Errorf("outside client forging %q: served by %s, want %s (its own address's member)", xff, s.Backend, want)
						}
					}
					served := map[string]bool{}
					for _, xff := range forged[1:] {
						chain := strings.Join(xff, ", ") + ", 127.0.0.3"
						s := hashedGet(t, trusted, origin+path, xff)
						if got := strings.Join(s.Header.Values("X-Forwarded-For"), ", "); got != chain {
							t.Errorf("trusted proxy sending %q: member saw X-Forwarded-For %q, want %q", xff, got, chain)
						}
						if want := memberOf(chain); s.Backend != want {
							t.Errorf("trusted proxy sending %q: served by %s, want %s (the member of %q)", xff, s.Backend, want, chain)
						}
						served[s.Backend] = true
					}
					if len(served) < 2 {
						t.Errorf("the trusted proxy's chains all went to %v; the test needs chains that spread", served)
					}
				})
			}
		}
	}
}

// hashedGet sends a GET to url with the X-Forwarded-For fields xff and
// returns what the member saw.
func hashedGet(t *testing.T, c *http.Client, url string, xff []string) seen {
	t.Helper()
	req, err := http.NewRequest("GET", url, nil)
	if err != nil {
		t.Fatal(err)
	}
	if xff != nil {
		req.Header["X-Forwarded-For"] = xff
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	var s seen
	if resp.StatusCode != 200 || json.Unmarshal(data, &s) != nil {
		t.Fatalf("%s: status %d: %s", url, resp.StatusCode, data)
	}
	return s
}

// TestHashingWithoutTheField: a pool hashing on a header hashes the
// client's address for a request without that header (or with it empty),
// over HTTP/1.1 and h2c, fast and net/http paths: clients that send none
// spread over the members, each on the member its own address hashes to,
// every time; a request with the header is hashed by its value.
func TestHashingWithoutTheField(t *testing.T) {
	var bes []*routingBackend
	for i := range 4 {
		bes = append(bes, startRoutingBackend(t, fmt.Sprintf("m%d", i)))
	}
	var ms []*balance.Member
	name := map[netip.AddrPort]string{}
	for i, be := range bes {
		ap := netip.MustParseAddrPort(be.addr)
		ms = append(ms, &balance.Member{Addr: ap, Weight: 1})
		name[ap] = fmt.Sprintf("m%d", i)
	}
	ring := balance.New(balance.Hash, ms)

	srv := l7.New(l7.Config{})
	t.Cleanup(func() { srv.Close() })
	p, _ := newProxy(t, Config{HTTP: NewHTTP(srv, nil)})
	port := freePort(t)
	lb := hashedForwardLB(port, bes, false)
	lb.Pools["app"].HashOn = "header:X-User"
	if err := p.Update(labObjects(lb), 1); err != nil {
		t.Fatal(err)
	}
	if st := p.Status()["acme/gw"]; len(st) != 0 {
		t.Fatalf("problems: %v", st)
	}
	target := vipAddr("127.0.0.2", port)
	origin := "http://gw.acme.example:" + portOf(target)
	get := func(c *http.Client, url string, user []string) string {
		t.Helper()
		req, err := http.NewRequest("GET", url, nil)
		if err != nil {
			t.Fatal(err)
		}
		if user != nil {
			req.Header["X-User"] = user
		}
		resp, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		io.Copy(io.Discard, resp.Body)
		if resp.StatusCode != 200 {
			t.Fatalf("%s: status %d", url, resp.StatusCode)
		}
		return resp.Header.Get("X-Backend")
	}
	for _, proto := range []string{"h1", "h2c"} {
		var clients []*http.Client
		var addrs []netip.Addr
		for i := range 12 {
			a := netip.AddrFrom4([4]byte{127, 0, 0, byte(10 + i)})
			addrs = append(addrs, a)
			clients = append(clients, forwardedClient(t, proto, a.String(), target))
		}
		for _, path := range []string{"/a", "/ext/a"} {
			t.Run(proto+path, func(t *testing.T) {
				served := map[string]bool{}
				for i, c := range clients {
					want := name[balance.PickAddr(ring, addrs[i]).Addr]
					for j, user := range [][]string{nil, {""}, nil} {
						if got := get(c, origin+path, user); got != want {
							t.Errorf("client %s without X-User (request %d, %q): served by %s, want %s (its own address's member)", addrs[i], j, user, got, want)
						}
					}
					served[want] = true
				}
				if len(served) < 2 {
					t.Fatalf("the clients' addresses all hash to %v; the test needs addresses that spread", served)
				}
				for _, user := range []string{"alice", "bob", "carol"} {
					want := name[ring.Pick([]byte(user)).Addr]
					for i, c := range clients[:3] {
						if got := get(c, origin+path, []string{user}); got != want {
							t.Errorf("client %s with X-User %s: served by %s, want %s (the member of %q)", addrs[i], user, got, want, user)
						}
					}
				}
			})
		}
	}
}

// TestHashingOnHost: a pool hashing on Host hashes the authority its
// member receives as Host, over HTTP/1.1 and h2c (where it comes as
// :authority), fast and net/http paths: every request lands on the
// member its Host hashes to, whichever client sends it.
func TestHashingOnHost(t *testing.T) {
	var bes []*routingBackend
	for i := range 4 {
		bes = append(bes, startRoutingBackend(t, fmt.Sprintf("m%d", i)))
	}
	var ms []*balance.Member
	name := map[netip.AddrPort]string{}
	for i, be := range bes {
		ap := netip.MustParseAddrPort(be.addr)
		ms = append(ms, &balance.Member{Addr: ap, Weight: 1})
		name[ap] = fmt.Sprintf("m%d", i)
	}
	ring := balance.New(balance.Hash, ms)

	srv := l7.New(l7.Config{})
	t.Cleanup(func() { srv.Close() })
	p, _ := newProxy(t, Config{HTTP: NewHTTP(srv, nil)})
	port := freePort(t)
	lb := hashedForwardLB(port, bes, false)
	lb.Pools["app"].HashOn = "header:Host"
	for _, r := range lb.Routes {
		r.Host = "*.acme.example"
	}
	if err := p.Update(labObjects(lb), 1); err != nil {
		t.Fatal(err)
	}
	if st := p.Status()["acme/gw"]; len(st) != 0 {
		t.Fatalf("problems: %v", st)
	}
	target := vipAddr("127.0.0.2", port)
	for _, proto := range []string{"h1", "h2c"} {
		var clients []*http.Client
		for i := range 3 {
			clients = append(clients, forwardedClient(t, proto, fmt.Sprintf("127.0.0.%d", 10+i), target))
		}
		for _, path := range []string{"/a", "/ext/a"} {
			t.Run(proto+path, func(t *testing.T) {
				served := map[string]bool{}
				for h := range 8 {
					host := fmt.Sprintf("h%d.acme.example:%s", h, portOf(target))
					for _, c := range clients {
						s := hashedGet(t, c, "http://"+host+path, nil)
						if s.Host != host {
							t.Fatalf("member saw Host %q, want %q", s.Host, host)
						}
						if want := name[ring.Pick([]byte(host)).Addr]; s.Backend != want {
							t.Errorf("Host %s: served by %s, want %s (the member of its Host)", host, s.Backend, want)
						}
						served[s.Backend] = true
					}
				}
				if len(served) < 2 {
					t.Fatalf("the hosts all hash to %v; the test needs hosts that spread", served)
				}
			})
		}
	}
}
