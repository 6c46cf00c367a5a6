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
	"testing"
	"time"

	mdns "github.com/miekg/dns"
)

// TestDNSPushToBINDPrimary runs the real binary with --dns-push to a
// BIND 9 primary on loopback (the zone allows update and transfer with
// the key of --dns-tsig-keys): the name appears on BIND after the apply;
// a second host that joins with the same flags does not push (only the
// leader does), as explain node says of each; when the only member fails
// the A record is deleted on BIND.
func TestDNSPushToBINDPrimary(t *testing.T) {
	named, err := exec.LookPath("named")
	if err != nil {
		unavailable(t, "BIND 9 (named) is not installed: apt-get install bind9")
	}
	parallelScenario(t)
	dir := t.TempDir()
	keyFile := filepath.Join(dir, "push.key")
	key := fmt.Sprintf("key \"push\" {\n\talgorithm hmac-sha256;\n\tsecret \"%s\";\n};\n", xfrSecret)
	if err := os.WriteFile(keyFile, []byte(key), 0o600); err != nil {
		t.Fatal(err)
	}
	namedAddr := freeAddrs(t, 1)[0]
	_, namedPort, _ := net.SplitHostPort(namedAddr)
	zone := "$TTL 300\n@ IN SOA ns1.acme.example. hostmaster.acme.example. 1 3600 600 86400 30\n@ IN NS ns1.acme.example.\nns1 IN A 127.0.0.1\n"
	if err := os.WriteFile(filepath.Join(dir, "acme.db"), []byte(zone), 0o600); err != nil {
		t.Fatal(err)
	}
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
zone "acme.example" {
	type primary;
	file "%[2]s/acme.db";
	allow-update { key push; };
	allow-transfer { key push; };
};
`, keyFile, dir, namedPort)
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

	c := newCluster(t)
	n := c.newNode()
	dnsAddr := freeAddrs(t, 1)[0]
	flags := []string{"--dns-addr", dnsAddr, "--dns-zones", "acme.example", "--dns-ns", "ns1.lb.example.com=127.0.0.1",
		"--dns-push", "acme.example=" + namedAddr + "=push", "--dns-tsig-keys", keyFile}
	c.start(n, flags...)
	c.waitMember(n)

	member := acceptingMember(t)
	spec := shopZoneSpec(t, dnsPushVIP, member.Addr().String(), true)
	path := filepath.Join(dir, "shop.yaml")
	if err := os.WriteFile(path, []byte(spec), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := c.cli(n, "apply", "-f", path); err != nil {
		t.Fatal(err)
	}
	applied := time.Now()
	bindAnswers := func(name string, want []string) func() error {
		return func() error {
			m, err := dnsAsk("udp", namedAddr, name, mdns.TypeA)
			if err != nil {
				return err
			}
			if got := dnsAddrs(m); !slices.Equal(got, want) {
				return fmt.Errorf("BIND answers %s %s %v", name, mdns.RcodeToString[m.Rcode], got)
			}
			return nil
		}
	}
	waitFor(t, 20*time.Second, "BIND answered the name", bindAnswers("shop.acme.example.", []string{dnsPushVIP}))
	t.Logf("apply to BIND's answer: %s", time.Since(applied))
	waitFor(t, 10*time.Second, "BIND answered under the wildcard", bindAnswers("a.apps.acme.example.", []string{dnsPushVIP}))

	// A second host with the same flags: it answers, but does not push.
	token, err := c.cli(n, "cluster", "join-token")
	if err != nil {
		t.Fatal(err)
	}
	n2 := c.newNode()
	flags2 := append([]string{"--join", n.apiAddr, "--token", strings.TrimSpace(token)}, flags...)
	flags2[slices.Index(flags2, dnsAddr)] = freeAddrs(t, 1)[0]
	c.start(n2, flags2...)
	c.waitMember(n2)
	explain := func(id, want string) func() error {
		return func() error {
			out, err := c.cli(n, "explain", "node", id)
			if err != nil {
				return err
			}
			if !strings.Contains(out, want) {
				return fmt.Errorf("explain node %s:\n%s", id, out)
			}
			return nil
		}
	}
	waitFor(t, 20*time.Second, "explain node n1 shows its push", explain(n.id, "pushed to "+namedAddr+" (key push) by this host"))
	waitFor(t, 20*time.Second, "explain node n2 shows it does not push", explain(n2.id, "pushed to "+namedAddr+" (key push) by the leader, not this host"))

	member.Close()
	down := time.Now()
	waitFor(t, 20*time.Second, "the name left BIND", bindAnswers("shop.acme.example.", nil))
	t.Logf("member down to BIND without the address: %s", time.Since(down))
	if out, err := c.cli(n, "explain", "node", n.id); err == nil {
		t.Logf("explain node %s:\n%s", n.id, out)
	}
}
