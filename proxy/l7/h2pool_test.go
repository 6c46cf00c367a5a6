package l7

import (
	"io"
	"math/rand/v2"
	"net"
	"testing"
	"time"

	"golang.org/x/net/http2"
)

// TestH2ResetLeavesPoolUsable resets streams at random points of their
// exchange (the request on its way, the member answering, the response
// being relayed) while another connection sends requests to the same
// member. A reset sets the deadlines of the stream's member connection in
// the past, behind the deadlines the connection records, so a connection
// it touched must not go back to the pool: the next request taking it
// would time out at once. Every request of the other connection is
// answered 200.
func TestH2ResetLeavesPoolUsable(t *testing.T) {
	be := newBackend(t, rawBackend(t, rawResponse))
	addr := proxyUnder(t, New(Config{H2MaxResetsPerSecond: 1 << 20, H2ResetBurst: 1 << 20}), oneRoute(be), selfSigned(t))
	h := dialH2(t, addr)
	client := h2TestClient()
	get := func(i int) {
		resp, err := client.Get("https://" + addr + "/")
		if err != nil {
			t.Fatalf("request %d: %v", i, err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Fatalf("request %d: status %d, want 200", i, resp.StatusCode)
		}
	}
	get(-1)
	for i := range 400 {
		id := uint32(2*i + 1)
		blk := h.block()
		if err := h.write(func(fr *http2.Framer) error {
			return fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: blk, EndStream: true, EndHeaders: true})
		}); err != nil {
			t.Fatal(err)
		}
		for d, t0 := time.Duration(rand.IntN(400))*time.Microsecond, time.Now(); time.Since(t0) < d; {
		}
		if err := h.write(func(fr *http2.Framer) error { return fr.WriteRSTStream(id, http2.ErrCodeCancel) }); err != nil {
			t.Fatal(err)
		}
		get(i)
	}
	if g := h.goAway.Load(); g != 0 {
		t.Fatalf("the resetting connection got GOAWAY code %d", g-1)
	}
}

// TestH2ResetMarksMemberConn checks the mark that keeps a member
// connection whose deadlines a reset moved out of the pool (the window
// between the end of a relay and the release of the connection is too
// short for TestH2ResetLeavesPoolUsable to hit reliably).
func TestH2ResetMarksMemberConn(t *testing.T) {
	a, b := net.Pipe()
	defer a.Close()
	defer b.Close()
	u := &upConn{nc: a}
	c := &h2Conn{}
	st := newH2Stream(c, 1)
	if err := st.attach(u); err != nil {
		t.Fatal(err)
	}
	if st.detach() {
		t.Fatal("a stream that was not reset reports its member connection cut")
	}
	if err := st.attach(u); err != nil {
		t.Fatal(err)
	}
	c.mu.Lock()
	st.abort(errStreamReset)
	c.mu.Unlock()
	if !st.detach() {
		t.Fatal("a stream reset while it used its member connection does not report it cut")
	}
	if _, err := a.Read(make([]byte, 1)); !isTimeout(err) {
		t.Fatalf("read on the cut connection: %v, want a timeout", err)
	}
}
