//go:build !linux

package l7

import "net"

// rawAwait is Linux only: elsewhere a write is followed by a read.
type rawAwait struct{}

func newRawAwait(*net.TCPConn) *rawAwait { return nil }

func (a *rawAwait) writeRead(out, in []byte) (n int, rest []byte, rerr, werr error) {
	panic("unreachable: newRawAwait returns nil")
}
