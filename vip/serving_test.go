package vip

import (
	"net/netip"
	"testing"
)

func TestServedSomewhere(t *testing.T) {
	t.Parallel()
	a := netip.MustParseAddr("192.0.2.10")
	arp := &record{spec: vipSpec{Addr: a, Mode: ModeARP}}
	bgp := &record{spec: vipSpec{Addr: a, Mode: ModeBGP}}
	held := &record{spec: vipSpec{Addr: a, Mode: ModeARP}, held: true}
	alive := func(h hostView) view { return view{Alive: map[string]hostView{"n2": h}} }
	holding := map[string]*peerState{"n2": {HoldingKnown: true, Holding: map[netip.Addr]bool{a: true}}}
	cases := []struct {
		name  string
		r     *record
		v     view
		peers map[string]*peerState
		want  bool
	}{
		{"held here", held, view{}, nil, true},
		{"arp: nobody holds it", arp, alive(hostView{Eligible: true}), map[string]*peerState{"n2": {HoldingKnown: true}}, false},
		{"arp: a live peer holds it", arp, alive(hostView{Eligible: true}), holding, true},
		{"arp: a dead peer held it", arp, view{}, holding, false},
		{"arp: a peer of an earlier release says nothing", arp, alive(hostView{Eligible: true}), map[string]*peerState{"n2": {}}, false},
		{"bgp: a live eligible peer announces it", bgp, alive(hostView{Eligible: true}), nil, true},
		{"bgp: the peer is not ready for it", bgp, alive(hostView{Eligible: true, NotReady: map[netip.Addr]bool{a: true}}), nil, false},
		{"bgp: the peer is not ready at all", bgp, alive(hostView{Eligible: true, NotReadyAll: true}), nil, false},
		{"bgp: the peer is not eligible", bgp, alive(hostView{}), nil, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			if got := servedSomewhere(a, tc.r, tc.v, tc.peers); got != tc.want {
				t.Fatalf("served %t, want %t", got, tc.want)
			}
		})
	}
}
