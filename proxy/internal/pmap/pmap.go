// Package pmap is a persistent map: a new version shares every shard that
// a change did not touch with the version it came from. A change costs
// what it changes (one copy of the root, and of each branch and shard it
// touches), old versions stay valid and unchanged for their readers, and
// Diff compares two versions by visiting only the parts they do not
// share.
package pmap

import (
	"hash/maphash"
	"iter"
)

// A map is a tree of two levels over the top 16 bits of a key's hash:
// a root of 256 branches, each of 256 shards (65,536 in all). An edit
// copies the root (2 KiB), each branch it touches (2 KiB) and each shard
// it touches, a slice of the entries whose hash falls there: about 15
// entries at 1,000,000, so that a change of a few entries costs a few
// KiB at any size. One level of 1,024 shards cost a copy of a shard of
// about 1,000 entries per entry changed at 1,000,000 (each about 40 KiB
// as a Go map), and 4,096 made the index copy cost more than the smaller
// shards saved at 100,000.
const (
	branchBits = 8
	shardBits  = 8
	branches   = 1 << branchBits
	perBranch  = 1 << shardBits
)

// Map is one version of a persistent map. The zero value and nil are
// empty maps; a Map is never modified once Done returns it.
type Map[K comparable, V any] struct {
	hash func(K) uint64
	root *[branches]*branch[K, V] // a nil branch is empty
	n    int
}

// branch is one part of the root; versions share it by pointer.
type branch[K comparable, V any] struct {
	s [perBranch]*shard[K, V] // a nil shard is empty
}

// shard is the entries whose hash leads to it, in no order; versions
// share it by pointer.
type shard[K comparable, V any] struct{ e []entry[K, V] }

type entry[K comparable, V any] struct {
	k K
	v V
}

func (s *shard[K, V]) find(k K) int {
	if s == nil {
		return -1
	}
	for i := range s.e {
		if s.e[i].k == k {
			return i
		}
	}
	return -1
}

// New returns an empty map whose keys hash with hash (String, Pointer or
// a function of Mix); equal keys must hash alike.
func New[K comparable, V any](hash func(K) uint64) *Map[K, V] {
	return &Map[K, V]{hash: hash}
}

// place returns the branch and the shard in it that hold k.
func (m *Map[K, V]) place(k K) (int, int) {
	h := m.hash(k)
	return int(h >> (64 - branchBits)), int(h>>(64-branchBits-shardBits)) & (perBranch - 1)
}

func (m *Map[K, V]) shard(b, i int) *shard[K, V] {
	if m == nil || m.root == nil || m.root[b] == nil {
		return nil
	}
	return m.root[b].s[i]
}

// Get returns the value at k.
func (m *Map[K, V]) Get(k K) (V, bool) {
	if m == nil || m.root == nil {
		var zero V
		return zero, false
	}
	s := m.shard(m.place(k))
	if i := s.find(k); i >= 0 {
		return s.e[i].v, true
	}
	var zero V
	return zero, false
}

// Len is the number of entries.
func (m *Map[K, V]) Len() int {
	if m == nil {
		return 0
	}
	return m.n
}

// All yields every entry, in no order.
func (m *Map[K, V]) All() iter.Seq2[K, V] {
	return func(yield func(K, V) bool) {
		if m == nil || m.root == nil {
			return
		}
		for _, b := range m.root {
			if b == nil {
				continue
			}
			for _, s := range b.s {
				if s == nil {
					continue
				}
				for _, e := range s.e {
					if !yield(e.k, e.v) {
						return
					}
				}
			}
		}
	}
}

// Edit starts a new version from m; m stays as it is.
func (m *Map[K, V]) Edit() *Editor[K, V] {
	e := &Editor[K, V]{m: &Map[K, V]{hash: m.hash, root: new([branches]*branch[K, V]), n: m.n}}
	if m.root != nil {
		*e.m.root = *m.root
	}
	return e
}

// Editor builds a new version. The branches and shards it copied are its
// own and change in place after that.
type Editor[K comparable, V any] struct {
	m      *Map[K, V]
	owned  [branches / 64]uint64 // branches copied
	shards map[*shard[K, V]]bool // shards copied
}

// own returns shard i of branch b, copied first unless e owns it (nil
// when it holds nothing and grow is false).
func (e *Editor[K, V]) own(b, i int, grow bool) *shard[K, V] {
	root := e.m.root
	if e.owned[b/64]&(1<<(b%64)) == 0 {
		e.owned[b/64] |= 1 << (b % 64)
		nb := &branch[K, V]{}
		if root[b] != nil {
			*nb = *root[b]
		}
		root[b] = nb
	}
	s := root[b].s[i]
	if s != nil && e.shards[s] {
		return s
	}
	if s == nil && !grow {
		return nil
	}
	ns := &shard[K, V]{}
	if s != nil {
		ns.e = make([]entry[K, V], len(s.e), len(s.e)+1)
		copy(ns.e, s.e)
	}
	if e.shards == nil {
		e.shards = map[*shard[K, V]]bool{}
	}
	e.shards[ns] = true
	root[b].s[i] = ns
	return ns
}

// Get returns the value at k in the version being built.
func (e *Editor[K, V]) Get(k K) (V, bool) { return e.m.Get(k) }

// Set sets k to v.
func (e *Editor[K, V]) Set(k K, v V) {
	b, i := e.m.place(k)
	s := e.own(b, i, true)
	if i := s.find(k); i >= 0 {
		s.e[i].v = v
		return
	}
	s.e = append(s.e, entry[K, V]{k, v})
	e.m.n++
}

// Delete removes k.
func (e *Editor[K, V]) Delete(k K) {
	b, i := e.m.place(k)
	if e.m.shard(b, i).find(k) < 0 {
		return
	}
	s := e.own(b, i, false)
	j := s.find(k)
	last := len(s.e) - 1
	s.e[j] = s.e[last]
	var zero entry[K, V]
	s.e[last] = zero
	s.e = s.e[:last]
	e.m.n--
	if len(s.e) == 0 {
		e.m.root[b].s[i] = nil
	}
}

// Done returns the new version; the Editor must not be used after.
func (e *Editor[K, V]) Done() *Map[K, V] {
	m := e.m
	e.m = nil
	return m
}

// Shared returns how many of the shards that hold entries a and b hold in
// common (by identity), for tests and measurements.
func Shared[K comparable, V any](a, b *Map[K, V]) int {
	if a == nil || b == nil || a.root == nil || b.root == nil {
		return 0
	}
	n := 0
	for i, ab := range a.root {
		bb := b.root[i]
		if ab == nil || bb == nil {
			continue
		}
		for j, s := range ab.s {
			if s != nil && s == bb.s[j] {
				n++
			}
		}
	}
	return n
}

// Diff calls fn for every key whose entry differs between old and new:
// added (hadOld false), removed (hasNew false) or with a value that same
// does not accept. It visits only the branches and shards the two
// versions do not share, so comparing a version with the one it was
// edited from costs what the edit changed.
func Diff[K comparable, V any](old, new *Map[K, V], same func(a, b V) bool, fn func(k K, o V, hadOld bool, n V, hasNew bool)) {
	var empty [branches]*branch[K, V]
	or, nr := &empty, &empty
	if old != nil && old.root != nil {
		or = old.root
	}
	if new != nil && new.root != nil {
		nr = new.root
	}
	if or == nr {
		return
	}
	var none branch[K, V]
	for b := range branches {
		ob, nb := or[b], nr[b]
		if ob == nb {
			continue
		}
		if ob == nil {
			ob = &none
		}
		if nb == nil {
			nb = &none
		}
		for i := range perBranch {
			os, ns := ob.s[i], nb.s[i]
			if os == ns {
				continue
			}
			var oe, ne []entry[K, V]
			if os != nil {
				oe = os.e
			}
			if ns != nil {
				ne = ns.e
			}
			for _, o := range oe {
				j := ns.find(o.k)
				if j < 0 {
					var zero V
					fn(o.k, o.v, true, zero, false)
				} else if !same(o.v, ne[j].v) {
					fn(o.k, o.v, true, ne[j].v, true)
				}
			}
			for _, n := range ne {
				if os.find(n.k) < 0 {
					var zero V
					fn(n.k, zero, false, n.v, true)
				}
			}
		}
	}
}

var seed = maphash.MakeSeed()

// String hashes a string key.
func String(s string) uint64 { return maphash.String(seed, s) }

// Mix spreads the bits of x; keys made of integers hash through it.
func Mix(x uint64) uint64 {
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	x ^= x >> 31
	return x
}

// Pointer hashes a pointer key by identity.
func Pointer[T any](p *T) uint64 { return maphash.Comparable(seed, p) }
