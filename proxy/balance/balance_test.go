package balance

import (
	"encoding/binary"
	"fmt"
	"math"
	"net/netip"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
)

// fakeState is a member's state the tests flip.
type fakeState struct {
	down     atomic.Bool
	inFlight atomic.Int64
}

func (s *fakeState) Healthy() bool   { return !s.down.Load() }
func (s *fakeState) InFlight() int64 { return s.inFlight.Load() }

func newMembers(weights ...uint32) ([]*Member, []*fakeState) {
	ms := make([]*Member, len(weights))
	st := make([]*fakeState, len(weights))
	for i, w := range weights {
		st[i] = &fakeState{}
		ms[i] = &Member{Addr: netip.AddrPortFrom(netip.AddrFrom4([4]byte{10, 0, 0, byte(i + 1)}), 80), Weight: w, State: st[i]}
	}
	return ms, st
}

func indexOf(ms []*Member, m *Member) int {
	for i, x := range ms {
		if x == m {
			return i
		}
	}
	return -1
}

func key(i int) []byte { return binary.BigEndian.AppendUint64(nil, uint64(i)*0x9e3779b97f4a7c15) }

// counts picks n times and counts per member index; -1 counts nil picks.
func counts(b Balancer, ms []*Member, n int) map[int]int {
	out := map[int]int{}
	for i := range n {
		out[indexOf(ms, b.Pick(key(i)))]++
	}
	return out
}

func TestRoundRobinSequence(t *testing.T) {
	tests := []struct {
		name    string
		weights []uint32
		down    []int
		want    string
	}{
		{"equal weights rotate", []uint32{1, 1, 1}, nil, "abcabc"},
		{"smooth weights", []uint32{5, 1, 1}, nil, "aabacaa"},
		{"weight zero is drained", []uint32{1, 0, 1}, nil, "acacac"},
		{"unhealthy is skipped", []uint32{1, 1, 1}, []int{1}, "acacac"},
		{"all down picks none", []uint32{1, 1}, []int{0, 1}, "----"},
		{"no members", nil, nil, "--"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ms, st := newMembers(tt.weights...)
			for _, i := range tt.down {
				st[i].down.Store(true)
			}
			b := New(RoundRobin, ms)
			var got strings.Builder
			for range len(tt.want) {
				if i := indexOf(ms, b.Pick(nil)); i < 0 {
					got.WriteByte('-')
				} else {
					got.WriteByte(byte('a' + i))
				}
			}
			if got.String() != tt.want {
				t.Errorf("picks %q, want %q", got.String(), tt.want)
			}
		})
	}
}

func TestDistribution(t *testing.T) {
	const n = 60000
	tests := []struct {
		name    string
		alg     Algorithm
		weights []uint32
		down    []int
		// tolerance is the allowed relative error of each share.
		tolerance float64
	}{
		{"round robin weighted", RoundRobin, []uint32{1, 2, 3}, nil, 0.001},
		{"least request equal", LeastRequest, []uint32{1, 1, 1, 1}, nil, 0.05},
		{"least request weighted", LeastRequest, []uint32{1, 3}, nil, 0.05},
		{"least request with one down", LeastRequest, []uint32{1, 1, 1}, []int{2}, 0.05},
		{"maglev equal", Hash, []uint32{1, 1, 1, 1, 1, 1, 1, 1, 1, 1}, nil, 0.06},
		{"maglev weighted", Hash, []uint32{1, 2, 5}, nil, 0.06},
		{"maglev with one down", Hash, []uint32{1, 1, 1, 1}, []int{0}, 0.06},
		{"maglev drained", Hash, []uint32{1, 0, 1}, nil, 0.06},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ms, st := newMembers(tt.weights...)
			var total float64
			for i, w := range tt.weights {
				if isIn(tt.down, i) {
					st[i].down.Store(true)
					continue
				}
				total += float64(w)
			}
			got := counts(New(tt.alg, ms), ms, n)
			for i, w := range tt.weights {
				want := 0.0
				if !isIn(tt.down, i) {
					want = float64(w) / total
				}
				share := float64(got[i]) / n
				if math.Abs(share-want) > tt.tolerance*max(want, 0.01) {
					t.Errorf("member %d (weight %d) got %.4f of picks, want %.4f", i, w, share, want)
				}
			}
			if got[-1] != 0 {
				t.Errorf("%d picks returned no member", got[-1])
			}
		})
	}
}

func isIn(xs []int, x int) bool {
	for _, y := range xs {
		if x == y {
			return true
		}
	}
	return false
}

func TestLeastRequestAvoidsLoaded(t *testing.T) {
	ms, st := newMembers(1, 1, 1, 1)
	st[0].inFlight.Store(50)
	st[1].inFlight.Store(10)
	got := counts(New(LeastRequest, ms), ms, 10000)
	if got[0] != 0 {
		t.Errorf("the most loaded member got %d picks; it should lose every pairing", got[0])
	}
	if got[1] >= got[2] || got[1] >= got[3] {
		t.Errorf("picks %v: the loaded member 1 should get fewer than the idle ones", got)
	}
}

func TestMaglevConsistency(t *testing.T) {
	const keys = 20000
	ms, st := newMembers(1, 1, 1, 1, 1, 1, 1, 1, 1, 1)
	b := New(Hash, ms)
	before := make([]*Member, keys)
	for i := range keys {
		before[i] = b.Pick(key(i))
	}
	t.Run("same key, same member, on every host", func(t *testing.T) {
		again := New(Hash, cloneMembers(ms))
		for i := range keys {
			if indexOf(ms, before[i]) != indexOf(ms, b.Pick(key(i))) || before[i].Addr != again.Pick(key(i)).Addr {
				t.Fatalf("key %d moved between picks or hosts", i)
			}
		}
	})
	t.Run("removing a member moves its keys and few others", func(t *testing.T) {
		gone := ms[3]
		rest := append(append([]*Member{}, ms[:3]...), ms[4:]...)
		after := New(Hash, rest)
		moved, others := 0, 0
		for i := range keys {
			m := after.Pick(key(i))
			if m == gone {
				t.Fatal("removed member picked")
			}
			if before[i] != gone {
				others++
				if m != before[i] {
					moved++
				}
			}
		}
		frac := float64(moved) / float64(others)
		t.Logf("removing 1 of 10 members moved %.2f%% of the other members' keys", 100*frac)
		if frac > 0.05 {
			t.Errorf("%.1f%% of keys on remaining members moved; Maglev should move few", 100*frac)
		}
	})
	t.Run("an unhealthy member's keys go where removal sends them, no other key moves", func(t *testing.T) {
		st[3].down.Store(true)
		defer st[3].down.Store(false)
		rest := append(append([]*Member{}, ms[:3]...), ms[4:]...)
		removed := New(Hash, rest)
		for i := range keys {
			got, want := b.Pick(key(i)), before[i]
			if want == ms[3] {
				want = removed.Pick(key(i))
			}
			if got != want {
				t.Fatalf("key %d: picked %s, want %s", i, got.Addr, want.Addr)
			}
		}
	})
	t.Run("back to healthy restores every key", func(t *testing.T) {
		for i := range keys {
			if b.Pick(key(i)) != before[i] {
				t.Fatalf("key %d did not return to its member", i)
			}
		}
	})
	t.Run("all down picks none", func(t *testing.T) {
		for _, s := range st {
			s.down.Store(true)
		}
		defer func() {
			for _, s := range st {
				s.down.Store(false)
			}
		}()
		if m := b.Pick(key(1)); m != nil {
			t.Errorf("picked %s with every member down", m.Addr)
		}
	})
}

func cloneMembers(ms []*Member) []*Member {
	out := make([]*Member, len(ms))
	for i, m := range ms {
		c := *m
		out[i] = &c
	}
	return out
}

func TestConcurrentPicks(t *testing.T) {
	for _, alg := range []Algorithm{RoundRobin, LeastRequest, Hash} {
		t.Run(fmt.Sprint(alg), func(t *testing.T) {
			ms, st := newMembers(1, 2, 3)
			b := New(alg, ms)
			var wg sync.WaitGroup
			for g := range 4 {
				wg.Go(func() {
					for i := range 2000 {
						if i%100 == 0 {
							st[g%3].down.Store(i%200 == 0)
						}
						b.Pick(key(i))
					}
				})
			}
			wg.Wait()
		})
	}
}

func BenchmarkPick(b *testing.B) {
	for _, tt := range []struct {
		name string
		alg  Algorithm
	}{{"round-robin", RoundRobin}, {"least-request", LeastRequest}, {"hash", Hash}} {
		b.Run(tt.name, func(b *testing.B) {
			ms, _ := newMembers(1, 1, 1, 1, 1, 1, 1, 1, 1, 1)
			bal := New(tt.alg, ms)
			k := []byte{192, 0, 2, 1}
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					if bal.Pick(k) == nil {
						b.Fatal("no member")
					}
				}
			})
		})
	}
}
