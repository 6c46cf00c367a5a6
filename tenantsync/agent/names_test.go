package agent

import (
	"strings"
	"testing"
	"time"

	"github.com/teapot-lb/teapot-lb/tenantsync"
	"github.com/teapot-lb/teapot-lb/tenantsync/translate"
)

// TestDesiredNamesAreOneObjectEach: every load balancer name of the
// desired set belongs to one object, whatever names the tenant's
// namespaces choose. Service a/b-c (older) takes svc-a-b-c; Service a-b/c,
// whose plain name is the same, moves to its unique name; a third Service
// named to spell the older hashed form a-b/c would have moved to
// (a/b-c-HASH32) cannot take it over (it used to replace a-b/c's entry,
// whose load balancer the next resync then removed).
func TestDesiredNamesAreOneObjectEach(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	legacy := tenantsync.HashedName(tenantsync.ServicePrefix, translate.KindService, "a-b", "c")
	spoof := strings.TrimPrefix(legacy, "svc-a-")
	svcs := []struct {
		ns, name string
		created  time.Time
	}{{"a", "b-c", t0}, {"a", spoof, t0.Add(time.Minute)}, {"a-b", "c", t0.Add(time.Hour)}}
	src, _ := sources(t, lbService(svcs[0].ns, svcs[0].name, svcs[0].created), lbService(svcs[1].ns, svcs[1].name, svcs[1].created), lbService(svcs[2].ns, svcs[2].name, svcs[2].created))
	s := newDesiredSet()
	o := translate.Options{DefaultPool: "public"}
	s.recompute(src, o)
	got := s.versions()
	if len(got) != 3 {
		t.Fatalf("desired %d load balancers for 3 Services: %v", len(got), keys(got))
	}
	for _, sv := range svcs {
		d, name := s.lookup(objKey{translate.KindService, sv.ns, sv.name})
		if d == nil || d.Source.Namespace != sv.ns || d.Source.Name != sv.name || got[name] != d {
			t.Errorf("Service %s/%s: load balancer %q is %v", sv.ns, sv.name, name, d)
		}
	}
	unique := "svc--a-b-c-" + tenantsync.Hash64(translate.KindService, "a-b", "c")
	if d := got[unique]; d == nil || d.Source.Namespace != "a-b" {
		t.Fatalf("%s = %v, want Service a-b/c", unique, d)
	}

	// The older Service goes: a-b/c keeps its unique name (its load
	// balancer, and VIP, are not renamed) ...
	src2, _ := sources(t, lbService("a-b", "c", t0.Add(time.Hour)))
	s.markAll()
	s.recompute(src2, o)
	if _, name := s.lookup(objKey{translate.KindService, "a-b", "c"}); name != unique {
		t.Errorf("after a/b-c left, a-b/c is %q, want %q kept", name, unique)
	}
	// ... and so does a restarted agent that the LB cluster tells it holds
	// that name.
	restarted := newDesiredSet()
	restarted.hold([]string{unique})
	restarted.recompute(src2, o)
	if _, name := restarted.lookup(objKey{translate.KindService, "a-b", "c"}); name != unique {
		t.Errorf("after a restart, a-b/c is %q, want %q kept", name, unique)
	}
	// A fresh one without a collision takes the plain name.
	fresh := newDesiredSet()
	fresh.recompute(src2, o)
	if _, name := fresh.lookup(objKey{translate.KindService, "a-b", "c"}); name != "svc-a-b-c" {
		t.Errorf("alone, a-b/c is %q, want svc-a-b-c", name)
	}
}

func keys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	return out
}
