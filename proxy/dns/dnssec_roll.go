package dns

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"strings"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/teapot-lb/teapot-lb/api"
	pb "github.com/teapot-lb/teapot-lb/api/proto/teapotv1"
)

// Key rollover by double signature (DESIGN.md, "Key rollover").

// RolloverWait is how long a rollover's DNSKEY set (both keys) must have
// been published before FINISH is not refused: its TTL (InfraTTL). Until
// then a resolver may hold the set of the old key alone, which validates
// no answer signed by the new key alone.
const RolloverWait = InfraTTL

// startedHeader is the PEM header of the new key that says when the
// rollover started (RFC 3339).
const startedHeader = "Rollover-Started"

var (
	// ErrNotSigned: the zone of a rollover is not one this host signs.
	ErrNotSigned = fmt.Errorf("dnssec: not a zone this host signs (--dns-dnssec): %w", api.ErrInvalid)
	// ErrRollover: the step does not fit the zone's rollover state (START
	// during a rollover, FINISH or CANCEL outside one, FINISH too early).
	ErrRollover = fmt.Errorf("dnssec: key rollover: %w", api.ErrConflict)
)

// zoneKeys are a signed zone's keys: the current one and, during a
// rollover, the new one, published beside it and signing every RRset too.
type zoneKeys struct {
	cur, next *zoneKey
	started   time.Time
}

// signing is the keys that sign and that the DNSKEY set holds (none on a
// nil zoneKeys).
func (zk *zoneKeys) signing() []*zoneKey {
	switch {
	case zk == nil:
		return nil
	case zk.next == nil:
		return []*zoneKey{zk.cur}
	}
	return []*zoneKey{zk.cur, zk.next}
}

// loadZoneKeys reads the zone's keys from the store: fs.ErrNotExist when
// it has no key yet.
func loadZoneKeys(ctx context.Context, ks KeyStore, zone string) (*zoneKeys, error) {
	b, err := ks.Load(ctx, keyPath(zone))
	if err != nil {
		return nil, fmt.Errorf("load the key of %s: %w", zone, err)
	}
	priv, err := parseKey(b)
	if err != nil {
		return nil, fmt.Errorf("the key of %s in the store: %w", zone, err)
	}
	zk := &zoneKeys{cur: newZoneKey(zone, priv)}
	b, err = ks.Load(ctx, nextPath(zone))
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return zk, nil
	case err != nil:
		return nil, fmt.Errorf("load the new key of %s: %w", zone, err)
	}
	next, hdr, err := parseKeyPEM(b)
	if err != nil {
		return nil, fmt.Errorf("the new key of %s in the store: %w", zone, err)
	}
	if nk := newZoneKey(zone, next); nk.dnskey.PublicKey != zk.cur.dnskey.PublicKey {
		// FINISH stores the new key as the current one before it deletes
		// the new one: in between both are the same key.
		zk.next = nk
		zk.started, _ = time.Parse(time.RFC3339, hdr[startedHeader])
	}
	return zk, nil
}

// reloadZone takes the zone's keys from the store again (serialised, so
// that a slower read never undoes a later one).
func (sg *signer) reloadZone(ctx context.Context, ks KeyStore, zone string) error {
	sg.reloadMu.Lock()
	defer sg.reloadMu.Unlock()
	zk, err := loadZoneKeys(ctx, ks, zone)
	if err != nil {
		return err
	}
	sg.setKeys(zk)
	return nil
}

// KeysChanged tells the server that the zones' keys in the store changed
// (serve follows the store items under KeyPrefix): every signed zone whose
// key is loaded takes its keys again. A zone whose key is not loaded yet
// gets them from its loader.
func (s *Server) KeysChanged(ctx context.Context) {
	if s.sec == nil {
		return
	}
	for zone := range s.sec.zones {
		if s.sec.key(zone) == nil {
			continue
		}
		lctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		if err := s.sec.reloadZone(lctx, s.cfg.Keys, zone); err != nil {
			s.log.Warn("DNSSEC keys not reloaded", "component", "dns", "zone", zone, "err", err)
		}
		cancel()
	}
}

// RollKey takes one step of the rollover of zone's key (pb.RollDNSKeyRequest
// says what each does) in the replicated store, under the zone's lock, and
// returns the zone as this host then signs it. Every other host follows
// through KeysChanged.
func (s *Server) RollKey(ctx context.Context, zone string, step pb.RollDNSKeyRequest_Step, force bool) (*pb.DNSZoneObservation, error) {
	z, err := canonicalZone(zone)
	if err != nil {
		return nil, fmt.Errorf("zone %q: %w: %w", excerpt(zone), err, api.ErrInvalid)
	}
	if s == nil || s.sec == nil || !s.sec.zones[z] {
		return nil, fmt.Errorf("%s: %w; sign it with --dns-dnssec on every host, or ask a host that signs it", z, ErrNotSigned)
	}
	if s.sec.key(z) == nil {
		return nil, fmt.Errorf("%s: %w", z, ErrNoKey)
	}
	ks := s.cfg.Keys
	if err := ks.Lock(ctx, lockName(z)); err != nil {
		return nil, fmt.Errorf("lock the keys of %s: %w", z, err)
	}
	defer func() { _ = ks.Unlock(context.WithoutCancel(ctx), lockName(z)) }()
	zk, err := loadZoneKeys(ctx, ks, z)
	if err != nil {
		return nil, err
	}
	now := time.Now()
	if err := rollStep(ctx, ks, zk, step, force, now); err != nil {
		return nil, err
	}
	if err := s.sec.reloadZone(ctx, ks, z); err != nil {
		return nil, err
	}
	s.log.Info("DNSSEC key rollover", "component", "dns", "zone", z, "step", strings.TrimPrefix(step.String(), "STEP_"))
	for _, o := range s.zoneObservations() {
		if o.GetZone() == z {
			return o, nil
		}
	}
	return nil, fmt.Errorf("%s: %w", z, ErrNotSigned)
}

// rollStep writes one step of a rollover of zk's zone at now.
func rollStep(ctx context.Context, ks KeyStore, zk *zoneKeys, step pb.RollDNSKeyRequest_Step, force bool, now time.Time) error {
	z := zk.cur.zone
	switch step {
	case pb.RollDNSKeyRequest_STEP_START:
		if zk.next != nil {
			return fmt.Errorf("%s: a rollover to key %d is in progress since %s: finish or cancel it first: %w",
				z, zk.next.tag, zk.started.UTC().Format(time.RFC3339), ErrRollover)
		}
		for {
			priv, b, err := generateKey(map[string]string{startedHeader: now.UTC().Format(time.RFC3339)})
			if err != nil {
				return fmt.Errorf("the new key of %s: %w", z, err)
			}
			// Signatures are cached by key tag: the new key's differs.
			if newZoneKey(z, priv).tag == zk.cur.tag {
				continue
			}
			if err := ks.Store(ctx, nextPath(z), b); err != nil {
				return fmt.Errorf("store the new key of %s: %w", z, err)
			}
			return nil
		}
	case pb.RollDNSKeyRequest_STEP_FINISH:
		if zk.next == nil {
			return fmt.Errorf("%s: no rollover in progress (its key is %d): start one first: %w", z, zk.cur.tag, ErrRollover)
		}
		if after := zk.started.Add(RolloverWait); now.Before(after) && !force {
			return fmt.Errorf("%s: both keys are published since %s; until %s (the DNSKEY TTL, %s) a resolver may hold the old key's DNSKEY set alone and could validate nothing signed by the new key alone: finish after then (and once the parent's DS set holds key %d and the old DS set's TTL has passed), or force it: %w",
				z, zk.started.UTC().Format(time.RFC3339), after.UTC().Format(time.RFC3339), RolloverWait, zk.next.tag, ErrRollover)
		}
		b, err := ks.Load(ctx, nextPath(z))
		if err != nil {
			return fmt.Errorf("load the new key of %s: %w", z, err)
		}
		priv, err := parseKey(b)
		if err != nil {
			return fmt.Errorf("the new key of %s in the store: %w", z, err)
		}
		cur, err := encodeKey(priv, nil)
		if err != nil {
			return fmt.Errorf("the new key of %s: %w", z, err)
		}
		// The new key becomes the current one first: a host that reads
		// between the two writes sees the same key twice, and signs with it
		// alone (never with the old key alone).
		if err := ks.Store(ctx, keyPath(z), cur); err != nil {
			return fmt.Errorf("store the key of %s: %w", z, err)
		}
		if err := ks.Delete(ctx, nextPath(z)); err != nil {
			return fmt.Errorf("delete the new key of %s: %w", z, err)
		}
	case pb.RollDNSKeyRequest_STEP_CANCEL:
		if zk.next == nil {
			return fmt.Errorf("%s: no rollover in progress (its key is %d): %w", z, zk.cur.tag, ErrRollover)
		}
		if err := ks.Delete(ctx, nextPath(z)); err != nil {
			return fmt.Errorf("delete the new key of %s: %w", z, err)
		}
	default:
		return fmt.Errorf("step %v: give START, FINISH or CANCEL: %w", step, api.ErrInvalid)
	}
	return nil
}

// rolloverObservation adds the new key of a rollover to o.
func rolloverObservation(o *pb.DNSZoneObservation, zk *zoneKeys) {
	if zk == nil || zk.next == nil {
		return
	}
	o.NextDs, o.NextDnskey, o.NextKeyTag = dsText(zk.next), strings.ReplaceAll(zk.next.dnskey.String(), "\t", " "), uint32(zk.next.tag)
	if !zk.started.IsZero() {
		o.RolloverStarted = timestamppb.New(zk.started)
		o.RolloverFinishAfter = timestamppb.New(zk.started.Add(RolloverWait))
	}
}
