package scenarios

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	mdns "github.com/miekg/dns"
)

// dnsAsk sends one query to addr over UDP (or TCP) with a miekg client.
func dnsAsk(network, addr, name string, qtype uint16) (*mdns.Msg, error) {
	c := &mdns.Client{Net: network, Timeout: time.Second}
	q := new(mdns.Msg)
	q.SetQuestion(name, qtype)
	m, _, err := c.Exchange(q, addr)
	return m, err
}

func dnsAddrs(m *mdns.Msg) []string {
	var out []string
	for _, rr := range m.Answer {
		if a, ok := rr.(*mdns.A); ok {
			out = append(out, a.A.String())
		}
	}
	slices.Sort(out)
	return out
}

// TestDNSAnswersFollowMemberHealth runs the real binary with --dns-addr
// and checks, with a DNS client on loopback, that a load balancer's
// route hosts (exact and wildcard) are answered with its VIP once it is
// created, leave the answers when its only member fails its checks, and
// come back when the member recovers (after the readiness hold-down the
// VIPs use too); names outside the zones are refused, unknown names get
// NXDOMAIN.
func TestDNSAnswersFollowMemberHealth(t *testing.T) {
	parallelScenario(t)
	c := newCluster(t)
	n := c.newNode()
	dnsAddr := freeAddrs(t, 1)[0]
	c.start(n, "--dns-addr", dnsAddr, "--dns-zones", "acme.example,lb.example.com",
		"--dns-ns", "ns1.lb.example.com=127.0.0.1", "--dns-ttl", "5s")
	c.waitMember(n)

	member := acceptingMember(t)
	memberAddr := member.Addr().String()
	spec := shopZoneSpec(t, dnsHealthVIP, member.Addr().String(), true)
	path := filepath.Join(t.TempDir(), "shop.yaml")
	if err := os.WriteFile(path, []byte(spec), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := c.cli(n, "apply", "-f", path); err != nil {
		t.Fatal(err)
	}
	applied := time.Now()
	answered := func(name string, want bool) func() error {
		return func() error {
			m, err := dnsAsk("udp", dnsAddr, name, mdns.TypeA)
			if err != nil {
				return err
			}
			got := dnsAddrs(m)
			if want && !slices.Equal(got, []string{dnsHealthVIP}) || !want && len(got) != 0 || m.Rcode != mdns.RcodeSuccess {
				return fmt.Errorf("%s: %s %v", name, mdns.RcodeToString[m.Rcode], got)
			}
			return nil
		}
	}
	waitFor(t, 15*time.Second, "the route host answered", answered("shop.acme.example.", true))
	t.Logf("apply to answer: %s", time.Since(applied))
	waitFor(t, 5*time.Second, "the wildcard answered", answered("a.b.apps.acme.example.", true))
	m, err := dnsAsk("tcp", dnsAddr, "shop.acme.example.", mdns.TypeA)
	if err != nil || !slices.Equal(dnsAddrs(m), []string{dnsHealthVIP}) || !m.Authoritative {
		t.Fatalf("over TCP: %v %v", m, err)
	}
	for _, q := range []struct {
		name  string
		rcode int
	}{{"nope.acme.example.", mdns.RcodeNameError}, {"example.org.", mdns.RcodeRefused}} {
		m, err := dnsAsk("udp", dnsAddr, q.name, mdns.TypeA)
		if err != nil || m.Rcode != q.rcode {
			t.Fatalf("%s: %v %v, want %s", q.name, m, err, mdns.RcodeToString[q.rcode])
		}
	}

	// The only member fails: the address leaves the answers.
	member.Close()
	down := time.Now()
	waitFor(t, 15*time.Second, "the address left the answers", answered("shop.acme.example.", false))
	t.Logf("member down to address gone: %s", time.Since(down))

	// It recovers: the address comes back.
	member, err = net.Listen("tcp", memberAddr)
	if err != nil {
		t.Fatal(err)
	}
	defer member.Close()
	go acceptAll(member)
	up := time.Now()
	waitFor(t, 40*time.Second, "the address came back", answered("shop.acme.example.", true))
	t.Logf("member up to address back: %s", time.Since(up))
}

// acceptAll accepts and closes connections until l closes.
// acceptingMember is a TCP member on loopback that accepts every
// connection and closes it (enough for a tcp health check); it closes
// with the test.
func acceptingMember(t *testing.T) net.Listener {
	t.Helper()
	member, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { member.Close() })
	go acceptAll(member)
	return member
}

// The DNS scenarios' VIPs, one each: they run beside one another and
// beside the admin API's pages (whose pool is 203.0.113.0/27), each
// host listening on its VIP at a port picked free on 127.0.0.1, which
// cannot tell that a neighbour listens on the same port of another
// address.
const (
	dnsHealthVIP = "203.0.113.49" // TestDNSAnswersFollowMemberHealth
	dnsPushVIP   = "203.0.113.50" // TestDNSPushToBINDPrimary
	dnsXfrVIP    = "203.0.113.51" // TestDNSSecondaryFollowsTheBinary
	dnssecVIP    = "203.0.113.52" // TestDNSSECValidatesFromTheRealBinary
)

// shopZoneSpec is what the DNS scenarios serve: pool public (static,
// vip/32), tenant acme (domains acme.example) and its load balancer shop
// on vip routing shop.acme.example (and, with wildcard,
// *.apps.acme.example) to the member at member, checked every second.
func shopZoneSpec(t *testing.T, vip, member string, wildcard bool) string {
	extra := ""
	if wildcard {
		extra = "  - {host: \"*.apps.acme.example\", path: /, pool: web}\n"
	}
	return fmt.Sprintf(`kind: VIPPool
name: public
cidrs: [%s/32]
mode: static
---
kind: Tenant
name: acme
domains: [acme.example]
networks: [127.0.0.0/8]
pools: [public]
---
kind: LoadBalancer
name: shop
tenant: acme
vip: {address: %s}
listeners:
  - {port: %d, protocol: http}
routes:
  - {host: shop.acme.example, path: /, pool: web}
%spools:
  web:
    members: [%s]
    healthCheck: {tcp: {}, interval: 1s, rise: 1, fall: 1}
`, vip, vip, freePort(t), extra, member)
}

func acceptAll(l net.Listener) {
	for {
		c, err := l.Accept()
		if err != nil {
			return
		}
		c.Close()
	}
}
