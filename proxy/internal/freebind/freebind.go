// Package freebind lets a socket bind an address this host does not hold
// (yet): a VIP is opened on every host before it is announced on one.
package freebind

import (
	"fmt"
	"syscall"

	"golang.org/x/sys/unix"
)

// Control is a net.ListenConfig Control that sets IPV6_FREEBIND on IPv6
// sockets (IP_FREEBIND where the kernel lacks it) and IP_FREEBIND on IPv4
// ones.
func Control(network, _ string, c syscall.RawConn) error {
	var serr error
	err := c.Control(func(fd uintptr) {
		if network == "tcp6" || network == "udp6" {
			serr = unix.SetsockoptInt(int(fd), unix.SOL_IPV6, unix.IPV6_FREEBIND, 1)
			if serr == nil {
				return
			}
		}
		serr = unix.SetsockoptInt(int(fd), unix.SOL_IP, unix.IP_FREEBIND, 1)
	})
	if err != nil {
		return err
	}
	if serr != nil {
		return fmt.Errorf("set IP_FREEBIND: %w", serr)
	}
	return nil
}
