package dns

import (
	"context"
	"slices"
	"testing"
	"time"

	mdns "github.com/miekg/dns"
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
