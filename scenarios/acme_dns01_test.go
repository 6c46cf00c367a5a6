package scenarios

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	mdns "github.com/miekg/dns"

	"github.com/teapot-lb/teapot-lb/proxy/certs/pebbletest"
)

// TestACMEWildcardThroughOwnDNS runs the real binary with its own DNS
// (--dns-zones acme.example, signed with --dns-dnssec) and a real ACME server (pebble) that resolves
// and validates with that DNS alone: a tenant's https listener with
// tls.acme and the route host *.acme.example gets a wildcard certificate
// through DNS-01 (the challenge's TXT record answered by the LB host from
// the replicated store), and serves it for two different names under the
// wildcard, verified with pebble's roots. A wildcard outside the zones the
// LB hosts answer is refused in its Certificate's status, saying why, and
// a second wildcard order of the tenant is refused by its ACME order
// budget (--acme-orders-per-tenant) as any order is. It runs beside the
// other parallel scenarios: it mostly waits for the order, binds its
// listener and DNS on ports picked free and measures no time.
func TestACMEWildcardThroughOwnDNS(t *testing.T) {
	pebbletest.Binaries(t)
	parallelScenarioTaking(t, 10*time.Second)
	dnsAddr := freeAddrs(t, 1)[0]
	peb := pebbletest.Start(t, pebbletest.Options{HTTPPort: 5002, TLSPort: 5001, DNSServer: dnsAddr})

	c := newCluster(t)
	n := c.newNode()
	c.start(n, "--dns-addr", dnsAddr, "--dns-zones", "acme.example", "--dns-ns", "ns1.acme.example=127.0.0.1", "--dns-dnssec", "acme.example",
		"--acme-ca", peb.Directory, "--acme-ca-root", peb.RootsFile, "--acme-email", "ops@acme.example",
		"--acme-orders-per-tenant", "1")
	c.waitMember(n)

	backend := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "wild %s", r.Host)
	}), ReadHeaderTimeout: 5 * time.Second}
	bl, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = backend.Serve(bl) }()
	// globex's member, in globex's own network (tenants' networks may
	// not overlap).
	gl, err := net.Listen("tcp", "127.0.1.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = backend.Serve(gl) }()
	t.Cleanup(func() { _ = backend.Close() })

	const vip = "127.0.0.97"
	port := freePort(t)
	spec := fmt.Sprintf(`kind: VIPPool
name: wild
cidrs: [127.0.0.96/30]
mode: static
---
kind: Tenant
name: acme
domains: [acme.example]
networks: [127.0.0.0/24]
pools: [wild]
---
kind: Tenant
name: globex
domains: [globex.example]
networks: [127.0.1.0/24]
pools: [wild]
---
kind: LoadBalancer
name: apps
tenant: acme
vip: {pool: wild, address: %[1]s}
listeners:
  - {port: %[2]d, protocol: https, tls: {acme: true}}
routes:
  - {host: "*.acme.example", path: /, pool: web}
pools:
  web: {members: ["%[3]s"]}
---
kind: LoadBalancer
name: apps
tenant: globex
vip: {pool: wild, address: 127.0.0.98}
listeners:
  - {port: %[2]d, protocol: https, tls: {acme: true}}
routes:
  - {host: "*.globex.example", path: /, pool: web}
pools:
  web: {members: ["%[4]s"]}
`, vip, port, bl.Addr().String(), gl.Addr().String())
	path := filepath.Join(t.TempDir(), "wild.yaml")
	if err := os.WriteFile(path, []byte(spec), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := c.cli(n, "apply", "-f", path); err != nil {
		t.Fatal(err)
	}

	status := func(tenant, name string) (certStatus, error) {
		out, err := c.cli(n, "cert", "list", "--tenant", tenant, "-o", "json")
		if err != nil {
			return certStatus{}, err
		}
		var docs []certStatus
		if err := json.Unmarshal([]byte(out), &docs); err != nil {
			return certStatus{}, fmt.Errorf("cert list -o json: %w: %q", err, out)
		}
		for _, d := range docs {
			if d.Name == name {
				return d, nil
			}
		}
		return certStatus{}, fmt.Errorf("no certificate %s/%s yet: %s", tenant, name, out)
	}
	start := time.Now()
	waitFor(t, 2*time.Minute, "acme/*.acme.example issued", func() error {
		st, err := status("acme", "*.acme.example")
		if err != nil {
			return err
		}
		if st.State != "valid" {
			return fmt.Errorf("state %q, last error %q", st.State, st.LastError)
		}
		return nil
	})
	t.Logf("*.acme.example issued through DNS-01 in %s", time.Since(start).Round(time.Millisecond))

	// A second wildcard of acme's is a second order, charged to acme's
	// budget of one order an hour like an HTTP-01 order.
	more := strings.Replace(spec, `  - {host: "*.acme.example", path: /, pool: web}`,
		`  - {host: "*.acme.example", path: /, pool: web}
  - {host: "*.apps.acme.example", path: /, pool: web}`, 1)
	if err := os.WriteFile(path, []byte(more), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := c.cli(n, "apply", "-f", path); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 30*time.Second, "acme/*.apps.acme.example refused by acme's order budget", func() error {
		st, err := status("acme", "*.apps.acme.example")
		if err != nil {
			return err
		}
		if st.State == "valid" {
			return errStop(fmt.Errorf("issued past the tenant's order budget"))
		}
		if !strings.Contains(st.LastError, "ACME order rate limited: tenant acme started its 1 ACME orders") {
			return fmt.Errorf("state %q, last error %q", st.State, st.LastError)
		}
		return nil
	})

	roots := peb.IssuerRoots(t)
	for _, name := range []string{"shop.acme.example", "blog.acme.example"} {
		waitFor(t, 30*time.Second, "https://"+name+" with the wildcard certificate", func() error {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			tr := &http.Transport{
				DialContext: func(ctx context.Context, network, _ string) (net.Conn, error) {
					return (&net.Dialer{}).DialContext(ctx, network, net.JoinHostPort(vip, fmt.Sprint(port)))
				},
				TLSClientConfig: &tls.Config{RootCAs: roots, ServerName: name},
			}
			defer tr.CloseIdleConnections()
			req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "https://"+name+"/", nil)
			resp, err := (&http.Client{Transport: tr}).Do(req)
			if err != nil {
				return err
			}
			defer resp.Body.Close()
			body, _ := io.ReadAll(resp.Body)
			leaf := resp.TLS.PeerCertificates[0]
			if len(leaf.DNSNames) != 1 || leaf.DNSNames[0] != "*.acme.example" {
				return errStop(fmt.Errorf("%s served a certificate for %v", name, leaf.DNSNames))
			}
			if string(body) != "wild "+name {
				return fmt.Errorf("%s answered %q", name, body)
			}
			return nil
		})
	}

	waitFor(t, 30*time.Second, "globex/*.globex.example refused", func() error {
		st, err := status("globex", "*.globex.example")
		if err != nil {
			return err
		}
		if st.State != "refused" || !strings.Contains(st.LastError, "--dns-zones: acme.example") {
			return errStop(fmt.Errorf("state %q, last error %q", st.State, st.LastError))
		}
		return nil
	})
	// The challenge's record is gone once the order is done.
	waitFor(t, 30*time.Second, "the DNS-01 record cleaned up", func() error {
		q := new(mdns.Msg)
		q.SetQuestion("_acme-challenge.acme.example.", mdns.TypeTXT)
		r, err := mdns.Exchange(q, dnsAddr)
		if err != nil {
			return err
		}
		if len(r.Answer) > 0 {
			return fmt.Errorf("still answered: %v", r.Answer)
		}
		return nil
	})

	// The challenge's outcome is in /metrics, per tenant and type, and the
	// exposition passes promtool.
	s, err := scrape(n)
	if err != nil {
		t.Fatal(err)
	}
	valid := 0.0
	for _, smp := range s["teapot_lb_acme_challenges_total"] {
		l := smp.labels
		if l["tenant"] != "acme" || l["type"] != "dns-01" {
			t.Errorf("a challenge of %v counted %v; only acme's DNS-01 challenge was presented", l, smp.value)
		}
		if l["outcome"] == "valid" {
			valid += smp.value
		}
	}
	if valid < 1 {
		t.Errorf("teapot_lb_acme_challenges_total: %v; want acme's DNS-01 challenge counted valid", s["teapot_lb_acme_challenges_total"])
	}
	promtoolCheckMetrics(t, n.metricsAddr)
}

// promtoolCheckMetrics lints the exposition served at addr with promtool
// (Debian package prometheus; CI installs it).
func promtoolCheckMetrics(t *testing.T, addr string) {
	t.Helper()
	promtool, err := exec.LookPath("promtool")
	if err != nil {
		unavailable(t, "promtool is not on PATH (Debian: apt-get install prometheus): %v", err)
	}
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(promtool, "check", "metrics")
	cmd.Stdin = bytes.NewReader(body)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Errorf("promtool check metrics: %v\n%s", err, out)
	}
}
