package main

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"strings"
	"time"
)

// freePort is a TCP port free on 127.0.0.1 now.
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// waitListening waits until a socket listens on addr (an IPv4 host:port),
// reading /proc/net/tcp so that no probe connection reaches the iperf3
// server and no probe bind races the proxy's.
func waitListening(addr string) error {
	ap, err := netip.ParseAddrPort(addr)
	if err != nil || !ap.Addr().Is4() {
		return fmt.Errorf("%q is not an IPv4 address and port", addr)
	}
	a := ap.Addr().As4()
	want := fmt.Sprintf("%02X%02X%02X%02X:%04X", a[3], a[2], a[1], a[0], ap.Port())
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		b, err := os.ReadFile("/proc/net/tcp")
		if err != nil {
			return err
		}
		for _, line := range strings.Split(string(b), "\n") {
			f := strings.Fields(line)
			if len(f) > 3 && f[1] == want && f[3] == "0A" { // TCP_LISTEN
				return nil
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	return errors.New(addr + " did not listen within 10s")
}
