// Package porttest picks ports for tests that give a port to another
// process (a host under test, pebble, BIND, BIRD) to listen on later.
//
// A port that the kernel handed out to a listener on port 0 and that was
// closed again is in the kernel's ephemeral range, from which it also picks
// the local port of every outgoing connection and of every other listener
// on port 0: in the moment between the pick and the other process's bind,
// any test of any package running beside it can take the port. So Pick
// chooses at random among the ports below that range, which the kernel
// never hands out by itself, checks that each is free for TCP and UDP on
// every address asked for, and never gives a port twice in one process.
package porttest

import (
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"strconv"
	"sync"
	"testing"
)

var (
	mu    sync.Mutex
	given = map[int]bool{}
)

// span is how many ports below the ephemeral range Pick chooses among.
const span = 16384

// ephemeralLow is the first port of the kernel's ephemeral range
// (net.ipv4.ip_local_port_range), 32768 when it cannot be read.
func ephemeralLow() int {
	data, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return 32768
	}
	var lo, hi int
	if _, err := fmt.Sscan(string(data), &lo, &hi); err != nil || lo <= 1024 {
		return 32768
	}
	return lo
}

// Range is the ports Pick chooses among: [lo, hi].
func Range() (lo, hi int) {
	hi = ephemeralLow() - 1
	lo = max(1025, hi-span+1)
	return lo, hi
}

// Pick returns a port free for TCP and UDP on each of ips (127.0.0.1 when
// none is given), outside the kernel's ephemeral range and not returned
// before in this process.
func Pick(tb testing.TB, ips ...string) int {
	tb.Helper()
	if len(ips) == 0 {
		ips = []string{"127.0.0.1"}
	}
	lo, hi := Range()
	mu.Lock()
	defer mu.Unlock()
	for range 1000 {
		port := lo + rand.IntN(hi-lo+1)
		if given[port] || !free(port, ips) {
			continue
		}
		given[port] = true
		return port
	}
	tb.Fatalf("no port in %d-%d free on %v", lo, hi, ips)
	return 0
}

// Ports returns n distinct ports as Pick does.
func Ports(tb testing.TB, n int, ips ...string) []int {
	tb.Helper()
	out := make([]int, n)
	for i := range out {
		out[i] = Pick(tb, ips...)
	}
	return out
}

// Addr returns ip:port with a port Pick chose for ip.
func Addr(tb testing.TB, ip string) string {
	tb.Helper()
	return net.JoinHostPort(ip, strconv.Itoa(Pick(tb, ip)))
}

// Addrs returns n distinct addresses on ip as Addr does.
func Addrs(tb testing.TB, ip string, n int) []string {
	tb.Helper()
	out := make([]string, n)
	for i := range out {
		out[i] = Addr(tb, ip)
	}
	return out
}

// free reports whether port can be bound for TCP and UDP on every ip.
func free(port int, ips []string) bool {
	for _, ip := range ips {
		addr := net.JoinHostPort(ip, strconv.Itoa(port))
		l, err := net.Listen("tcp", addr)
		if err != nil {
			return false
		}
		l.Close()
		u, err := net.ListenPacket("udp", addr)
		if err != nil {
			return false
		}
		u.Close()
	}
	return true
}
