package pmap

import (
	"fmt"
	"maps"
	"math/rand/v2"
	"testing"
)

// TestMapAgreesWithBuiltin applies random sets and deletes to a Map and to
// a Go map, version after version, and checks every version against a
// copy of the Go map taken at the time, and Diff against the changes made.
func TestMapAgreesWithBuiltin(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	m := New[string, int](String)
	ref := map[string]int{}
	type version struct {
		m   *Map[string, int]
		ref map[string]int
	}
	var versions []version
	for round := range 200 {
		e := m.Edit()
		want := maps.Clone(ref)
		for range r.IntN(50) {
			k := fmt.Sprintf("k%d", r.IntN(2000))
			if r.IntN(3) == 0 {
				e.Delete(k)
				delete(want, k)
			} else {
				e.Set(k, round)
				want[k] = round
			}
		}
		next := e.Done()
		diffs := map[string]bool{}
		Diff(m, next, func(a, b int) bool { return a == b }, func(k string, _ int, _ bool, _ int, _ bool) { diffs[k] = true })
		for k := range want {
			if ref[k] != want[k] || !hasKey(ref, k) {
				if !diffs[k] {
					t.Fatalf("round %d: Diff missed %s", round, k)
				}
				delete(diffs, k)
			}
		}
		for k := range ref {
			if !hasKey(want, k) {
				if !diffs[k] {
					t.Fatalf("round %d: Diff missed removed %s", round, k)
				}
				delete(diffs, k)
			}
		}
		if len(diffs) != 0 {
			t.Fatalf("round %d: Diff reported unchanged keys %v", round, diffs)
		}
		m, ref = next, want
		versions = append(versions, version{m, maps.Clone(ref)})
	}
	for i, v := range versions {
		if v.m.Len() != len(v.ref) {
			t.Fatalf("version %d: %d entries, want %d", i, v.m.Len(), len(v.ref))
		}
		got := maps.Collect(v.m.All())
		if !maps.Equal(got, v.ref) {
			t.Fatalf("version %d changed after later edits", i)
		}
		for k, want := range v.ref {
			if g, ok := v.m.Get(k); !ok || g != want {
				t.Fatalf("version %d: Get(%s) = %d %v, want %d", i, k, g, ok, want)
			}
		}
	}
}

func hasKey(m map[string]int, k string) bool { _, ok := m[k]; return ok }

// TestEditSharesUntouchedShards: one change to 100,000 entries copies one
// shard; every other shard is shared.
func TestEditSharesUntouchedShards(t *testing.T) {
	e := New[string, int](String).Edit()
	for i := range 100000 {
		e.Set(fmt.Sprintf("tenant/lb-%d", i), i)
	}
	a := e.Done()
	before := Shared(a, a)
	e = a.Edit()
	e.Set("tenant/lb-7", -1)
	b := e.Done()
	if got := Shared(a, b); got != before-1 {
		t.Errorf("one change shares %d of %d shards, want all but one", got, before)
	}
	if v, _ := a.Get("tenant/lb-7"); v != 7 {
		t.Errorf("the old version changed: %d", v)
	}
}

func BenchmarkEditOneOf100k(b *testing.B) {
	e := New[string, int](String).Edit()
	for i := range 100000 {
		e.Set(fmt.Sprintf("tenant/lb-%d", i), i)
	}
	m := e.Done()
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		e := m.Edit()
		e.Set("tenant/lb-7", i)
		m = e.Done()
	}
}

// TestEditCostsTheSameAtAnySize: an edit of one entry allocates about as
// much among 300,000 entries as among 1,000 (a copy of the root, one
// branch and one shard).
func TestEditCostsTheSameAtAnySize(t *testing.T) {
	if testing.Short() {
		t.Skip("a scale test: make test runs it; -short (make test-quick) skips it")
	}
	perEdit := func(n int) float64 {
		e := New[string, int](String).Edit()
		for i := range n {
			e.Set(fmt.Sprintf("tenant/lb-%d", i), i)
		}
		m := e.Done()
		i := 0
		return float64(testing.Benchmark(func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				i++
				e := m.Edit()
				e.Set(fmt.Sprintf("tenant/lb-%d", i%n), -i)
				m = e.Done()
			}
		}).AllocedBytesPerOp())
	}
	small, large := perEdit(1000), perEdit(300000)
	t.Logf("one edit allocates %.0f bytes among 1,000 entries, %.0f among 300,000", small, large)
	if large > 2*small+1024 {
		t.Errorf("one edit allocates %.0f bytes among 300,000 entries and %.0f among 1,000: it grows with the map", large, small)
	}
}
