package dns

import (
	"context"
	"net"

	"github.com/teapot-lb/teapot-lb/proxy/internal/freebind"
)

var listenConfig = net.ListenConfig{Control: freebind.Control}

func listenPacket(addr string) (net.PacketConn, error) {
	return listenConfig.ListenPacket(context.Background(), "udp", addr)
}

func listenTCP(addr string) (net.Listener, error) {
	return listenConfig.Listen(context.Background(), "tcp", addr)
}
