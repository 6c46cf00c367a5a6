package bfd

import (
	"net/netip"
	"syscall"
	"testing"
	"time"
)

// BenchmarkSessionCPU is what a session costs the host in CPU per packet
// sent and taken: two endpoints of this process at 10 ms each way for
// about a second, the process's CPU time over the packets both sent and
// read (each packet is sent by one and read by the other, so the figure
// is one send and one read).
func BenchmarkSessionCPU(b *testing.B) {
	p := Params{MinTx: 10 * time.Millisecond, MinRx: 10 * time.Millisecond, Multiplier: 3}
	pa, pb := freeUDPPort(b), freeUDPPort(b)
	ea := New(Config{Port: pa, PeerPort: pb})
	eb := New(Config{Port: pb, PeerPort: pa})
	defer ea.Close()
	defer eb.Close()
	lo := netip.MustParseAddr("127.0.0.1")
	if err := ea.Set(map[netip.Addr]Params{lo: p}); err != nil {
		b.Fatal(err)
	}
	if err := eb.Set(map[netip.Addr]Params{lo: p}); err != nil {
		b.Fatal(err)
	}
	waitFor(b, "up", 5*time.Second, stateIs(ea, Up))
	b.ResetTimer()
	for range b.N {
		before := cpu()
		sa, sb := ea.Stats().Sent+eb.Stats().Sent, ea.Stats().Received+eb.Stats().Received
		time.Sleep(time.Second)
		used := cpu() - before
		sent := ea.Stats().Sent + eb.Stats().Sent - sa
		read := ea.Stats().Received + eb.Stats().Received - sb
		if read == 0 {
			b.Fatal("no packets")
		}
		b.ReportMetric(float64(used.Microseconds())/float64(read), "µs-cpu/packet")
		b.ReportMetric(float64(sent), "packets-sent")
	}
}

func cpu() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
