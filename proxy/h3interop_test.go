package proxy

import (
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/tls"
	"encoding/hex"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/quic-go/quic-go"
	"github.com/quic-go/quic-go/http3"
	"github.com/quic-go/quic-go/qlog"
	"github.com/quic-go/quic-go/qlogwriter"

	pb "github.com/teapot-lb/teapot-lb/api/proto/teapotv1"
	"github.com/teapot-lb/teapot-lb/proxy/l7"
	"github.com/teapot-lb/teapot-lb/proxy/snapshot"
)

// The test cases of the QUIC interop runner that fit one machine
// (https://github.com/quic-interop/quic-interop-runner: handshake,
// transfer, retry, resumption, keyupdate, zerortt), each with a quic-go
// client through the data plane: an https listener with http3 whose
// route goes to interopMember.

// interopMember answers GET /bytes/N with N bytes of a pattern and a POST
// with the length and SHA-256 of its body; it counts the requests that
// came with Early-Data: 1.
type interopMember struct {
	addr  string
	early atomic.Int64
}

func startInteropMember(t *testing.T) *interopMember {
	t.Helper()
	m := &interopMember{}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Early-Data") == "1" {
			m.early.Add(1)
		}
		if r.Method == http.MethodPost {
			h := sha256.New()
			n, _ := io.Copy(h, r.Body)
			fmt.Fprintf(w, "%d %x", n, h.Sum(nil))
			return
		}
		n, err := strconv.Atoi(strings.TrimPrefix(r.URL.Path, "/bytes/"))
		if err != nil || n < 0 || n > 64<<20 {
			http.NotFound(w, r)
			return
		}
		w.Header().Set("Content-Length", strconv.Itoa(n))
		_, _ = w.Write(interopPattern(n))
	})}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	m.addr = ln.Addr().String()
	return m
}

// interopPattern is n bytes that differ from one position to the next.
func interopPattern(n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(i*7 + i>>8)
	}
	return b
}

// startInterop serves an https listener with http3 (and 0-RTT when
// zeroRTT) in front of a new interopMember.
func startInterop(t *testing.T, zeroRTT bool) (*Proxy, string, *interopMember) {
	t.Helper()
	m := startInteropMember(t)
	srv := l7.New(l7.Config{})
	t.Cleanup(func() { srv.Close() })
	p, _ := newProxy(t, Config{HTTP: newH3Term(t, srv)})
	port := freePort(t)
	lb := h3LB(port, map[string]*routingBackend{"main": {addr: m.addr}})
	lb.Routes = lb.Routes[:1]
	lb.Pools = map[string]*pb.BackendPool{"main": lb.Pools["main"]}
	lb.Listeners[0].Http3ZeroRtt = zeroRTT
	update(t, p, lb)
	if st := p.Status()["acme/gw"]; len(st) != 0 {
		t.Fatalf("problems: %v", st)
	}
	return p, vipAddr("127.0.0.2", port), m
}

// fetchBytes GETs /bytes/n on cc (method http3.MethodGet0RTT sends it in
// 0-RTT) and checks what came back.
func fetchBytes(cc *http3.ClientConn, method string, n int) error {
	resp, err := h3Get(cc, method, "/bytes/"+strconv.Itoa(n))
	if err != nil {
		return err
	}
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 || !bytes.Equal(b, interopPattern(n)) {
		return fmt.Errorf("GET /bytes/%d: status %d, %d bytes, want the %d bytes of the pattern", n, resp.StatusCode, len(b), n)
	}
	return nil
}

// upload POSTs n bytes on cc and checks the member's length and digest.
func upload(cc *http3.ClientConn, n int) error {
	body := interopPattern(n)
	req, _ := http.NewRequest(http.MethodPost, "https://gw.acme.example/upload", bytes.NewReader(body))
	resp, err := cc.RoundTrip(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	got, _ := io.ReadAll(resp.Body)
	sum := sha256.Sum256(body)
	if want := fmt.Sprintf("%d %s", n, hex.EncodeToString(sum[:])); resp.StatusCode != 200 || string(got) != want {
		return fmt.Errorf("POST of %d bytes: status %d, member got %q, want %q", n, resp.StatusCode, got, want)
	}
	return nil
}

// TestInteropHandshake (interop case handshake): a full handshake, TLS
// 1.3 with ALPN h3, no Retry, no resumption, and a small file.
func TestInteropHandshake(t *testing.T) {
	t.Parallel()
	_, target, _ := startInterop(t, false)
	rc := newResumingClient(t, target)
	g := newGatedConn(t, true)
	c, cc := rc.dial(g, false)
	if err := fetchBytes(cc, http.MethodGet, 1000); err != nil {
		t.Fatal(err)
	}
	st := c.ConnectionState()
	if st.TLS.Version != tls.VersionTLS13 || st.TLS.NegotiatedProtocol != "h3" || st.TLS.DidResume || st.Used0RTT {
		t.Errorf("TLS %x, ALPN %q, resumed %v, 0-RTT %v: want TLS 1.3, h3, a full handshake", st.TLS.Version, st.TLS.NegotiatedProtocol, st.TLS.DidResume, st.Used0RTT)
	}
	if n := g.retries.Load(); n != 0 {
		t.Errorf("%d Retry packets without a flood", n)
	}
}

// TestInteropTransfer (interop case transfer): on one connection, three
// 3 MiB downloads, 32 downloads of 64 KiB and a 4 MiB upload at once,
// all whole (flow control and stream limits at work both ways).
func TestInteropTransfer(t *testing.T) {
	t.Parallel()
	_, target, _ := startInterop(t, false)
	rc := newResumingClient(t, target)
	_, cc := rc.dial(newGatedConn(t, true), false)
	var wg sync.WaitGroup
	errs := make(chan error, 64)
	run := func(f func() error) {
		wg.Go(func() {
			if err := f(); err != nil {
				errs <- err
			}
		})
	}
	for range 3 {
		run(func() error { return fetchBytes(cc, http.MethodGet, 3<<20) })
	}
	for range 32 {
		run(func() error { return fetchBytes(cc, http.MethodGet, 64<<10) })
	}
	run(func() error { return upload(cc, 4<<20) })
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

// TestInteropRetry (interop case retry): with Retry forced on the
// listener's port (as past H3RetryAbove handshakes in flight), the client
// gets a Retry, comes back with its token and is served.
func TestInteropRetry(t *testing.T) {
	t.Parallel()
	p, target, _ := startInterop(t, false)
	p.mu.Lock()
	p.sockets[snapshot.Key{Addr: mustAddrPort(t, target), Network: snapshot.TCP}].h3.retryAbove.Store(0)
	p.mu.Unlock()
	rc := newResumingClient(t, target)
	g := newGatedConn(t, true)
	_, cc := rc.dial(g, false)
	if err := fetchBytes(cc, http.MethodGet, 10000); err != nil {
		t.Fatal(err)
	}
	// A ClientHello with a post-quantum key share takes two Initial
	// datagrams; each may be answered by a Retry (the client takes the
	// first).
	if n := g.retries.Load(); n < 1 || n > 2 {
		t.Errorf("%d Retry packets, want 1 or 2", n)
	}
}

// TestInteropResumption (interop case resumption): a second connection
// resumes the first one's session (no certificate sent again) and is
// served.
func TestInteropResumption(t *testing.T) {
	t.Parallel()
	_, target, _ := startInterop(t, false)
	rc := newResumingClient(t, target)
	c, cc := rc.dial(newGatedConn(t, true), false)
	if err := fetchBytes(cc, http.MethodGet, 5000); err != nil {
		t.Fatal(err)
	}
	if c.ConnectionState().TLS.DidResume {
		t.Fatal("the first connection resumed")
	}
	rc.waitTicket(0)
	_ = c.CloseWithError(0, "")
	c, cc = rc.dial(newGatedConn(t, true), false)
	if err := fetchBytes(cc, http.MethodGet, 5000); err != nil {
		t.Fatal(err)
	}
	if !c.ConnectionState().TLS.DidResume {
		t.Error("the second connection did not resume the session")
	}
}

// keyUpdates records the 1-RTT key updates of a client's connections
// (quic-go's qlog events).
type keyUpdates struct {
	mu      sync.Mutex
	updates []qlog.KeyUpdated
}

func (k *keyUpdates) AddProducer() qlogwriter.Recorder { return k }
func (k *keyUpdates) RecordEvent(ev qlogwriter.Event) {
	if u, ok := ev.(qlog.KeyUpdated); ok && u.KeyType == qlog.KeyTypeClient1RTT && u.Trigger != qlog.KeyUpdateTLS {
		k.mu.Lock()
		k.updates = append(k.updates, u)
		k.mu.Unlock()
	}
}
func (k *keyUpdates) Close() error { return nil }

func (k *keyUpdates) get() []qlog.KeyUpdated {
	k.mu.Lock()
	defer k.mu.Unlock()
	return append([]qlog.KeyUpdated(nil), k.updates...)
}

// TestInteropKeyUpdate (interop case keyupdate): quic-go updates the
// 1-RTT keys after the first 100 packets of a connection (the runner's
// client does so too), so a 2 MiB upload and a 2 MiB download cross at
// least one key update (the client's or the data plane's) and come back
// whole.
func TestInteropKeyUpdate(t *testing.T) {
	t.Parallel()
	_, target, _ := startInterop(t, false)
	rc := newResumingClient(t, target)
	ku := &keyUpdates{}
	rc.qconf.Tracer = func(context.Context, bool, quic.ConnectionID) qlogwriter.Trace { return ku }
	_, cc := rc.dial(newGatedConn(t, true), false)
	if err := upload(cc, 2<<20); err != nil {
		t.Fatal(err)
	}
	if err := fetchBytes(cc, http.MethodGet, 2<<20); err != nil {
		t.Fatal(err)
	}
	ups := ku.get()
	if len(ups) == 0 {
		t.Fatal("no key update during 4 MiB of transfer")
	}
	var what []string
	for _, u := range ups {
		what = append(what, fmt.Sprintf("%s to phase %d", u.Trigger, u.KeyPhase))
	}
	t.Logf("key updates: %s", strings.Join(what, ", "))
}

// TestInteropZeroRTT (interop case zerortt): a resuming client whose
// handshake cannot complete (its reads are held) sends four GETs in
// 0-RTT; the member serves all four (marked Early-Data) before the
// handshake completed, and once it completes the client has them whole.
func TestInteropZeroRTT(t *testing.T) {
	t.Parallel()
	_, target, m := startInterop(t, true)
	rc := newResumingClient(t, target)
	c, cc := rc.dial(newGatedConn(t, true), false)
	if err := fetchBytes(cc, http.MethodGet, 100); err != nil {
		t.Fatal(err)
	}
	rc.waitTicket(0)
	_ = c.CloseWithError(0, "")

	g := newGatedConn(t, false)
	c, cc = rc.dial(g, true)
	errs := make(chan error, 4)
	for i := range 4 {
		go func() { errs <- fetchBytes(cc, http3.MethodGet0RTT, 1000*(i+1)) }()
	}
	waitFor(t, 15*time.Second, "four requests from early data at the member", func() bool { return m.early.Load() == 4 })
	select {
	case <-c.HandshakeComplete():
		t.Fatal("the handshake completed while the client's reads were held")
	default:
	}
	g.waitControl(t)
	g.open()
	for range 4 {
		if err := <-errs; err != nil {
			t.Error(err)
		}
	}
	if !c.ConnectionState().Used0RTT {
		t.Error("0-RTT not used")
	}
}
