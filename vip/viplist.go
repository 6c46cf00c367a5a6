package vip

import (
	"iter"
	"net/netip"
	"slices"
)

// vipChunk is how many VIPs a chunk of a vipList holds when it is built;
// a chunk that grows to twice that is split in two.
const vipChunk = 256

// vipList is VIPs sorted by address, held in chunks. A copy shares every
// chunk with its origin, and an edit copies the chunks it changes: a
// change of one load balancer costs a chunk and the list of chunks (400
// entries at 100,000 VIPs), not every VIP.
type vipList struct {
	chunks [][]vipSpec // each sorted and not empty; in address order
	n      int
}

// newVIPList holds sorted, which must be sorted by address without
// duplicates, and takes it over.
func newVIPList(sorted []vipSpec) vipList {
	l := vipList{n: len(sorted)}
	for len(sorted) > 0 {
		k := min(len(sorted), vipChunk)
		l.chunks = append(l.chunks, sorted[:k:k])
		sorted = sorted[k:]
	}
	return l
}

// Len is the number of VIPs.
func (l *vipList) Len() int { return l.n }

// All yields the VIPs in address order.
func (l *vipList) All() iter.Seq[vipSpec] {
	return func(yield func(vipSpec) bool) {
		for _, c := range l.chunks {
			for _, vs := range c {
				if !yield(vs) {
					return
				}
			}
		}
	}
}

// locate returns the chunk that holds a, or would: the last whose first
// address is not after a (the first chunk for an address before all),
// and a's place in it.
func (l *vipList) locate(a netip.Addr) (ci, i int, found bool) {
	if len(l.chunks) == 0 {
		return 0, 0, false
	}
	ci, _ = slices.BinarySearchFunc(l.chunks, a, func(c []vipSpec, a netip.Addr) int {
		if c[0].Addr.Compare(a) <= 0 {
			return -1
		}
		return 1
	})
	ci = max(ci-1, 0)
	i, found = slices.BinarySearchFunc(l.chunks[ci], a, func(v vipSpec, a netip.Addr) int { return v.Addr.Compare(a) })
	return ci, i, found
}

// get returns the VIP at a.
func (l *vipList) get(a netip.Addr) (vipSpec, bool) {
	ci, i, found := l.locate(a)
	if !found {
		return vipSpec{}, false
	}
	return l.chunks[ci][i], true
}

// vipEdit changes a copy of a vipList: the chunks it copied are its own
// (owned, by their first element) and are changed in place after that.
type vipEdit struct {
	l     *vipList
	owned map[*vipSpec]bool
}

// edit starts changing a copy of l; l itself stays as it is.
func (l *vipList) edit() vipEdit {
	out := &vipList{chunks: slices.Clone(l.chunks), n: l.n}
	return vipEdit{l: out, owned: map[*vipSpec]bool{}}
}

// chunk returns chunk ci, copied first unless e owns it.
func (e vipEdit) chunk(ci int) []vipSpec {
	c := e.l.chunks[ci]
	if !e.owned[&c[0]] {
		c = append(make([]vipSpec, 0, len(c)+1), c...) // room for a put
	}
	return c
}

// store puts c back as chunk ci: it drops an empty chunk and splits one
// grown to twice vipChunk.
func (e vipEdit) store(ci int, c []vipSpec) {
	switch {
	case len(c) == 0:
		e.l.chunks = slices.Delete(e.l.chunks, ci, ci+1)
		return
	case len(c) >= 2*vipChunk:
		half := len(c) / 2
		lo, hi := slices.Clip(c[:half]), slices.Clone(c[half:])
		e.l.chunks[ci] = lo
		e.l.chunks = slices.Insert(e.l.chunks, ci+1, hi)
		e.owned[&lo[0]], e.owned[&hi[0]] = true, true
		return
	}
	e.l.chunks[ci] = c
	e.owned[&c[0]] = true
}

// put sets the VIP at vs.Addr to vs, adding it if there is none.
func (e vipEdit) put(vs vipSpec) {
	l := e.l
	if len(l.chunks) == 0 {
		c := []vipSpec{vs}
		l.chunks, l.n = [][]vipSpec{c}, 1
		e.owned[&c[0]] = true
		return
	}
	ci, i, found := l.locate(vs.Addr)
	c := e.chunk(ci)
	if found {
		c[i] = vs
	} else {
		c = slices.Insert(c, i, vs)
		l.n++
	}
	e.store(ci, c)
}

// remove drops the VIP at a, if there is one.
func (e vipEdit) remove(a netip.Addr) {
	ci, i, found := e.l.locate(a)
	if !found {
		return
	}
	c := e.chunk(ci)
	c = slices.Delete(c, i, i+1)
	e.l.n--
	e.store(ci, c)
}
