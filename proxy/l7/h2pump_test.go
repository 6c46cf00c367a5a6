package l7

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"net/netip"
	"runtime"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

// pumps counts the goroutines that write a request body to an HTTP/2
// member on the net/http path.
func pumps() int {
	buf := make([]byte, 1<<22)
	return strings.Count(string(buf[:runtime.Stack(buf, true)]), "l7.(*h2RespBody).pump(")
}

// A member that answers before it read the whole body, while the client
// still uploads: the stream ends with the response, and the goroutine
// that wrote the body to the member ends with it. It must not wait on,
// and later read, the body of the stream that reuses the recycled one:
// the next request on the connection reaches its member whole.
func TestH2BodyWriterEndsWithItsStream(t *testing.T) {
	member := h2cServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/early" {
			io.WriteString(w, "early")
			return
		}
		n, err := io.Copy(io.Discard, r.Body)
		fmt.Fprintf(w, "%d %v", n, err)
	}))
	be := newBackend(t, member)
	be.opts.Protocol = H2C
	// An extended route takes the net/http path, whose body writer is a
	// goroutine of its own.
	router := oneRoute(be)
	router[0].route.Ext = &RouteExt{}
	addr := proxyUnder(t, New(Config{}), router, selfSigned(t))
	before := pumps()
	h := dialH2Reader(t, addr)
	post := func(id uint32, path string, body []byte, end bool) { t.Helper(); postH2(t, h, id, path, body, end) }
	done := h.done
	// The upload stays open: the member answers at once.
	post(1, "/early", []byte("part of a body"), false)
	for deadline := time.Now().Add(10 * time.Second); !done(1); time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("no answer to the early request")
		}
	}
	for deadline := time.Now().Add(10 * time.Second); pumps() > before; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%d request body writers still run after their streams ended", pumps()-before)
		}
	}
	// The next request on the connection reaches its member whole.
	body := bytes.Repeat([]byte("n"), 10000)
	post(3, "/next", body, true)
	for deadline := time.Now().Add(10 * time.Second); !done(3); time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("no answer to the next request")
		}
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if want := len(fmt.Sprintf("%d <nil>", len(body))); !h.ended[3] || h.data[3] != want {
		t.Errorf("the next request: ended %v, %d bytes of answer, want %d (its member read its body whole)", h.ended[3], h.data[3], want)
	}
}

// A body writer that first runs after its stream ended and was recycled
// for the connection's next request reads nothing of that request's body:
// the next request reaches its member whole. The first writer is held
// back until the next request's body has arrived, then let go before the
// next request's own writer.
func TestH2LateBodyWriterReadsNothingOfTheNextRequest(t *testing.T) {
	member := h2cServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/early" {
			io.WriteString(w, "early")
			return
		}
		n, err := io.Copy(io.Discard, r.Body)
		fmt.Fprintf(w, "%d %v", n, err)
	}))
	be := newBackend(t, member)
	be.opts.Protocol = H2C
	router := oneRoute(be)
	router[0].route.Ext = &RouteExt{}
	addr := proxyUnder(t, New(Config{}), router, selfSigned(t))

	first, second := make(chan struct{}), make(chan struct{})
	secondStarted := make(chan struct{})
	var calls atomic.Int32
	hook := func() {
		switch calls.Add(1) {
		case 1:
			<-first
		case 2:
			close(secondStarted)
			<-second
		}
	}
	pumpStarts.Store(&hook)
	t.Cleanup(func() { pumpStarts.Store(nil) })
	before := pumps()

	h := dialH2Reader(t, addr)
	post := func(id uint32, path string, body []byte, end bool) { t.Helper(); postH2(t, h, id, path, body, end) }
	done := h.done
	post(1, "/early", []byte("part of a body"), false)
	for deadline := time.Now().Add(10 * time.Second); !done(1); time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			close(first)
			t.Fatal("no answer to the early request")
		}
	}
	// Stream 1 ended, its writer has not read yet. The next request
	// reuses the recycled stream; its body arrives whole.
	body := bytes.Repeat([]byte("n"), 10000)
	post(3, "/next", body, true)
	select {
	case <-secondStarted:
	case <-time.After(10 * time.Second):
		close(first)
		t.Fatal("the next request's body writer did not start")
	}
	close(first)
	for deadline := time.Now().Add(10 * time.Second); pumps() > before+1; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			close(second)
			t.Fatalf("the first request's body writer still runs (%d writers)", pumps()-before)
		}
	}
	close(second)
	for deadline := time.Now().Add(10 * time.Second); !done(3); time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("no answer to the next request")
		}
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if want := len(fmt.Sprintf("%d <nil>", len(body))); !h.ended[3] || h.data[3] != want {
		t.Errorf("the next request: ended %v, %d bytes of answer, want %d (its member read its body whole)", h.ended[3], h.data[3], want)
	}
}

// postH2 sends a POST for path on stream id with body, ending the stream
// (with a content-length) when end is set.
func postH2(t *testing.T, h *h2reader, id uint32, path string, body []byte, end bool) {
	t.Helper()
	h.hb.Reset()
	for _, f := range [][2]string{{":method", "POST"}, {":scheme", "https"}, {":authority", "x"}, {":path", path}} {
		_ = h.enc.WriteField(hpack.HeaderField{Name: f[0], Value: f[1]})
	}
	if end {
		_ = h.enc.WriteField(hpack.HeaderField{Name: "content-length", Value: strconv.Itoa(len(body))})
	}
	if err := h.write(func(fr *http2.Framer) error {
		if err := fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: h.hb.Bytes(), EndHeaders: true}); err != nil {
			return err
		}
		return fr.WriteData(id, end, body)
	}); err != nil {
		t.Fatal(err)
	}
}

// done reports whether stream id ended or was reset.
func (h *h2reader) done(id uint32) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.ended[id] || h.reset[id] != 0
}

// doneHolds is a backend whose members, once a request's response is
// relayed (Member.Done, the last thing the net/http path does before its
// handler returns), signal in and then hold the handler for hold.
type doneHolds struct {
	*testBackend
	in   chan struct{}
	hold time.Duration
}

func (b *doneHolds) Pick(a netip.Addr, key []byte) (Member, bool) {
	m, ok := b.testBackend.Pick(a, key)
	if !ok {
		return nil, false
	}
	return &heldMember{Member: m, b: b}, true
}

type heldMember struct {
	Member
	b *doneHolds
}

func (m *heldMember) Done(err error, status int, d time.Duration) {
	m.Member.Done(err, status, d)
	select {
	case m.b.in <- struct{}{}:
	default:
	}
	// A sleep, not a wait on the test: the request body's writer must
	// run without any synchronisation with this handler.
	time.Sleep(m.b.hold)
}

// A member answers before it read the request body, and the client goes
// on uploading while the handler finishes: the body writer (pump) reads
// the new bytes while the handler takes the request's byte count for its
// figures. Under the race detector this fails unless the count is read
// and written atomically.
func TestH2BodyCountWhileItsWriterRuns(t *testing.T) {
	member := h2cServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "early")
	}))
	be := &doneHolds{testBackend: newBackend(t, member), in: make(chan struct{}, 1), hold: 300 * time.Millisecond}
	be.opts.Protocol = H2C
	router := oneRoute(be)
	router[0].route.Ext = &RouteExt{}
	addr := proxyUnder(t, New(Config{}), router, selfSigned(t))

	h := dialH2Reader(t, addr)
	postH2(t, h, 1, "/early", []byte("part of a body"), false)
	select {
	case <-be.in:
	case <-time.After(10 * time.Second):
		t.Fatal("the response was not relayed")
	}
	// The handler is held in Done: more of the body arrives, which the
	// writer reads meanwhile.
	if err := h.write(func(fr *http2.Framer) error { return fr.WriteData(1, false, []byte("and more of it")) }); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(10 * time.Second); !h.done(1); time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the stream did not end")
		}
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.data[1] != len("early") {
		t.Errorf("%d bytes of answer, want %d", h.data[1], len("early"))
	}
}
