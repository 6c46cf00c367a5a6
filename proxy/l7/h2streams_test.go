package l7

import (
	"io"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

// testStreams is a tenant's bound on streams in flight.
type testStreams struct {
	limit                   int64
	n, peak, taken, refused atomic.Int64
}

func (s *testStreams) TakeStream() bool {
	for {
		v := s.n.Load()
		if v >= s.limit {
			s.refused.Add(1)
			return false
		}
		if s.n.CompareAndSwap(v, v+1) {
			s.taken.Add(1)
			for p := s.peak.Load(); v+1 > p && !s.peak.CompareAndSwap(p, v+1); p = s.peak.Load() {
			}
			return true
		}
	}
}

func (s *testStreams) ReleaseStream() { s.n.Add(-1) }

// sendGets opens n GET streams to path on h, from stream id first.
func sendGets(t *testing.T, h *h2raw, first uint32, n int, path string) {
	t.Helper()
	h.hb.Reset()
	for _, f := range [][2]string{{":method", "GET"}, {":scheme", "https"}, {":authority", "x"}, {":path", path}} {
		_ = h.enc.WriteField(hpack.HeaderField{Name: f[0], Value: f[1]})
	}
	blk := append([]byte(nil), h.hb.Bytes()...)
	for i := range n {
		id := first + 2*uint32(i)
		if err := h.write(func(fr *http2.Framer) error {
			return fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: blk, EndStream: true, EndHeaders: true})
		}); err != nil {
			t.Fatal(err)
		}
	}
}

// TestH2TenantStreamBound: a tenant's HTTP/2 streams in flight, over all
// its connections, are bounded by ConnInfo.Streams. Three connections of
// tenant t open 4 slow streams each against a bound of 6: 6 reach the
// member, the other 6 are refused (REFUSED_STREAM) as their HEADERS are
// read, without a handler or a worker goroutine, and the connections
// stay open. Another tenant's connection is served meanwhile. When the
// slow streams finish the bound is free again.
//
// Not parallel: it counts the stream workers of the whole process, which
// the package's parallel HTTP/2 tests would add to (as
// TestH2IdleConnectionKeepsFewWorkers).
func TestH2TenantStreamBound(t *testing.T) {
	const limit, conns, perConn = 6, 3, 4
	var inflight, peak atomic.Int64
	release := make(chan struct{})
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/slow" {
			n := inflight.Add(1)
			defer inflight.Add(-1)
			for p := peak.Load(); n > p && !peak.CompareAndSwap(p, n); p = peak.Load() {
			}
			<-release
		}
		_, _ = io.WriteString(w, "ok")
	})
	defer func() {
		select {
		case <-release:
		default:
			close(release)
		}
	}()
	be := newBackend(t, backendServer(t, h))
	srv := New(Config{})
	tlsCfg := selfSigned(t)
	router := oneRoute(be)
	bt, bu := &testStreams{limit: limit}, &testStreams{limit: limit}
	addrT := proxyUnderInfo(t, srv, ConnInfo{Listener: "t", LB: "t/lb", Tenant: "t", Router: func() Router { return router }, Streams: bt}, tlsCfg)
	addrU := proxyUnderInfo(t, srv, ConnInfo{Listener: "u", LB: "u/lb", Tenant: "u", Router: func() Router { return router }, Streams: bu}, tlsCfg)

	workers0 := h2Workers()
	var hs []*h2raw
	for range conns {
		c := dialH2(t, addrT)
		hs = append(hs, c)
		sendGets(t, c, 1, perConn, "/slow")
	}
	refused := func() int64 {
		var n int64
		for _, c := range hs {
			n += c.refuse.Load()
		}
		return n
	}
	waitUntil(t, 10*time.Second, "6 streams run and 6 are refused", func() bool {
		return inflight.Load() == limit && refused() == conns*perConn-limit
	})
	if got := h2Workers() - workers0; got > limit {
		t.Errorf("%d stream workers run for %d streams admitted: the refused streams got goroutines", got, limit)
	}
	if bt.refused.Load() != conns*perConn-limit {
		t.Errorf("the bound refused %d streams, want %d", bt.refused.Load(), conns*perConn-limit)
	}

	// Tenant u is not charged for t's streams.
	cu := dialH2(t, addrU)
	sendGets(t, cu, 1, 1, "/")
	waitUntil(t, 10*time.Second, "tenant u's request is answered", func() bool {
		v, ok := cu.status.Load(uint32(1))
		return ok && v == "200"
	})
	if cu.refuse.Load() != 0 || bu.refused.Load() != 0 {
		t.Errorf("tenant u's stream was refused while tenant t was at its bound")
	}

	close(release)
	waitUntil(t, 10*time.Second, "t's streams are released", func() bool { return bt.n.Load() == 0 })
	// The bound is free again: a new stream on a connection that had
	// refusals is served.
	sendGets(t, hs[0], 1+2*perConn, 1, "/")
	waitUntil(t, 10*time.Second, "t's next request is answered", func() bool {
		v, ok := hs[0].status.Load(uint32(1 + 2*perConn))
		return ok && v == "200"
	})
	if p := peak.Load(); p > limit {
		t.Errorf("the member saw %d of t's requests at once, bound %d", p, limit)
	}
	if p := bt.peak.Load(); p > limit {
		t.Errorf("t had %d streams in flight, bound %d", p, limit)
	}
	for i, c := range hs {
		if g := c.goAway.Load(); g != 0 {
			t.Errorf("connection %d got a GOAWAY (code+1 %d): a refusal within the reset budget must not end it", i, g)
		}
	}
}
