package dns

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	mdns "github.com/miekg/dns"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/teapot-lb/teapot-lb/api/observe"
	pb "github.com/teapot-lb/teapot-lb/api/proto/teapotv1"
)

// startServer serves state on a loopback port with every VIP of it held
// and every load balancer ready.
func startServer(t *testing.T, cfg Config, state []*pb.Object) (*Server, string) {
	t.Helper()
	s, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = s.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	s.Update(state, 7)
	held, ready := map[netip.Addr]bool{}, map[string]string{}
	for _, o := range state {
		if l := o.GetLoadBalancer(); l != nil {
			if a, err := netip.ParseAddr(l.GetStatus().GetAddress()); err == nil {
				held[a] = true
			}
			ready[l.GetTenant()+"/"+l.GetName()] = ""
		}
	}
	s.SetHeld(held)
	s.SetReady(ready)
	return s, s.Addrs()[0]
}

// ask queries addr over net ("udp" or "tcp"), retrying while the server
// starts.
func ask(t *testing.T, network, addr, name string, qtype uint16, edns bool) *mdns.Msg {
	t.Helper()
	c := &mdns.Client{Net: network, Timeout: 2 * time.Second}
	q := query(name, qtype)
	if edns {
		q.SetEdns0(4096, false)
	}
	var lastErr error
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); {
		m, _, err := c.Exchange(q, addr)
		if err == nil {
			return m
		}
		lastErr = err
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("%s query %s: %v", network, name, lastErr)
	return nil
}

func TestServerOnLoopback(t *testing.T) {
	t.Parallel()
	state := testState()
	// 60 load balancers for one name: more than 512 bytes of answer.
	for i := range 60 {
		state = append(state, lb("acme", fmt.Sprintf("many%d", i), fmt.Sprintf("192.0.2.%d", 100+i), "many.acme.example"))
	}
	cfg := testConfig()
	cfg.ResponsesPerSecond = -1
	s, addr := startServer(t, cfg, state)

	for _, network := range []string{"udp", "tcp"} {
		m := ask(t, network, addr, "shop.acme.example.", mdns.TypeA, false)
		if got := addrsOf(m); len(got) != 2 || !m.Authoritative {
			t.Fatalf("%s: answered %v (aa %t)", network, got, m.Authoritative)
		}
	}
	// A member down on this host: that load balancer's address goes.
	start := time.Now()
	s.SetReadyFor(map[string]string{"acme/shop2": "pools.web: no member is up"}, nil)
	if got := addrsOf(ask(t, "udp", addr, "shop.acme.example.", mdns.TypeA, false)); len(got) != 1 || got[0] != "192.0.2.10" {
		t.Fatalf("with shop2 down: %v", got)
	}
	t.Logf("readiness change to answer change: %s", time.Since(start))
	// The other VIP no longer held anywhere: NODATA.
	s.SetHeld(map[netip.Addr]bool{})
	if m := ask(t, "udp", addr, "shop.acme.example.", mdns.TypeA, false); len(m.Answer) != 0 || m.Rcode != mdns.RcodeSuccess || len(m.Ns) != 1 {
		t.Fatalf("no VIP held: %v", m)
	}
	all := map[netip.Addr]bool{}
	for i := range 60 {
		all[netip.AddrFrom4([4]byte{192, 0, 2, byte(100 + i)})] = true
	}
	s.SetHeld(all)
	// Too big for 512 bytes: truncated over UDP, whole over TCP and with
	// EDNS0 (up to 1232 bytes).
	if m := ask(t, "udp", addr, "many.acme.example.", mdns.TypeA, false); !m.Truncated {
		t.Fatalf("%d answers in a UDP response without EDNS0, not truncated", len(m.Answer))
	}
	if m := ask(t, "tcp", addr, "many.acme.example.", mdns.TypeA, false); m.Truncated || len(m.Answer) != 60 {
		t.Fatalf("TCP: %d answers, truncated %t", len(m.Answer), m.Truncated)
	}
	if m := ask(t, "udp", addr, "many.acme.example.", mdns.TypeA, true); m.Truncated || len(m.Answer) != 60 || m.IsEdns0() == nil {
		t.Fatalf("EDNS0: %d answers, truncated %t", len(m.Answer), m.Truncated)
	}
	if m := ask(t, "udp", addr, "example.org.", mdns.TypeA, false); m.Rcode != mdns.RcodeRefused {
		t.Fatalf("recursion: rcode %s", mdns.RcodeToString[m.Rcode])
	}
	if n := s.Stats().Queries.Load(); n < 8 {
		t.Fatalf("%d queries counted", n)
	}
}

// TestServerRateLimitsSpoofedFlood floods one name from one source over
// UDP, as a spoofed-source reflection attack would: at most the rate of
// full answers comes back, the rest truncated or dropped; TCP is not
// limited.
func TestServerRateLimitsSpoofedFlood(t *testing.T) {
	t.Parallel()
	cfg := testConfig()
	cfg.ResponsesPerSecond, cfg.Slip = 5, 2
	s, addr := startServer(t, cfg, testState())
	ask(t, "tcp", addr, "shop.acme.example.", mdns.TypeA, false) // started

	conn, err := net.Dial("udp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	q := query("shop.acme.example.", mdns.TypeA)
	q.SetEdns0(4096, false)
	wire, _ := q.Pack()
	const flood = 200
	sentBytes := 0
	for range flood {
		n, err := conn.Write(wire)
		if err != nil {
			t.Fatal(err)
		}
		sentBytes += n
	}
	full, truncated, gotBytes := 0, 0, 0
	buf := make([]byte, 2048)
	for {
		_ = conn.SetReadDeadline(time.Now().Add(500 * time.Millisecond))
		n, err := conn.Read(buf)
		if err != nil {
			break
		}
		gotBytes += n
		var m mdns.Msg
		if err := m.Unpack(buf[:n]); err != nil {
			t.Fatal(err)
		}
		if m.Truncated {
			truncated++
		} else {
			full++
		}
	}
	st := s.Stats()
	t.Logf("%d queries (%d bytes): %d full answers, %d truncated, %d dropped; amplification %.2f",
		flood, sentBytes, full, truncated, st.Dropped.Load(), float64(gotBytes)/float64(sentBytes))
	// The flood takes well under the 15 s window, so at most the first
	// second's worth and what accrued while it ran.
	if full > 10 || full < 1 {
		t.Fatalf("%d full answers to a flood of %d, want at most 10", full, flood)
	}
	if gotBytes >= sentBytes {
		t.Fatalf("responses (%d bytes) outweigh the queries (%d bytes)", gotBytes, sentBytes)
	}
	if st.Dropped.Load() == 0 || st.Slipped.Load() == 0 {
		t.Fatalf("dropped %d, slipped %d", st.Dropped.Load(), st.Slipped.Load())
	}
	// A real client retries a truncated answer over TCP, which is not
	// rate limited.
	for range 20 {
		if m := ask(t, "tcp", addr, "shop.acme.example.", mdns.TypeA, false); len(m.Answer) != 2 {
			t.Fatalf("TCP after the flood: %v", m.Answer)
		}
	}
}

func TestCollectorCountsRcodes(t *testing.T) {
	t.Parallel()
	cfg := testConfig()
	cfg.ResponsesPerSecond = -1
	s, addr := startServer(t, cfg, testState())
	ask(t, "udp", addr, "shop.acme.example.", mdns.TypeA, false)
	ask(t, "udp", addr, "nope.acme.example.", mdns.TypeA, false)
	ask(t, "udp", addr, "example.org.", mdns.TypeA, false)
	reg := prometheus.NewRegistry()
	reg.MustRegister(s.Collectors()...)
	got := map[string]float64{}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			key := mf.GetName()
			for _, l := range m.GetLabel() {
				key += "," + l.GetValue()
			}
			got[key] = m.GetCounter().GetValue() + m.GetGauge().GetValue()
		}
	}
	for key, want := range map[string]float64{
		"teapot_lb_dns_responses_total,NOERROR": 1, "teapot_lb_dns_responses_total,NXDOMAIN": 1,
		"teapot_lb_dns_responses_total,REFUSED": 1, "teapot_lb_dns_queries_total": 3, "teapot_lb_dns_revision": 7,
	} {
		if got[key] != want {
			t.Errorf("%s = %v, want %v (all: %v)", key, got[key], want, got)
		}
	}
}

func TestObserveSaysWhyAnAddressIsLeftOut(t *testing.T) {
	t.Parallel()
	cfg := testConfig()
	s, _ := startServer(t, cfg, testState())
	s.SetReadyFor(map[string]string{"acme/shop2": "no member is up"}, nil)
	var h pb.HostObservation
	s.Observe(observe.Filter{Tenant: "acme"}, &h)
	got := map[string]string{}
	for _, d := range h.GetDnsNames() {
		got[d.GetLoadBalancer()+" "+d.GetName()] = fmt.Sprint(d.GetAnswered(), " ", d.GetReason())
	}
	for k, want := range map[string]string{
		"acme/shop shop.acme.example.":       "true ",
		"acme/shop2 shop.acme.example.":      "false no member is up",
		"acme/wild *.apps.acme.example.":     "true ",
		"acme/pending pending.acme.example.": "false the load balancer has no address yet",
		"acme/outside shop.acme.other.":      "false outside the zones served",
	} {
		if got[k] != want {
			t.Errorf("%s: %q, want %q", k, got[k], want)
		}
	}
	if _, ok := got["evil/steal steal.acme.example."]; ok {
		t.Error("another tenant's names shown")
	}
	var all pb.HostObservation
	s.Observe(observe.Filter{}, &all)
	if len(all.GetDnsNames()) != 0 {
		t.Errorf("a whole-host observation lists %d names", len(all.GetDnsNames()))
	}
}

// TestTenantFloodSparesNeighbours floods one tenant's names from many
// queries: past its budget its names get no answer over UDP and REFUSED
// over TCP, while another tenant's names keep answering.
func TestTenantFloodSparesNeighbours(t *testing.T) {
	t.Parallel()
	cfg := testConfig()
	cfg.Zones = append(cfg.Zones, "beta.example")
	cfg.ResponsesPerSecond, cfg.QueriesPerTenant = -1, 1
	state := append(testState(), tenant("beta", "beta.example"), lb("beta", "site", "192.0.2.90", "www.beta.example"))
	s, addr := startServer(t, cfg, state)
	ask(t, "tcp", addr, "lb.example.com.", mdns.TypeSOA, false) // started; the zone's own names spend no budget

	conn, err := net.Dial("udp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	wire, _ := query("shop.acme.example.", mdns.TypeA).Pack()
	for range 200 {
		if _, err := conn.Write(wire); err != nil {
			t.Fatal(err)
		}
	}
	answers := 0
	buf := make([]byte, 2048)
	for {
		_ = conn.SetReadDeadline(time.Now().Add(300 * time.Millisecond))
		if _, err := conn.Read(buf); err != nil {
			break
		}
		answers++
	}
	if answers > 2 || s.Stats().OverBudget.Load() < 190 {
		t.Fatalf("acme's flood: %d answers, %d over budget; want at most its budget (1 a second)", answers, s.Stats().OverBudget.Load())
	}
	if m := ask(t, "tcp", addr, "shop.acme.example.", mdns.TypeA, false); m.Rcode != mdns.RcodeRefused {
		t.Fatalf("acme over its budget over TCP: %s", mdns.RcodeToString[m.Rcode])
	}
	if m := ask(t, "udp", addr, "www.beta.example.", mdns.TypeA, false); len(m.Answer) != 1 {
		t.Fatalf("beta's name during acme's flood: %v", m)
	}
}

// TestSharedAddressAnsweredPerTenant: tenants ta and tb each have a load
// balancer on 10.0.0.100, an address their attachments share. While the
// VIP manager reports it carried for tb alone (ta's attachment is down
// wherever it is held), tb's name is answered with it and ta's gets the
// answer of a load balancer whose address no host holds (NODATA), and
// this host's observation says why without naming tb. Carried for both,
// or an address of the hosts' network (every tenant), both are answered.
func TestSharedAddressAnsweredPerTenant(t *testing.T) {
	t.Parallel()
	cfg := testConfig()
	cfg.Zones = []string{"ta.example", "tb.example"}
	cfg.ResponsesPerSecond = -1
	state := []*pb.Object{
		tenant("ta", "ta.example"), tenant("tb", "tb.example"),
		lb("ta", "web", "10.0.0.100", "web.ta.example"), lb("tb", "web", "10.0.0.100", "web.tb.example"),
	}
	s, addr := startServer(t, cfg, state)
	a := netip.MustParseAddr("10.0.0.100")
	answers := func(name string) []string {
		t.Helper()
		m := ask(t, "udp", addr, name, mdns.TypeA, false)
		if m.Rcode != mdns.RcodeSuccess {
			t.Fatalf("%s: rcode %d", name, m.Rcode)
		}
		if len(m.Answer) == 0 && len(m.Ns) != 1 {
			t.Fatalf("%s: NODATA without the SOA: %v", name, m)
		}
		return addrsOf(m)
	}
	s.SetServed(map[netip.Addr][]string{a: {"tb"}})
	if got := answers("web.ta.example."); len(got) != 0 {
		t.Errorf("ta's name, the address carried for tb alone: %v, want no answer", got)
	}
	if got := answers("web.tb.example."); !slices.Equal(got, []string{"10.0.0.100"}) {
		t.Errorf("tb's name: %v, want 10.0.0.100", got)
	}
	h := &pb.HostObservation{}
	s.Observe(observe.Filter{Tenant: "ta", LB: "ta/web"}, h)
	if len(h.DnsNames) != 1 || h.DnsNames[0].Answered || !strings.Contains(h.DnsNames[0].Reason, "for tenant ta") || strings.Contains(h.DnsNames[0].Reason, "tb") {
		t.Errorf("ta's observation %v: want not answered, why, and no other tenant named", h.DnsNames)
	}
	for _, served := range []map[netip.Addr][]string{{a: {"ta", "tb"}}, {a: nil}} {
		s.SetServed(served)
		for _, name := range []string{"web.ta.example.", "web.tb.example."} {
			if got := answers(name); !slices.Equal(got, []string{"10.0.0.100"}) {
				t.Errorf("%s, served %q: %v, want 10.0.0.100", name, served, got)
			}
		}
	}
	s.SetServed(map[netip.Addr][]string{})
	if got := answers("web.tb.example."); len(got) != 0 {
		t.Errorf("held nowhere: %v", got)
	}
}
