package tenantbgp

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/netip"
	"syscall"
	"testing"
	"time"
)

// hostDial is Attachments whose namespace is the host's: DialInside
// dials as d would.
type hostDial struct{}

func (hostDial) DialInside(ctx context.Context, _ string, d *net.Dialer, network, addr string) (net.Conn, error) {
	return d.DialContext(ctx, network, addr)
}

func (hostDial) InNamespace(_ string, fn func() error) error { return fn() }

// A tunnel keeps the gobgp connection it carries when gobgp dials it
// again (a connect that crossed the session's establishment): the new
// one is closed, the one in place carries on; once gobgp closes that
// one, the next dial is carried.
func TestTunnelKeepsTheConnectionInPlace(t *testing.T) {
	t.Parallel()
	speaker, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer speaker.Close()
	accepted := make(chan net.Conn, 4)
	go func() {
		for {
			c, err := speaker.Accept()
			if err != nil {
				return
			}
			accepted <- c
		}
	}()
	local := netip.MustParseAddr("127.77.0.250")
	secret := newLoopbackSecret()
	tun, err := openTunnel(hostDial{}, "t", local, netip.MustParseAddrPort(speaker.Addr().String()), "", secret, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer tun.close()
	dial := func() net.Conn {
		t.Helper()
		d := &net.Dialer{Timeout: 3 * time.Second, LocalAddr: &net.TCPAddr{IP: local.AsSlice()},
			Control: func(_, _ string, rc syscall.RawConn) error { return setMD5(rc, local, secret) }}
		c, err := d.Dial("tcp", netip.AddrPortFrom(local, tun.port()).String())
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	through := func(c net.Conn, s net.Conn, msg string) error {
		if _, err := c.Write([]byte(msg)); err != nil {
			return err
		}
		_ = s.SetReadDeadline(time.Now().Add(5 * time.Second))
		b := make([]byte, len(msg))
		if _, err := io.ReadFull(s, b); err != nil {
			return err
		}
		if string(b) != msg {
			return fmt.Errorf("read %q, want %q", b, msg)
		}
		return nil
	}
	c1 := dial()
	defer c1.Close()
	s1 := <-accepted
	defer s1.Close()
	if err := through(c1, s1, "open"); err != nil {
		t.Fatalf("the first connection: %v", err)
	}
	c2 := dial()
	defer c2.Close()
	_ = c2.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := c2.Read(make([]byte, 1)); err != io.EOF {
		t.Fatalf("a second connection while the first is carried: read %v, want it closed", err)
	}
	if err := through(c1, s1, "keepalive"); err != nil {
		t.Fatalf("the first connection after a second dial: %v", err)
	}
	select {
	case s := <-accepted:
		s.Close()
		t.Fatal("the second connection reached the speaker")
	default:
	}
	// gobgp gives up on the first: the speaker's side ends, and the
	// next dial is carried.
	c1.Close()
	_ = s1.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := s1.Read(make([]byte, 1)); err != io.EOF {
		t.Fatalf("the speaker's side of a closed connection: %v", err)
	}
	var c3 net.Conn
	deadline := time.Now().Add(5 * time.Second)
	for {
		c3 = dial()
		select {
		case s3 := <-accepted:
			defer s3.Close()
			defer c3.Close()
			if err := through(c3, s3, "open again"); err != nil {
				t.Fatalf("a new connection after the first ended: %v", err)
			}
			return
		case <-time.After(200 * time.Millisecond):
		}
		c3.Close() // the first's carry had not ended yet
		if time.Now().After(deadline) {
			t.Fatal("no new connection carried after the first ended")
		}
	}
}
