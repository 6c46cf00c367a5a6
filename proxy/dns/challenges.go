package dns

import (
	"context"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	mdns "github.com/miekg/dns"
)

// ChallengeTTL is the TTL of the TXT records of ACME DNS-01 challenges
// (seconds): a validator that asks again after the record changed (a new
// order for the name) gets the new one.
const ChallengeTTL = 1

// challengeLabel starts every name a DNS-01 TXT record may have.
const challengeLabel = "_acme-challenge."

// challenges holds the TXT records of the DNS-01 challenges in progress,
// by owner name in lower case with the final dot.
type challenges struct {
	mu      sync.RWMutex
	recs    map[string][]string
	changed chan struct{}
}

// SetChallenges replaces the TXT records of the ACME DNS-01 challenges in
// progress: owner name ("_acme-challenge.acme.example", with or without
// the final dot) to its texts. serve takes them from the replicated store
// (certs.DNS01Prefix), where only the LB hosts' certificate managers
// write; a name that does not start with "_acme-challenge." is left out.
// The records are answered while a name is in a zone served, in front of
// anything the table says about that name (a wildcard route covers it
// otherwise), and signed with the zone when it is signed.
func (s *Server) SetChallenges(recs map[string][]string) {
	next := make(map[string][]string, len(recs))
	for name, txts := range recs {
		n := mdns.Fqdn(strings.ToLower(name))
		if !strings.HasPrefix(n, challengeLabel) || len(txts) == 0 {
			continue
		}
		t := slices.Clone(txts)
		slices.Sort(t)
		next[n] = slices.Compact(t)
	}
	c := &s.chal
	c.mu.Lock()
	defer c.mu.Unlock()
	if maps.EqualFunc(c.recs, next, slices.Equal) {
		return
	}
	c.recs = next
	if c.changed != nil {
		close(c.changed)
		c.changed = nil
	}
}

// ChallengeSpreadTimeout bounds how long WaitChallenge waits for the
// other hosts to apply a challenge's record once this host answers it;
// past it the CA is told all the same (and a host that lags may fail the
// order, which is retried).
const ChallengeSpreadTimeout = 10 * time.Second

// challengeSpreadPoll is how often the hosts' applied indexes are asked.
const challengeSpreadPoll = 50 * time.Millisecond

// WaitChallenge returns once name ("_acme-challenge.acme.example")
// answers the TXT text txt here and, with Config.Cluster, once every
// other host that answers has applied the state that holds it (its Raft
// applied index is at least this host's), so that a CA asking any host's
// DNS finds it; or when ctx ends.
func (s *Server) WaitChallenge(ctx context.Context, name, txt string) error {
	if err := s.waitChallengeHere(ctx, name, txt); err != nil {
		return err
	}
	if s.cfg.Cluster == nil {
		return nil
	}
	return s.waitHostsApplied(ctx)
}

// waitHostsApplied waits until every host that answers the status has
// applied this host's applied index, at most ChallengeSpreadTimeout.
func (s *Server) waitHostsApplied(ctx context.Context) error {
	bound := s.spreadTimeout
	if bound <= 0 {
		bound = ChallengeSpreadTimeout
	}
	wctx, cancel := context.WithTimeout(ctx, bound)
	defer cancel()
	var target uint64
	var lag []string
	for {
		st, err := s.cfg.Cluster(wctx)
		if err == nil {
			lag = lag[:0]
			for _, n := range st.GetNodes() {
				if n.GetId() == s.cfg.NodeID && target == 0 {
					target = n.GetAppliedIndex()
				}
			}
			if target == 0 {
				return nil // this host is not in the configuration: nothing to compare
			}
			for _, n := range st.GetNodes() {
				// A host that does not answer cannot be waited for.
				if n.GetError() == "" && n.GetId() != s.cfg.NodeID && n.GetAppliedIndex() < target {
					lag = append(lag, n.GetId())
				}
			}
			if len(lag) == 0 {
				s.chalSpread.Add(1)
				return nil
			}
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-wctx.Done():
			s.chalLagged.Add(1)
			s.log.Warn("ACME DNS-01: hosts have not applied the challenge's record; the CA is told all the same",
				"component", "dns", "hosts", lag, "err", err)
			return nil
		case <-time.After(challengeSpreadPoll):
		}
	}
}

// waitChallengeHere returns once this host answers name's TXT text txt.
func (s *Server) waitChallengeHere(ctx context.Context, name, txt string) error {
	n := mdns.Fqdn(strings.ToLower(name))
	c := &s.chal
	for {
		c.mu.Lock()
		if slices.Contains(c.recs[n], txt) {
			c.mu.Unlock()
			return nil
		}
		if c.changed == nil {
			c.changed = make(chan struct{})
		}
		ch := c.changed
		c.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// challengeTXT returns the texts of name's DNS-01 record (nil: none).
func (s *Server) challengeTXT(name string) []string {
	if !strings.HasPrefix(name, challengeLabel) {
		return nil
	}
	c := &s.chal
	c.mu.RLock()
	defer c.mu.RUnlock()
	return c.recs[name]
}

// challengeTXT asks s for name's DNS-01 texts, when s keeps any.
func challengeTXT(s Serving, name string) []string {
	if cs, ok := s.(interface{ challengeTXT(string) []string }); ok {
		return cs.challengeTXT(name)
	}
	return nil
}

// answerChallenge fills m with name's DNS-01 record: the TXT records for
// a TXT query, else nothing (NODATA).
func answerChallenge(m *mdns.Msg, q mdns.Question, txts []string, soa *mdns.SOA) {
	if q.Qtype == mdns.TypeTXT {
		for _, v := range txts {
			m.Answer = append(m.Answer, &mdns.TXT{Hdr: mdns.RR_Header{Name: q.Name, Rrtype: mdns.TypeTXT, Class: mdns.ClassINET, Ttl: ChallengeTTL}, Txt: []string{v}})
		}
	}
	if len(m.Answer) == 0 {
		m.Ns = append(m.Ns, soa)
	}
}

// Zones returns the zones the server answers for (--dns-zones).
func (s *Server) Zones() []string { return slices.Clone(s.cfg.Zones) }
