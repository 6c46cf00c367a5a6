package vip

import (
	"net/netip"
	"strings"
	"testing"

	"github.com/teapot-lb/teapot-lb/api/observe"
)

// decideReady is the decision of a one-host cluster with a majority on
// a VIP whose load balancer's readiness is ready.
func decideReady(vs vipSpec, ready string) decision {
	why := notReady(vs, map[string]string{"acme/web": ready}, true)
	me := self{ID: "n1", NotReady: map[netip.Addr]string{}}
	if why != "" {
		me.NotReady[vs.Addr] = why
	}
	v := view{Alive: map[string]hostView{}, Quorum: true}
	return decide(vs, []string{"n1"}, me, v, nil, dead, "")
}

// The rule on member health is the same in every mode: a load balancer
// whose members all fail (by their checks or by what clients get) keeps
// its VIP, held or announced; only a listener that is not open (a real
// problem of this host) releases it.
func TestMemberHealthKeepsVIPsInEveryMode(t *testing.T) {
	t.Parallel()
	a := netip.MustParseAddr("192.0.2.10")
	for _, mode := range []string{ModeARP, ModeBGP, ModeStatic} {
		for _, c := range []struct {
			name  string
			ready string
			hold  bool
		}{
			{"ready", "", true},
			{"no healthy member", observe.NoHealthyMember, true},
			{"recovering", observe.Recovering, true},
			{"listener not open", "listeners[0]: cannot listen on 192.0.2.10:80/tcp: address in use", false},
			{"no healthy member beside another problem", "listeners[0]: cannot listen; " + observe.NoHealthyMember, false},
		} {
			t.Run(mode+"/"+c.name, func(t *testing.T) {
				t.Parallel()
				// withdrawWhenDown means nothing outside bgp pools (and is
				// refused there by validation).
				for _, withdraw := range []bool{false, mode != ModeBGP} {
					vs := vipSpec{Addr: a, Mode: mode, LBs: []string{"acme/web"}, WithdrawWhenDown: withdraw}
					if d := decideReady(vs, c.ready); d.Hold != c.hold {
						t.Errorf("withdrawWhenDown %t: hold %t (%s), want %t", withdraw, d.Hold, d.Reason, c.hold)
					}
				}
			})
		}
	}
}

// withdrawWhenDown in a bgp pool withdraws the VIP while none of its
// load balancers' members is healthy and during the hold-down after one
// recovers, and announces it otherwise. A VIP shared by two load
// balancers stays announced while one of them has a healthy member.
func TestWithdrawWhenDownBGP(t *testing.T) {
	t.Parallel()
	vs := vipSpec{Addr: netip.MustParseAddr("192.0.2.10"), Mode: ModeBGP, LBs: []string{"acme/web"}, WithdrawWhenDown: true}
	for _, c := range []struct {
		ready string
		hold  bool
	}{
		{"", true},
		{observe.NoHealthyMember, false},
		{observe.Recovering, false},
	} {
		d := decideReady(vs, c.ready)
		if d.Hold != c.hold {
			t.Errorf("readiness %q: hold %t (%s), want %t", c.ready, d.Hold, d.Reason, c.hold)
		}
		if !c.hold && !strings.Contains(d.Reason, "withdrawWhenDown") {
			t.Errorf("readiness %q: reason %q does not name withdrawWhenDown", c.ready, d.Reason)
		}
	}
	shared := vs
	shared.LBs = []string{"acme/api", "acme/web"}
	ready := map[string]string{"acme/api": "", "acme/web": observe.NoHealthyMember}
	if why := notReady(shared, ready, true); why != "" {
		t.Errorf("shared VIP with one serving load balancer: not ready %q", why)
	}
	ready["acme/api"] = observe.Recovering
	if why := notReady(shared, ready, true); !strings.Contains(why, "acme/api") || !strings.Contains(why, "acme/web") {
		t.Errorf("shared VIP with none serving: %q", why)
	}
}
