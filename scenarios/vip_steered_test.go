package scenarios

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"strings"
	"testing"
	"time"
)

// TestVIPARPTenantSockets: with listen-sockets: tenant, the hosts open
// no socket on the VIPs' addresses (a BPF program steers them to the
// tenant's socket), the VIPs serve, and they keep serving when their
// holder's process crashes and when its host dies, as they do with a
// socket per listener.
func TestVIPARPTenantSockets(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: builds a network lab with a three-host cluster")
	}
	needTools(t)
	l := newVIPLab(t, labOptions{teapot: true, args: []string{"--listen-sockets", "tenant"}})
	for _, a := range []netip.Addr{arpVIP4, arpVIP6} {
		h := l.waitHolder(a, startTimeout)
		waitFor(t, settleTimeout, "a request through "+a.String(), func() error { return l.get(a) })
		t.Logf("%s held by %s and serving", a, h.id)
	}
	for _, n := range l.lbs {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		out, err := n.host.Exec(ctx, "ss", "-Htln")
		cancel()
		if err != nil {
			t.Fatalf("ss on %s: %v", n.id, err)
		}
		for _, a := range []netip.Addr{arpVIP4, arpVIP6} {
			if vip := netip.AddrPortFrom(a, 80).String(); strings.Contains(string(out), vip) {
				t.Errorf("%s listens on %s itself:\n%s", n.id, vip, out)
			}
		}
		log, err := os.ReadFile(n.logPath)
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(string(log), "listeners share a socket per tenant") {
			t.Errorf("%s does not say its listeners share a socket per tenant", n.id)
		}
	}
	for _, tc := range []struct {
		a      netip.Addr
		unplug bool
	}{{arpVIP4, false}, {arpVIP6, true}} {
		name := fmt.Sprintf("process crash %s", tc.a)
		if tc.unplug {
			name = fmt.Sprintf("host death %s", tc.a)
		}
		t.Run(name, func(t *testing.T) {
			l.failoverAndBack(t, tc.a, tc.unplug)
			waitFor(t, settleTimeout, "a request through "+tc.a.String(), func() error { return l.get(tc.a) })
		})
	}
}
