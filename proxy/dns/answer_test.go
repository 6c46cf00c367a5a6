package dns

import (
	"net/netip"
	"slices"
	"testing"

	mdns "github.com/miekg/dns"

	pb "github.com/teapot-lb/teapot-lb/api/proto/teapotv1"
)

// serving is a Serving of fixed answers: what it does not list is served.
type serving map[string]string

func (s serving) Serves(t Target) string { return s[t.LB+" "+t.Addr.String()] }

func testConfig() Config {
	return Config{
		Addrs: []string{"127.0.0.1:0"}, Zones: []string{"acme.example", "lb.example.com."},
		NameServers: []NameServer{{Name: "ns1.lb.example.com.", Addrs: []netip.Addr{netip.MustParseAddr("192.0.2.53")}}},
	}
}

func lb(tenant, name, addr string, hosts ...string) *pb.Object {
	l := &pb.LoadBalancer{Tenant: tenant, Name: name, Status: &pb.LoadBalancerStatus{Address: addr},
		Listeners: []*pb.Listener{{Port: 80, Protocol: "http"}}}
	for _, h := range hosts {
		l.Routes = append(l.Routes, &pb.Route{Host: h, Path: "/", Pool: "web"})
	}
	return &pb.Object{Kind: &pb.Object_LoadBalancer{LoadBalancer: l}}
}

func tenant(name string, domains ...string) *pb.Object {
	return &pb.Object{Kind: &pb.Object_Tenant{Tenant: &pb.Tenant{Name: name, Domains: domains}}}
}

func testState() []*pb.Object {
	sni := lb("acme", "db", "192.0.2.30")
	sni.GetLoadBalancer().Listeners = []*pb.Listener{{Port: 5432, Protocol: "tls-passthrough", Pool: "db",
		SniRoutes: []*pb.SNIRoute{{Host: "db.acme.example", Pool: "db"}}}}
	l4 := lb("acme", "l4", "192.0.2.31")
	l4.GetLoadBalancer().Listeners = []*pb.Listener{{Port: 5432, Protocol: "tcp", Pool: "db"}}
	l4.GetLoadBalancer().Hostnames = []string{"pg.acme.example"}
	dual := lb("acme", "dual", "192.0.2.50", "dual.acme.example")
	dual.GetLoadBalancer().Status.Addresses = []string{"192.0.2.50", "2001:db8::50"}
	return []*pb.Object{
		l4,
		dual,
		tenant("acme", "acme.example", "acme.lb.example.com"),
		tenant("evil", "evil.example"),
		lb("acme", "shop", "192.0.2.10", "shop.acme.example", "www.shop.acme.example"),
		lb("acme", "shop2", "192.0.2.11", "shop.acme.example"),
		lb("acme", "v6", "2001:db8::10", "six.acme.example"),
		lb("acme", "wild", "192.0.2.20", "*.apps.acme.example", "*.acme.lb.example.com"),
		lb("acme", "exact", "192.0.2.21", "special.apps.acme.example"),
		lb("acme", "pending", "", "pending.acme.example"),
		lb("acme", "outside", "192.0.2.40", "shop.acme.other"),
		// A name outside its tenant's domains (the API refuses it; the
		// table does not trust that).
		lb("evil", "steal", "192.0.2.66", "steal.acme.example"),
		sni,
	}
}

func query(name string, qtype uint16) *mdns.Msg {
	m := new(mdns.Msg)
	m.SetQuestion(name, qtype)
	m.RecursionDesired = true
	return m
}

func addrsOf(m *mdns.Msg) []string {
	var out []string
	for _, rr := range m.Answer {
		switch r := rr.(type) {
		case *mdns.A:
			out = append(out, r.A.String())
		case *mdns.AAAA:
			out = append(out, r.AAAA.String())
		}
	}
	slices.Sort(out)
	return out
}

func TestAnswerRules(t *testing.T) {
	t.Parallel()
	tab := Compile(testConfig(), testState(), 42)
	down := serving{"acme/shop2 192.0.2.11": "pools.web: no member is up"}
	cases := []struct {
		name  string
		q     string
		qtype uint16
		s     serving
		rcode int
		addrs []string
		auth  bool // SOA in authority (negative answer)
	}{
		{"both load balancers of a name", "shop.acme.example.", mdns.TypeA, serving{}, mdns.RcodeSuccess, []string{"192.0.2.10", "192.0.2.11"}, false},
		{"case does not matter", "SHOP.Acme.Example.", mdns.TypeA, serving{}, mdns.RcodeSuccess, []string{"192.0.2.10", "192.0.2.11"}, false},
		{"only the one that works", "shop.acme.example.", mdns.TypeA, down, mdns.RcodeSuccess, []string{"192.0.2.10"}, false},
		{"none works: NODATA", "www.shop.acme.example.", mdns.TypeA, serving{"acme/shop 192.0.2.10": "not held"}, mdns.RcodeSuccess, nil, true},
		{"AAAA of an IPv4 name: NODATA", "shop.acme.example.", mdns.TypeAAAA, serving{}, mdns.RcodeSuccess, nil, true},
		{"AAAA", "six.acme.example.", mdns.TypeAAAA, serving{}, mdns.RcodeSuccess, []string{"2001:db8::10"}, false},
		{"dual stack: A", "dual.acme.example.", mdns.TypeA, serving{}, mdns.RcodeSuccess, []string{"192.0.2.50"}, false},
		{"dual stack: AAAA", "dual.acme.example.", mdns.TypeAAAA, serving{}, mdns.RcodeSuccess, []string{"2001:db8::50"}, false},
		{"dual stack: the IPv6 VIP down", "dual.acme.example.", mdns.TypeAAAA, serving{"acme/dual 2001:db8::50": "not held"}, mdns.RcodeSuccess, nil, true},
		{"a Service's hostname", "pg.acme.example.", mdns.TypeA, serving{}, mdns.RcodeSuccess, []string{"192.0.2.31"}, false},
		{"server-name route host", "db.acme.example.", mdns.TypeA, serving{}, mdns.RcodeSuccess, []string{"192.0.2.30"}, false},
		{"wildcard, one label", "a.apps.acme.example.", mdns.TypeA, serving{}, mdns.RcodeSuccess, []string{"192.0.2.20"}, false},
		{"wildcard, two labels", "a.b.apps.acme.example.", mdns.TypeA, serving{}, mdns.RcodeSuccess, []string{"192.0.2.20"}, false},
		{"exact beats wildcard", "special.apps.acme.example.", mdns.TypeA, serving{}, mdns.RcodeSuccess, []string{"192.0.2.21"}, false},
		{"wildcard does not cover its own name", "apps.acme.example.", mdns.TypeA, serving{}, mdns.RcodeSuccess, nil, true},
		{"wildcard in a sub-zone", "x.acme.lb.example.com.", mdns.TypeA, serving{}, mdns.RcodeSuccess, []string{"192.0.2.20"}, false},
		{"empty non-terminal: NODATA", "shop.acme.example.", mdns.TypeTXT, serving{}, mdns.RcodeSuccess, nil, true},
		{"unknown name: NXDOMAIN", "nope.acme.example.", mdns.TypeA, serving{}, mdns.RcodeNameError, nil, true},
		{"no address yet: NODATA", "pending.acme.example.", mdns.TypeA, serving{}, mdns.RcodeSuccess, nil, true},
		{"outside the tenant's domains: NXDOMAIN", "steal.acme.example.", mdns.TypeA, serving{}, mdns.RcodeNameError, nil, true},
		{"outside the zones: REFUSED", "shop.acme.other.", mdns.TypeA, serving{}, mdns.RcodeRefused, nil, false},
		{"no recursion for the world", "example.org.", mdns.TypeA, serving{}, mdns.RcodeRefused, nil, false},
		{"zone transfer refused", "acme.example.", mdns.TypeAXFR, serving{}, mdns.RcodeRefused, nil, false},
		{"glue", "ns1.lb.example.com.", mdns.TypeA, serving{}, mdns.RcodeSuccess, []string{"192.0.2.53"}, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			m, _ := tab.Answer(query(tc.q, tc.qtype), tc.s, nil)
			if m.Rcode != tc.rcode {
				t.Fatalf("rcode %s, want %s", mdns.RcodeToString[m.Rcode], mdns.RcodeToString[tc.rcode])
			}
			if got := addrsOf(m); !slices.Equal(got, tc.addrs) {
				t.Errorf("answered %v, want %v", got, tc.addrs)
			}
			if m.RecursionAvailable {
				t.Error("recursion offered")
			}
			hasSOA := len(m.Ns) == 1 && m.Ns[0].Header().Rrtype == mdns.TypeSOA
			if hasSOA != tc.auth {
				t.Errorf("authority %v, want SOA: %v", m.Ns, tc.auth)
			}
			if tc.rcode != mdns.RcodeRefused && !m.Authoritative {
				t.Error("not authoritative")
			}
		})
	}
}

func TestApexAndAny(t *testing.T) {
	t.Parallel()
	tab := Compile(testConfig(), testState(), 42)
	m, _ := tab.Answer(query("lb.example.com.", mdns.TypeSOA), serving{}, nil)
	soa, ok := m.Answer[0].(*mdns.SOA)
	if len(m.Answer) != 1 || !ok || soa.Serial != 42 || soa.Ns != "ns1.lb.example.com." || soa.Minttl != uint32(DefaultTTL.Seconds()) {
		t.Fatalf("SOA answer %v", m.Answer)
	}
	m, _ = tab.Answer(query("lb.example.com.", mdns.TypeNS), serving{}, nil)
	if len(m.Answer) != 1 || m.Answer[0].(*mdns.NS).Ns != "ns1.lb.example.com." || len(m.Extra) != 1 {
		t.Fatalf("NS answer %v, extra %v", m.Answer, m.Extra)
	}
	// ANY gets one small record (RFC 8482), not every address.
	m, _ = tab.Answer(query("shop.acme.example.", mdns.TypeANY), serving{}, nil)
	if len(m.Answer) != 1 || m.Answer[0].Header().Rrtype != mdns.TypeHINFO {
		t.Fatalf("ANY answer %v", m.Answer)
	}
	// Answers carry the operator's TTL.
	cfg := testConfig()
	cfg.TTL = 5e9
	m, _ = Compile(cfg, testState(), 1).Answer(query("shop.acme.example.", mdns.TypeA), serving{}, nil)
	if m.Answer[0].Header().Ttl != 5 {
		t.Fatalf("TTL %d, want 5", m.Answer[0].Header().Ttl)
	}
}

func TestLeftOut(t *testing.T) {
	t.Parallel()
	tab := Compile(testConfig(), testState(), 1)
	want := map[string]string{
		"shop.acme.other.":      "outside the zones served",
		"steal.acme.example.":   "outside the tenant's domains",
		"pending.acme.example.": "the load balancer has no address yet",
	}
	got := map[string]string{}
	for _, l := range tab.LeftOut() {
		got[l.Name] = l.Reason
	}
	for n, r := range want {
		if got[n] != r {
			t.Errorf("%s left out for %q, want %q", n, got[n], r)
		}
	}
}

func TestTenantBudget(t *testing.T) {
	t.Parallel()
	tab := Compile(testConfig(), testState(), 1)
	calls := map[string]int{}
	allow := func(tenant string) bool { calls[tenant]++; return false }
	if m, res := tab.Answer(query("shop.acme.example.", mdns.TypeA), serving{}, allow); m != nil || res.Kind != KindOverBudget || res.Tenant != "acme" {
		t.Fatalf("over budget: answered %v (%+v)", m, res)
	}
	// The zone's own names are not a tenant's.
	if m, _ := tab.Answer(query("lb.example.com.", mdns.TypeSOA), serving{}, allow); m == nil || len(m.Answer) != 1 {
		t.Fatalf("apex SOA refused with a tenant's budget spent: %v", m)
	}
	if calls["acme"] != 1 || len(calls) != 1 {
		t.Fatalf("budget asked %v", calls)
	}
}

func TestInZone(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, zone string
		want       bool
	}{
		{"acme.example.", "acme.example.", true},
		{"a.acme.example.", "acme.example.", true},
		{"xacme.example.", "acme.example.", false},
		{"example.", "acme.example.", false},
		{"a.b.acme.example.", "b.acme.example.", true},
	} {
		if got := inZone(tc.name, tc.zone); got != tc.want {
			t.Errorf("inZone(%s, %s) = %t", tc.name, tc.zone, got)
		}
	}
}
