package l7

import (
	"bytes"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

// memberFramesProxy serves every request from member, an h2c member
// whose connections are charged to a tenant budget counting into cpu;
// the client connection has no CPU budget, so cpu counts what the
// member's frames cost alone.
func memberFramesProxy(t *testing.T, s *Server, member string, cpu CPU) (string, *http.Client) {
	t.Helper()
	d := &spentDescriptors{}
	d.free.Store(1 << 10)
	be := newBackend(t, member)
	be.opts.Protocol = H2C
	be.opts.Budget = NewMemberBudget(d, cpu)
	addr := proxyUnder(t, s, oneRoute(be), selfSigned(t))
	client := h2TestClient()
	client.Timeout = 20 * time.Second
	t.Cleanup(client.CloseIdleConnections)
	return "https://" + addr + "/", client
}

func getBody(t *testing.T, client *http.Client, url string) (int, string) {
	t.Helper()
	resp, err := client.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// TestH2MemberFramesAreCharged: what a tenant's HTTP/2 member makes the
// proxy read and answer without a response to show for it counts in the
// tenant's CPU budget: PINGs and SETTINGS the proxy acknowledges a unit
// each, WINDOW_UPDATEs a unit per WorkControlFrames, DATA for a stream
// that already ended as control frames and its bytes a unit per 64 KiB,
// as body bytes do, and so does a response's padding.
func TestH2MemberFramesAreCharged(t *testing.T) {
	const pings, settings, updates, dropped, small = 10, 10, 10 * WorkControlFrames, 8 * 16384, 160
	const padded, pad = 258, 255
	member := rawH2Streams(t, func(_ int, fr *http2.Framer) func(*http2.MetaHeadersFrame) error {
		n := 0
		return func(f *http2.MetaHeadersFrame) error {
			n++
			if n > 1 {
				// The second response's body comes in frames of padding.
				var hb bytes.Buffer
				enc := hpack.NewEncoder(&hb)
				enc.WriteField(hpack.HeaderField{Name: ":status", Value: "200"})
				enc.WriteField(hpack.HeaderField{Name: "content-length", Value: "2"})
				fr.WriteHeaders(http2.HeadersFrameParam{StreamID: f.StreamID, BlockFragment: hb.Bytes(), EndHeaders: true})
				for range padded {
					fr.WriteDataPadded(f.StreamID, false, nil, make([]byte, pad))
				}
				return fr.WriteData(f.StreamID, true, []byte("ok"))
			}
			if err := answerH2(fr, f.StreamID, "ok"); err != nil {
				return err
			}
			for range pings {
				fr.WritePing(false, [8]byte{'f', 'l', 'o', 'o', 'd'})
			}
			for range settings {
				fr.WriteSettings()
			}
			for range updates {
				fr.WriteWindowUpdate(0, 1)
			}
			chunk := bytes.Repeat([]byte("x"), 16384)
			for range dropped / len(chunk) {
				fr.WriteData(f.StreamID, false, chunk)
			}
			for range small {
				fr.WriteData(f.StreamID, false, []byte("x"))
			}
			return nil
		}
	})
	cpu := &unitCount{}
	url, client := memberFramesProxy(t, New(Config{}), member, cpu)
	if code, body := getBody(t, client, url); code != 200 || body != "ok" {
		t.Fatalf("first request: %d %q", code, body)
	}
	// The member wrote its frames before it read the second request, so
	// the proxy has read them all once the second response is in.
	if code, body := getBody(t, client, url); code != 200 || body != "ok" {
		t.Fatalf("second request: %d %q", code, body)
	}
	// Frames that carry no byte a client takes count as control frames:
	// those no stream takes, and those of padding alone.
	frames := updates + dropped/16384 + small + padded
	bytes := dropped + small + padded*(pad+1) // a padded frame's length byte is padding too
	want := int64(pings*WorkAnsweredFrame + settings*WorkAnsweredFrame + frames/WorkControlFrames + bytes>>WorkBytesShift)
	// The member's ACKs count too.
	if got := cpu.n.Load(); got < want || got > want+4 {
		t.Errorf("the member's frames charged %d units to its tenant, want %d to %d", got, want, want+4)
	}
}

// TestH2MemberEmptyContinuations: a member whose response head goes on in
// CONTINUATION frames that carry (nearly) nothing has its connection
// ended after h2MaxContinue of them (GOAWAY ENHANCE_YOUR_CALM), and so
// does one whose frames are full of bytes that decode to no field, past
// twice MaxHeaderBytes; the request fails at once rather than at its
// ResponseHeaderTimeout. A head in more CONTINUATION frames of a real
// size is served.
func TestH2MemberEmptyContinuations(t *testing.T) {
	goAway := make(chan http2.ErrCode, 4)
	big := strings.Repeat("v", 30<<10)
	member := rawH2Frames(t, func(_ int, fr *http2.Framer) func(http2.Frame) error {
		told := false // this connection's first GOAWAY is told
		return func(f http2.Frame) error {
			switch f := f.(type) {
			case *http2.GoAwayFrame:
				if !told {
					told = true
					goAway <- f.ErrCode
				}
			case *http2.MetaHeadersFrame:
				var hb bytes.Buffer
				enc := hpack.NewEncoder(&hb)
				enc.WriteField(hpack.HeaderField{Name: ":status", Value: "200"})
				enc.WriteField(hpack.HeaderField{Name: "content-length", Value: "2"})
				if path := f.PseudoValue("path"); path == "/empty" || path == "/fill" {
					// A block that never ends: empty frames, or frames
					// of 16 KiB of HPACK table size updates to 0, which
					// decode to no field. The proxy ends the connection
					// while they are written: the writes stop, the
					// reads go on to its GOAWAY.
					block, fill := hb.Bytes(), []byte(nil)
					if path == "/fill" {
						// Size updates come before the block's fields.
						block, fill = nil, bytes.Repeat([]byte{0x20}, 16384)
					}
					fr.WriteHeaders(http2.HeadersFrameParam{StreamID: f.StreamID, BlockFragment: block})
					for range 1000 {
						if fr.WriteContinuation(f.StreamID, false, fill) != nil {
							break
						}
					}
					return nil
				}
				// 30 KiB of field in frames of 1 KiB: 30 CONTINUATION frames.
				enc.WriteField(hpack.HeaderField{Name: "x-big", Value: big})
				block := hb.Bytes()
				fr.WriteHeaders(http2.HeadersFrameParam{StreamID: f.StreamID, BlockFragment: block[:h2SmallFrame]})
				for block = block[h2SmallFrame:]; len(block) > 0; {
					k := min(len(block), h2SmallFrame)
					fr.WriteContinuation(f.StreamID, k == len(block), block[:k])
					block = block[k:]
				}
				return fr.WriteData(f.StreamID, true, []byte("ok"))
			}
			return nil
		}
	})
	url, client := memberFramesProxy(t, New(Config{ResponseHeaderTimeout: 30 * time.Second}), member, nil)
	resp, err := client.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || string(b) != "ok" || len(resp.Header.Get("X-Big")) != len(big) {
		t.Fatalf("a head in 1 KiB CONTINUATION frames: %d %q, x-big of %d bytes", resp.StatusCode, b, len(resp.Header.Get("X-Big")))
	}

	for _, path := range []string{"empty", "fill"} {
		start := time.Now()
		resp, err = client.Get(url + path)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if took := time.Since(start); resp.StatusCode != http.StatusBadGateway || took > 10*time.Second {
			t.Errorf("/%s: %d after %v, want 502 at once", path, resp.StatusCode, took)
		}
		select {
		case code := <-goAway:
			if code != http2.ErrCodeEnhanceYourCalm {
				t.Errorf("/%s: the member's connection ended with %v, want ENHANCE_YOUR_CALM", path, code)
			}
		case <-time.After(10 * time.Second):
			t.Errorf("/%s: the member got no GOAWAY", path)
		}
	}
}
