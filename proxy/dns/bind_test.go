package dns

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	mdns "github.com/miekg/dns"

	"github.com/teapot-lb/teapot-lb/api/porttest"
)

// freePort returns a loopback port free for UDP and TCP now.
func freePort(t *testing.T) int {
	t.Helper()
	return porttest.Pick(t)
}

// syncBuffer is a log both named and the test touch.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// startNamed runs BIND as a secondary of zone from primary (port), with
// the test's TSIG key, listening on 127.0.0.1:port; it returns the zone
// file it writes and its log.
func startNamed(t *testing.T, port int, zone, primary string) (string, *syncBuffer) {
	t.Helper()
	named, err := exec.LookPath("named")
	if err != nil {
		if named, err = exec.LookPath("/usr/sbin/named"); err != nil {
			if os.Getenv("CI") != "" { // .ci/run installs bind9: missing there is a failure
				t.Fatal("CI: BIND 9 (named) is not installed: apt-get install bind9")
			}
			t.Skip("BIND 9 (named) is not installed: apt-get install bind9")
		}
	}
	dir := t.TempDir()
	host, pport, _ := net.SplitHostPort(primary)
	conf := fmt.Sprintf(`key "xfr" { algorithm hmac-sha256; secret "%s"; };
options {
	directory "%[2]s";
	pid-file "%[2]s/named.pid";
	session-keyfile "%[2]s/session.key";
	managed-keys-directory "%[2]s";
	listen-on port %[3]d { 127.0.0.1; };
	listen-on-v6 { none; };
	recursion no;
	dnssec-validation no;
	notify no;
	allow-query { any; };
};
controls { };
server %[4]s { keys { xfr; }; };
zone "%[5]s" {
	type secondary;
	primaries port %[6]s { %[4]s key xfr; };
	masterfile-format text;
	file "%[2]s/zone.db";
	allow-notify { %[4]s; };
};
`, testSecret, dir, port, host, strings.TrimSuffix(zone, "."), pport)
	confPath := filepath.Join(dir, "named.conf")
	if err := os.WriteFile(confPath, []byte(conf), 0o600); err != nil {
		t.Fatal(err)
	}
	log := &syncBuffer{}
	ctx, cancel := context.WithCancel(context.Background())
	cmd := exec.CommandContext(ctx, named, "-g", "-n", "1", "-c", confPath)
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cancel()
		_ = cmd.Wait()
		if t.Failed() {
			t.Logf("named:\n%s", log.String())
		}
	})
	return filepath.Join(dir, "zone.db"), log
}

// askNamed polls named until its answer for name satisfies ok.
func askNamed(t *testing.T, addr, name string, ok func([]string) bool, what string) time.Duration {
	t.Helper()
	c := &mdns.Client{Net: "udp", Timeout: time.Second}
	start := time.Now()
	var got []string
	for deadline := start.Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		m, _, err := c.Exchange(query(name, mdns.TypeA), addr)
		if err != nil {
			continue
		}
		if got = addrsOf(m); ok(got) {
			return time.Since(start)
		}
	}
	t.Fatalf("BIND never answered %s %s: last %v", name, what, got)
	return 0
}

// TestBINDSecondary has a real BIND 9 transfer the zone with the TSIG
// key, then follow changes by NOTIFY and IXFR (its refresh timer is an
// hour, so only NOTIFY can bring them within the test's deadline).
func TestBINDSecondary(t *testing.T) {
	t.Parallel()
	port := freePort(t)
	namedAddr := fmt.Sprintf("127.0.0.1:%d", port)
	s, addr := startServer(t, xfrConfig(namedAddr), testState())
	zoneFile, _ := startNamed(t, port, "acme.example.", addr)

	both := func(got []string) bool { return slices.Equal(got, []string{"192.0.2.10", "192.0.2.11"}) }
	took := askNamed(t, namedAddr, "shop.acme.example.", both, "with both addresses")
	t.Logf("BIND serves the zone %s after starting", took)

	// A member down: the address leaves this host's answers, the serial
	// increases, BIND gets NOTIFY and transfers the change.
	s.SetReadyFor(map[string]string{"acme/shop2": "pools.web: no member is up"}, nil)
	took = askNamed(t, namedAddr, "shop.acme.example.", func(got []string) bool { return slices.Equal(got, []string{"192.0.2.10"}) }, "without shop2")
	t.Logf("a readiness change reached BIND in %s", took)
	// A new name.
	s.SetHeld(map[netip.Addr]bool{netip.MustParseAddr("192.0.2.10"): true, netip.MustParseAddr("192.0.2.11"): true,
		netip.MustParseAddr("192.0.2.60"): true})
	s.SetReadyFor(map[string]string{"acme/blog": ""}, nil)
	s.Update(append(testState(), lb("acme", "blog", "192.0.2.60", "blog.acme.example")), 8)
	took = askNamed(t, namedAddr, "blog.acme.example.", func(got []string) bool { return slices.Equal(got, []string{"192.0.2.60"}) }, "for a new name")
	t.Logf("a new name reached BIND in %s", took)
	if n := s.xfr.stats.Incremental.Load(); n == 0 {
		t.Errorf("no incremental transfer (IXFR) served; transfers %d", s.xfr.stats.Transfers.Load())
	}
	if n := s.xfr.stats.Notified.Load(); n == 0 {
		t.Error("no NOTIFY acknowledged")
	}
	// named-checkzone accepts what BIND wrote.
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		out, err := exec.Command("named-checkzone", "acme.example", zoneFile).CombinedOutput()
		if err == nil {
			t.Logf("named-checkzone: %s", bytes.TrimSpace(out))
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("named-checkzone: %v\n%s", err, out)
		}
	}
}
