package scenarios

import (
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/teapot-lb/teapot-lb/scenarios/netlab"
)

// vipTrials is the number of failovers measured per kind.
const vipTrials = 20

// keepalivedAdverts are the VRRP advert intervals compared: keepalived's
// default and a tenth of it.
var keepalivedAdverts = []string{"1", "0.1"}

// failoverRow is one line of the failover table.
type failoverRow struct {
	label string
	lat   latencies
}

// BenchmarkVIPFailover measures, in the network lab, the time from the
// death of the host holding an ARP VIP to the client's next successful
// request (one request every 10ms): teapot-lb with its defaults (20ms
// heartbeats, 5 misses) after a process crash and after a host death,
// and keepalived (VRRPv3) after a host death with its default 1s advert
// and with 100ms.
func BenchmarkVIPFailover(b *testing.B) {
	needTools(b)
	var rows []failoverRow
	b.Run("teapot-lb", func(b *testing.B) {
		l := newVIPLab(b, labOptions{teapot: true})
		for _, kind := range []struct {
			label  string
			unplug bool
		}{{"teapot-lb, process crash", false}, {"teapot-lb, host death", true}} {
			var lat latencies
			for i := range vipTrials {
				a := arpVIP4
				if i%2 == 1 {
					a = arpVIP6
				}
				d, from, _ := l.failover(b, a, kind.unplug)
				lat = append(lat, d)
				l.revive(from)
				l.waitBack(b, from, a)
			}
			rows = append(rows, failoverRow{kind.label, lat})
			b.ReportMetric(ms(lat.percentile(99)), "p99-ms-"+metricName(kind.label))
		}
	})
	b.Run("keepalived", func(b *testing.B) {
		needTools(b, "keepalived")
		for _, advert := range keepalivedAdverts {
			label := "keepalived, advert " + advert + "s, host death"
			lat := keepalivedFailovers(b, advert)
			rows = append(rows, failoverRow{label, lat})
			b.ReportMetric(ms(lat.percentile(99)), "p99-ms-keepalived-"+advert+"s")
		}
	})
	fmt.Printf("\nVIP failover (ARP): from the holder's death to the client's next successful request\n")
	fmt.Printf("(3 LB hosts, a client sending a request every 10ms, %d trials each)\n", vipTrials)
	fmt.Printf("%-36s %10s %10s %10s\n", "", "median ms", "p99 ms", "max ms")
	for _, r := range rows {
		fmt.Printf("%-36s %10.1f %10.1f %10.1f\n", r.label, ms(r.lat.percentile(50)), ms(r.lat.percentile(99)), ms(r.lat.percentile(100)))
	}
	b.ReportMetric(0, "ns/op")
}

func metricName(label string) string {
	out := []byte{}
	for _, c := range []byte(label) {
		switch {
		case c >= 'a' && c <= 'z', c >= '0' && c <= '9':
			out = append(out, c)
		case len(out) > 0 && out[len(out)-1] != '-':
			out = append(out, '-')
		}
	}
	return string(out)
}

// keepalivedConfig is a VRRPv3 instance holding arpVIP4 on eth0; the
// first host has the highest priority and takes the VIP back when it
// returns.
func keepalivedConfig(n *lbHost, prio int, advert string) string {
	return fmt.Sprintf(`global_defs {
  router_id %s
  vrrp_version 3
}
vrrp_instance lab {
  state BACKUP
  interface eth0
  virtual_router_id 51
  priority %d
  advert_int %s
  virtual_ipaddress {
    %s/24 dev eth0
  }
}
`, n.id, prio, advert, arpVIP4)
}

// keepalivedFailovers runs keepalived on the three LB hosts of a fresh
// lab, each serving HTTP on port 80, and measures vipTrials host deaths
// of the master.
func keepalivedFailovers(b *testing.B, advert string) latencies {
	l := newVIPLab(b, labOptions{})
	for _, n := range l.lbs {
		l.serveHTTP(n.host)
	}
	procs := map[*lbHost]*netlab.Process{}
	b.Cleanup(func() {
		if b.Failed() {
			for _, n := range l.lbs {
				log := filepath.Join(l.dir, "keepalived-"+n.id, "log")
				b.Logf("---- keepalived log of %s ----\n%s", n.id, tail(log, 40))
			}
		}
	})
	start := func(n *lbHost, prio int) {
		b.Helper()
		dir := filepath.Join(l.dir, "keepalived-"+n.id)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			b.Fatal(err)
		}
		conf := filepath.Join(dir, "keepalived.conf")
		if err := os.WriteFile(conf, []byte(keepalivedConfig(n, prio, advert)), 0o644); err != nil {
			b.Fatal(err)
		}
		p, err := n.host.Start(filepath.Join(dir, "log"), nil, "keepalived", "--dont-fork", "--log-console", "--vrrp",
			"-f", conf, "-p", filepath.Join(dir, "main.pid"), "-r", filepath.Join(dir, "vrrp.pid"), "-c", filepath.Join(dir, "checkers.pid"))
		if err != nil {
			b.Fatal(err)
		}
		procs[n] = p
	}
	// keepalived's VRRP child leaves the process group: end it by its
	// pid file as well.
	kill := func(n *lbHost) {
		b.Helper()
		if p := procs[n]; p != nil {
			p.Kill()
		}
		if err := killPidFile(filepath.Join(l.dir, "keepalived-"+n.id, "vrrp.pid")); err != nil {
			b.Fatal(err)
		}
	}
	b.Cleanup(func() {
		for _, n := range l.lbs {
			kill(n)
		}
	})
	prio := map[*lbHost]int{l.lbs[0]: 150, l.lbs[1]: 100, l.lbs[2]: 50}
	for _, n := range l.lbs {
		start(n, prio[n])
	}
	master := l.lbs[0]
	var lat latencies
	for range vipTrials {
		l.waitHolderIsKeepalived(b, master)
		p := startProber(l.client, netip.AddrPortFrom(arpVIP4, 80), probeInterval, probeMax)
		time.Sleep(100 * time.Millisecond)
		if err := master.host.SetLink(false); err != nil {
			b.Fatal(err)
		}
		// The host is dead once its cable is out; its keepalived dies with
		// it, and is reaped after the measurement.
		_ = procs[master].Signal(syscall.SIGKILL)
		killed := time.Now()
		lat = append(lat, p.waitRecovery(b, killed, recoverTimeout))
		p.finish()
		kill(master)
		// Its VRRP child may have left the VIP behind.
		if ok, err := master.host.HasAddr("eth0", arpVIP4); err != nil {
			b.Fatal(err)
		} else if ok {
			if err := master.host.IP("addr", "del", arpVIP4.String()+"/24", "dev", "eth0"); err != nil {
				b.Fatal(err)
			}
		}
		if err := master.host.SetLink(true); err != nil {
			b.Fatal(err)
		}
		start(master, prio[master])
	}
	return lat
}

// killPidFile sends SIGKILL to the process named in a pid file (if it
// runs) and waits until it is gone.
func killPidFile(path string) error {
	data, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(data)))
	if err != nil || pid <= 1 {
		return fmt.Errorf("%s: no pid in %q", path, data)
	}
	if err := syscall.Kill(pid, syscall.SIGKILL); errors.Is(err, syscall.ESRCH) {
		return nil
	}
	for range 500 {
		if err := syscall.Kill(pid, 0); errors.Is(err, syscall.ESRCH) {
			return nil
		}
		time.Sleep(10 * time.Millisecond)
	}
	return fmt.Errorf("process %d of %s still runs", pid, path)
}

// waitHolderIsKeepalived waits until only want carries arpVIP4 and the
// client reaches it.
func (l *vipLab) waitHolderIsKeepalived(tb testing.TB, want *lbHost) {
	tb.Helper()
	waitFor(tb, settleTimeout, want.id+" to be the VRRP master", func() error {
		hs, err := l.holders(arpVIP4)
		if err != nil {
			return err
		}
		if len(hs) != 1 || hs[0] != want {
			return fmt.Errorf("held by %v", ids(hs))
		}
		return l.get(arpVIP4)
	})
}

// serveHTTP answers HTTP on [::]:80 in h (the keepalived hosts' data
// plane: whichever host holds the VIP answers).
func (l *vipLab) serveHTTP(h *netlab.Host) {
	var ln net.Listener
	if err := h.Do(func() (err error) { ln, err = net.Listen("tcp", "[::]:80"); return err }); err != nil {
		l.tb.Fatal(err)
	}
	srv := &http.Server{
		Handler:           http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "ok\n") }),
		ReadHeaderTimeout: 5 * time.Second,
	}
	go srv.Serve(ln)
	l.tb.Cleanup(func() { srv.Close() })
}
