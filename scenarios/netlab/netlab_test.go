package netlab

import (
	"io"
	"net"
	"net/netip"
	"os"
	"strings"
	"testing"
	"time"
)

func TestLab(t *testing.T) {
	if err := Check(); err != nil {
		t.Skip(err)
	}
	l, err := New()
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	a, err := l.AddHost("a", "192.0.2.1/24", "2001:db8::1/64")
	if err != nil {
		t.Fatal(err)
	}
	b, err := l.AddHost("b", "192.0.2.2/24", "2001:db8::2/64")
	if err != nil {
		t.Fatal(err)
	}

	// A server in b, a client in a, over TCP.
	var ln net.Listener
	if err := b.Do(func() (err error) { ln, err = net.Listen("tcp", "[::]:8080"); return err }); err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			io.WriteString(c, "hello")
			c.Close()
		}
	}()
	for _, addr := range []string{"192.0.2.2:8080", "[2001:db8::2]:8080"} {
		var got []byte
		err := a.Do(func() error {
			c, err := net.DialTimeout("tcp", addr, 2*time.Second)
			if err != nil {
				return err
			}
			defer c.Close()
			got, err = io.ReadAll(c)
			return err
		})
		if err != nil || string(got) != "hello" {
			t.Fatalf("dial %s from a: %q, %v", addr, got, err)
		}
	}
	// The test's own thread is back in its namespace.
	if _, err := net.DialTimeout("tcp", "192.0.2.2:8080", 200*time.Millisecond); err == nil {
		t.Fatal("reached a lab host from outside the lab")
	}

	for _, target := range []string{"192.0.2.2", "2001:db8::2"} {
		macs, err := a.Neighbors("eth0", netip.MustParseAddr(target), 300*time.Millisecond)
		if err != nil {
			t.Fatal(err)
		}
		if len(macs) != 1 || macs[0].String() != b.MAC.String() {
			t.Errorf("who has %s: %v, want [%s]", target, macs, b.MAC)
		}
	}
	if err := b.SetLink(false); err != nil {
		t.Fatal(err)
	}
	if macs, _ := a.Neighbors("eth0", netip.MustParseAddr("192.0.2.2"), 200*time.Millisecond); len(macs) != 0 {
		t.Errorf("unplugged host answered: %v", macs)
	}
	if err := b.SetLink(true); err != nil {
		t.Fatal(err)
	}

	p, err := a.Start("", nil, "sleep", "60")
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if p.Running() {
		t.Error("process survived Close")
	}
	entries, _ := os.ReadDir(netnsDir)
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), l.prefix) {
			t.Errorf("namespace %s survived Close", e.Name())
		}
	}
}
