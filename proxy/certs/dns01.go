package certs

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strings"

	"github.com/mholt/acmez/v3"
	"github.com/mholt/acmez/v3/acme"
)

// DNS01Prefix is where the DNS-01 challenges in progress are kept in the
// store: DNS01Prefix + NAME + "/" + ID, whose value is the TXT text. NAME
// is the record's owner ("_acme-challenge.acme.example": lower case, no
// final dot) and ID a digest of the text, so the two challenges of an
// order for "*.acme.example" and "acme.example" (one name, two texts)
// are both kept. The LB hosts' own DNS (proxy/dns) answers them; serve
// carries the items there.
const DNS01Prefix = "acme-dns01/"

// dns01Key is the store key of one DNS-01 TXT record.
func dns01Key(name, txt string) string {
	h := sha256.Sum256([]byte(txt))
	return DNS01Prefix + name + "/" + hex.EncodeToString(h[:8])
}

// DNS01Record returns the TXT record a store item under DNS01Prefix
// holds: its owner name (lower case, no final dot) and text. ok is false
// for any other item.
func DNS01Record(key string, value []byte) (name, txt string, ok bool) {
	rest, found := strings.CutPrefix(key, DNS01Prefix)
	if !found {
		return "", "", false
	}
	name, id, found := strings.Cut(rest, "/")
	if !found || name == "" || id == "" || strings.Contains(id, "/") || len(value) == 0 || len(value) > 255 {
		return "", "", false
	}
	return name, string(value), true
}

// dnsSolver presents DNS-01 challenges by storing their TXT records in
// the replicated store, from which every LB host's DNS answers them.
// Only the issuer's DNS-01 client uses it, for orders with a wildcard
// name, all of which lie in the zones the LB hosts serve
// (computeDesired); acmez's preference between challenge types is one
// list for every order, so a client that could also answer DNS-01 might
// pick it for names outside those zones.
type dnsSolver struct{ i *issuer }

var (
	_ acmez.Solver = dnsSolver{}
	_ acmez.Waiter = dnsSolver{}
)

func dns01Record(chal acme.Challenge) (name, txt string) {
	return strings.ToLower(strings.TrimSuffix(chal.DNS01TXTRecordName(), ".")), chal.DNS01KeyAuthorization()
}

func (s dnsSolver) Present(ctx context.Context, chal acme.Challenge) error {
	name, txt := dns01Record(chal)
	if err := s.i.store.Store(ctx, dns01Key(name, txt), []byte(txt)); err != nil {
		return fmt.Errorf("publish dns-01 challenge for %s: %w", name, err)
	}
	s.i.chal.present(chal)
	return nil
}

// Wait returns once this host's DNS answers the record (the store write
// is committed by then; the DNS learns of it from the replicated state a
// moment later), when the manager was given a way to ask.
func (s dnsSolver) Wait(ctx context.Context, chal acme.Challenge) error {
	if s.i.dnsWait == nil {
		return nil
	}
	name, txt := dns01Record(chal)
	if err := s.i.dnsWait(ctx, name, txt); err != nil {
		return fmt.Errorf("dns-01 challenge for %s: %w", name, err)
	}
	return nil
}

func (s dnsSolver) CleanUp(ctx context.Context, chal acme.Challenge) error {
	name, txt := dns01Record(chal)
	s.i.chal.cleanUp(chal)
	return s.i.store.Delete(context.WithoutCancel(ctx), dns01Key(name, txt))
}

// hasWildcard reports whether names hold a wildcard ("*.acme.example").
func hasWildcard(names []string) bool {
	for _, n := range names {
		if strings.HasPrefix(n, "*.") {
			return true
		}
	}
	return false
}

// InZones reports whether name (or a wildcard's base: "acme.example" for
// "*.acme.example") lies in one of zones (lower case, with or without the
// final dot), so that its DNS-01 record is in a zone the LB hosts answer.
func InZones(name string, zones []string) bool {
	name = strings.TrimPrefix(strings.TrimSuffix(name, "."), "*.")
	for _, z := range zones {
		z = strings.TrimSuffix(z, ".")
		if z != "" && (name == z || strings.HasSuffix(name, "."+z)) {
			return true
		}
	}
	return false
}
