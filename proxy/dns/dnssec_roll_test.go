package dns

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	mdns "github.com/miekg/dns"

	"github.com/teapot-lb/teapot-lb/api"
	"github.com/teapot-lb/teapot-lb/api/observe"
	pb "github.com/teapot-lb/teapot-lb/api/proto/teapotv1"
)

// dsAnchors writes a delv trust anchor file holding the DS of the key
// with tag (as a resolver holds the parent's DS set) and returns its path.
func dsAnchors(t *testing.T, k *zoneKey) string {
	t.Helper()
	ds := k.DS()
	p := filepath.Join(t.TempDir(), fmt.Sprintf("ds-%d.conf", k.tag))
	conf := fmt.Sprintf("trust-anchors {\n\t%s static-ds %d %d %d %q;\n};\n", k.zone, ds.KeyTag, ds.Algorithm, ds.DigestType, ds.Digest)
	if err := os.WriteFile(p, []byte(conf), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// delvAll has delv validate the zone's kinds of answer with anchors; ok
// false expects every one to fail.
func delvAll(t *testing.T, bin, addr, anchors, when string, ok bool) {
	t.Helper()
	for _, c := range []struct{ name, qtype, want string }{
		{"shop.acme.example", "A", "192.0.2.10"},
		{"x.apps.acme.example", "A", "192.0.2.20"},
		{"acme.example", "DNSKEY", "DNSKEY"},
		{"shop.acme.example", "AAAA", "; negative response, fully validated"},
		{"nope.acme.example", "A", "; negative response, fully validated"},
	} {
		out := delv(t, bin, addr, anchors, c.name, c.qtype)
		valid := strings.Contains(out, "fully validated") && strings.Contains(out, c.want)
		if valid != ok {
			t.Fatalf("%s: delv %s %s with %s (validated: %v, want %v):\n%s", when, c.name, c.qtype, filepath.Base(anchors), valid, ok, out)
		}
	}
}

// TestKeyRolloverValidatesThroughout rolls a zone's key by double
// signature on one host while a second host shares its store: BIND's
// validator (delv), with the DS of the old key or of the new one as its
// trust anchor, validates every kind of answer from both hosts at every
// step where a resolver may hold that DS; the steps out of order and a
// FINISH before the DNSKEY TTL are refused with their reasons; CANCEL
// drops the new key.
func TestKeyRolloverValidatesThroughout(t *testing.T) {
	t.Parallel()
	bin := lookDelv(t)
	keys := newMemKeys()
	s, addr := startSigned(t, signedConfig(keys))
	s2, addr2 := startSigned(t, signedConfig(keys))
	ctx := context.Background()
	old := s.sec.key("acme.example.")
	oldDS := dsAnchors(t, old)
	delvAll(t, bin, addr, oldDS, "before", true)

	if _, err := s.RollKey(ctx, "lb.example.com", pb.RollDNSKeyRequest_STEP_START, false); !errors.Is(err, ErrNotSigned) || !errors.Is(err, api.ErrInvalid) {
		t.Fatalf("START of a zone not signed: %v", err)
	}
	if _, err := s.RollKey(ctx, "acme.example", pb.RollDNSKeyRequest_STEP_FINISH, false); !errors.Is(err, ErrRollover) || !strings.Contains(err.Error(), "start one first") {
		t.Fatalf("FINISH without a rollover: %v", err)
	}
	began := time.Now()
	o, err := s.RollKey(ctx, "acme.example", pb.RollDNSKeyRequest_STEP_START, false)
	if err != nil {
		t.Fatal(err)
	}
	next := s.sec.zoneKeysOf("acme.example.").next
	if next == nil || o.GetNextKeyTag() != uint32(next.tag) || o.GetKeyTag() != uint32(old.tag) || o.GetDs() != dsText(old) || o.GetNextDs() != dsText(next) ||
		o.GetRolloverStarted().AsTime().Before(began.Add(-time.Second)) || !o.GetRolloverFinishAfter().AsTime().Equal(o.GetRolloverStarted().AsTime().Add(RolloverWait)) {
		t.Fatalf("after START: %v", o)
	}
	t.Logf("START: DS of both keys shown: %q and %q", o.GetDs(), o.GetNextDs())
	if _, err := s.RollKey(ctx, "acme.example", pb.RollDNSKeyRequest_STEP_START, false); !errors.Is(err, ErrRollover) || !strings.Contains(err.Error(), "in progress") {
		t.Fatalf("START during a rollover: %v", err)
	}
	// The other host follows the store.
	s2.KeysChanged(ctx)
	var h pb.HostObservation
	s2.Observe(observe.Filter{}, &h)
	if z := h.GetDnsZones()[0]; z.GetNextDs() != o.GetNextDs() || z.GetDs() != o.GetDs() {
		t.Fatalf("the second host after START: %v", z)
	}
	// Both keys in the DNSKEY set, every RRset signed by both.
	m := askDO(t, "udp", addr, "shop.acme.example.", mdns.TypeA, false)
	tags := map[uint16]bool{}
	for _, rr := range m.Answer {
		if sig, ok := rr.(*mdns.RRSIG); ok {
			tags[sig.KeyTag] = true
		}
	}
	if len(tags) != 2 || !tags[old.tag] || !tags[next.tag] {
		t.Fatalf("during the rollover the A RRset is signed by %v, want %d and %d", tags, old.tag, next.tag)
	}
	newDS := dsAnchors(t, next)
	for _, a := range []string{addr, addr2} {
		delvAll(t, bin, a, oldDS, "during, the parent's DS the old", true)
		delvAll(t, bin, a, newDS, "during, the parent's DS the new", true)
	}

	_, err = s.RollKey(ctx, "acme.example", pb.RollDNSKeyRequest_STEP_FINISH, false)
	if !errors.Is(err, ErrRollover) || !errors.Is(err, api.ErrConflict) || !strings.Contains(err.Error(), "force") {
		t.Fatalf("FINISH before the DNSKEY TTL: %v", err)
	}
	t.Logf("FINISH too early: %v", err)
	o, err = s.RollKey(ctx, "acme.example", pb.RollDNSKeyRequest_STEP_FINISH, true)
	if err != nil {
		t.Fatal(err)
	}
	if o.GetKeyTag() != uint32(next.tag) || o.GetNextDs() != "" || o.GetRolloverStarted() != nil {
		t.Fatalf("after FINISH: %v", o)
	}
	s2.KeysChanged(ctx)
	for _, a := range []string{addr, addr2} {
		delvAll(t, bin, a, newDS, "after, the parent's DS the new", true)
		delvAll(t, bin, a, oldDS, "after, the old DS alone", false)
	}

	// CANCEL drops a new key: the zone is signed by its key alone again.
	if _, err := s.RollKey(ctx, "acme.example", pb.RollDNSKeyRequest_STEP_START, false); err != nil {
		t.Fatal(err)
	}
	if o, err = s.RollKey(ctx, "acme.example", pb.RollDNSKeyRequest_STEP_CANCEL, false); err != nil {
		t.Fatal(err)
	}
	if o.GetKeyTag() != uint32(next.tag) || o.GetNextDs() != "" || len(s.zoneDNSKEY("acme.example.")) != 1 {
		t.Fatalf("after CANCEL: %v", o)
	}
	if _, err := keys.Load(ctx, nextPath("acme.example.")); err == nil {
		t.Fatal("the new key is still stored after CANCEL")
	}
	delvAll(t, bin, addr, newDS, "after CANCEL", true)
	if _, err := s.RollKey(ctx, "acme.example", pb.RollDNSKeyRequest_STEP_CANCEL, false); !errors.Is(err, ErrRollover) {
		t.Fatalf("CANCEL without a rollover: %v", err)
	}
}
