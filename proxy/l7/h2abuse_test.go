package l7

import (
	"bytes"
	"crypto/tls"
	"fmt"
	"io"
	"net/http"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

// h2raw is a hand-driven HTTP/2 client for abuse tests.
type h2raw struct {
	c      *tls.Conn
	fr     *http2.Framer
	wmu    sync.Mutex
	enc    *hpack.Encoder
	hb     bytes.Buffer
	done   chan struct{}
	goAway atomic.Int64 // code+1 of the first GOAWAY, 0 without one
	resets atomic.Int64 // RST_STREAM frames received
	refuse atomic.Int64 // of them REFUSED_STREAM
	calm   atomic.Int64 // of them ENHANCE_YOUR_CALM
	status sync.Map     // stream id -> :status
}

func dialH2(t testing.TB, addr string, settings ...http2.Setting) *h2raw {
	t.Helper()
	return dialH2With(t, addr, nil, settings...)
}

// dialH2With is dialH2 with on, when not nil, called with each frame
// read, on the reading goroutine.
func dialH2With(t testing.TB, addr string, on func(http2.Frame), settings ...http2.Setting) *h2raw {
	t.Helper()
	c, err := tls.Dial("tcp", addr, &tls.Config{InsecureSkipVerify: true, NextProtos: []string{"h2"}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	h := &h2raw{c: c, done: make(chan struct{})}
	h.enc = hpack.NewEncoder(&h.hb)
	if _, err := io.WriteString(c, http2.ClientPreface); err != nil {
		t.Fatal(err)
	}
	h.fr = http2.NewFramer(c, c)
	h.fr.ReadMetaHeaders = hpack.NewDecoder(4096, nil)
	if err := h.fr.WriteSettings(settings...); err != nil {
		t.Fatal(err)
	}
	go func() {
		defer close(h.done)
		for {
			f, err := h.fr.ReadFrame()
			if err != nil {
				if _, ok := err.(http2.StreamError); ok {
					continue
				}
				return
			}
			if on != nil {
				on(f)
			}
			switch f := f.(type) {
			case *http2.GoAwayFrame:
				h.goAway.CompareAndSwap(0, int64(f.ErrCode)+1)
			case *http2.RSTStreamFrame:
				h.resets.Add(1)
				switch f.ErrCode {
				case http2.ErrCodeRefusedStream:
					h.refuse.Add(1)
				case http2.ErrCodeEnhanceYourCalm:
					h.calm.Add(1)
				}
			case *http2.MetaHeadersFrame:
				h.status.Store(f.StreamID, f.PseudoValue("status"))
			}
		}
	}()
	_ = c.SetWriteDeadline(time.Now().Add(10 * time.Second))
	return h
}

// block encodes a GET request head, with extra fields.
func (h *h2raw) block(extra ...hpack.HeaderField) []byte {
	h.hb.Reset()
	for _, f := range [][2]string{{":method", "GET"}, {":scheme", "https"}, {":authority", "x"}, {":path", "/"}} {
		_ = h.enc.WriteField(hpack.HeaderField{Name: f[0], Value: f[1]})
	}
	for _, f := range extra {
		_ = h.enc.WriteField(f)
	}
	return bytes.Clone(h.hb.Bytes())
}

func (h *h2raw) write(f func(fr *http2.Framer) error) error {
	h.wmu.Lock()
	defer h.wmu.Unlock()
	// 10 s from now, not from the dial: a test may write again long
	// after it dialled (once a tenant's bound is reached, on a loaded
	// machine over 30 s later).
	_ = h.c.SetWriteDeadline(time.Now().Add(10 * time.Second))
	return f(h.fr)
}

// closedWith waits for the connection to end and returns the GOAWAY code
// it got; it fails the test without a GOAWAY or when the server does not
// close the connection.
func (h *h2raw) closedWith(t testing.TB, timeout time.Duration) http2.ErrCode {
	t.Helper()
	select {
	case <-h.done:
	case <-time.After(timeout):
		t.Fatalf("the connection is still open after %v (GOAWAY code+1: %d)", timeout, h.goAway.Load())
	}
	g := h.goAway.Load()
	if g == 0 {
		t.Fatal("connection closed without a GOAWAY")
	}
	return http2.ErrCode(g - 1)
}

// underAbuse runs attack over and over on new connections while a
// well-behaved HTTP/2 client sends requests, and checks that the client
// keeps its latency: every request answers, the median stays within ten
// times the median measured before (at least 250 ms: a loaded 2-core
// machine running the race detector stretches a quiet median) and none
// takes over 10 s. Goroutines return to their number before once it ends.
func underAbuse(t *testing.T, addr string, rounds int, attack func(t *testing.T)) {
	t.Helper()
	client := h2TestClient()
	measure := func(n int) []time.Duration {
		var d []time.Duration
		for range n {
			t0 := time.Now()
			resp, err := client.Get("https://" + addr + "/")
			if err != nil {
				t.Errorf("well-behaved client: %v", err)
				return d
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode != 200 {
				t.Errorf("well-behaved client: status %d", resp.StatusCode)
			}
			d = append(d, time.Since(t0))
		}
		return d
	}
	median := func(d []time.Duration) time.Duration {
		slices.Sort(d)
		return d[len(d)/2]
	}
	base := median(measure(50))
	before := h2Goroutines()

	stop := make(chan struct{})
	var lat []time.Duration
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			default:
			}
			lat = append(lat, measure(1)...)
		}
	}()
	var once sync.Once
	halt := func() { once.Do(func() { close(stop); wg.Wait() }) }
	defer halt() // also when an attack fails the test
	for range rounds {
		attack(t)
	}
	halt()
	if len(lat) < 5 {
		t.Fatalf("only %d requests of the well-behaved client finished during the attack", len(lat))
	}
	limit := max(10*base, 250*time.Millisecond)
	if m := median(lat); m > limit {
		t.Errorf("well-behaved client: median %v under attack, %v before (limit %v)", m, base, limit)
	}
	// The slowest request only has to finish: a loaded machine running
	// the race detector stretches single requests to seconds.
	if worst := lat[len(lat)-1]; worst > 10*time.Second {
		t.Errorf("well-behaved client: slowest request %v under attack", worst)
	}
	t.Logf("well-behaved client: %d requests, median %v (before %v), slowest %v", len(lat), median(lat), base, lat[len(lat)-1])
	client.CloseIdleConnections()
	deadline := time.Now().Add(10 * time.Second)
	for h2Goroutines() > before && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	if n := h2Goroutines(); n > before {
		buf := make([]byte, 1<<20)
		t.Errorf("%d goroutines of the HTTP/2 server after the attack, %d before:\n%s", n, before, buf[:runtime.Stack(buf, true)])
	}
}

// h2Goroutines counts the goroutines of the HTTP/2 server: connection
// readers and request handlers. Idle stream workers, which the server
// keeps up to its bound for any connection's next streams
// (TestH2IdleWorkersAreBounded), are not counted.
func h2Goroutines() int {
	buf := make([]byte, 4<<20)
	n := 0
	for _, g := range strings.Split(string(buf[:runtime.Stack(buf, true)]), "\n\n") {
		if strings.Contains(g, "l7.(*Server).h2Worker(") && !strings.Contains(g, "l7.(*h2Stream)") {
			continue
		}
		if strings.Contains(g, "l7.(*h2Conn)") || strings.Contains(g, "l7.(*h2Stream)") {
			n++
		}
	}
	return n
}

func abuseProxy(t *testing.T, cfg Config, h http.Handler) string {
	if h == nil {
		h = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { _, _ = io.WriteString(w, "ok") })
	}
	be := newBackend(t, backendServer(t, h))
	return proxyUnder(t, New(cfg), oneRoute(be), selfSigned(t))
}

func wantCode(t *testing.T, got, want http2.ErrCode) {
	t.Helper()
	if got != want {
		t.Fatalf("GOAWAY %v, want %v", got, want)
	}
}

// TestH2RapidResetGoAway opens and resets streams in a loop (CVE-2023-44487).
func TestH2RapidResetGoAway(t *testing.T) {
	addr := abuseProxy(t, Config{H2MaxResetsPerSecond: 50, H2ResetBurst: 100}, nil)
	underAbuse(t, addr, 3, func(t *testing.T) {
		h := dialH2(t, addr)
		blk := h.block()
		for id := uint32(1); id < 20000; id += 2 {
			err := h.write(func(fr *http2.Framer) error {
				if err := fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: blk, EndStream: true, EndHeaders: true}); err != nil {
					return err
				}
				return fr.WriteRSTStream(id, http2.ErrCodeCancel)
			})
			if err != nil {
				break
			}
		}
		wantCode(t, h.closedWith(t, 10*time.Second), http2.ErrCodeEnhanceYourCalm)
	})
}

// TestH2ContinuationFlood sends a header block that never ends, in empty
// CONTINUATION frames (CVE-2024-27316 and kin): they carry no bytes, so no
// size limit ever stops them.
func TestH2ContinuationFlood(t *testing.T) {
	if testing.Short() {
		t.Skip("a flood: make test runs it; -short (make test-quick) skips it")
	}
	addr := abuseProxy(t, Config{}, nil)
	underAbuse(t, addr, 5, func(t *testing.T) {
		h := dialH2(t, addr)
		blk := h.block()
		_ = h.write(func(fr *http2.Framer) error {
			if err := fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: blk[:2], EndStream: true}); err != nil {
				return err
			}
			for range 100000 {
				if err := fr.WriteContinuation(1, false, nil); err != nil {
					return err
				}
			}
			return nil
		})
		wantCode(t, h.closedWith(t, 10*time.Second), http2.ErrCodeEnhanceYourCalm)
	})
}

// TestH2HPACKBomb puts one 4 KiB field in the dynamic table and refers to
// it thousands of times, one byte each: a few KiB on the wire that decode
// to megabytes. The decoded list stops at MaxHeaderBytes (431), and a
// client that keeps doing it gets a GOAWAY.
func TestH2HPACKBomb(t *testing.T) {
	addr := abuseProxy(t, Config{MaxHeaderBytes: 16 << 10}, nil)
	underAbuse(t, addr, 3, func(t *testing.T) {
		h := dialH2(t, addr)
		big := hpack.HeaderField{Name: "x-bomb", Value: strings.Repeat("b", 4000)}
		var got431 bool
		for id := uint32(1); id < 200; id += 2 {
			blk := h.block(big) // the first block adds it to the table
			ref := h.block(big) // later ones refer to it by index
			bomb := append(blk, bytes.Repeat(ref[len(ref)-1:], 3000)...)
			err := h.write(func(fr *http2.Framer) error {
				return fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: bomb, EndStream: true, EndHeaders: true})
			})
			if err != nil {
				break
			}
			if id == 1 {
				deadline := time.Now().Add(5 * time.Second)
				for time.Now().Before(deadline) {
					if v, ok := h.status.Load(uint32(1)); ok {
						got431 = v == "431"
						break
					}
					time.Sleep(5 * time.Millisecond)
				}
				if !got431 {
					v, _ := h.status.Load(uint32(1))
					t.Fatalf("first bomb: status %v, want 431", v)
				}
			}
		}
		wantCode(t, h.closedWith(t, 10*time.Second), http2.ErrCodeEnhanceYourCalm)
	})
}

// TestH2ControlFloods floods SETTINGS, PING and WINDOW_UPDATE frames, each
// of which costs the server work (and for the first two a reply) but
// carries no request.
func TestH2ControlFloods(t *testing.T) {
	if testing.Short() {
		t.Skip("a flood: make test runs it; -short (make test-quick) skips it")
	}
	addr := abuseProxy(t, Config{H2MaxControlFramesPerSecond: 500}, nil)
	floods := map[string]func(fr *http2.Framer) error{
		"settings": func(fr *http2.Framer) error {
			return fr.WriteSettings(http2.Setting{ID: http2.SettingInitialWindowSize, Val: 65535})
		},
		"ping":          func(fr *http2.Framer) error { return fr.WritePing(false, [8]byte{1}) },
		"window_update": func(fr *http2.Framer) error { return fr.WriteWindowUpdate(0, 1) },
	}
	for name, flood := range floods {
		t.Run(name, func(t *testing.T) {
			underAbuse(t, addr, 3, func(t *testing.T) {
				h := dialH2(t, addr)
				for range 100000 {
					if h.write(flood) != nil {
						break
					}
					select {
					case <-h.done:
					default:
						continue
					}
					break
				}
				wantCode(t, h.closedWith(t, 10*time.Second), http2.ErrCodeEnhanceYourCalm)
			})
		})
	}
}

// TestH2ZeroWindowStall asks for responses with a zero flow-control window
// and never opens it: the server holds the responses (and their member
// connections) for WriteTimeout, then ends the connection.
func TestH2ZeroWindowStall(t *testing.T) {
	addr := abuseProxy(t, Config{WriteTimeout: 500 * time.Millisecond}, nil)
	underAbuse(t, addr, 2, func(t *testing.T) {
		h := dialH2(t, addr, http2.Setting{ID: http2.SettingInitialWindowSize, Val: 0})
		blk := h.block()
		t0 := time.Now()
		for id := uint32(1); id < 20; id += 2 {
			_ = h.write(func(fr *http2.Framer) error {
				return fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: blk, EndStream: true, EndHeaders: true})
			})
		}
		wantCode(t, h.closedWith(t, 10*time.Second), http2.ErrCodeEnhanceYourCalm)
		if d := time.Since(t0); d < 400*time.Millisecond {
			t.Errorf("connection ended after %v, before WriteTimeout", d)
		}
	})
}

// TestH2StreamCountAbuse opens streams past SETTINGS_MAX_CONCURRENT_STREAMS
// while the member is slow: the excess streams are refused, and a client
// that keeps opening them gets a GOAWAY. The member never sees more than
// the limit at once.
func TestH2StreamCountAbuse(t *testing.T) {
	var inflight, peak atomic.Int64
	slow := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/slow" {
			n := inflight.Add(1)
			defer inflight.Add(-1)
			for p := peak.Load(); n > p && !peak.CompareAndSwap(p, n); p = peak.Load() {
			}
			time.Sleep(300 * time.Millisecond)
		}
		_, _ = io.WriteString(w, "ok")
	})
	addr := abuseProxy(t, Config{H2MaxConcurrentStreams: 8, H2MaxResetsPerSecond: 20, H2ResetBurst: 40}, slow)
	underAbuse(t, addr, 2, func(t *testing.T) {
		h := dialH2(t, addr)
		h.hb.Reset()
		for _, f := range [][2]string{{":method", "GET"}, {":scheme", "https"}, {":authority", "x"}, {":path", "/slow"}} {
			_ = h.enc.WriteField(hpack.HeaderField{Name: f[0], Value: f[1]})
		}
		blk := bytes.Clone(h.hb.Bytes())
		for id := uint32(1); id < 4000; id += 2 {
			err := h.write(func(fr *http2.Framer) error {
				return fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: blk, EndStream: true, EndHeaders: true})
			})
			if err != nil {
				break
			}
		}
		wantCode(t, h.closedWith(t, 10*time.Second), http2.ErrCodeEnhanceYourCalm)
		if h.refuse.Load() == 0 {
			t.Error("no stream was refused")
		}
	})
	if p := peak.Load(); p > 8 {
		t.Errorf("the member saw %d requests of one connection at once, limit 8", p)
	}
}

// h2Workers counts the HTTP/2 stream workers of the package's servers,
// busy or idle.
func h2Workers() int {
	buf := make([]byte, 4<<20)
	return strings.Count(string(buf[:runtime.Stack(buf, true)]), "l7.(*Server).h2Worker(")
}

// TestH2IdleWorkersAreBounded runs 16 requests at once, with request
// bodies, on each of 4 connections, then lets them finish: of the 64
// workers, the server keeps its bound of idle ones (8 here), the others
// end; the next request of each connection runs on a kept worker, not a
// new one, whichever connection its first stream came from.
func TestH2IdleWorkersAreBounded(t *testing.T) {
	const conns, perConn, idleMax = 4, 16, 8
	const n = conns * perConn
	var inflight atomic.Int64
	release := make(chan struct{})
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/slow" {
			inflight.Add(1)
			<-release
		}
		_, _ = io.Copy(io.Discard, r.Body)
		_, _ = io.WriteString(w, "ok")
	})
	s := New(Config{})
	s.h2idleMax = idleMax
	be := newBackend(t, backendServer(t, h))
	addr := proxyUnder(t, s, oneRoute(be), selfSigned(t))
	clients := make([]*http.Client, conns)
	body := bytes.Repeat([]byte("b"), 20<<10)
	get := func(c *http.Client, path string) error {
		resp, err := c.Post("https://"+addr+path, "text/plain", bytes.NewReader(body))
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		_, _ = io.Copy(io.Discard, resp.Body)
		if resp.StatusCode != 200 {
			return fmt.Errorf("POST %s: status %d", path, resp.StatusCode)
		}
		return nil
	}
	for i := range clients {
		clients[i] = h2TestClient()
		defer clients[i].CloseIdleConnections()
		if err := get(clients[i], "/"); err != nil { // one connection each, settled
			t.Fatal(err)
		}
	}
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs <- get(clients[i%conns], "/slow")
		}()
	}
	deadline := time.Now().Add(30 * time.Second)
	for inflight.Load() < n && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	busy := h2Workers()
	close(release)
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	if busy < n {
		t.Fatalf("%d workers with %d requests in flight: the requests did not run at once", busy, n)
	}
	deadline = time.Now().Add(10 * time.Second)
	for (h2Workers() > idleMax || s.h2parked.Load() != idleMax) && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	if idle, parked := h2Workers(), s.h2parked.Load(); idle > idleMax || parked != idleMax {
		t.Errorf("after the burst: %d workers, %d parked (%d while busy), want %d", idle, parked, busy, idleMax)
	}
	started := s.h2started.Load()
	for _, c := range clients {
		if err := get(c, "/"); err != nil {
			t.Fatalf("after the burst: %v", err)
		}
	}
	if more := s.h2started.Load() - started; more != 0 {
		t.Errorf("the requests after the burst started %d workers, want 0: the idle ones take any connection's streams", more)
	}
	s.Close()
	deadline = time.Now().Add(10 * time.Second)
	for s.h2parked.Load() != 0 && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	if parked := s.h2parked.Load(); parked != 0 {
		t.Errorf("%d workers still idle after Close", parked)
	}
}

// TestH2RecycledStreamDropsLargeBody checks that a finished stream goes to
// the free list without a large request body buffer, and keeps a small one.
func TestH2RecycledStreamDropsLargeBody(t *testing.T) {
	c := &h2Conn{}
	large := &h2Stream{c: c, rbuf: make([]byte, 10, 64<<10), rr: 10}
	c.putStream(large)
	if large.rbuf != nil {
		t.Errorf("a recycled stream keeps a %d-byte body buffer", cap(large.rbuf))
	}
	small := &h2Stream{c: c, rbuf: make([]byte, 10, 1<<10), rr: 10}
	c.putStream(small)
	if cap(small.rbuf) != 1<<10 || len(small.rbuf) != 0 {
		t.Errorf("a recycled stream's small body buffer: len %d cap %d, want 0 and %d", len(small.rbuf), cap(small.rbuf), 1<<10)
	}
	if len(c.free) != 2 {
		t.Errorf("%d streams on the free list, want 2", len(c.free))
	}
	bigHead := &h2Stream{c: c, head: make([]byte, 10, 64<<10), hblk: make([]byte, 0, 32<<10)}
	c.putStream(bigHead)
	if bigHead.head != nil || bigHead.hblk != nil {
		t.Errorf("a recycled stream keeps head buffers of %d and %d bytes", cap(bigHead.head), cap(bigHead.hblk))
	}
	// Of a burst's streams, only h2KeepBuffers keep a response buffer.
	c = &h2Conn{}
	for range h2KeepStreams + 4 {
		wbp := h2bufs.Get().(*[]byte)
		c.putStream(&h2Stream{c: c, wbp: wbp, wbuf: (*wbp)[:0]})
	}
	kept := 0
	for _, st := range c.free {
		if st.wbp != nil {
			kept++
		}
	}
	if len(c.free) != h2KeepStreams || kept > h2KeepBuffers {
		t.Errorf("%d free streams keep %d response buffers, want %d streams and at most %d buffers", len(c.free), kept, h2KeepStreams, h2KeepBuffers)
	}
}

// TestH2SettingsAckPrecedesWindowedData shrinks the stream window to 0,
// waits for the response head, then opens the window by SETTINGS: the
// SETTINGS acknowledgement must come before the DATA the new window lets
// out (a client waiting for the ACK may drop frames before it; h2spec
// 6.9.2/1 does).
func TestH2SettingsAckPrecedesWindowedData(t *testing.T) {
	be := newBackend(t, backendServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, strings.Repeat("d", 64))
	})))
	addr := proxyUnder(t, New(Config{}), oneRoute(be), selfSigned(t))
	var hb bytes.Buffer
	enc := hpack.NewEncoder(&hb)
	for _, f := range [][2]string{{":method", "GET"}, {":scheme", "https"}, {":authority", "x"}, {":path", "/"}} {
		enc.WriteField(hpack.HeaderField{Name: f[0], Value: f[1]})
	}
	for i := range 30 {
		c, err := tls.Dial("tcp", addr, &tls.Config{InsecureSkipVerify: true, NextProtos: []string{"h2"}})
		if err != nil {
			t.Fatal(err)
		}
		_ = c.SetDeadline(time.Now().Add(10 * time.Second))
		_, _ = io.WriteString(c, http2.ClientPreface)
		fr := http2.NewFramer(c, c)
		next := func(want func(http2.Frame) bool) http2.Frame {
			for {
				f, err := fr.ReadFrame()
				if err != nil {
					t.Fatalf("run %d: %v", i, err)
				}
				if want(f) {
					return f
				}
			}
		}
		isAck := func(f http2.Frame) bool { s, ok := f.(*http2.SettingsFrame); return ok && s.IsAck() }
		_ = fr.WriteSettings(http2.Setting{ID: http2.SettingInitialWindowSize, Val: 0})
		next(isAck)
		_ = fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: hb.Bytes(), EndStream: true, EndHeaders: true})
		next(func(f http2.Frame) bool { _, ok := f.(*http2.HeadersFrame); return ok })
		_ = fr.WriteSettings(http2.Setting{ID: http2.SettingInitialWindowSize, Val: 1})
		f := next(func(f http2.Frame) bool { _, data := f.(*http2.DataFrame); return data || isAck(f) })
		if !isAck(f) {
			t.Fatalf("run %d: DATA before the SETTINGS ACK", i)
		}
		d, ok := next(func(f http2.Frame) bool { _, ok := f.(*http2.DataFrame); return ok }).(*http2.DataFrame)
		if !ok || len(d.Data()) != 1 {
			t.Fatalf("run %d: want one byte of DATA after the ACK", i)
		}
		c.Close()
	}
}

// TestH2WindowBelowZeroEndsTheStream: a client's SETTINGS may lower the
// initial window below what a response has sent (RFC 9113 section
// 6.9.2); the response's end then goes out as an empty DATA frame, which
// no window holds back, not as a reset.
func TestH2WindowBelowZeroEndsTheStream(t *testing.T) {
	release := make(chan struct{})
	be := newBackend(t, backendServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = w.Write(bytes.Repeat([]byte("d"), h2MaxFrame)) // one full buffer: it leaves at once
		w.(http.Flusher).Flush()
		select {
		case <-release:
		case <-time.After(10 * time.Second):
		}
	})))
	addr := proxyUnder(t, New(Config{}), oneRoute(be), selfSigned(t))
	var got atomic.Int64
	acks, ended, reset := make(chan struct{}, 2), make(chan int64, 1), make(chan http2.ErrCode, 1)
	h := dialH2With(t, addr, func(f http2.Frame) {
		switch f := f.(type) {
		case *http2.SettingsFrame:
			if f.IsAck() {
				acks <- struct{}{}
			}
		case *http2.DataFrame:
			n := got.Add(int64(len(f.Data())))
			if f.StreamEnded() {
				ended <- n
			}
		case *http2.RSTStreamFrame:
			reset <- f.ErrCode
		}
	})
	ack := func() {
		select {
		case <-acks:
		case <-time.After(10 * time.Second):
			t.Fatal("no SETTINGS ACK")
		}
	}
	ack()
	if err := h.write(func(fr *http2.Framer) error {
		return fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: h.block(), EndStream: true, EndHeaders: true})
	}); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, 10*time.Second, "the first DATA", func() bool { return got.Load() == h2MaxFrame })
	if err := h.write(func(fr *http2.Framer) error {
		return fr.WriteSettings(http2.Setting{ID: http2.SettingInitialWindowSize, Val: 0})
	}); err != nil {
		t.Fatal(err)
	}
	ack() // applied: the stream's window is now below zero
	close(release)
	select {
	case n := <-ended:
		if n != h2MaxFrame {
			t.Fatalf("%d body bytes, want %d", n, h2MaxFrame)
		}
	case code := <-reset:
		t.Fatalf("stream reset (%v), want it ended", code)
	case <-time.After(10 * time.Second):
		t.Fatal("the response did not end")
	}
}
