package dns

import (
	"context"
	"fmt"
	"net"
	"syscall"

	"golang.org/x/sys/unix"
)

// freebind lets a socket bind an address this host does not hold (yet):
// --dns-addr is typically a VIP, bound on every host before one holds it.
func freebind(network, _ string, c syscall.RawConn) error {
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

var listenConfig = net.ListenConfig{Control: freebind}

func listenPacket(addr string) (net.PacketConn, error) {
	return listenConfig.ListenPacket(context.Background(), "udp", addr)
}

func listenTCP(addr string) (net.Listener, error) {
	return listenConfig.Listen(context.Background(), "tcp", addr)
}
