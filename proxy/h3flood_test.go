package proxy

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/quic-go/quic-go"

	"github.com/teapot-lb/teapot-lb/proxy/metrics"
	"github.com/teapot-lb/teapot-lb/proxy/snapshot"
)

// capturePC is a net.PacketConn that keeps the first datagram written and
// delivers nothing: it turns a quic-go dial into one client Initial.
type capturePC struct {
	once sync.Once
	got  chan []byte
	done chan struct{}
}

func (c *capturePC) ReadFrom([]byte) (int, net.Addr, error) {
	<-c.done
	return 0, nil, net.ErrClosed
}

func (c *capturePC) WriteTo(b []byte, _ net.Addr) (int, error) {
	c.once.Do(func() { c.got <- append([]byte(nil), b...) })
	return len(b), nil
}
func (c *capturePC) Close() error                     { return nil }
func (c *capturePC) LocalAddr() net.Addr              { return &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 9} }
func (c *capturePC) SetDeadline(time.Time) error      { return nil }
func (c *capturePC) SetReadDeadline(time.Time) error  { return nil }
func (c *capturePC) SetWriteDeadline(time.Time) error { return nil }

// clientInitial returns a fresh client Initial packet (its own connection
// IDs, a ClientHello for gw.acme.example with ALPN h3) for target.
func clientInitial(t testing.TB, target *net.UDPAddr) []byte {
	t.Helper()
	pc := &capturePC{got: make(chan []byte, 1), done: make(chan struct{})}
	tr := &quic.Transport{Conn: pc}
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		// X25519 alone: the ClientHello fits one Initial, so the server
		// can answer it with its whole first flight.
		_, _ = tr.Dial(ctx, target, &tls.Config{InsecureSkipVerify: true, NextProtos: []string{"h3"}, ServerName: "gw.acme.example",
			CurvePreferences: []tls.CurveID{tls.X25519}}, &quic.Config{})
	}()
	var b []byte
	select {
	case b = <-pc.got:
	case <-time.After(10 * time.Second):
		t.Fatal("no Initial")
	}
	cancel()
	close(pc.done)
	_ = tr.Close()
	return b
}

// TestHTTP3InitialFlood floods an https listener with http3 with client
// Initials from 400 sources that never answer (what a spoofed-source
// flood looks like to the server): the host sends at most 3 bytes for
// each byte received (the anti-amplification limit), past H3RetryAbove
// handshakes in flight new sources only get a stateless Retry, so the
// flood holds at most that many connections of the tenant's budget, and
// a real client is served meanwhile. (quic-go drops the Initials it
// cannot answer with a Retry at once: a burst gets fewer Retries than
// sources.)
func TestHTTP3InitialFlood(t *testing.T) {
	p, target, _ := startH3(t)
	ua := net.UDPAddrFromAddrPort(mustAddrPort(t, target))
	const sources = 400
	pkts := make([][]byte, sources)
	for i := range pkts {
		pkts[i] = clientInitial(t, ua)
	}
	var in, out, retries atomic.Int64
	// each is what each source got.
	each := make([]atomic.Int64, sources)
	var wg sync.WaitGroup
	conns := make([]*net.UDPConn, sources)
	for i := range conns {
		c, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
		if err != nil {
			t.Fatal(err)
		}
		conns[i] = c
		t.Cleanup(func() { c.Close() })
		wg.Go(func() {
			buf := make([]byte, 2048)
			for {
				n, err := c.Read(buf)
				if err != nil {
					return
				}
				out.Add(int64(n))
				each[i].Add(int64(n))
				if n > 0 && buf[0]&0xf0 == 0xf0 { // long header, type Retry (v1)
					retries.Add(1)
				}
			}
		})
	}
	for i, c := range conns {
		if _, err := c.WriteToUDP(pkts[i], ua); err != nil {
			t.Fatal(err)
		}
		in.Add(int64(len(pkts[i])))
	}
	// Every source got its answer: a Retry, or the first flight of a
	// handshake.
	key := snapshot.Key{Addr: mustAddrPort(t, target), Network: snapshot.TCP}
	waitFor(t, 20*time.Second, "the flood's handshakes and Retries", func() bool { return retries.Load() > 0 && p.h3Handshakes(key) >= H3RetryAbove })
	// A real client completes a handshake (through a Retry) and is served.
	client := newH3Client(t, target)
	resp, err := client.do("GET", "https://gw.acme.example/x", nil, "")
	if err != nil {
		var refused []string
		if m, ok := p.metrics.(*metrics.Memory); ok {
			for _, l := range m.Report().Listeners {
				refused = append(refused, fmt.Sprintf("%s %s %v", l.LB, l.Listener, l.Refused))
			}
		}
		t.Fatalf("a client during the flood: %v (handshakes in flight %d, tenant connections %d, refused %v)",
			err, p.h3Handshakes(key), p.tenantBudget("acme").conns.Load(), refused)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("a client during the flood: status %d", resp.StatusCode)
	}
	held := p.tenantBudget("acme").conns.Load()
	client.tr.Close()
	// The flood's handshakes time out (H3HandshakeTimeout): everything
	// the server sent them, retransmissions included, has been sent, and
	// their charges are given back.
	waitFor(t, 30*time.Second, "the flood's handshakes to time out", func() bool {
		return p.h3Handshakes(key) == 0 && p.tenantBudget("acme").conns.Load() == 0
	})
	for _, c := range conns {
		_ = c.SetReadDeadline(time.Now())
	}
	wg.Wait()
	ratio := float64(out.Load()) / float64(in.Load())
	t.Logf("flood: %d bytes in, %d bytes out (factor %.2f), %d Retries, %d connections held", in.Load(), out.Load(), ratio, retries.Load(), held)
	if ratio > 3 {
		t.Errorf("amplification factor %.2f, want at most 3", ratio)
	}
	for i := range each {
		if got, sent := each[i].Load(), int64(len(pkts[i])); got > 3*sent {
			t.Errorf("source %d sent %d bytes and got %d", i, sent, got)
		}
	}
	if held > H3RetryAbove+1 {
		t.Errorf("the flood holds %d connections of the tenant, want at most %d", held, H3RetryAbove+1)
	}
	if retries.Load() == 0 {
		t.Error("no Retry past the handshakes in flight")
	}
}
