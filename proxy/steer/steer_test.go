package steer

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/teapot-lb/teapot-lb/proxy/internal/netnstest"
)

func listen(t *testing.T, addr string) *net.TCPListener {
	t.Helper()
	var lc net.ListenConfig
	lc.SetMultipathTCP(false) // a sockmap takes TCP sockets, not MPTCP ones
	l, err := lc.Listen(context.Background(), "tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	return l.(*net.TCPListener)
}

func rawConn(t *testing.T, l *net.TCPListener) syscall.RawConn {
	t.Helper()
	rc, err := l.SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	return rc
}

// reaches dials dst and reports which listener accepted it, and the
// local address the accepted connection has (nil, "" when refused).
func reaches(t *testing.T, dst string, ls ...*net.TCPListener) (*net.TCPListener, string) {
	t.Helper()
	c, err := net.DialTimeout("tcp", dst, 5*time.Second)
	// A fresh namespace's IPv6 loopback address is, now and then, briefly
	// unroutable right after it was added (ENETUNREACH; seen under load):
	// dial again for up to 2 s.
	for tries := 0; errors.Is(err, syscall.ENETUNREACH) && tries < 100; tries++ {
		time.Sleep(20 * time.Millisecond)
		c, err = net.DialTimeout("tcp", dst, 5*time.Second)
	}
	if err != nil {
		if !errors.Is(err, syscall.ECONNREFUSED) {
			t.Fatalf("dial %s: %v", dst, err)
		}
		return nil, ""
	}
	defer c.Close()
	for _, l := range ls {
		l.SetDeadline(time.Now().Add(200 * time.Millisecond))
		a, err := l.Accept()
		if err == nil {
			defer a.Close()
			return l, a.LocalAddr().String()
		}
	}
	t.Fatalf("dial %s connected, but no listener accepted it", dst)
	return nil, ""
}

func TestSteersDestinationsToSockets(t *testing.T) {
	netnstest.Run(t, []string{"192.0.2.10/32", "192.0.2.11/32", "192.0.2.12/32", "2001:db8::10/128"}, func() {
		s, err := Open(1024)
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		v4, v6 := listen(t, "127.0.0.1:0"), listen(t, "[::1]:0")
		if err := s.SetSocket(1, rawConn(t, v4)); err != nil {
			t.Fatal(err)
		}
		if err := s.SetSocket(2, rawConn(t, v6)); err != nil {
			t.Fatal(err)
		}
		for dst, slot := range map[string]uint32{"192.0.2.10:80": 1, "192.0.2.11:443": 1, "[2001:db8::10]:80": 2} {
			if err := s.Add(netip.MustParseAddrPort(dst), slot); err != nil {
				t.Fatal(err)
			}
		}
		if slot, ok := s.Lookup(netip.MustParseAddrPort("192.0.2.11:443")); !ok || slot != 1 {
			t.Errorf("Lookup = %d, %t; want 1, true", slot, ok)
		}
		for dst, want := range map[string]*net.TCPListener{"192.0.2.10:80": v4, "192.0.2.11:443": v4, "[2001:db8::10]:80": v6} {
			got, local := reaches(t, dst, v4, v6)
			if got != want || local != dst {
				t.Errorf("%s: accepted by %v as %q; want %v as %q", dst, got, local, want.Addr(), dst)
			}
		}
		// Not steered: another address, another port, UDP.
		for _, dst := range []string{"192.0.2.12:80", "192.0.2.10:81"} {
			if got, _ := reaches(t, dst, v4, v6); got != nil {
				t.Errorf("%s is not steered, but %s accepted it", dst, got.Addr())
			}
		}
		u, err := net.ListenPacket("udp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer u.Close()
		if err := s.SetSocket(3, rawConnOf(t, u.(*net.UDPConn))); err != nil {
			t.Fatal(err)
		}
		if err := s.Add(netip.MustParseAddrPort("192.0.2.10:53"), 3); err != nil {
			t.Fatal(err)
		}
		uc, err := net.Dial("udp", "192.0.2.10:53")
		if err != nil {
			t.Fatal(err)
		}
		uc.Write([]byte("x"))
		uc.Close()
		u.SetReadDeadline(time.Now().Add(200 * time.Millisecond))
		if _, _, err := u.ReadFrom(make([]byte, 8)); err == nil {
			t.Error("a UDP datagram was steered; only TCP is")
		}

		// A later program takes over the destinations it steers, and
		// gives them back when it is closed.
		s2, err := Open(16)
		if err != nil {
			t.Fatal(err)
		}
		later := listen(t, "127.0.0.1:0")
		if err := s2.SetSocket(7, rawConn(t, later)); err != nil {
			t.Fatal(err)
		}
		if err := s2.Add(netip.MustParseAddrPort("192.0.2.10:80"), 7); err != nil {
			t.Fatal(err)
		}
		if got, _ := reaches(t, "192.0.2.10:80", v4, later); got != later {
			t.Errorf("with a later program, 192.0.2.10:80 went to %v; want the later program's socket", got)
		}
		if got, _ := reaches(t, "192.0.2.11:443", v4, later); got != v4 {
			t.Errorf("with a later program, 192.0.2.11:443 went to %v; want the first program's socket", got)
		}
		s2.Close()
		if got, _ := reaches(t, "192.0.2.10:80", v4, later); got != v4 {
			t.Errorf("after the later program closed, 192.0.2.10:80 went to %v; want the first program's socket", got)
		}

		// Removed, then the socket closed.
		if err := s.Remove(netip.MustParseAddrPort("192.0.2.11:443")); err != nil {
			t.Fatal(err)
		}
		if got, _ := reaches(t, "192.0.2.11:443", v4, v6); got != nil {
			t.Errorf("192.0.2.11:443 was removed, but %s accepted it", got.Addr())
		}
		v4.Close()
		if got, _ := reaches(t, "192.0.2.10:80", v6); got != nil {
			t.Errorf("the socket of 192.0.2.10:80 was closed, but %s accepted it", got.Addr())
		}
		if err := s.Remove(netip.MustParseAddrPort("192.0.2.11:443")); err != nil {
			t.Errorf("removing twice: %v", err)
		}
	})
}

func rawConnOf(t *testing.T, c *net.UDPConn) syscall.RawConn {
	t.Helper()
	rc, err := c.SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	return rc
}

func TestMapIsBounded(t *testing.T) {
	netnstest.Run(t, nil, func() {
		s, err := Open(1)
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Add(netip.MustParseAddrPort("198.51.100.1:1"), 0); err != nil {
			t.Fatal(err)
		}
		if err := s.Add(netip.MustParseAddrPort("198.51.100.1:2"), 0); err == nil {
			t.Error("a second destination fit a map of one")
		}
		if err := s.Add(netip.MustParseAddrPort("198.51.100.1:1"), 1); err != nil {
			t.Errorf("changing the slot of a destination in a full map: %v", err)
		}
		s.Close()
		s.Close()
		if _, err := Open(0); err == nil {
			t.Error("Open(0) did not fail")
		}
	})
}

// TestOpensWithTheUnitsCapabilities: a process of an unprivileged user
// with CAP_BPF and CAP_NET_ADMIN alone (what the packaged unit grants)
// opens a Steer and steers a connection; without CAP_BPF it cannot, and
// says what is missing.
func TestOpensWithTheUnitsCapabilities(t *testing.T) {
	if os.Getenv("STEER_HELPER") == "1" {
		helperSteer()
		return
	}
	if os.Geteuid() != 0 {
		t.Skip("needs root to start a process as another user")
	}
	for _, tool := range []string{"unshare", "setpriv", "ip"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("%s is not installed (util-linux, iproute2)", tool)
		}
	}
	// The user must reach the binary: a copy in a directory anyone may
	// read (go test's own may not be).
	dir, err := os.MkdirTemp("", "steer-caps")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	self, err := os.ReadFile(os.Args[0])
	if err == nil {
		err = os.Chmod(dir, 0o755)
	}
	bin := filepath.Join(dir, "steer.test")
	if err == nil {
		err = os.WriteFile(bin, self, 0o755)
	}
	if err != nil {
		t.Fatal(err)
	}
	run := func(caps string) (string, error) {
		script := `ip link set lo up && exec setpriv --reuid=65534 --regid=65534 --clear-groups --inh-caps=` + caps +
			` --ambient-caps=` + caps + ` "$0" -test.run='^TestOpensWithTheUnitsCapabilities$'`
		cmd := exec.Command("unshare", "-n", "sh", "-c", script, bin)
		cmd.Env = append(os.Environ(), "STEER_HELPER=1")
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	out, err := run("+bpf,+net_admin")
	if err != nil || !strings.Contains(out, "steered 127.0.0.77:8077 as uid 65534") {
		t.Errorf("with CAP_BPF and CAP_NET_ADMIN: %v\n%s", err, out)
	}
	out, err = run("+net_admin")
	if err == nil || !strings.Contains(out, "operation not permitted: this process lacks CAP_BPF") {
		t.Errorf("without CAP_BPF it opened, or failed without saying why: %v\n%s", err, out)
	}
}

// helperSteer is the process TestOpensWithTheUnitsCapabilities starts.
func helperSteer() {
	fail := func(what string, err error) {
		fmt.Println(what+":", err)
		os.Exit(1)
	}
	s, err := Open(16)
	if err != nil {
		fail("open", err)
	}
	var lc net.ListenConfig
	lc.SetMultipathTCP(false)
	l, err := lc.Listen(context.Background(), "tcp4", "127.0.0.1:0")
	if err != nil {
		fail("listen", err)
	}
	rc, err := l.(*net.TCPListener).SyscallConn()
	if err == nil {
		err = s.SetSocket(0, rc)
	}
	if err != nil {
		fail("set socket", err)
	}
	if err := s.Add(netip.MustParseAddrPort("127.0.0.77:8077"), 0); err != nil {
		fail("add", err)
	}
	c, err := net.DialTimeout("tcp", "127.0.0.77:8077", 5*time.Second)
	if err != nil {
		fail("dial", err)
	}
	defer c.Close()
	l.(*net.TCPListener).SetDeadline(time.Now().Add(5 * time.Second))
	a, err := l.Accept()
	if err != nil {
		fail("accept", err)
	}
	fmt.Printf("steered %s as uid %d\n", a.LocalAddr(), os.Getuid())
	os.Exit(0)
}

// A socket closed before its slot is cleared has already left the
// sockmap: clearing the slot then, or an empty one, is no error; a slot
// past the map is.
func TestClearSocketOfAClosedSocket(t *testing.T) {
	s, err := Open(16)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	l := listen(t, "127.0.0.1:0")
	if err := s.SetSocket(1, rawConn(t, l)); err != nil {
		t.Fatal(err)
	}
	l.Close()
	if err := s.ClearSocket(1); err != nil {
		t.Errorf("clear the slot of a closed socket: %v", err)
	}
	if err := s.ClearSocket(2); err != nil {
		t.Errorf("clear an empty slot: %v", err)
	}
	if err := s.ClearSocket(MaxSockets); err == nil {
		t.Error("clearing a slot past the map: no error")
	}
}
