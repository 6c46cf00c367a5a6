package l7

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

// The HTTP/2 request body bytes a server holds for one tenant are bounded
// (MaxTenantH2Bodies). Tenant t's clients open 10 connections of 100
// streams, each sending a 65,535-byte body (a whole stream window) to a
// route whose handler does not read it yet (a member slow to take its
// bodies holds them as long): 62.5 MiB asked for. The server holds at
// most 32 MiB of them; the streams whose DATA would pass the bound are
// reset (ENHANCE_YOUR_CALM) and counted as body-limit. Tenant u's upload
// meanwhile goes through, the held streams' bodies arrive whole once the
// handler reads them, and every byte is given back when the connections
// end.
func TestH2BodiesPerTenant(t *testing.T) {
	t.Run("local handler", func(t *testing.T) { h2BodiesPerTenant(t, false) })
	// A member route: the streams past the client connection's member
	// connections wait for one with their bodies held, then fail.
	t.Run("member", func(t *testing.T) { h2BodiesPerTenant(t, true) })
}

func h2BodiesPerTenant(t *testing.T, viaMember bool) {
	const conns, streams, size = 10, 100, h2InitialWindow
	release := make(chan struct{})
	var read, failed atomic.Int64
	hold := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		<-release
		n, err := io.Copy(io.Discard, r.Body)
		switch {
		case err == nil && n == size:
			read.Add(1)
		case err != nil:
			failed.Add(1)
		default:
			t.Errorf("a held body read whole has %d bytes, want %d", n, size)
		}
		io.WriteString(w, "ok")
	})
	echo := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n, err := io.Copy(io.Discard, r.Body)
		fmt.Fprintf(w, "%d %v", n, err)
	})
	m := &recordingMetrics{}
	s := New(Config{Metrics: m})
	route := &Route{Handler: hold}
	if viaMember {
		route = &Route{Backend: newBackend(t, backendServer(t, hold))}
	}
	tAddr := proxyUnderInfo(t, s, tenantRoute("t", route), selfSigned(t))
	uAddr := proxyUnderInfo(t, s, tenantRoute("u", &Route{Handler: echo}), selfSigned(t))

	chunk := bytes.Repeat([]byte("b"), h2MaxFrame)
	var clients []*h2raw
	for range conns {
		h := dialH2(t, tAddr)
		clients = append(clients, h)
		for i := range streams {
			id := uint32(2*i + 1)
			h.hb.Reset()
			for _, f := range [][2]string{{":method", "POST"}, {":scheme", "https"}, {":authority", "t"}, {":path", "/"}, {"content-length", strconv.Itoa(size)}} {
				_ = h.enc.WriteField(hpack.HeaderField{Name: f[0], Value: f[1]})
			}
			err := h.write(func(fr *http2.Framer) error {
				if err := fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: h.hb.Bytes(), EndHeaders: true}); err != nil {
					return err
				}
				for left := size; left > 0; left -= h2MaxFrame {
					n := min(left, h2MaxFrame)
					if err := fr.WriteData(id, n == left, chunk[:n]); err != nil {
						return err
					}
				}
				return nil
			})
			if err != nil {
				t.Fatalf("sending stream %d: %v", id, err)
			}
		}
	}
	// Each stream is either held whole or reset.
	resets := func() int {
		k := 0
		for _, h := range clients {
			k += int(h.calm.Load())
		}
		return k
	}
	held := func() int { return s.h2bodies.held("t") }
	// Through a member, the bodies of the streams that got a member
	// connection went on to its socket buffers.
	for deadline, last, since := time.Now().Add(30*time.Second), -1, time.Now(); ; time.Sleep(10 * time.Millisecond) {
		n := held()/size + resets()
		if n == conns*streams || (viaMember && n == last && time.Since(since) > 500*time.Millisecond && resets() > 0) {
			break
		}
		if n != last {
			last, since = n, time.Now()
		}
		if time.Now().After(deadline) {
			close(release)
			t.Fatalf("%d bytes held (%d bodies) and %d streams reset of %d", held(), held()/size, resets(), conns*streams)
		}
	}
	whole, k := held()/size, resets()
	if h := held(); h%size != 0 || h > MaxTenantH2Bodies || h < MaxTenantH2Bodies-4*size {
		t.Errorf("tenant t's held bodies: %d bytes, want whole bodies of %d, at most %d (the bound) and near it", h, size, MaxTenantH2Bodies)
	}
	t.Logf("of %d bodies of %d bytes, %d held (%d bytes) and %d streams reset", conns*streams, size, whole, held(), k)

	// Tenant u's upload while t is at its bound.
	client := h2TestClient()
	resp, err := client.Post("https://"+uAddr+"/", "application/octet-stream", bytes.NewReader(bytes.Repeat([]byte("u"), 1<<20)))
	if err != nil {
		t.Fatalf("tenant u while t is at its bound: %v", err)
	}
	got, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || string(got) != fmt.Sprint(1<<20, " <nil>") {
		t.Errorf("tenant u while t is at its bound: %d %q, want 200 and its 1 MiB read whole", resp.StatusCode, got)
	}

	close(release)
	if !viaMember {
		for deadline := time.Now().Add(30 * time.Second); int(read.Load()+failed.Load()) < conns*streams; time.Sleep(10 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("%d handlers read their body and %d failed, of %d", read.Load(), failed.Load(), conns*streams)
			}
		}
		if int(read.Load()) != whole || int(failed.Load()) != k {
			t.Errorf("%d bodies read whole and %d failed; want the %d held and the %d reset", read.Load(), failed.Load(), whole, k)
		}
	}
	limited := func() int { return m.outcomes("t", OutcomeBodyLimit) }
	for deadline := time.Now().Add(30 * time.Second); limited() < k && time.Now().Before(deadline); {
		time.Sleep(10 * time.Millisecond)
	}
	if n := limited(); n != k {
		m.mu.Lock()
		out := map[Outcome]int{}
		for _, st := range m.reqs {
			out[st.Outcome]++
		}
		m.mu.Unlock()
		t.Errorf("%d requests counted as body-limit, want the %d reset (outcomes %v)", n, k, out)
	}
	for _, h := range clients {
		h.c.Close()
	}
	// A connection gives its bytes back as it closes: its streams' unread
	// bodies are dropped (h2Stream.abort), whatever their relays to the
	// member are doing. (Before they were, 32,769 bytes of one body were
	// still on their way to the member after 10 s on a loaded 2-core
	// machine.)
	for deadline := time.Now().Add(30 * time.Second); held() != 0 && time.Now().Before(deadline); {
		time.Sleep(10 * time.Millisecond)
	}
	if h := held(); h != 0 {
		t.Errorf("%d bytes still held for tenant t after its connections closed", h)
	}
}

// h2reader is a hand-driven HTTP/2 client that opens GET streams and
// grants no flow-control credit until told to: what it was sent, per
// stream, and how each stream ended.
type h2reader struct {
	*h2raw
	mu    sync.Mutex
	data  map[uint32]int
	ended map[uint32]bool // END_STREAM
	reset map[uint32]http2.ErrCode
}

func dialH2Reader(t *testing.T, addr string) *h2reader {
	t.Helper()
	h := &h2reader{data: map[uint32]int{}, ended: map[uint32]bool{}, reset: map[uint32]http2.ErrCode{}}
	h.h2raw = dialH2With(t, addr, func(f http2.Frame) {
		h.mu.Lock()
		defer h.mu.Unlock()
		switch f := f.(type) {
		case *http2.DataFrame:
			h.data[f.StreamID] += len(f.Data())
			if f.StreamEnded() {
				h.ended[f.StreamID] = true
			}
		case *http2.RSTStreamFrame:
			h.reset[f.StreamID] = f.ErrCode
		}
	})
	return h
}

// The HTTP/2 response body bytes a server holds for one tenant's members
// are bounded too (MaxTenantH2Bodies, on the tenant's member budget).
// Tenant t's clients open 4 connections of 100 GETs of 256 KiB to an h2c
// member and grant no flow-control credit: each member stream fills its
// 128 KiB window on the server, 50 MiB asked for. The server holds at
// most 32 MiB; the member streams whose DATA would pass it are reset, and
// once the clients grant credit their streams are reset and counted as
// body-limit while the others get their whole response. Tenant u's
// download, on a budget of its own, meanwhile goes through.
func TestH2ResponsesPerTenant(t *testing.T) {
	const conns, streams, size = 4, 100, 256 << 10
	big := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Length", strconv.Itoa(size))
		chunk := bytes.Repeat([]byte("r"), 16<<10)
		for left := size; left > 0; left -= len(chunk) {
			if _, err := w.Write(chunk); err != nil {
				return
			}
		}
	})
	member := h2cServer(t, big)
	budget := func() *MemberBudget {
		d := &spentDescriptors{}
		d.free.Store(1 << 20)
		return NewMemberBudget(d, nil)
	}
	tb, ub := newBackend(t, member), newBackend(t, member)
	tb.opts.Protocol, ub.opts.Protocol = H2C, H2C
	tb.opts.Budget, ub.opts.Budget = budget(), budget()
	m := &recordingMetrics{}
	s := New(Config{Metrics: m})
	tAddr := proxyUnderInfo(t, s, tenantRoute("t", &Route{Backend: tb}), selfSigned(t))
	uAddr := proxyUnderInfo(t, s, tenantRoute("u", &Route{Backend: ub}), selfSigned(t))

	var clients []*h2reader
	for range conns {
		h := dialH2Reader(t, tAddr)
		clients = append(clients, h)
		for i := range streams {
			blk := h.block()
			if err := h.write(func(fr *http2.Framer) error {
				return fr.WriteHeaders(http2.HeadersFrameParam{StreamID: uint32(2*i + 1), BlockFragment: blk, EndStream: true, EndHeaders: true})
			}); err != nil {
				t.Fatal(err)
			}
		}
	}
	held := func() int64 { return tb.opts.Budget.h2held.Load() }
	var peak int64
	for deadline, last, since := time.Now().Add(30*time.Second), int64(-1), time.Now(); ; time.Sleep(10 * time.Millisecond) {
		h := held()
		peak = max(peak, h)
		if h == last && time.Since(since) > time.Second && h > 0 {
			break
		}
		if h != last {
			last, since = h, time.Now()
		}
		if time.Now().After(deadline) {
			t.Fatalf("tenant t's held responses still move after 30 s: %d bytes", h)
		}
	}
	if peak > MaxTenantH2Bodies || peak < MaxTenantH2Bodies-(256<<10) {
		t.Errorf("tenant t's held responses peaked at %d bytes, want at most %d (the bound) and near it", peak, MaxTenantH2Bodies)
	}

	// Tenant u's download while t is at its bound.
	resp, err := h2TestClient().Get("https://" + uAddr + "/")
	if err != nil {
		t.Fatalf("tenant u while t is at its bound: %v", err)
	}
	n, err := io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || n != size || err != nil {
		t.Errorf("tenant u while t is at its bound: %d, %d bytes (%v), want 200 and %d", resp.StatusCode, n, err, size)
	}

	// The clients grant credit: each stream ends whole or reset.
	for _, h := range clients {
		if err := h.write(func(fr *http2.Framer) error {
			if err := fr.WriteWindowUpdate(0, 1<<30); err != nil {
				return err
			}
			for i := range streams {
				if err := fr.WriteWindowUpdate(uint32(2*i+1), 1<<24); err != nil {
					return err
				}
			}
			return nil
		}); err != nil {
			t.Fatal(err)
		}
	}
	var whole, reset int
	for deadline := time.Now().Add(120 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		whole, reset = 0, 0
		for _, h := range clients {
			h.mu.Lock()
			for i := range streams {
				id := uint32(2*i + 1)
				switch {
				case h.ended[id] && h.data[id] == size:
					whole++
				case h.ended[id]:
					t.Fatalf("stream %d ended with %d bytes of %d", id, h.data[id], size)
				case h.reset[id] != 0:
					reset++
				}
			}
			h.mu.Unlock()
		}
		if whole+reset == conns*streams {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d streams whole and %d reset of %d after the clients granted credit", whole, reset, conns*streams)
		}
	}
	limited := func() int { return m.outcomes("t", OutcomeBodyLimit) }
	for deadline := time.Now().Add(10 * time.Second); limited() < reset && time.Now().Before(deadline); {
		time.Sleep(10 * time.Millisecond)
	}
	if reset == 0 || limited() != reset {
		t.Errorf("%d streams reset and %d requests counted as body-limit; want some, the same", reset, limited())
	}
	t.Logf("of %d responses of %d bytes: held at most %d bytes, %d whole, %d reset at the bound", conns*streams, size, peak, whole, reset)
	for deadline := time.Now().Add(10 * time.Second); held() != 0 && time.Now().Before(deadline); {
		time.Sleep(10 * time.Millisecond)
	}
	if h := held(); h != 0 {
		t.Errorf("%d bytes still held for tenant t after its responses ended", h)
	}
}

// outcomes counts the requests of tenant that ended with out.
func (m *recordingMetrics) outcomes(tenant string, out Outcome) int {
	m.mu.Lock()
	defer m.mu.Unlock()
	k := 0
	for _, st := range m.reqs {
		if st.Tenant == tenant && st.Outcome == out {
			k++
		}
	}
	return k
}

// TestH2AbortDropsHeldBody: a stream whose client reset it or went away
// gives its unread body back to its tenant at once, and its reader (a
// relay copying the body to a member) gets the error, not the rest of the
// body: the host does no more work for a gone client.
func TestH2AbortDropsHeldBody(t *testing.T) {
	for _, reason := range []error{errClientGone, errStreamReset} {
		s := New(Config{})
		c := &h2Conn{s: s, hc: &h2conn{info: &ConnInfo{Tenant: "t"}}}
		st := &h2Stream{c: c, cond: sync.NewCond(&c.mu)}
		const size = 48 << 10
		c.mu.Lock()
		if !c.holdBody(size) {
			t.Fatal("the tenant's first body refused")
		}
		st.rbuf = append(st.rbuf, bytes.Repeat([]byte("b"), size)...)
		c.mu.Unlock()
		// A reader took part of it before the client left.
		p := make([]byte, 1000)
		if n, err := st.Read(p); n != len(p) || err != nil {
			t.Fatalf("read before the abort: %d, %v", n, err)
		}
		c.mu.Lock()
		st.abort(reason)
		c.mu.Unlock()
		if h := s.h2bodies.held("t"); h != 0 {
			t.Errorf("%v: %d bytes still held for the tenant after the abort, want 0", reason, h)
		}
		if n, err := st.Read(p); n != 0 || err != reason {
			t.Errorf("%v: a read after the abort got %d bytes and %v, want 0 and the abort's error", reason, n, err)
		}
	}
}
