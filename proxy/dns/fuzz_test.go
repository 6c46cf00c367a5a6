package dns

import (
	"fmt"
	"net/netip"
	"testing"

	mdns "github.com/miekg/dns"

	pb "github.com/teapot-lb/teapot-lb/api/proto/teapotv1"
)

// FuzzAnswer feeds any message that unpacks to Answer, as the server
// does with what arrives from the internet: it must not panic, and
// every response it builds must pack.
func FuzzAnswer(f *testing.F) {
	for _, q := range []*mdns.Msg{query("shop.acme.example.", mdns.TypeA), query("a.b.apps.acme.example.", mdns.TypeAAAA),
		query("acme.example.", mdns.TypeANY), query("example.org.", mdns.TypeNS)} {
		b, _ := q.Pack()
		f.Add(b)
	}
	tab := Compile(testConfig(), testState(), 3)
	f.Fuzz(func(t *testing.T, b []byte) {
		var req mdns.Msg
		if err := req.Unpack(b); err != nil {
			return
		}
		m, _ := tab.Answer(&req, serving{}, nil)
		if m == nil {
			return
		}
		if _, err := m.Pack(); err != nil {
			t.Fatalf("response does not pack: %v", err)
		}
	})
}

func BenchmarkCompile10k(b *testing.B) {
	state := []*pb.Object{tenant("acme", "acme.example")}
	for i := range 10000 {
		state = append(state, lb("acme", fmt.Sprintf("lb%d", i), fmt.Sprintf("10.%d.%d.1", i/256, i%256), fmt.Sprintf("h%d.acme.example", i), fmt.Sprintf("*.w%d.acme.example", i)))
	}
	cfg := testConfig()
	b.ResetTimer()
	for b.Loop() {
		Compile(cfg, state, 1)
	}
}

func BenchmarkAnswer(b *testing.B) {
	tab := Compile(testConfig(), testState(), 3)
	q := query("shop.acme.example.", mdns.TypeA)
	b.ReportAllocs()
	for b.Loop() {
		tab.Answer(q, serving{}, nil)
	}
}

// BenchmarkRefresh10k compares the copy of a zone of 20,000 names for
// secondaries with the answers (what a readiness change costs).
func BenchmarkRefresh10k(b *testing.B) {
	state := []*pb.Object{tenant("acme", "acme.example")}
	held, ready := map[netip.Addr]bool{}, map[string]string{}
	for i := range 10000 {
		addr := fmt.Sprintf("10.%d.%d.1", i/256, i%256)
		state = append(state, lb("acme", fmt.Sprintf("lb%d", i), addr, fmt.Sprintf("h%d.acme.example", i), fmt.Sprintf("*.w%d.acme.example", i)))
		held[netip.MustParseAddr(addr)], ready[fmt.Sprintf("acme/lb%d", i)] = true, ""
	}
	s, err := New(xfrConfig("127.0.0.1:9"))
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	s.Update(state, 1)
	s.SetHeld(held)
	s.SetReady(ready)
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		s.SetReadyFor(map[string]string{"acme/lb1": []string{"", "down"}[i%2]}, nil)
		s.refresh()
	}
}
