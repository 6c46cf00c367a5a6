package certs

import (
	"context"
	"log/slog"
	"slices"
	"strings"
	"sync"

	"github.com/mholt/acmez/v3/acme"
)

// The outcomes of the ACME challenges a host presented
// (teapot_lb_acme_challenges_total).
const (
	// ChallengeValid: the CA validated the challenge.
	ChallengeValid = "valid"
	// ChallengeInvalid: the CA found the challenge invalid (its problem is
	// in the log and the Certificate's status).
	ChallengeInvalid = "invalid"
	// ChallengeUnfinished: the order ended before the CA's verdict on the
	// challenge (another challenge of the order failed, a timeout, a store
	// or network error).
	ChallengeUnfinished = "unfinished"
)

// The messages acmez logs (v3, client.go pollAuthorization) once the CA
// decided on an authorization: its identifier ("*.acme.example" for a
// wildcard's) and, when it failed, the challenge's type. They are the
// only place acmez tells the outcome of each challenge (ObtainCertificate
// returns one error for the order); TestChallengeOutcomes fails if they
// change.
const (
	acmezChallengeFailed = "challenge failed"
	acmezAuthzFinalized  = "authorization finalized"
)

// challengeKey is one series: a tenant ("" for names of no tenant), a
// challenge type (http-01, tls-alpn-01, dns-01) and an outcome.
type challengeKey struct{ tenant, typ, outcome string }

// challengeStats counts the challenges this host presented, by tenant,
// type and outcome. A challenge is presented (Present), cleaned up once
// the CA polled it or the order ended (CleanUp), and then acmez logs the
// CA's verdict on its authorization; what is left without a verdict when
// the order returns is unfinished.
type challengeStats struct {
	tenantOf func(host string) string

	mu        sync.Mutex
	presented map[string][]string // identifier without "*." -> types presented
	awaiting  map[string][]string // cleaned up, verdict not logged yet
	counts    map[challengeKey]uint64
}

func newChallengeStats(tenantOf func(string) string) *challengeStats {
	return &challengeStats{tenantOf: tenantOf, presented: map[string][]string{}, awaiting: map[string][]string{}, counts: map[challengeKey]uint64{}}
}

func baseName(id string) string {
	return strings.ToLower(strings.TrimPrefix(strings.TrimSuffix(id, "."), "*."))
}

func (c *challengeStats) tenant(id string) string {
	if c.tenantOf == nil {
		return ""
	}
	return c.tenantOf(strings.ToLower(strings.TrimSuffix(id, ".")))
}

// present records a challenge presented.
func (c *challengeStats) present(chal acme.Challenge) {
	if c == nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	b := baseName(chal.Identifier.Value)
	c.presented[b] = append(c.presented[b], chal.Type)
}

// cleanUp moves a challenge presented to those awaiting a verdict.
func (c *challengeStats) cleanUp(chal acme.Challenge) {
	if c == nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	b := baseName(chal.Identifier.Value)
	if i := slices.Index(c.presented[b], chal.Type); i >= 0 {
		c.presented[b] = slices.Delete(c.presented[b], i, i+1)
		c.awaiting[b] = append(c.awaiting[b], chal.Type)
	}
}

// verdict counts the oldest challenge of id awaiting one, of type typ
// when typ is given. An authorization that was valid before (no challenge
// presented) awaits nothing and counts nothing.
func (c *challengeStats) verdict(id, typ, outcome string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	b := baseName(id)
	w := c.awaiting[b]
	i := 0
	if typ != "" {
		i = slices.Index(w, typ)
	}
	if i < 0 || i >= len(w) {
		return
	}
	c.counts[challengeKey{c.tenant(id), w[i], outcome}]++
	c.awaiting[b] = slices.Delete(w, i, i+1)
}

// orderDone counts the challenges of names left without a verdict as
// unfinished.
func (c *challengeStats) orderDone(names []string) {
	if c == nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, n := range names {
		b := baseName(n)
		for _, typ := range append(c.presented[b], c.awaiting[b]...) {
			c.counts[challengeKey{c.tenant(n), typ, ChallengeUnfinished}]++
		}
		delete(c.presented, b)
		delete(c.awaiting, b)
	}
}

// snapshot copies the counts.
func (c *challengeStats) snapshot() map[challengeKey]uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make(map[challengeKey]uint64, len(c.counts))
	for k, v := range c.counts {
		out[k] = v
	}
	return out
}

// verdictHandler passes acmez's log records to the issuer's handler and
// gives the verdicts among them to stats.
type verdictHandler struct {
	inner slog.Handler
	stats *challengeStats
}

func (h verdictHandler) Enabled(context.Context, slog.Level) bool { return true }

func (h verdictHandler) Handle(ctx context.Context, r slog.Record) error {
	if r.Message == acmezChallengeFailed || r.Message == acmezAuthzFinalized {
		var id, typ string
		r.Attrs(func(a slog.Attr) bool {
			switch a.Key {
			case "identifier":
				id = a.Value.String()
			case "challenge_type":
				typ = a.Value.String()
			}
			return true
		})
		if r.Message == acmezChallengeFailed {
			h.stats.verdict(id, typ, ChallengeInvalid)
		} else {
			h.stats.verdict(id, "", ChallengeValid)
		}
	}
	if !h.inner.Enabled(ctx, r.Level) {
		return nil
	}
	return h.inner.Handle(ctx, r)
}

func (h verdictHandler) WithAttrs(as []slog.Attr) slog.Handler {
	return verdictHandler{h.inner.WithAttrs(as), h.stats}
}

func (h verdictHandler) WithGroup(name string) slog.Handler {
	return verdictHandler{h.inner.WithGroup(name), h.stats}
}
