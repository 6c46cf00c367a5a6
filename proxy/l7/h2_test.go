package l7

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
)

func h2TestClient() *http.Client {
	return &http.Client{Transport: &http2.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true, NextProtos: []string{"h2"}}}}
}

func TestHTTP2(t *testing.T) {
	protoEcho := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Backend-Proto", r.Proto)
		echoHandler(w, r)
	})
	h1 := newBackend(t, backendServer(t, protoEcho))
	h2c := newBackend(t, h2cServer(t, protoEcho))
	h2c.opts.Protocol = H2C
	addr := proxyUnder(t, New(Config{MaxHeaderCount: 20}), testRouter{
		{prefix: "/h2c", route: &Route{Backend: h2c}},
		{prefix: "/redirect", route: &Route{RedirectHTTPS: true}},
		{prefix: "/", route: &Route{Backend: h1}},
	}, selfSigned(t))
	client := h2TestClient()
	big := bytes.Repeat([]byte("x"), 3<<20)
	tests := []struct {
		name, method, path string
		body               []byte
		hdr                int
		status             int
		backendProto       string
	}{
		{"get to HTTP/1.1 member", "GET", "/a", nil, 0, 200, "HTTP/1.1"},
		{"post to HTTP/1.1 member", "POST", "/a", big, 0, 200, "HTTP/1.1"},
		{"get to h2c member", "GET", "/h2c", nil, 0, 200, "HTTP/2.0"},
		{"post to h2c member", "POST", "/h2c", big, 0, 200, "HTTP/2.0"},
		{"too many fields", "GET", "/a", nil, 30, 431, ""},
		{"redirect", "GET", "/redirect", nil, 0, 301, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			req, _ := http.NewRequest(tc.method, "https://"+addr+tc.path, bytes.NewReader(tc.body))
			for i := range tc.hdr {
				req.Header.Set(fmt.Sprintf("X-F%d", i), "v")
			}
			resp, err := client.Transport.RoundTrip(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			io.Copy(io.Discard, resp.Body)
			if resp.StatusCode != tc.status || resp.ProtoMajor != 2 {
				t.Fatalf("status %d %s, want %d over HTTP/2", resp.StatusCode, resp.Proto, tc.status)
			}
			if tc.backendProto == "" {
				return
			}
			if got := resp.Header.Get("X-Backend-Proto"); got != tc.backendProto {
				t.Errorf("member spoke %s, want %s", got, tc.backendProto)
			}
			if got := resp.Header.Get("X-Len"); got != fmt.Sprint(len(tc.body)) {
				t.Errorf("member got %s body bytes, want %d", got, len(tc.body))
			}
			if got := resp.Header.Get("X-Xfp"); got != "https" {
				t.Errorf("X-Forwarded-Proto %q", got)
			}
			if got := resp.Header.Get("X-Secret"); got != "" && tc.backendProto == "HTTP/1.1" {
				t.Errorf("Connection-listed response field relayed: %q", got)
			}
		})
	}
}

// h2cServer serves h on a cleartext HTTP/2 (prior knowledge) listener.
func h2cServer(t testing.TB, h http.Handler) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var p http.Protocols
	p.SetUnencryptedHTTP2(true)
	srv := &http.Server{Handler: h, Protocols: &p}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	return ln.Addr().String()
}

// rawCodec carries []byte messages for gRPC.
type rawCodec struct{}

func (rawCodec) Marshal(v any) ([]byte, error) { return *(v.(*[]byte)), nil }
func (rawCodec) Unmarshal(b []byte, v any) error {
	*(v.(*[]byte)) = append([]byte(nil), b...)
	return nil
}
func (rawCodec) Name() string { return "raw" }

var bidiDesc = grpc.StreamDesc{StreamName: "Bidi", ServerStreams: true, ClientStreams: true}

// TestGRPCBidi runs a bidirectional gRPC stream through the proxy: TLS
// with ALPN h2 from the client, h2c to the member, trailers back.
func TestGRPCBidi(t *testing.T) {
	gs := grpc.NewServer(grpc.ForceServerCodec(rawCodec{}))
	desc := bidiDesc
	desc.Handler = func(_ any, st grpc.ServerStream) error {
		for {
			var msg []byte
			if err := st.RecvMsg(&msg); err != nil {
				if errors.Is(err, io.EOF) {
					st.SetTrailer(metadata.Pairs("x-count", "done"))
					return nil
				}
				return err
			}
			reply := append([]byte("echo:"), msg...)
			if err := st.SendMsg(&reply); err != nil {
				return err
			}
		}
	}
	gs.RegisterService(&grpc.ServiceDesc{ServiceName: "test.Echo", HandlerType: (*any)(nil), Streams: []grpc.StreamDesc{desc}}, struct{}{})
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	go gs.Serve(ln)
	defer gs.Stop()
	be := newBackend(t, ln.Addr().String())
	be.opts.Protocol = H2C
	addr := proxyUnder(t, New(Config{}), oneRoute(be), selfSigned(t))

	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(credentials.NewTLS(&tls.Config{InsecureSkipVerify: true})),
		grpc.WithDefaultCallOptions(grpc.ForceCodec(rawCodec{})))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	st, err := conn.NewStream(ctx, &bidiDesc, "/test.Echo/Bidi")
	if err != nil {
		t.Fatal(err)
	}
	// Interleave: each reply must arrive before the next message is sent,
	// which only works if both directions stream.
	for i := range 50 {
		msg := []byte(fmt.Sprintf("m%d-%s", i, strings.Repeat("z", i*1000)))
		if err := st.SendMsg(&msg); err != nil {
			t.Fatal(err)
		}
		var got []byte
		if err := st.RecvMsg(&got); err != nil {
			t.Fatal(err)
		}
		if string(got) != "echo:"+string(msg) {
			t.Fatalf("reply %d: %d bytes", i, len(got))
		}
	}
	if err := st.CloseSend(); err != nil {
		t.Fatal(err)
	}
	var tail []byte
	if err := st.RecvMsg(&tail); !errors.Is(err, io.EOF) {
		t.Fatalf("end of stream: %v", err)
	}
	if got := st.Trailer().Get("x-count"); len(got) != 1 || got[0] != "done" {
		t.Errorf("trailer %v", st.Trailer())
	}
}

// TestRapidReset opens and resets streams as fast as it can and expects a
// GOAWAY.
func TestRapidReset(t *testing.T) {
	be := newBackend(t, backendServer(t, http.HandlerFunc(echoHandler)))
	addr := proxyUnder(t, New(Config{H2MaxResetsPerSecond: 50, H2ResetBurst: 100}), oneRoute(be), selfSigned(t))
	c, err := tls.Dial("tcp", addr, &tls.Config{InsecureSkipVerify: true, NextProtos: []string{"h2"}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := io.WriteString(c, http2.ClientPreface); err != nil {
		t.Fatal(err)
	}
	fr := http2.NewFramer(c, c)
	if err := fr.WriteSettings(); err != nil {
		t.Fatal(err)
	}
	var hb bytes.Buffer
	enc := hpack.NewEncoder(&hb)
	for _, f := range [][2]string{{":method", "GET"}, {":scheme", "https"}, {":authority", "x"}, {":path", "/"}} {
		enc.WriteField(hpack.HeaderField{Name: f[0], Value: f[1]})
	}
	goAway := make(chan *http2.GoAwayFrame, 1)
	go func() {
		for {
			f, err := fr.ReadFrame()
			if err != nil {
				close(goAway)
				return
			}
			if g, ok := f.(*http2.GoAwayFrame); ok {
				goAway <- g
				return
			}
		}
	}()
	_ = c.SetWriteDeadline(time.Now().Add(5 * time.Second))
	for id := uint32(1); id < 2000; id += 2 {
		if err := fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: hb.Bytes(), EndStream: true, EndHeaders: true}); err != nil {
			break // cut off
		}
		if err := fr.WriteRSTStream(id, http2.ErrCodeCancel); err != nil {
			break
		}
	}
	select {
	case g, ok := <-goAway:
		if !ok {
			t.Fatal("connection closed without GOAWAY")
		}
		if g.LastStreamID >= 1999 {
			t.Errorf("GOAWAY last stream %d: the resets were not stopped", g.LastStreamID)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("no GOAWAY")
	}
}
