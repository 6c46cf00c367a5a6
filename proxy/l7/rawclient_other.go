//go:build !linux

package l7

import (
	"net"
	"syscall"
)

// rawConnOf is Linux only: elsewhere requests are read through net.Conn.
func rawConnOf(*net.TCPConn) syscall.RawConn { return nil }

func (c *clientConn) stepRaw(uintptr) bool {
	panic("unreachable: rawConnOf returns nil")
}

func writeRawClient(int, []byte) ([]byte, error) {
	panic("unreachable: rawConnOf returns nil")
}

func rawWriteError(err error) error { return err }

func (t *tlsTransport) Read(p []byte) (int, error) { return t.TCPConn.Read(p) }
