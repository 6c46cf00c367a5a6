package dns

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	mdns "github.com/miekg/dns"

	pb "github.com/teapot-lb/teapot-lb/api/proto/teapotv1"
)

// TestChallengesAnsweredAndSigned: the TXT records of ACME DNS-01
// challenges are answered over UDP and TCP once set, in front of the
// wildcard that covers their name, signed in a signed zone (the NODATA of
// another type lists TXT), and gone once cleared; a name that is no
// challenge's is never answered from them, nor one outside the zones.
func TestChallengesAnsweredAndSigned(t *testing.T) {
	t.Parallel()
	s, addr := startSigned(t, signedConfig(newMemKeys()))
	key := askDO(t, "udp", addr, "acme.example.", mdns.TypeDNSKEY, false).Answer[0].(*mdns.DNSKEY)
	const name = "_acme-challenge.apps.acme.example." // under *.apps.acme.example
	txts := func(m *mdns.Msg) []string {
		var out []string
		for _, rr := range m.Answer {
			if r, ok := rr.(*mdns.TXT); ok {
				out = append(out, r.Txt...)
			}
		}
		slices.Sort(out)
		return out
	}
	if got := txts(askDO(t, "udp", addr, name, mdns.TypeTXT, false)); got != nil {
		t.Fatalf("before any challenge: %v", got)
	}

	waited := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		waited <- s.WaitChallenge(ctx, "_acme-challenge.apps.acme.example", "tok-b")
	}()
	s.SetChallenges(map[string][]string{
		"_acme-challenge.apps.acme.example":  {"tok-b", "tok-a"},
		"shop.acme.example":                  {"not-a-challenge"},
		"_acme-challenge.elsewhere.example.": {"outside"},
	})
	if err := <-waited; err != nil {
		t.Fatalf("WaitChallenge: %v", err)
	}
	for _, network := range []string{"udp", "tcp"} {
		m := askDO(t, network, addr, name, mdns.TypeTXT, false)
		if got := txts(m); !slices.Equal(got, []string{"tok-a", "tok-b"}) || m.Rcode != mdns.RcodeSuccess {
			t.Fatalf("%s TXT: %v (%s)", network, got, mdns.RcodeToString[m.Rcode])
		}
		if ttl := m.Answer[0].Header().Ttl; ttl != ChallengeTTL {
			t.Errorf("TTL %d, want %d", ttl, ChallengeTTL)
		}
		verifySection(t, network+" TXT", m.Answer, key)
		nd := askDO(t, network, addr, name, mdns.TypeA, false)
		if len(nd.Answer) != 0 || nsecOf(nd) == nil || bitmap(nsecOf(nd)) != "TXT RRSIG NSEC" {
			t.Fatalf("%s A of the challenge's name: %v", network, nd)
		}
		verifySection(t, network+" NODATA", nd.Ns, key)
	}
	// Unsigned without DO.
	q := query(name, mdns.TypeTXT)
	m, err := mdns.Exchange(q, addr)
	if err != nil || len(m.Answer) != 2 {
		t.Fatalf("without DO: %v %v", m, err)
	}
	if got := txts(askDO(t, "udp", addr, "shop.acme.example.", mdns.TypeTXT, false)); got != nil {
		t.Errorf("a name that is no challenge's answered %v", got)
	}
	if m := askDO(t, "udp", addr, "_acme-challenge.elsewhere.example.", mdns.TypeTXT, false); m.Rcode != mdns.RcodeRefused {
		t.Errorf("a name outside the zones: %s %v", mdns.RcodeToString[m.Rcode], m.Answer)
	}

	s.SetChallenges(nil)
	if got := txts(askDO(t, "tcp", addr, name, mdns.TypeTXT, false)); got != nil {
		t.Fatalf("after clean-up: %v", got)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if err := s.WaitChallenge(ctx, name, "tok-a"); err == nil {
		t.Error("WaitChallenge returned for a record no longer answered")
	}
}

// lagCluster reports this host (n1) at applied index 10, n3 unreachable,
// and n2 at 5 for its first lagFor answers, then at 10.
type lagCluster struct {
	mu     sync.Mutex
	calls  int
	lagFor int
}

func (c *lagCluster) status(context.Context) (*pb.ClusterStatusResponse, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.calls++
	n2 := uint64(10)
	if c.calls <= c.lagFor {
		n2 = 5
	}
	return &pb.ClusterStatusResponse{Nodes: []*pb.NodeStatus{
		{Id: "n1", AppliedIndex: 10}, {Id: "n2", AppliedIndex: n2}, {Id: "n3", Error: "unreachable"},
	}}, nil
}

// TestWaitChallengeCoversEveryHost: with the cluster's applied indexes,
// WaitChallenge returns only once every host that answers has applied
// this host's index (a host that does not answer is not waited for), so
// the CA is told when any host's DNS can answer; a host that never
// catches up is waited for until the bound, then the CA is told all the
// same, and both outcomes are counted.
func TestWaitChallengeCoversEveryHost(t *testing.T) {
	t.Parallel()
	lc := &lagCluster{lagFor: 3}
	cfg := testConfig()
	cfg.Cluster, cfg.NodeID = lc.status, "n1"
	s, _ := startServer(t, cfg, testState())
	s.SetChallenges(map[string][]string{"_acme-challenge.shop.acme.example": {"tok"}})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := s.WaitChallenge(ctx, "_acme-challenge.shop.acme.example", "tok"); err != nil {
		t.Fatal(err)
	}
	lc.mu.Lock()
	calls := lc.calls
	lc.mu.Unlock()
	if calls != 4 || s.chalSpread.Load() != 1 {
		t.Fatalf("returned after %d status answers (spread %d); want 4: n2 lagged for 3", calls, s.chalSpread.Load())
	}

	lc.mu.Lock()
	lc.calls, lc.lagFor = 0, 1<<30
	lc.mu.Unlock()
	s.spreadTimeout = 300 * time.Millisecond
	began := time.Now()
	if err := s.WaitChallenge(ctx, "_acme-challenge.shop.acme.example", "tok"); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(began); d < 300*time.Millisecond || s.chalLagged.Load() != 1 {
		t.Fatalf("a host that never caught up: returned after %v, lagged %d", d, s.chalLagged.Load())
	}
}
