package scenarios

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	mdns "github.com/miekg/dns"
)

const xfrSecret = "TOjl4Zy59Y7sf4bzbq4EsjSwH6vrWVwBkFpyuCQ1qrI="

// TestDNSSecondaryFollowsTheBinary runs the real binary with
// --dns-secondaries and --dns-tsig-keys (one key file, as tsig-keygen
// writes it, for both) and BIND 9 as its secondary on loopback: BIND
// transfers the zone, and when the only member fails the NOTIFY and
// IXFR that follow take the name out of BIND's answers. A transfer asked
// from another address, or unsigned, is refused at the socket.
func TestDNSSecondaryFollowsTheBinary(t *testing.T) {
	named, err := exec.LookPath("named")
	if err != nil {
		unavailable(t, "BIND 9 (named) is not installed: apt-get install bind9")
	}
	parallelScenario(t)
	dir := t.TempDir()
	keyFile := filepath.Join(dir, "xfr.key")
	key := fmt.Sprintf("key \"xfr\" {\n\talgorithm hmac-sha256;\n\tsecret \"%s\";\n};\n", xfrSecret)
	if err := os.WriteFile(keyFile, []byte(key), 0o600); err != nil {
		t.Fatal(err)
	}
	namedAddr := freeAddrs(t, 1)[0]
	_, namedPort, _ := net.SplitHostPort(namedAddr)

	c := newCluster(t)
	n := c.newNode()
	dnsAddr := freeAddrs(t, 1)[0]
	_, dnsPort, _ := net.SplitHostPort(dnsAddr)
	c.start(n, "--dns-addr", dnsAddr, "--dns-zones", "acme.example", "--dns-ns", "ns1.lb.example.com=127.0.0.1",
		"--dns-secondaries", namedAddr+"=xfr", "--dns-tsig-keys", keyFile)
	c.waitMember(n)

	conf := fmt.Sprintf(`include "%[1]s";
options {
	directory "%[2]s";
	pid-file "%[2]s/named.pid";
	session-keyfile "%[2]s/session.key";
	managed-keys-directory "%[2]s";
	listen-on port %[3]s { 127.0.0.1; };
	listen-on-v6 { none; };
	recursion no;
	dnssec-validation no;
	notify no;
};
controls { };
server 127.0.0.1 { keys { xfr; }; };
zone "acme.example" {
	type secondary;
	primaries port %[4]s { 127.0.0.1 key xfr; };
	masterfile-format text;
	file "%[2]s/acme.db";
	allow-notify { 127.0.0.1; };
};
`, keyFile, dir, namedPort, dnsPort)
	confPath := filepath.Join(dir, "named.conf")
	if err := os.WriteFile(confPath, []byte(conf), 0o600); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cmd := exec.CommandContext(ctx, named, "-g", "-n", "1", "-c", confPath)
	log := &namedLog{}
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

	member := acceptingMember(t)
	spec := shopZoneSpec(t, dnsXfrVIP, member.Addr().String(), false)
	path := filepath.Join(dir, "shop.yaml")
	if err := os.WriteFile(path, []byte(spec), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := c.cli(n, "apply", "-f", path); err != nil {
		t.Fatal(err)
	}
	applied := time.Now()
	bindAnswers := func(want []string) func() error {
		return func() error {
			m, err := dnsAsk("udp", namedAddr, "shop.acme.example.", mdns.TypeA)
			if err != nil {
				return err
			}
			if got := dnsAddrs(m); !slices.Equal(got, want) {
				return fmt.Errorf("BIND answers %s %v", mdns.RcodeToString[m.Rcode], got)
			}
			return nil
		}
	}
	waitFor(t, 20*time.Second, "BIND answered the name", bindAnswers([]string{dnsXfrVIP}))
	t.Logf("apply to BIND's answer: %s", time.Since(applied))

	// At the socket: another address with the key, and the secondary's
	// address unsigned, are refused.
	for _, from := range []struct {
		ip     string
		signed bool
	}{{"127.0.0.2", true}, {"127.0.0.1", false}} {
		q := new(mdns.Msg)
		q.SetAxfr("acme.example.")
		cl := &mdns.Client{Net: "tcp", Timeout: 2 * time.Second,
			Dialer: &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(from.ip)}, Timeout: 2 * time.Second}}
		if from.signed {
			q.SetTsig("xfr.", mdns.HmacSHA256, 300, time.Now().Unix())
			cl.TsigSecret = map[string]string{"xfr.": xfrSecret}
		}
		m, _, err := cl.Exchange(q, dnsAddr)
		if err != nil || m.Rcode != mdns.RcodeRefused || len(m.Answer) != 0 {
			t.Fatalf("AXFR from %s (signed %t): %v %v, want REFUSED", from.ip, from.signed, m, err)
		}
	}

	member.Close()
	down := time.Now()
	waitFor(t, 20*time.Second, "the name left BIND's answers", bindAnswers(nil))
	t.Logf("member down to BIND without the address: %s", time.Since(down))
	if !strings.Contains(log.String(), "notify from 127.0.0.1") {
		t.Errorf("BIND logged no NOTIFY")
	}
}

// namedLog is named's output, written by exec's copier and read by the
// test.
type namedLog struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *namedLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *namedLog) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}
