package l7

import (
	"bytes"
	"crypto/tls"
	"io"
	"net/http"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

// TestH2SlowHeaderBlock trickles a header block in CONTINUATION frames
// that never end it, and sends only the preface without SETTINGS: as an
// HTTP/1.1 request head, the block (and the preface with SETTINGS) has
// HeaderTimeout, whatever arrives meanwhile, and then a GOAWAY.
func TestH2SlowHeaderBlock(t *testing.T) {
	t.Parallel()
	const header = 400 * time.Millisecond
	addr := abuseProxy(t, Config{HeaderTimeout: header, IdleTimeout: time.Minute}, nil)
	t.Run("continuations", func(t *testing.T) {
		t.Parallel()
		h := dialH2(t, addr)
		blk := h.block()
		t0 := time.Now()
		_ = h.write(func(fr *http2.Framer) error {
			return fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: blk[:1], EndStream: true})
		})
		// One byte of the block every 100 ms does not move the deadline.
		// (The block has more bytes than HeaderTimeout lets through.)
		go func() {
			for i := 1; i < len(blk)-1; i++ {
				select {
				case <-h.done:
					return
				case <-time.After(100 * time.Millisecond):
				}
				_ = h.write(func(fr *http2.Framer) error {
					return fr.WriteContinuation(1, false, blk[i:i+1])
				})
			}
		}()
		wantCode(t, h.closedWith(t, 5*time.Second), http2.ErrCodeEnhanceYourCalm)
		if d := time.Since(t0); d < header-header/8 {
			t.Errorf("closed after %v, before HeaderTimeout %v", d, header)
		}
	})
	t.Run("preface_without_settings", func(t *testing.T) {
		t.Parallel()
		c, err := tls.Dial("tcp", addr, &tls.Config{InsecureSkipVerify: true, NextProtos: []string{"h2"}})
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		if _, err := io.WriteString(c, http2.ClientPreface); err != nil {
			t.Fatal(err)
		}
		_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
		fr := http2.NewFramer(io.Discard, c)
		for {
			f, err := fr.ReadFrame()
			if err != nil {
				t.Fatalf("no GOAWAY before the connection ended: %v", err)
			}
			if g, ok := f.(*http2.GoAwayFrame); ok {
				wantCode(t, g.ErrCode, http2.ErrCodeEnhanceYourCalm)
				return
			}
		}
	})
}

// TestH2IdleTimeoutIgnoresPings keeps a connection without streams busy
// with PINGs, and leaves another silent after a request: both end at
// IdleTimeout with a GOAWAY. A request that outlasts IdleTimeout is not
// cut, and its connection has the whole IdleTimeout after it.
func TestH2IdleTimeoutIgnoresPings(t *testing.T) {
	t.Parallel()
	const idle = 400 * time.Millisecond
	slow := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/slow" {
			time.Sleep(3 * idle)
		}
		_, _ = io.WriteString(w, "ok")
	})
	addr := abuseProxy(t, Config{IdleTimeout: idle}, slow)
	t.Run("pings", func(t *testing.T) {
		t.Parallel()
		h := dialH2(t, addr)
		t0 := time.Now()
		go func() {
			for i := 0; ; i++ {
				select {
				case <-h.done:
					return
				case <-time.After(50 * time.Millisecond):
				}
				if h.write(func(fr *http2.Framer) error {
					if err := fr.WritePing(false, [8]byte{byte(i)}); err != nil {
						return err
					}
					return fr.WriteWindowUpdate(0, 1)
				}) != nil {
					return
				}
			}
		}()
		wantCode(t, h.closedWith(t, 5*time.Second), http2.ErrCodeNo)
		if d := time.Since(t0); d < idle-idle/8 {
			t.Errorf("closed after %v, before IdleTimeout %v", d, idle)
		}
	})
	for _, path := range []string{"/", "/slow"} {
		t.Run("after_request"+path, func(t *testing.T) {
			t.Parallel()
			h := dialH2(t, addr)
			blk := h.blockPath(path)
			_ = h.write(func(fr *http2.Framer) error {
				return fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: blk, EndStream: true, EndHeaders: true})
			})
			t0 := time.Now()
			deadline := time.Now().Add(10 * time.Second)
			for {
				if v, ok := h.status.Load(uint32(1)); ok {
					if v != "200" {
						t.Fatalf("status %v", v)
					}
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("no response (GOAWAY code+1: %d)", h.goAway.Load())
				}
				time.Sleep(10 * time.Millisecond)
			}
			answered := time.Now()
			wantCode(t, h.closedWith(t, 5*time.Second), http2.ErrCodeNo)
			if d := time.Since(answered); d < idle/4 {
				t.Errorf("closed %v after the response (request took %v), IdleTimeout %v", d, answered.Sub(t0), idle)
			}
		})
	}
}

// blockPath encodes a GET request head for path.
func (h *h2raw) blockPath(path string) []byte {
	h.hb.Reset()
	for _, f := range [][2]string{{":method", "GET"}, {":scheme", "https"}, {":authority", "x"}, {":path", path}} {
		_ = h.enc.WriteField(hpack.HeaderField{Name: f[0], Value: f[1]})
	}
	return bytes.Clone(h.hb.Bytes())
}
