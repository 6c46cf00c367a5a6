package l7

import (
	"testing"
)

// TestTLSReadsPerRequest is TestProxyReadsPerRequest over TLS: with
// ClientTransport under the TLS connection, the proxy waits for a keep-
// alive client's next request as it does on bare TCP, and makes the same
// two read(2) calls per request (the member's response, the client's
// request) where reading through net.Conn makes a third that finds
// nothing. The client's and the member's reads are those of the same
// exchange without the proxy, over cleartext.
func TestTLSReadsPerRequest(t *testing.T) {
	member := rawBackend(t, rawResponse)
	be := newBackend(t, member)
	ours := tlsProxy(t, New(Config{}), oneRoute(allocFree{be}), false).addr
	plain := tlsProxy(t, New(Config{}), oneRoute(allocFree{be}), true).addr
	const n = 2000
	perRequest := func(rc *rawClient) float64 {
		for range 20 {
			rc.do(t)
		}
		r0 := readSyscalls(t)
		for range n {
			rc.do(t)
		}
		return float64(readSyscalls(t)-r0) / n
	}
	tlsClient := func(addr string) *rawClient {
		return &rawClient{c: dialTLS(t, addr, nil), req: []byte(benchRequest), buf: make([]byte, 64<<10), want: len(rawResponse)}
	}
	dc, oc, pc := newRawClient(t, member, benchRequest, len(rawResponse)), tlsClient(ours), tlsClient(plain)
	direct, viaOurs, viaPlain := 1e9, 1e9, 1e9
	for range 3 {
		direct = min(direct, perRequest(dc))
		viaOurs = min(viaOurs, perRequest(oc))
		viaPlain = min(viaPlain, perRequest(pc))
	}
	t.Logf("read(2) per request: %.2f direct; by the proxy over TLS %.2f, %.2f reading through net.Conn",
		direct, viaOurs-direct, viaPlain-direct)
	if p := viaOurs - direct; p > 2.5 {
		t.Errorf("the proxy makes %.2f read(2) calls per HTTPS request, want 2 (the response once, the request once)", p)
	}
}
