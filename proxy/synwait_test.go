package proxy

import (
	"fmt"
	"io"
	"net"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// silentMember listens on loopback with a full accept queue (a backlog
// of 0, one connection queued): the kernel drops every further SYN, as a
// node drops the SYNs its rules send to an endpoint that cannot answer.
func silentMember(t *testing.T) string {
	t.Helper()
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Close(fd) })
	if err := unix.Bind(fd, &unix.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}); err != nil {
		t.Fatal(err)
	}
	if err := unix.Listen(fd, 0); err != nil {
		t.Fatal(err)
	}
	sa, err := unix.Getsockname(fd)
	if err != nil {
		t.Fatal(err)
	}
	addr := fmt.Sprintf("127.0.0.1:%d", sa.(*unix.SockaddrInet4).Port)
	for range 4 {
		c, err := net.DialTimeout("tcp", addr, 200*time.Millisecond)
		if err != nil {
			return addr // the queue is full: this SYN was dropped
		}
		t.Cleanup(func() { c.Close() })
	}
	t.Fatalf("%s still accepts connections", addr)
	return ""
}

// A member that drops SYNs (behind a NodePort, a pod the node's rules
// send to before it can answer) costs a connection at most synWait, not
// the pool's connectTimeout (5s here): the attempt ends when the kernel
// would send the SYN again, and the next member answers. Before, a
// client behind a 3s timeout gave up first.
func TestDroppedSYNTriesTheNextMemberAfterSynWait(t *testing.T) {
	t.Parallel()
	silent := silentMember(t)
	good := startBackend(t, "127.0.0.1", named("G"))
	p, m := newProxy(t, Config{})
	port := freePort(t)
	addr := vipAddr("127.0.0.2", port)
	lb := l4LB("api", "127.0.0.2", port, "tcp", silent, good.addr)
	lb.Pools["app"].ConnectTimeout = dur(5 * time.Second)
	update(t, p, lb)
	var slowest time.Duration
	for i := range 8 {
		start := time.Now()
		c, err := net.DialTimeout("tcp", addr, 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		buf := make([]byte, 1)
		_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
		_, err = io.ReadFull(c, buf)
		c.Close()
		took := time.Since(start)
		slowest = max(slowest, took)
		if err != nil || string(buf) != "G" {
			t.Fatalf("connection %d: %q %v after %v", i, buf, err, took)
		}
		if took > 3*time.Second {
			t.Errorf("connection %d answered after %v: the dropped SYN held it past synWait (%v)", i, took, time.Second)
		}
	}
	var timeouts int64
	for _, ms := range m.Report().Members {
		if ms.Name == silent {
			timeouts += ms.ByStatus[StatusConnectTimeout]
		}
	}
	if timeouts == 0 {
		t.Fatalf("no connection tried the silent member first (its connect timeouts: %v)", m.Report().Members)
	}
	t.Logf("8 connections, %d tried the silent member first; the slowest answered after %v", timeouts, slowest.Round(time.Millisecond))
}
