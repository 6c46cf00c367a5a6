package scenarios

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	mdns "github.com/miekg/dns"
)

var dnskeyLine = regexp.MustCompile(`DNSKEY: (acme\.example\.) \d+ IN DNSKEY (257 3 13 \S+)`)

// TestDNSSECValidatesFromTheRealBinary runs the real binary with
// --dns-dnssec: the zone's key is made and kept in the replicated state,
// `explain node` shows its DS and DNSKEY (never the private key, which no
// log holds either), BIND's validator (delv) with that DNSKEY as its
// trust anchor validates an answer and a name that does not exist, after
// a restart the host signs with the same key, and a host that joins signs
// with it too.
func TestDNSSECValidatesFromTheRealBinary(t *testing.T) {
	delvBin, err := exec.LookPath("delv")
	if err != nil {
		unavailable(t, "delv is not installed: apt-get install bind9-dnsutils")
	}
	parallelScenarioTaking(t, 4*time.Second)
	// Each host listens on a loopback address of its own (ownaddr_test.go):
	// the first binds its ports again after its restart.
	c := newCluster(t)
	n, more := c.newNodeOn(dnssecHostA, 1)
	dnsAddr := more[0]
	flags := []string{"--dns-addr", dnsAddr, "--dns-zones", "acme.example", "--dns-ns", "ns1.acme.example=127.0.0.1",
		"--dns-ttl", "5s", "--dns-dnssec", "acme.example"}
	c.start(n, flags...)
	c.waitMember(n)

	member := acceptingMember(t)
	defer member.Close()
	spec := shopZoneSpec(t, dnssecVIP, member.Addr().String(), false)
	path := filepath.Join(t.TempDir(), "shop.yaml")
	if err := os.WriteFile(path, []byte(spec), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := c.cli(n, "apply", "-f", path); err != nil {
		t.Fatal(err)
	}

	dnskey := func() string {
		var key string
		waitFor(t, 20*time.Second, "explain node shows the zone's DNSKEY", func() error {
			out, err := c.cli(n, "explain", "node", n.id)
			if err != nil {
				return err
			}
			if strings.Contains(out, "PRIVATE") {
				return errStop(fmt.Errorf("explain shows a private key:\n%s", out))
			}
			m := dnskeyLine.FindStringSubmatch(out)
			if m == nil || !strings.Contains(out, "DS to publish in the parent zone: acme.example. 3600 IN DS ") {
				return fmt.Errorf("no DNSKEY and DS yet:\n%s", out)
			}
			key = m[2]
			return nil
		})
		return key
	}
	key := dnskey()
	f := strings.Fields(key)
	anchors := filepath.Join(t.TempDir(), "anchors.conf")
	if err := os.WriteFile(anchors, []byte(fmt.Sprintf("trust-anchors {\n\tacme.example. static-key %s %s %s %q;\n};\n", f[0], f[1], f[2], f[3])), 0o600); err != nil {
		t.Fatal(err)
	}
	host, port, _ := net.SplitHostPort(dnsAddr)
	delvAt := func(host, port, name, qtype string) (string, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		out, err := exec.CommandContext(ctx, delvBin, "@"+host, "-p", port, "-a", anchors, "+root=acme.example", name, qtype).CombinedOutput()
		return string(out), err
	}
	delv := func(name string) (string, error) { return delvAt(host, port, name, "A") }
	waitFor(t, 30*time.Second, "delv validates the answer", func() error {
		out, _ := delv("shop.acme.example")
		if !strings.Contains(out, "; fully validated") || !strings.Contains(out, dnssecVIP) {
			return fmt.Errorf("delv:\n%s", out)
		}
		return nil
	})
	if out, _ := delv("nope.acme.example"); !strings.Contains(out, "; negative response, fully validated") {
		t.Fatalf("delv, a name that does not exist:\n%s", out)
	}

	// Restarted, the host loads the key from the state: the same DNSKEY.
	c.stop(n)
	c.start(n, flags...)
	c.waitMember(n)
	if again := dnskey(); again != key {
		t.Fatalf("after a restart the zone's key changed:\n%s\n%s", key, again)
	}
	waitFor(t, 20*time.Second, "the DNSKEY after the restart", func() error {
		q := new(mdns.Msg)
		q.SetQuestion("acme.example.", mdns.TypeDNSKEY)
		m, _, err := (&mdns.Client{Timeout: 2 * time.Second}).Exchange(q, dnsAddr)
		if err != nil {
			return err
		}
		if len(m.Answer) != 1 || !strings.HasSuffix(m.Answer[0].String(), f[3]) {
			return errStop(fmt.Errorf("DNSKEY after the restart: %v", m))
		}
		return nil
	})
	logs, _ := os.ReadFile(n.logPath)
	if strings.Contains(string(logs), "PRIVATE KEY") {
		t.Fatal("the log holds a private key")
	}

	// A second host joins: it loads the key from the state and its answers
	// validate with the same trust anchor.
	token, err := c.cli(n, "cluster", "join-token")
	if err != nil {
		t.Fatal(err)
	}
	n2, more := c.newNodeOn(dnssecHostB, 1)
	dns2 := more[0]
	flags2 := append([]string{"--join", n.apiAddr, "--token", strings.TrimSpace(token)}, flags...)
	flags2[slices.Index(flags2, dnsAddr)] = dns2
	c.start(n2, flags2...)
	c.waitMember(n2)
	host2, port2, _ := net.SplitHostPort(dns2)
	waitFor(t, 30*time.Second, "delv validates the second host's answers", func() error {
		for _, q := range [][2]string{{"acme.example", "SOA"}, {"nope.acme.example", "A"}} {
			if out, _ := delvAt(host2, port2, q[0], q[1]); !strings.Contains(out, "fully validated") {
				return fmt.Errorf("delv %s %s at the second host:\n%s", q[0], q[1], out)
			}
		}
		return nil
	})

	// The key is rolled through the CLI on the second host; the first
	// follows through the replicated state. With either DS as the trust
	// anchor (a resolver holds the parent's DS set, old or new), delv
	// validates both hosts' answers throughout the rollover.
	out, err := c.cli(n2, "cluster", "dnssec-rollover", "start", "acme.example")
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("dnssec-rollover start:\n%s", out)
	dsOf := func(label string) string {
		m := regexp.MustCompile(label + `\s+(acme\.example\.) \d+ IN DS (\d+) (\d+) (\d+) ([0-9A-F]+)`).FindStringSubmatch(out)
		if m == nil {
			t.Fatalf("no %q in:\n%s", label, out)
		}
		p := filepath.Join(t.TempDir(), "ds-"+m[2]+".conf")
		if err := os.WriteFile(p, []byte(fmt.Sprintf("trust-anchors {\n\t%s static-ds %s %s %s %q;\n};\n", m[1], m[2], m[3], m[4], m[5])), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	oldDS, newDS := dsOf("DS of the current key:"), dsOf("DS of the new key:")
	hosts := [][2]string{{host, port}, {host2, port2}}
	validates := func(anchor, when string) error {
		for _, h := range hosts {
			for _, q := range [][2]string{{"shop.acme.example", "A"}, {"acme.example", "DNSKEY"}, {"nope.acme.example", "A"}} {
				ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
				out, _ := exec.CommandContext(ctx, delvBin, "@"+h[0], "-p", h[1], "-a", anchor, "+root=acme.example", q[0], q[1]).CombinedOutput()
				cancel()
				if !strings.Contains(string(out), "fully validated") {
					return fmt.Errorf("%s: delv %s %s at %s with %s:\n%s", when, q[0], q[1], h[0]+":"+h[1], filepath.Base(anchor), out)
				}
			}
		}
		return nil
	}
	waitFor(t, 30*time.Second, "both hosts sign with both keys", func() error {
		if err := validates(newDS, "during the rollover, the new DS"); err != nil {
			return err
		}
		return validates(oldDS, "during the rollover, the old DS")
	})
	if out, err := c.cli(n, "explain", "node", n.id); err != nil || !strings.Contains(out, "DS of the new key: acme.example. 3600 IN DS") {
		t.Fatalf("explain node %s during the rollover (%v):\n%s", n.id, err, out)
	}
	if out, err := c.cli(n, "cluster", "dnssec-rollover", "finish", "acme.example"); err == nil || !strings.Contains(out+err.Error(), "or force it") {
		t.Fatalf("finish right after start: %v\n%s", err, out)
	}
	if _, err := c.cli(n, "cluster", "dnssec-rollover", "finish", "--force", "acme.example"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 30*time.Second, "both hosts sign with the new key alone", func() error {
		if err := validates(newDS, "after the rollover, the new DS"); err != nil {
			return err
		}
		if validates(oldDS, "after the rollover, the old DS") == nil {
			return errors.New("the old DS still validates")
		}
		return nil
	})
}
