package dns

import (
	"context"
	"errors"
	"net"
	"syscall"

	"github.com/teapot-lb/teapot-lb/proxy/internal/freebind"
)

var listenConfig = net.ListenConfig{Control: freebind.Control}

func listenPacket(addr string) (net.PacketConn, error) {
	return listenConfig.ListenPacket(context.Background(), "udp", addr)
}

func listenTCP(addr string) (net.Listener, error) {
	return listenConfig.Listen(context.Background(), "tcp", addr)
}

// listenBoth opens UDP and TCP on addr. For a port 0, TCP takes the port
// UDP got; when another socket holds that TCP port, both are opened again
// on another port (a few times).
func listenBoth(addr string) (net.PacketConn, net.Listener, error) {
	_, port, _ := net.SplitHostPort(addr)
	for attempt := 0; ; attempt++ {
		pc, err := listenPacket(addr)
		if err != nil {
			return nil, nil, err
		}
		ln, err := listenTCP(pc.LocalAddr().String())
		if err == nil {
			return pc, ln, nil
		}
		pc.Close()
		if port != "0" || !errors.Is(err, syscall.EADDRINUSE) || attempt == 8 {
			return nil, nil, err
		}
	}
}
