package l7

import (
	"bytes"
	"io"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

// TestH2MemberLateHeaderBlocksBounded: an HTTP/2 member may send a head
// or trailers for a stream the proxy has ended or reset, before it saw
// that; each such block is decoded and dropped, for no request and no
// tenant. A member that keeps sending them (here 1,000 after one answered
// request) has its connection ended with ENHANCE_YOUR_CALM once they pass
// two per stream opened and a few more, while one late block a stream is
// let be. (The member reads the GOAWAY only after its writes; the test
// watches the connection end.)
func TestH2MemberLateHeaderBlocksBounded(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		late    int
		goAway  bool // the connection ends
		answers int
	}{{"a late block per stream", 1, false, 3}, {"a flood of late blocks", 1000, true, 1}} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var ended atomic.Bool // the proxy closed the member connection
			member := rawH2Frames(t, func(_ int, fr *http2.Framer) func(http2.Frame) error {
				var hb bytes.Buffer
				enc := hpack.NewEncoder(&hb)
				enc.WriteField(hpack.HeaderField{Name: ":status", Value: "200"})
				head := append([]byte(nil), hb.Bytes()...)
				hb.Reset()
				enc.WriteField(hpack.HeaderField{Name: "x-late", Value: string(bytes.Repeat([]byte("l"), 1000))})
				late := append([]byte(nil), hb.Bytes()...)
				return func(f http2.Frame) error {
					switch f := f.(type) {
					case nil:
						ended.Store(true)
					case *http2.MetaHeadersFrame:
						if err := fr.WriteHeaders(http2.HeadersFrameParam{StreamID: f.StreamID, BlockFragment: head, EndHeaders: true}); err != nil {
							return err
						}
						if err := fr.WriteData(f.StreamID, true, []byte("body")); err != nil {
							return err
						}
						for range tc.late {
							// The literal is indexed once; later blocks
							// refer to it, as a member's would.
							if err := fr.WriteHeaders(http2.HeadersFrameParam{StreamID: f.StreamID, BlockFragment: late, EndHeaders: true, EndStream: true}); err != nil {
								return err
							}
						}
					}
					return nil
				}
			})
			be := newBackend(t, member)
			be.opts.Protocol = H2C
			addr := proxyUnder(t, New(Config{}), oneRoute(be), nil)
			client := h2cTestClient()
			for i := range tc.answers {
				req, _ := http.NewRequest("GET", "http://"+addr+"/", nil)
				req.Host = "a.example"
				resp, err := client.Do(req)
				if err != nil {
					t.Fatalf("request %d: %v", i, err)
				}
				b, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				if resp.StatusCode != 200 || string(b) != "body" {
					t.Fatalf("request %d: %d %q", i, resp.StatusCode, b)
				}
			}
			wait := 500 * time.Millisecond
			if tc.goAway {
				wait = 10 * time.Second
			}
			for deadline := time.Now().Add(wait); !ended.Load() && time.Now().Before(deadline); {
				time.Sleep(10 * time.Millisecond)
			}
			if got := ended.Load(); got != tc.goAway {
				t.Fatalf("the proxy ended the member connection: %v, want %v", got, tc.goAway)
			}
		})
	}
}
