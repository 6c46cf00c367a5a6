package scenarios

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	mdns "github.com/miekg/dns"

	"github.com/teapot-lb/teapot-lb/scenarios/netlab"
)

// dnsVIP is the arp VIP of the DNS lab's named load balancer.
var dnsVIP = netip.MustParseAddr("192.0.2.201")

const dnsLabManifest = `
kind: Tenant
name: acme
domains: [acme.example]
networks: [192.0.2.50/32, "2001:db8::50/128"]
pools: [l2, edge]
---
kind: LoadBalancer
name: named
tenant: acme
vip: { pool: l2, address: "192.0.2.201" }
listeners: [{ port: 80, protocol: http }]
routes: [{ host: www.acme.example, path: /, pool: web }, { path: /, pool: web }]
pools: { web: { members: ["192.0.2.50:8080"] } }
`

// dnsAskFrom queries a host's DNS over UDP from h.
func dnsAskFrom(h *netlab.Host, server netip.Addr, name string) ([]string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	c, err := h.DialContext(ctx, "udp", netip.AddrPortFrom(server, 53).String())
	if err != nil {
		return nil, err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(500 * time.Millisecond))
	co := &mdns.Conn{Conn: c}
	q := new(mdns.Msg)
	q.SetQuestion(name, mdns.TypeA)
	if err := co.WriteMsg(q); err != nil {
		return nil, err
	}
	m, err := co.ReadMsg()
	if err != nil {
		return nil, err
	}
	if m.Rcode != mdns.RcodeSuccess {
		return nil, fmt.Errorf("%s", mdns.RcodeToString[m.Rcode])
	}
	return dnsAddrs(m), nil
}

// TestDNSAnswersFollowVIPMoves runs three LB hosts that each answer DNS
// for the tenant's zone: every host answers the name with the arp VIP,
// including the two that do not hold it (they know from the holder's
// heartbeats); when the holder dies the survivors keep answering it once
// it moved, and the gap is measured.
func TestDNSAnswersFollowVIPMoves(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: builds a network lab with a three-host cluster")
	}
	needTools(t)
	parallelScenario(t)
	l := newVIPLab(t, labOptions{teapot: true, args: []string{
		"--dns-addr", "0.0.0.0:53", "--dns-zones", "acme.example", "--dns-ns", "ns1.acme.example=192.0.2.11", "--dns-ttl", "5s",
	}})
	manifest := filepath.Join(t.TempDir(), "named.yaml")
	if err := os.WriteFile(manifest, []byte(dnsLabManifest), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := l.cli(l.lbs[0], "apply", "-f", manifest); err != nil {
		t.Fatal(err)
	}
	holder := l.waitHolder(dnsVIP, startTimeout)
	want := []string{dnsVIP.String()}
	for _, n := range l.lbs {
		waitFor(t, settleTimeout, n.id+" answers the name", func() error {
			got, err := dnsAskFrom(l.client, n.ip4, "www.acme.example.")
			if err != nil || !slices.Equal(got, want) {
				return fmt.Errorf("%s answers %v (%v)", n.id, got, err)
			}
			return nil
		})
	}

	// The holder dies: the survivors answer the VIP once it moved.
	var survivors []*lbHost
	for _, n := range l.lbs {
		if n != holder {
			survivors = append(survivors, n)
		}
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	gaps := make([]time.Duration, len(survivors))
	for i, n := range survivors {
		wg.Go(func() {
			var since time.Time
			for {
				select {
				case <-stop:
					return
				default:
				}
				got, err := dnsAskFrom(l.client, n.ip4, "www.acme.example.")
				switch {
				case err == nil && slices.Equal(got, want):
					if !since.IsZero() {
						gaps[i] = max(gaps[i], time.Since(since))
						since = time.Time{}
					}
				case since.IsZero():
					since = time.Now()
				}
				time.Sleep(10 * time.Millisecond)
			}
		})
	}
	l.kill(holder, false)
	next := l.waitHolder(dnsVIP, settleTimeout)
	for _, n := range survivors {
		waitFor(t, settleTimeout, n.id+" answers the moved VIP", func() error {
			got, err := dnsAskFrom(l.client, n.ip4, "www.acme.example.")
			if err != nil || !slices.Equal(got, want) {
				return fmt.Errorf("%s answers %v (%v)", n.id, got, err)
			}
			return nil
		})
	}
	close(stop)
	wg.Wait()
	t.Logf("%s died, %s holds %s; longest time a survivor left it out of its answers: %v", holder.id, next.id, dnsVIP, gaps)
}
