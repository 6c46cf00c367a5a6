package porttest

import (
	"net"
	"strconv"
	"testing"
)

func TestPickOutsideTheEphemeralRange(t *testing.T) {
	lo, hi := Range()
	if hi >= ephemeralLow() || lo > hi || lo <= 1024 {
		t.Fatalf("range %d-%d, ephemeral from %d", lo, hi, ephemeralLow())
	}
	seen := map[int]bool{}
	for _, p := range Ports(t, 64, "127.0.0.1", "::1") {
		if p < lo || p > hi {
			t.Errorf("port %d outside %d-%d", p, lo, hi)
		}
		if seen[p] {
			t.Errorf("port %d given twice", p)
		}
		seen[p] = true
		// Free for both protocols when given.
		if !free(p, []string{"127.0.0.1", "::1"}) {
			t.Errorf("port %d is not free", p)
		}
	}
}

func TestPortInUseIsNotFree(t *testing.T) {
	p := Pick(t)
	l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.2", strconv.Itoa(p)))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if free(p, []string{"127.0.0.1", "127.0.0.2"}) {
		t.Errorf("port %d held for TCP on 127.0.0.2 was found free", p)
	}
	u, err := net.ListenPacket("udp", net.JoinHostPort("127.0.0.3", strconv.Itoa(p)))
	if err != nil {
		t.Fatal(err)
	}
	defer u.Close()
	if free(p, []string{"127.0.0.3"}) {
		t.Errorf("port %d held for UDP on 127.0.0.3 was found free", p)
	}
}
