package consensus

import (
	"io"
	"net/netip"
)

func ioNopCloser(r io.Reader) io.ReadCloser { return io.NopCloser(r) }

func mustAddr(s string) netip.Addr { return netip.MustParseAddr(s) }
