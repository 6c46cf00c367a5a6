package vip

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

var testKey = []byte("0123456789abcdef0123456789abcdef")

func TestHeartbeatRoundTrip(t *testing.T) {
	tests := []struct {
		name string
		hb   heartbeat
		want heartbeat // when it differs from hb
	}{
		{"minimal", heartbeat{ID: "n1", Incarnation: 7, Seq: 1}, heartbeat{}},
		{"full", heartbeat{
			ID: "lb-host-2", Incarnation: 1 << 60, Seq: 99, Revision: 1234, Eligible: true,
			Sightings: []sighting{{ID: "n1", Age: 12345 * time.Microsecond, Eligible: true}, {ID: "n3", Age: 0}},
			NotReady:  []netip.Addr{netip.MustParseAddr("192.0.2.10"), netip.MustParseAddr("2001:db8::10")},
		}, heartbeat{}},
		{"leaving", heartbeat{ID: "n1", Leaving: true, NotReadyAll: true}, heartbeat{}},
		{"ordered incarnation", heartbeat{ID: "n1", Incarnation: 1_700_000_000_000_000_000, Seq: 3, Ordered: true, Eligible: true}, heartbeat{}},
		{"handing over", heartbeat{ID: "n1", Eligible: true, Handover: true, Holdings: true, HoldingSent: true,
			Holding: []netip.Addr{netip.MustParseAddr("192.0.2.200")}}, heartbeat{}},
		{"held addresses and settled sightings", heartbeat{
			ID: "n2", Holdings: true, HoldingSent: true,
			Sightings: []sighting{{ID: "n1", Age: time.Millisecond, Eligible: true, Settled: true, AliveFor: 3 * time.Second}, {ID: "n3", AliveFor: time.Millisecond}},
			Holding:   []netip.Addr{netip.MustParseAddr("192.0.2.200"), netip.MustParseAddr("2001:db8::200")},
		}, heartbeat{}},
		{"no held addresses sent, the flag still is", heartbeat{ID: "n2", Holdings: true}, heartbeat{}},
		{"held addresses that do not fit are left out", heartbeat{ID: "n2", Holdings: true, HoldingSent: true, Holding: manyAddrs(maxDatagram / 17)},
			heartbeat{ID: "n2", Holdings: true}},
		{"sub-microsecond ages are truncated", heartbeat{ID: "n1", Sightings: []sighting{{ID: "n2", Age: 1500 * time.Nanosecond}}},
			heartbeat{ID: "n1", Sightings: []sighting{{ID: "n2", Age: time.Microsecond}}}},
		{"partly ready addresses", heartbeat{ID: "n2", Holdings: true, HoldingSent: true, ReadsPartly: true, PartlySent: true,
			NotReady: []netip.Addr{netip.MustParseAddr("10.0.0.100"), netip.MustParseAddr("10.0.0.101")},
			Partly:   []netip.Addr{netip.MustParseAddr("10.0.0.100")}}, heartbeat{}},
		{"tenant sets", heartbeat{ID: "n2", Holdings: true, HoldingSent: true, ReadsPartly: true, PartlySent: true, ReadsTenants: true, TenantsSent: true,
			NotReady: []netip.Addr{netip.MustParseAddr("10.0.0.100")},
			Partly:   []netip.Addr{netip.MustParseAddr("10.0.0.100")},
			Tenants: []tenantSet{
				mustSet(netip.MustParseAddr("10.0.0.100"), []string{"ta", "tb", "tc"}, "ta"),
				mustSet(netip.MustParseAddr("10.0.0.101"), []string{"ta", "tb"}, "ta", "tb"),
				mustSet(netip.MustParseAddr("2001:db8::101"), manyTenants(20), "t00", "t07", "t08", "t19"),
			}}, heartbeat{}},
		{"no tenant sets, the flag still is", heartbeat{ID: "n2", Holdings: true, HoldingSent: true, ReadsPartly: true, PartlySent: true, ReadsTenants: true},
			heartbeat{}},
		{"tenant sets that do not fit are left out", heartbeat{ID: "n2", Holdings: true, HoldingSent: true, ReadsPartly: true, PartlySent: true, TenantsSent: true,
			Tenants: manySets(maxDatagram / 12)}, heartbeat{ID: "n2", Holdings: true, HoldingSent: true, ReadsPartly: true, PartlySent: true}},
		{"tenant sets go only after the partly ready addresses", heartbeat{ID: "n2", Holdings: true, HoldingSent: true, TenantsSent: true,
			Tenants: manySets(1)}, heartbeat{ID: "n2", Holdings: true, HoldingSent: true}},
		{"partly ready addresses that do not fit are left out", heartbeat{ID: "n2", Holdings: true, HoldingSent: true, ReadsPartly: true, PartlySent: true,
			Partly: manyAddrs(maxDatagram / 17)}, heartbeat{ID: "n2", Holdings: true, HoldingSent: true, ReadsPartly: true}},
		{"a list that does not fit becomes not-ready-for-all", heartbeat{ID: "n1", NotReady: manyAddrs(maxDatagram / 17)},
			heartbeat{ID: "n1", NotReadyAll: true}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b, err := tt.hb.marshal(testKey, tt.hb.HoldingSent)
			if err != nil {
				t.Fatal(err)
			}
			if len(b) > maxDatagram {
				t.Fatalf("%d bytes, more than %d", len(b), maxDatagram)
			}
			got, err := parseHeartbeat(b, testKey)
			if err != nil {
				t.Fatal(err)
			}
			want := tt.hb
			if tt.want.ID != "" {
				want = tt.want
			}
			if !reflect.DeepEqual(*got, want) {
				t.Errorf("round trip:\n got %+v\nwant %+v", *got, want)
			}
		})
	}
}

// mustSet is the tenant set of a among spaces that carries it for the
// tenants of served.
func mustSet(a netip.Addr, spaces []string, served ...string) tenantSet {
	unserved := map[string]string{}
	for _, t := range spaces {
		if !slices.Contains(served, t) {
			unserved[t] = "down"
		}
	}
	s, ok := newTenantSet(a, spaces, unserved)
	if !ok {
		panic("no set")
	}
	return s
}

func manyTenants(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("t%02d", i)
	}
	return out
}

// manySets returns n tenant sets of IPv4 addresses shared by two tenants
// (12 bytes each on the wire).
func manySets(n int) []tenantSet {
	out := make([]tenantSet, n)
	a := netip.MustParseAddr("10.0.0.0")
	for i := range out {
		a = a.Next()
		out[i] = mustSet(a, []string{"ta", "tb"}, "tb")
	}
	return out
}

func manyAddrs(n int) []netip.Addr {
	out := make([]netip.Addr, n)
	a := netip.MustParseAddr("2001:db8::")
	for i := range out {
		a = a.Next()
		out[i] = a
	}
	return out
}

func TestHeartbeatRejects(t *testing.T) {
	good, err := (&heartbeat{ID: "n1", Seq: 1, NotReady: []netip.Addr{netip.MustParseAddr("192.0.2.1")}}).marshal(testKey, false)
	if err != nil {
		t.Fatal(err)
	}
	body := good[:len(good)-macSize]
	signed := func(body []byte) []byte { return append(append([]byte{}, body...), sign(testKey, body)...) }
	resign := func(b []byte) []byte { return signed(b[:len(b)-macSize]) }
	tests := []struct {
		name string
		b    []byte
		key  []byte
		want string
	}{
		{"empty", nil, testKey, "too short"},
		{"another key", good, []byte("other"), "signature"},
		{"flipped bit", func() []byte { b := append([]byte{}, good...); b[20] ^= 1; return b }(), testKey, "signature"},
		{"not ours", resign(append([]byte("XXXX"), good[4:]...)), testKey, "not a teapot-lb heartbeat"},
		{"future version", func() []byte { b := append([]byte{}, good...); b[4] = 9; return resign(b) }(), testKey, "version 9"},
		{"truncated", signed(body[:len(body)-2]), testKey, ""},
		{"times heard that do not match", signed(append(append([]byte{}, body...), 0, 0, 2)), testKey, "do not match"},
		{"trailing bytes after the tenant sets", signed(append(append([]byte{}, body...), 0, 0, 0, 0, 0, 0, 0, 9)), testKey, "trailing bytes"},
		{"tenant sets cut short", signed(append(append([]byte{}, body...), 0, 0, 0, 0, 0, 9)), testKey, "truncated"},
		{"a tenant set of another address length", signed(append(append([]byte{}, body...), 0, 0, 0, 0, 0, 0, 1, 5, 1, 2, 3, 4, 5, 0, 0, 0, 0, 0, 0)), testKey, "4 or 16"},
		{"a tenant set with bits past its tenants", signed(append(append([]byte{}, body...), 0, 0, 0, 0, 0, 0, 1, 4, 10, 0, 0, 1, 1, 2, 3, 4, 0, 3, 0x09)), testKey, "bits set past"},
		{"a tenant set without its bits", signed(append(append([]byte{}, body...), 0, 0, 0, 0, 0, 0, 1, 4, 10, 0, 0, 1, 1, 2, 3, 4, 0, 9, 0xff)), testKey, "truncated"},
		{"a partly ready address of another length", signed(append(append([]byte{}, body...), 0, 0, 0, 0, 1, 5, 1, 2, 3, 4, 5)), testKey, "4 or 16"},
		{"partly ready addresses of a host not ready for any", func() []byte {
			b := append(append([]byte{}, body...), 0, 0, 0, 0, 1, 4, 10, 0, 0, 1)
			b[5] |= flagNotReady
			return signed(b)
		}(), testKey, "not ready for any"},
		{"an empty node id in a sighting", func() []byte {
			b := (&heartbeat{ID: "n1"}).appendTo(nil, false, false, false)
			b = append(b[:len(b)-3:len(b)-3], 1, 0, 0, 0, 0, 0, 0, 0, 0) // one sighting, no id; no not-ready address
			return signed(b)
		}(), testKey, "empty node id in a sighting"},
		{"too long", signed(make([]byte, maxDatagram)), testKey, "too long"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := parseHeartbeat(tt.b, tt.key)
			if !errors.Is(err, errBadHeartbeat) {
				t.Fatalf("err = %v, want errBadHeartbeat", err)
			}
			if tt.want != "" && !strings.Contains(err.Error(), tt.want) {
				t.Errorf("err = %v, want it to mention %q", err, tt.want)
			}
		})
	}
}

// FuzzParseHeartbeat: the parser never panics, and whatever it accepts
// encodes back to the same bytes.
func FuzzParseHeartbeat(f *testing.F) {
	for _, hb := range []heartbeat{
		{ID: "n1"},
		{ID: "n2", Eligible: true, Sightings: []sighting{{ID: "n1", Age: time.Millisecond}}, NotReady: []netip.Addr{netip.MustParseAddr("2001:db8::1")}},
		{ID: "n3", Eligible: true, Holdings: true, ReadsPartly: true, PartlySent: true, Sightings: []sighting{{ID: "n1", Age: time.Millisecond}},
			NotReady: []netip.Addr{netip.MustParseAddr("10.0.0.1"), netip.MustParseAddr("2001:db8::1")},
			Partly:   []netip.Addr{netip.MustParseAddr("2001:db8::1")}},
		{ID: "n4", Eligible: true, Holdings: true, ReadsPartly: true, PartlySent: true, ReadsTenants: true, TenantsSent: true,
			NotReady: []netip.Addr{netip.MustParseAddr("10.0.0.1")}, Partly: []netip.Addr{netip.MustParseAddr("10.0.0.1")},
			Tenants: []tenantSet{mustSet(netip.MustParseAddr("10.0.0.1"), manyTenants(10), "t03", "t09"),
				mustSet(netip.MustParseAddr("2001:db8::1"), []string{"ta", "tb"})}},
	} {
		b, _ := hb.marshal(testKey, false)
		f.Add(b)
		b, _ = hb.marshal(testKey, true)
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		// Sign whatever the fuzzer made, so that it reaches the decoder.
		if len(b) >= macSize {
			b = append(b[:len(b)-macSize:len(b)-macSize], sign(testKey, b[:len(b)-macSize])...)
		}
		hb, err := parseHeartbeat(b, testKey)
		if err != nil {
			return
		}
		again, err := hb.marshal(testKey, hb.HoldingSent)
		if err != nil {
			t.Fatalf("accepted %+v but cannot encode it: %v", hb, err)
		}
		hb2, err := parseHeartbeat(again, testKey)
		if err != nil || !reflect.DeepEqual(hb, hb2) {
			t.Fatalf("re-encoding changed the heartbeat: %+v -> %+v (%v)", hb, hb2, err)
		}
	})
}

func TestArrivalUsesTheKernelStamp(t *testing.T) {
	now := time.Now()
	stamp := func(at time.Time) []byte {
		b := make([]byte, unix.CmsgSpace(16))
		h := (*unix.Cmsghdr)(unsafe.Pointer(&b[0]))
		h.Level, h.Type = unix.SOL_SOCKET, unix.SCM_TIMESTAMPNS
		h.SetLen(unix.CmsgLen(16))
		binary.NativeEndian.PutUint64(b[unix.CmsgLen(0):], uint64(at.Unix()))
		binary.NativeEndian.PutUint64(b[unix.CmsgLen(0)+8:], uint64(at.Nanosecond()))
		return b
	}
	tests := []struct {
		name string
		oob  []byte
		want time.Duration // before now
	}{
		{"no stamp", nil, 0},
		{"stamped 150ms before the read", stamp(now.Add(-150 * time.Millisecond)), 150 * time.Millisecond},
		{"a stamp from the future is ignored", stamp(now.Add(time.Second)), 0},
		{"garbage", []byte{1, 2, 3}, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := now.Sub(arrival(now, tt.oob))
			if d := got - tt.want; d < -time.Millisecond || d > time.Millisecond {
				t.Errorf("arrival is %s before the read, want %s", got, tt.want)
			}
		})
	}
}

// TestHeldPartWithoutPartlyReadyAddresses: the held part as a host of the
// previous version sends it (no partly ready addresses after it) is read,
// with none; a peer that does not read them is not sent them.
func TestHeldPartWithoutPartlyReadyAddresses(t *testing.T) {
	a := netip.MustParseAddr("10.0.0.100")
	hb := heartbeat{ID: "n2", Holdings: true, Holding: []netip.Addr{a}, NotReady: []netip.Addr{a}, Partly: []netip.Addr{a}}
	for _, withPartly := range []bool{false, true} {
		b := hb.appendTo(nil, true, withPartly, false)
		got, err := parseHeartbeat(append(b, sign(testKey, b)...), testKey)
		if err != nil {
			t.Fatal(err)
		}
		if !got.HoldingSent || !slices.Equal(got.Holding, hb.Holding) || got.PartlySent != withPartly || (len(got.Partly) == 1) != withPartly {
			t.Errorf("with partly %t: %+v", withPartly, got)
		}
	}
}

// BenchmarkHeartbeatTenantSets encodes the heartbeat of a host with 100
// partly ready IPv4 addresses, each shared by 2 or by 20 tenants, with and
// without their tenant sets (the beat thread's work for one datagram, its
// signature apart), and reports its size.
func BenchmarkHeartbeatTenantSets(b *testing.B) {
	for _, tenants := range []int{2, 20} {
		hb := heartbeat{ID: "lb-host-1", Eligible: true, Holdings: true, ReadsPartly: true, PartlySent: true, ReadsTenants: true, TenantsSent: true,
			Sightings: []sighting{{ID: "lb-host-2"}, {ID: "lb-host-3"}}}
		a := netip.MustParseAddr("10.0.0.0")
		for range 100 {
			a = a.Next()
			hb.NotReady, hb.Partly = append(hb.NotReady, a), append(hb.Partly, a)
			hb.Tenants = append(hb.Tenants, mustSet(a, manyTenants(tenants), "t01"))
		}
		for _, sets := range []bool{false, true} {
			b.Run(fmt.Sprintf("tenants=%d/sets=%t", tenants, sets), func(b *testing.B) {
				buf := make([]byte, 0, maxDatagram)
				var n int
				b.ReportAllocs()
				for b.Loop() {
					n = len(hb.appendTo(buf[:0], true, true, sets))
				}
				b.ReportMetric(float64(n), "bytes")
			})
		}
	}
}

// TestNotReadyListWithBGPAddresses: the bgp VIPs a host is not ready for
// go into its not-ready list after the arp ones, and a reader gets both
// in one list, as a host of an earlier version reads it. When they would
// crowd out another part (here the held addresses), they are left out and
// so are the tenant sets, which tell a reader that the list is whole; the
// arp part reads as without them.
func TestNotReadyListWithBGPAddresses(t *testing.T) {
	arp := manyAddrs(2)
	held := manyAddrs(302)[2:]
	set := mustSet(arp[0], manyTenants(2), "t01")
	for _, tc := range []struct {
		name     string
		bgp      int
		fits     bool
		withSets bool
	}{
		{"a few", 50, true, true},
		{"a few, to a peer that reads no sets", 50, true, false},
		{"too many next to the held addresses", 200, false, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			bgp := manyAddrs(2000)[1000 : 1000+tc.bgp]
			hb := heartbeat{ID: "n1", Eligible: true, Holdings: true, ReadsPartly: true, ReadsTenants: true,
				NotReady: arp, NotReadyBGP: bgp, Holding: held, Partly: arp[:1], PartlySent: true, Tenants: []tenantSet{set}, TenantsSent: true}
			b, sent := hb.appendParts(nil, true, true, tc.withSets)
			if sent.NotReadyAll || !sent.Holding || !sent.Partly || sent.BGP != tc.fits || sent.Tenants != (tc.fits && tc.withSets) {
				t.Fatalf("sent %+v; want the bgp addresses in: %t", sent, tc.fits)
			}
			got, err := parseHeartbeat(append(b, sign(testKey, b)...), testKey)
			if err != nil {
				t.Fatal(err)
			}
			want := arp
			if tc.fits {
				want = append(slices.Clone(arp), bgp...)
			}
			if got.NotReadyAll || !slices.Equal(got.NotReady, want) || !slices.Equal(got.Holding, held) || !slices.Equal(got.Partly, arp[:1]) ||
				got.TenantsSent != (tc.fits && tc.withSets) {
				t.Fatalf("read not ready for all %t, %d not ready (want %d), %d held, partly %v, sets sent %t",
					got.NotReadyAll, len(got.NotReady), len(want), len(got.Holding), got.Partly, got.TenantsSent)
			}
		})
	}
}
