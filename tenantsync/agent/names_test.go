package agent

import (
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/teapot-lb/teapot-lb/tenantsync/syncspec"
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
	legacy := syncspec.HashedName(syncspec.ServicePrefix, translate.KindService, "a-b", "c")
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
	unique := "svc--a-b-c-" + syncspec.Hash64(translate.KindService, "a-b", "c")
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

// TestUpgradeKeepsTheVIPOfARenamedLoadBalancer: an older agent gave
// Service a-b/c, whose plain name Service a/b-c held, the 32-bit hashed
// name; this agent gives it its unique name, and the new load balancer
// asks for the old one's VIP (the same sync removes the old one first),
// until the cluster reports the new one's address. When another object
// wants the old name (a Service named to spell it), the VIP is not
// carried.
func TestUpgradeKeepsTheVIPOfARenamedLoadBalancer(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	older := syncspec.HashedName(syncspec.ServicePrefix, translate.KindService, "a-b", "c")
	unique := "svc--a-b-c-" + syncspec.Hash64(translate.KindService, "a-b", "c")
	o := translate.Options{DefaultPool: "public"}
	k := objKey{translate.KindService, "a-b", "c"}
	for _, spoofed := range []bool{false, true} {
		objs := []*corev1.Service{lbService("a", "b-c", t0), lbService("a-b", "c", t0.Add(time.Hour))}
		if spoofed {
			objs = append(objs, lbService("a", strings.TrimPrefix(older, "svc-a-"), t0.Add(time.Minute)))
		}
		var ros []runtime.Object
		for _, o := range objs {
			ros = append(ros, o)
		}
		src, _ := sources(t, ros...)
		cluster := map[string]string{"svc-a-b-c": "192.0.2.1", older: "192.0.2.2"}
		s := newDesiredSet()
		s.addr = func(n string) string { return cluster[n] }
		s.hold([]string{"svc-a-b-c", older})
		s.recompute(src, o)
		d, name := s.lookup(k)
		if name != unique {
			t.Fatalf("spoofed %t: a-b/c is %q, want %q", spoofed, name, unique)
		}
		want := "192.0.2.2"
		if spoofed {
			want = "" // the old name is another object's: its VIP is not ours to take
		}
		if got := d.LB.GetVip().GetAddress(); got != want || d.Version != syncspec.Version(d.LB) {
			t.Errorf("spoofed %t: %s asks for %q (version %s), want %q", spoofed, name, got, d.Version, want)
		}
		if _, kept := s.versions()[older]; kept != spoofed {
			t.Errorf("spoofed %t: %s still desired: %t", spoofed, older, kept)
		}
		if d, _ := s.lookup(objKey{translate.KindService, "a", "b-c"}); d.LB.GetVip().GetAddress() != "" {
			t.Errorf("a/b-c asks for %q", d.LB.GetVip().GetAddress())
		}
		if spoofed {
			continue
		}
		// The cluster created the new load balancer on the old VIP and
		// removed the old one: the request is dropped.
		delete(cluster, older)
		cluster[unique] = "192.0.2.2"
		s.markAll()
		s.recompute(src, o)
		if d, name := s.lookup(k); name != unique || d.LB.GetVip().GetAddress() != "" {
			t.Errorf("after the rename, %s asks for %q, want no address (the LB keeps its own)", name, d.LB.GetVip().GetAddress())
		}
	}
}
