package vip

import (
	"errors"
	"net"
	"net/netip"
	"os"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/mdlayher/packet"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

func TestMissingCaps(t *testing.T) {
	both := map[int]string{capNetAdmin: "CAP_NET_ADMIN", capNetRaw: "CAP_NET_RAW"}
	tests := []struct {
		name   string
		status string
		want   []string
		err    bool
	}{
		{"root", "Name:\tx\nCapEff:\t000001ffffffffff\n", nil, false},
		{"nothing", "CapEff:\t0000000000000000\n", []string{"CAP_NET_ADMIN", "CAP_NET_RAW"}, false},
		{"admin only", "CapEff:\t0000000000001000\n", []string{"CAP_NET_RAW"}, false},
		{"both", "CapEff:\t0000000000003000\n", nil, false},
		{"no line", "Name:\tx\n", nil, true},
		{"garbage", "CapEff:\tzz\n", nil, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := missingCaps(tt.status, both)
			if (err != nil) != tt.err || !slices.Equal(got, tt.want) {
				t.Errorf("missingCaps = %v, %v; want %v (error %t)", got, err, tt.want, tt.err)
			}
		})
	}
}

// inNetns runs fn on a thread of its own in a new network namespace with
// a veth pair v0-v1, both up. The thread is thrown away afterwards.
func inNetns(t *testing.T, fn func()) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root to create a network namespace")
	}
	done := make(chan struct{})
	var setupErr error
	go func() {
		defer close(done)
		runtime.LockOSThread() // never unlocked: the thread dies with the goroutine
		if setupErr = unix.Unshare(unix.CLONE_NEWNET); setupErr != nil {
			return
		}
		veth := &netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: "v0"}, PeerName: "v1"}
		if setupErr = netlink.LinkAdd(veth); setupErr != nil {
			return
		}
		for _, n := range []string{"v0", "v1", "lo"} {
			l, err := netlink.LinkByName(n)
			if err == nil {
				err = netlink.LinkSetUp(l)
			}
			if err != nil {
				setupErr = err
				return
			}
		}
		// Frames sent before the carrier is up are dropped.
		for range 200 {
			l, err := netlink.LinkByName("v0")
			if err == nil && l.Attrs().OperState == netlink.OperUp {
				break
			}
			time.Sleep(10 * time.Millisecond)
		}
		fn()
	}()
	<-done
	if setupErr != nil {
		t.Skipf("cannot set up a network namespace: %v", setupErr)
	}
}

func TestIfaceAddsMarkedAddresses(t *testing.T) {
	inNetns(t, func() {
		f := iface{name: "v0"}
		v4, v6 := netip.MustParseAddr("192.0.2.10"), netip.MustParseAddr("2001:db8::10")
		l, _ := netlink.LinkByName("v0")
		foreign, _ := netlink.ParseAddr("192.0.2.99/32")
		if err := netlink.AddrAdd(l, foreign); err != nil {
			t.Fatal(err)
		}
		for _, a := range []netip.Addr{v4, v6} {
			if err := f.add(a); err != nil {
				t.Fatal(err)
			}
			if err := f.add(a); err != nil {
				t.Fatalf("renewing %s: %v", a, err)
			}
		}
		got, err := f.hostAddrs()
		if err != nil {
			t.Fatal(err)
		}
		if !got[v4] || !got[v6] {
			t.Errorf("our addresses not recognised as ours: %v", got)
		}
		if ours, ok := got[netip.MustParseAddr("192.0.2.99")]; !ok || ours {
			t.Errorf("an address added by hand: listed %t, ours %t; want listed and not ours", ok, ours)
		}
		list, _ := netlink.AddrList(l, netlink.FAMILY_ALL)
		for _, na := range list {
			if na.IP.Equal(v4.AsSlice()) && (na.Label != "v0:vip" || na.ValidLft > int(leaseTime/time.Second)) {
				t.Errorf("%s: label %q valid %ds", v4, na.Label, na.ValidLft)
			}
			if na.IP.Equal(v6.AsSlice()) && na.Flags&unix.IFA_F_DEPRECATED == 0 {
				t.Errorf("%s is not deprecated (flags %#x): the kernel may pick it as a source address", v6, na.Flags)
			}
		}
		for _, a := range []netip.Addr{v4, v6} {
			if err := f.remove(a); err != nil {
				t.Fatal(err)
			}
			if err := f.remove(a); err != nil {
				t.Fatalf("removing %s twice: %v", a, err)
			}
		}
		got, _ = f.hostAddrs()
		if _, ok := got[v4]; ok {
			t.Errorf("%s still there after remove", v4)
		}
		if up, err := f.up(); err != nil || !up {
			t.Errorf("up = %t, %v", up, err)
		}
		if err := (iface{name: "nope"}).add(v4); err == nil || !strings.Contains(err.Error(), "interface nope") {
			t.Errorf("add on a missing interface: %v", err)
		}
	})
}

func TestSenderPutsAnnouncementsOnTheWire(t *testing.T) {
	inNetns(t, func() {
		ifi, err := net.InterfaceByName("v1")
		if err != nil {
			t.Fatal(err)
		}
		capture, err := packet.Listen(ifi, packet.Raw, unix.ETH_P_ALL, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer capture.Close()
		s := &sender{name: "v0"}
		defer s.close()
		v4, v6 := netip.MustParseAddr("192.0.2.10"), netip.MustParseAddr("2001:db8::10")
		for _, a := range []netip.Addr{v4, v6} {
			if err := s.send(a); err != nil {
				t.Fatal(err)
			}
		}
		want := map[uint16]int{etherTypeARP: 2, etherTypeIPv6: 1}
		got := map[uint16]int{}
		buf := make([]byte, 1500)
		deadline := time.Now().Add(2 * time.Second)
		for got[etherTypeARP] < 2 || got[etherTypeIPv6] < 1 {
			_ = capture.SetReadDeadline(deadline)
			n, _, err := capture.ReadFrom(buf)
			if errors.Is(err, os.ErrDeadlineExceeded) {
				break
			}
			if err != nil {
				t.Fatal(err)
			}
			f := buf[:n]
			switch {
			case len(f) >= 42 && f[12] == 0x08 && f[13] == 0x06 && netip.AddrFrom4([4]byte(f[28:32])) == v4:
				got[etherTypeARP]++
			case len(f) >= 54 && f[12] == 0x86 && f[13] == 0xdd && netip.AddrFrom16([16]byte(f[22:38])) == v6:
				got[etherTypeIPv6]++
			}
		}
		if got[etherTypeARP] != want[etherTypeARP] || got[etherTypeIPv6] != want[etherTypeIPv6] {
			t.Errorf("captured %v frames by ethertype, want %v", got, want)
		}
	})
}
