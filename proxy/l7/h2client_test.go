package l7

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// grpcMember starts a gRPC server with a unary method (test.Echo/Unary:
// echoes, or fails with NotFound for "missing") and the bidirectional
// stream of TestGRPCBidi.
func grpcMember(t testing.TB, opts ...grpc.ServerOption) string {
	t.Helper()
	gs := grpc.NewServer(append(opts, grpc.ForceServerCodec(rawCodec{}))...)
	unary := grpc.MethodDesc{MethodName: "Unary", Handler: func(_ any, ctx context.Context, dec func(any) error, _ grpc.UnaryServerInterceptor) (any, error) {
		var in []byte
		if err := dec(&in); err != nil {
			return nil, err
		}
		if string(in) == "missing" {
			return nil, status.Error(codes.NotFound, "no such thing")
		}
		md, _ := metadata.FromIncomingContext(ctx)
		_ = grpc.SetTrailer(ctx, metadata.Pairs("x-seen-xff", strings.Join(md.Get("x-forwarded-for"), ",")))
		out := append([]byte("echo:"), in...)
		return &out, nil
	}}
	bidi := bidiDesc
	bidi.Handler = func(_ any, st grpc.ServerStream) error {
		for {
			var msg []byte
			if err := st.RecvMsg(&msg); err != nil {
				if errors.Is(err, io.EOF) {
					return nil
				}
				return err
			}
			if err := st.SendMsg(&msg); err != nil {
				return err
			}
		}
	}
	gs.RegisterService(&grpc.ServiceDesc{ServiceName: "test.Echo", HandlerType: (*any)(nil),
		Methods: []grpc.MethodDesc{unary}, Streams: []grpc.StreamDesc{bidi}}, struct{}{})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go gs.Serve(ln)
	t.Cleanup(gs.Stop)
	return ln.Addr().String()
}

func grpcClient(t testing.TB, addr string) *grpc.ClientConn {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(credentials.NewTLS(&tls.Config{InsecureSkipVerify: true})),
		grpc.WithDefaultCallOptions(grpc.ForceCodec(rawCodec{}), grpc.MaxCallRecvMsgSize(16<<20), grpc.MaxCallSendMsgSize(16<<20)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

// TestGRPCThroughH2Client runs gRPC unary calls (concurrent, with a
// status error and trailers) and a stream of messages much larger than
// the flow-control windows through the proxy to an h2c member.
func TestGRPCThroughH2Client(t *testing.T) {
	be := newBackend(t, grpcMember(t))
	be.opts.Protocol = H2C
	conn := grpcClient(t, proxyUnder(t, New(Config{}), oneRoute(be), selfSigned(t)))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	t.Run("unary", func(t *testing.T) {
		var wg sync.WaitGroup
		errs := make(chan error, 400)
		for g := range 8 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := range 50 {
					in := []byte(fmt.Sprintf("call-%d-%d", g, i))
					var out []byte
					var tr metadata.MD
					if err := conn.Invoke(ctx, "/test.Echo/Unary", &in, &out, grpc.Trailer(&tr)); err != nil {
						errs <- err
						return
					}
					if string(out) != "echo:"+string(in) {
						errs <- fmt.Errorf("reply %q to %q", out, in)
						return
					}
					if got := tr.Get("x-seen-xff"); len(got) != 1 || got[0] != "127.0.0.1" {
						errs <- fmt.Errorf("member saw X-Forwarded-For %v", got)
						return
					}
				}
			}()
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Fatal(err)
		}
	})
	t.Run("status error", func(t *testing.T) {
		in := []byte("missing")
		var out []byte
		err := conn.Invoke(ctx, "/test.Echo/Unary", &in, &out)
		if st, _ := status.FromError(err); st.Code() != codes.NotFound || st.Message() != "no such thing" {
			t.Fatalf("got %v, want NotFound with its message", err)
		}
	})
	t.Run("large messages both ways", func(t *testing.T) {
		st, err := conn.NewStream(ctx, &bidiDesc, "/test.Echo/Bidi")
		if err != nil {
			t.Fatal(err)
		}
		for i := range 3 {
			msg := bytes.Repeat([]byte{byte('a' + i)}, 2<<20) // 16 windows of the member stream
			if err := st.SendMsg(&msg); err != nil {
				t.Fatal(err)
			}
			var got []byte
			if err := st.RecvMsg(&got); err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got, msg) {
				t.Fatalf("message %d came back with %d bytes", i, len(got))
			}
		}
		if err := st.CloseSend(); err != nil {
			t.Fatal(err)
		}
		var tail []byte
		if err := st.RecvMsg(&tail); !errors.Is(err, io.EOF) {
			t.Fatalf("end of stream: %v", err)
		}
	})
}

// TestH2ClientHonoursMaxStreams sends many concurrent requests to a member
// that allows 2 streams per connection: it never sees more, no request
// fails, and the proxy opens at most h2UpMaxConns connections.
func TestH2ClientHonoursMaxStreams(t *testing.T) {
	var mu sync.Mutex
	perConn := map[string]int{}
	peak := 0
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		perConn[r.RemoteAddr]++
		peak = max(peak, perConn[r.RemoteAddr])
		mu.Unlock()
		time.Sleep(20 * time.Millisecond)
		mu.Lock()
		perConn[r.RemoteAddr]--
		mu.Unlock()
		io.WriteString(w, "ok")
	})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var p http.Protocols
	p.SetUnencryptedHTTP2(true)
	srv := &http.Server{Handler: h, Protocols: &p, HTTP2: &http.HTTP2Config{MaxConcurrentStreams: 2}}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	be := newBackend(t, ln.Addr().String())
	be.opts.Protocol = H2C
	addr := proxyUnder(t, New(Config{}), oneRoute(be), selfSigned(t))
	client := h2TestClient()
	var wg sync.WaitGroup
	var failed atomic.Int32
	for range 40 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			resp, err := client.Get("https://" + addr + "/")
			if err != nil {
				failed.Add(1)
				return
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != 200 || string(b) != "ok" {
				failed.Add(1)
			}
		}()
	}
	wg.Wait()
	if n := failed.Load(); n > 0 {
		t.Fatalf("%d of 40 requests failed", n)
	}
	mu.Lock()
	defer mu.Unlock()
	if peak > 2 {
		t.Errorf("member saw %d concurrent streams on one connection, allows 2", peak)
	}
	if len(perConn) > h2UpMaxConns {
		t.Errorf("proxy opened %d connections to the member, bound %d", len(perConn), h2UpMaxConns)
	}
}

// rawH2Member accepts HTTP/2 connections and hands each one's frames to
// serve, with the connection's number (from 1) and a framer after the
// preface and the member's SETTINGS.
func rawH2Member(t testing.TB, serve func(n int, fr *http2.Framer, c net.Conn)) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for n := 1; ; n++ {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func(n int) {
				defer c.Close()
				var pre [len(http2.ClientPreface)]byte
				if _, err := io.ReadFull(c, pre[:]); err != nil {
					return
				}
				fr := http2.NewFramer(c, c)
				fr.ReadMetaHeaders = hpack.NewDecoder(4096, nil)
				if fr.WriteSettings() != nil {
					return
				}
				serve(n, fr, c)
			}(n)
		}
	}()
	return ln.Addr().String()
}

// rawH2Frames is a rawH2Member that acknowledges the proxy's SETTINGS
// and passes every other frame it reads to the function that conn
// returns for its connection (the n-th), and nil once the connection
// ends; an error from it ends the connection.
func rawH2Frames(t testing.TB, conn func(n int, fr *http2.Framer) func(f http2.Frame) error) string {
	return rawH2Member(t, func(n int, fr *http2.Framer, _ net.Conn) {
		handle := conn(n, fr)
		defer func() { _ = handle(nil) }()
		for {
			f, err := fr.ReadFrame()
			if err != nil {
				return
			}
			if sf, ok := f.(*http2.SettingsFrame); ok && !sf.IsAck() {
				_ = fr.WriteSettingsAck()
				continue
			}
			if handle(f) != nil {
				return
			}
		}
	})
}

// rawH2Streams is a rawH2Frames that has each request's header block
// answered by the function that conn returns for its connection (the
// n-th); an error from it ends the connection.
func rawH2Streams(t testing.TB, conn func(n int, fr *http2.Framer) func(f *http2.MetaHeadersFrame) error) string {
	return rawH2Frames(t, func(n int, fr *http2.Framer) func(http2.Frame) error {
		answer := conn(n, fr)
		return func(f http2.Frame) error {
			if h, ok := f.(*http2.MetaHeadersFrame); ok {
				return answer(h)
			}
			return nil
		}
	})
}

// answerH2 answers a stream with status 200 and body.
func answerH2(fr *http2.Framer, id uint32, body string) error {
	var hb bytes.Buffer
	enc := hpack.NewEncoder(&hb)
	enc.WriteField(hpack.HeaderField{Name: ":status", Value: "200"})
	enc.WriteField(hpack.HeaderField{Name: "content-length", Value: fmt.Sprint(len(body))})
	if err := fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: hb.Bytes(), EndHeaders: true}); err != nil {
		return err
	}
	return fr.WriteData(id, true, []byte(body))
}

// TestH2ClientRetriesUnprocessed has the member refuse a stream
// (REFUSED_STREAM) and send a GOAWAY below another: both requests are
// sent again, on the same member, and succeed.
func TestH2ClientRetriesUnprocessed(t *testing.T) {
	var served [3]atomic.Int32
	member := rawH2Streams(t, func(n int, fr *http2.Framer) func(*http2.MetaHeadersFrame) error {
		streams := 0
		return func(f *http2.MetaHeadersFrame) error {
			streams++
			switch {
			case n == 1 && streams == 1:
				fr.WriteRSTStream(f.StreamID, http2.ErrCodeRefusedStream)
			case n == 1 && streams == 3:
				fr.WriteGoAway(f.StreamID-2, http2.ErrCodeNo, nil)
				time.Sleep(100 * time.Millisecond)
				return io.EOF
			default:
				served[min(n, 2)].Add(1)
				answerH2(fr, f.StreamID, fmt.Sprintf("conn%d", n))
			}
			return nil
		}
	})
	be := newBackend(t, member)
	be.opts.Protocol = H2C
	addr := proxyUnder(t, New(Config{}), oneRoute(be), selfSigned(t))
	client := h2TestClient()
	for i, want := range []string{"conn1", "conn2"} {
		resp, err := client.Get("https://" + addr + "/")
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || string(b) != want {
			t.Fatalf("request %d: %d %q, want 200 %q", i, resp.StatusCode, b, want)
		}
	}
	if served[1].Load() != 1 || served[2].Load() != 1 {
		t.Errorf("served %d on the first connection and %d on the second, want 1 and 1", served[1].Load(), served[2].Load())
	}
	errs, _ := be.members[0].outcomes()
	for _, err := range errs {
		if err != nil {
			t.Errorf("member charged with %v for a refusal", err)
		}
	}
}

// TestH2ClientTLSMember reaches a member over TLS with ALPN h2.
func TestH2ClientTLSMember(t *testing.T) {
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Proto", r.Proto)
		w.Header().Set("Trailer", "X-Sum")
		n, _ := io.Copy(io.Discard, r.Body)
		fmt.Fprintf(w, "%d", n)
		w.Header().Set("X-Sum", "done")
	}))
	srv.EnableHTTP2 = true
	srv.StartTLS()
	t.Cleanup(srv.Close)
	be := newBackend(t, srv.Listener.Addr().String())
	be.opts.Protocol = H2TLS
	addr := proxyUnder(t, New(Config{}), oneRoute(be), selfSigned(t))
	for _, c := range []struct {
		name   string
		client *http.Client
	}{{"http2 client", h2TestClient()}, {"http1 client", &http.Client{}}} {
		t.Run(c.name, func(t *testing.T) {
			url := "https://" + addr + "/"
			if c.name == "http1 client" {
				url = "http://" + proxyUnder(t, New(Config{}), oneRoute(be), nil) + "/"
			}
			resp, err := c.client.Post(url, "application/octet-stream", bytes.NewReader(make([]byte, 300<<10)))
			if err != nil {
				t.Fatal(err)
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != 200 || string(b) != "307200" || resp.Header.Get("X-Proto") != "HTTP/2.0" {
				t.Fatalf("%d %q proto %q", resp.StatusCode, b, resp.Header.Get("X-Proto"))
			}
			if got := resp.Trailer.Get("X-Sum"); got != "done" {
				t.Errorf("trailer %q", got)
			}
		})
	}
}

// TestH2ClientIdleClose closes member connections left idle past
// UpstreamIdleTimeout.
func TestH2ClientIdleClose(t *testing.T) {
	closed := make(chan int, 4)
	member := rawH2Frames(t, func(n int, fr *http2.Framer) func(http2.Frame) error {
		return func(f http2.Frame) error {
			switch f := f.(type) {
			case nil:
				closed <- n
			case *http2.MetaHeadersFrame:
				answerH2(fr, f.StreamID, "ok")
			}
			return nil
		}
	})
	be := newBackend(t, member)
	be.opts.Protocol = H2C
	addr := proxyUnder(t, New(Config{UpstreamIdleTimeout: 300 * time.Millisecond}), oneRoute(be), selfSigned(t))
	resp, err := h2TestClient().Get("https://" + addr + "/")
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	select {
	case n := <-closed:
		if n != 1 {
			t.Fatalf("connection %d closed", n)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("idle member connection still open after 10 s")
	}
}

// TestH2ClientMemberGone answers 502 when the member accepts and closes
// at once, or never speaks HTTP/2, and 504 when its SETTINGS never come
// within the connect timeout.
func TestH2ClientMemberGone(t *testing.T) {
	gone := rawServer(t, func(net.Conn) {}) // closes each connection at once
	silent, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { silent.Close() })
	var held []net.Conn
	var mu sync.Mutex
	go func() {
		for {
			c, err := silent.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			held = append(held, c)
			mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		mu.Lock()
		for _, c := range held {
			c.Close()
		}
		mu.Unlock()
	})
	closing := newBackend(t, gone)
	closing.opts.Protocol = H2C
	mute := newBackend(t, silent.Addr().String())
	mute.opts.Protocol = H2C
	mute.opts.ConnectTimeout = 300 * time.Millisecond
	addr := proxyUnder(t, New(Config{}), testRouter{
		{prefix: "/closing", route: &Route{Backend: closing}},
		{prefix: "/mute", route: &Route{Backend: mute}},
	}, selfSigned(t))
	client := h2TestClient()
	for _, c := range []struct {
		path string
		want int
	}{{"/closing", 502}, {"/mute", 504}} {
		resp, err := client.Get("https://" + addr + c.path)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != c.want {
			t.Errorf("%s: status %d, want %d", c.path, resp.StatusCode, c.want)
		}
	}
}

// TestH2ClientWindowBelowZero: a member's SETTINGS may lower the initial
// window below what a stream has sent (RFC 9113 section 6.9.2), leaving
// its window negative; the body's end then goes out as an empty DATA
// frame, which no window holds back.
func TestH2ClientWindowBelowZero(t *testing.T) {
	lowered := make(chan struct{})
	member := rawH2Member(t, func(n int, fr *http2.Framer, c net.Conn) {
		var id uint32
		got := 0
		for {
			f, err := fr.ReadFrame()
			if err != nil {
				return
			}
			switch f := f.(type) {
			case *http2.SettingsFrame:
				if !f.IsAck() {
					fr.WriteSettingsAck()
				} else if id != 0 {
					close(lowered) // applied before it was acknowledged
				}
			case *http2.MetaHeadersFrame:
				id = f.StreamID
			case *http2.DataFrame:
				got += len(f.Data())
				if got == 10 && !f.StreamEnded() {
					fr.WriteSettings(http2.Setting{ID: http2.SettingInitialWindowSize, Val: 0})
				}
				if f.StreamEnded() {
					answerH2(fr, id, fmt.Sprint(got))
				}
			}
		}
	})
	be := newBackend(t, member)
	be.opts.Protocol = H2C
	addr := proxyUnder(t, New(Config{}), oneRoute(be), nil)
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.WriteString(c, "POST / HTTP/1.1\r\nHost: a.example\r\nTransfer-Encoding: chunked\r\n\r\na\r\n0123456789\r\n"); err != nil {
		t.Fatal(err)
	}
	select {
	case <-lowered:
	case <-time.After(10 * time.Second):
		t.Fatal("the member's SETTINGS were not acknowledged")
	}
	if _, err := io.WriteString(c, "0\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 || string(b) != "10" {
		t.Fatalf("%d %q, want 200 \"10\"", resp.StatusCode, b)
	}
}
