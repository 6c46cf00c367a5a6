// Package netnstest runs a test's code in a network namespace of its
// own, whose loopback holds the addresses the test asks for.
package netnstest

import (
	"os"
	"runtime"
	"testing"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// Run runs fn on a thread of its own in a new network namespace whose
// loopback is up and holds addrs (prefixes, "192.0.2.1/32"). Sockets fn
// opens on its goroutine are in that namespace; other goroutines' are
// not. The thread is thrown away afterwards. It skips the test when not
// root.
func Run(t *testing.T, addrs []string, fn func()) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root to create a network namespace")
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		runtime.LockOSThread() // never unlocked: the thread dies with the goroutine
		if err := unix.Unshare(unix.CLONE_NEWNET); err != nil {
			t.Errorf("unshare: %v", err)
			return
		}
		lo, err := netlink.LinkByName("lo")
		if err == nil {
			err = netlink.LinkSetUp(lo)
		}
		for _, a := range addrs {
			if err != nil {
				break
			}
			var na *netlink.Addr
			if na, err = netlink.ParseAddr(a); err == nil {
				na.Flags = unix.IFA_F_NODAD
				err = netlink.AddrAdd(lo, na)
			}
		}
		if err != nil {
			t.Errorf("set up the namespace: %v", err)
			return
		}
		fn()
	}()
	<-done
}
