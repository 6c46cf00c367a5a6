package scenarios

import (
	"crypto/sha256"
	binenc "encoding/binary"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/teapot-lb/teapot-lb/scenarios/netlab"
)

// The pools lab: the VIP lab's three LB hosts, whose eth0 (192.0.2.0/24)
// carries the public pool l2, and a second segment, br1
// (198.51.100.0/24), that n1 and n2 join with an eth1 and n3 does not. The
// pool private names eth1 (VIPPool.interface): its VIPs live on n1's or
// n2's eth1 and are announced there, the public ones on eth0. A client
// sits on each segment.
const poolsManifest = `
kind: VIPPool
name: private
cidrs: ["198.51.100.200-198.51.100.215"]
mode: arp
interface: eth1
---
kind: Tenant
name: acme
networks: [192.0.2.50/32, "2001:db8::50/128"]
pools: [l2, edge, private]
---
kind: LoadBalancer
name: pub
tenant: acme
vip: { pool: l2, address: "%s" }
listeners: [{ port: 80, protocol: http }]
routes: [{ path: /, pool: web }]
pools: { web: { members: ["192.0.2.50:8080"] } }
---
kind: LoadBalancer
name: priv
tenant: acme
vip: { pool: private, address: "%s" }
listeners: [{ port: 80, protocol: http }]
routes: [{ path: /, pool: web }]
pools: { web: { members: ["192.0.2.50:8080"] } }
`

// labRank orders hosts for an arp VIP as the VIP layer does (rendezvous
// hashing, pinned by vip's TestRankIsStableAndSpread), so that the lab
// can pick addresses that one host ranks first for.
func labRank(a netip.Addr, hosts []string) []string {
	score := func(id string) uint64 {
		h := sha256.New()
		h.Write([]byte(id))
		h.Write([]byte{0})
		b := a.As16()
		h.Write(b[:])
		return binenc.BigEndian.Uint64(h.Sum(nil))
	}
	out := slices.Clone(hosts)
	slices.SortFunc(out, func(x, y string) int {
		if sx, sy := score(x), score(y); sx != sy {
			if sx > sy {
				return -1
			}
			return 1
		}
		return strings.Compare(x, y)
	})
	return out
}

// TestVIPPoolInterfaces: one host serves a public pool on eth0 and a
// private pool on eth1; each pool's gratuitous ARP goes out on its own
// segment only; a host without the private pool's interface says so in
// cluster status and never holds its VIPs; when the host serving both
// stops, both move to other hosts, each announced on its own segment.
func TestVIPPoolInterfaces(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: builds a network lab with a three-host cluster")
	}
	needTools(t)
	teapotBinary(t) // built before the clock starts
	start := time.Now()
	l := newVIPLab(t, labOptions{teapot: true})
	t.Logf("cluster formed in %s", time.Since(start).Round(time.Millisecond))
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(l.lab.AddBridge("br1"))
	eth1 := map[string]net.HardwareAddr{}
	for _, n := range l.lbs[:2] {
		mac, err := l.lab.AttachHost(n.host, "br1", "eth1", fmt.Sprintf("198.51.100.%d/24", n.ip4.As4()[3]))
		must(err)
		eth1[n.id] = mac
	}
	pclient, err := l.lab.AddBareHost("pclient")
	must(err)
	_, err = l.lab.AttachHost(pclient, "br1", "eth0", "198.51.100.100/24")
	must(err)

	// Addresses the same host ranks first for: n3 has no eth1, so the
	// private VIP goes to the first of n1 and n2.
	priv := netip.MustParseAddr("198.51.100.200")
	holder := labRank(priv, []string{"n1", "n2"})[0]
	var pub netip.Addr
	for a := netip.MustParseAddr("192.0.2.201"); a.Compare(netip.MustParseAddr("192.0.2.215")) <= 0; a = a.Next() {
		if labRank(a, []string{"n1", "n2", "n3"})[0] == holder {
			pub = a
			break
		}
	}
	if !pub.IsValid() {
		t.Fatalf("no public address ranks %s first", holder)
	}
	var x *lbHost
	for _, n := range l.lbs {
		if n.id == holder {
			x = n
		}
	}

	pubWatch, err := l.client.WatchARP("eth0")
	must(err)
	defer pubWatch.Stop()
	privWatch, err := pclient.WatchARP("eth0")
	must(err)
	defer privWatch.Stop()

	manifest := filepath.Join(l.dir, "pools.yaml")
	must(os.WriteFile(manifest, []byte(fmt.Sprintf(poolsManifest, pub, priv)), 0o644))
	if out, err := l.cli(l.lbs[0], "apply", "-f", manifest); err != nil {
		t.Fatalf("apply: %v: %s", err, out)
	}

	// holdersOn: the running LB hosts whose ifname carries a.
	holdersOn := func(ifname string, a netip.Addr) ([]*lbHost, error) {
		var out []*lbHost
		for _, n := range l.lbs {
			if ifname == "eth1" && eth1[n.id] == nil {
				continue
			}
			ok, err := n.host.HasAddr(ifname, a)
			if err != nil {
				return nil, err
			}
			if ok && n.proc.Running() {
				out = append(out, n)
			}
		}
		return out, nil
	}
	// served waits until one host holds each VIP on its pool's interface
	// and each is served to the client of its segment; it returns them.
	served := func(not *lbHost) (pubHolder, privHolder *lbHost) {
		t.Helper()
		waitFor(t, settleTimeout, "one holder of each VIP, served on its segment", func() error {
			ph, err := holdersOn("eth0", pub)
			if err != nil {
				return err
			}
			qh, err := holdersOn("eth1", priv)
			if err != nil {
				return err
			}
			if len(ph) != 1 || len(qh) != 1 || ph[0] == not || qh[0] == not {
				return fmt.Errorf("%s held by %v, %s by %v", pub, ids(ph), priv, ids(qh))
			}
			for _, n := range l.lbs {
				if on, _ := n.host.HasAddr("eth0", priv); on {
					return errStop(fmt.Errorf("%s holds private %s on eth0", n.id, priv))
				}
			}
			if err := l.get(pub); err != nil {
				return err
			}
			pubHolder, privHolder = ph[0], qh[0]
			return httpGet(pclient, netip.AddrPortFrom(priv, 80), labHTTPTimeout)
		})
		return pubHolder, privHolder
	}
	// announced waits until each VIP's gratuitous ARP from its holder was
	// seen on its own segment, and fails if one was seen on the other.
	announced := func(pubHolder, privHolder *lbHost) {
		t.Helper()
		waitFor(t, settleTimeout, "the announcements of both VIPs", func() error {
			if !seenFrom(pubWatch.Seen(pub), pubHolder.host.MAC) {
				return fmt.Errorf("no gratuitous ARP for %s from %s on 192.0.2.0/24", pub, pubHolder.id)
			}
			if !seenFrom(privWatch.Seen(priv), eth1[privHolder.id]) {
				return fmt.Errorf("no gratuitous ARP for %s from %s's eth1 on 198.51.100.0/24", priv, privHolder.id)
			}
			return nil
		})
		if g := pubWatch.Seen(priv); len(g) > 0 {
			t.Errorf("the private VIP %s was announced on the public segment: %v", priv, g)
		}
		if g := privWatch.Seen(pub); len(g) > 0 {
			t.Errorf("the public VIP %s was announced on the private segment: %v", pub, g)
		}
	}

	ph, qh := served(nil)
	if ph != x || qh != x {
		t.Fatalf("%s held by %s and %s by %s, want both by %s (ranked first)", pub, ph.id, priv, qh.id, x.id)
	}
	announced(ph, qh)
	t.Logf("%s serves %s on eth0 and %s on eth1 (%s after the lab started)", x.id, pub, priv, time.Since(start).Round(time.Millisecond))

	t.Run("a host without the pool's interface says why it holds none of its VIPs", func(t *testing.T) {
		want := "interface eth1 of pool private does not exist on this host"
		waitFor(t, settleTimeout, "n3's reason in cluster status", func() error {
			st, err := l.status(l.lbs[0])
			if err != nil {
				return err
			}
			for _, ns := range st.GetNodes() {
				if ns.GetId() != "n3" {
					continue
				}
				for _, v := range ns.GetVips() {
					if v.GetAddress() == priv.String() && v.GetState() == "released" && strings.Contains(v.GetReason(), want) {
						return nil
					}
				}
				return fmt.Errorf("n3's VIPs: %v", ns.GetVips())
			}
			return fmt.Errorf("no n3 in %v", st.GetNodes())
		})
		out, err := l.cli(l.lbs[0], "cluster", "status")
		if err != nil || !strings.Contains(out, want) {
			t.Fatalf("cluster status: %v\n%s", err, out)
		}
	})

	t.Run("both pools fail over when their host stops, each announced on its segment", func(t *testing.T) {
		pubWatch.Reset()
		privWatch.Reset()
		pp := startProber(l.client, netip.AddrPortFrom(pub, 80), probeInterval, probeMax)
		defer pp.finish()
		qp := startProber(pclient, netip.AddrPortFrom(priv, 80), probeInterval, probeMax)
		defer qp.finish()
		time.Sleep(100 * time.Millisecond)
		killed := l.kill(x, false)
		dp := pp.waitRecovery(t, killed, recoverTimeout)
		dq := qp.waitRecovery(t, killed, recoverTimeout)
		ph, qh := served(x)
		if qh == l.lbs[2] {
			t.Fatalf("n3, without eth1, holds %s", priv)
		}
		announced(ph, qh)
		t.Logf("after %s stopped: %s on %s's eth0 in %s, %s on %s's eth1 in %s (first successful request after the kill)",
			x.id, pub, ph.id, dp.Round(time.Millisecond), priv, qh.id, dq.Round(time.Millisecond))
		for what, d := range map[string]time.Duration{"public": dp, "private": dq} {
			if d > arpFailoverBound {
				t.Errorf("%s failover took %s, want under %s", what, d, arpFailoverBound)
			}
		}
	})

	t.Run("a pool's interface going down releases the pool's VIPs alone, and coming up takes them back", func(t *testing.T) {
		// X is dead and n3 has no eth1: the holder of the private VIP is
		// its last host.
		_, y := served(x)
		must(y.host.IP("link", "set", "eth1", "down"))
		want := "interface eth1 of pool private is down"
		waitFor(t, settleTimeout, y.id+" to release "+priv.String()+" and say why", func() error {
			if on, err := y.host.HasAddr("eth1", priv); err != nil || on {
				return fmt.Errorf("still on %s's eth1 (%v)", y.id, err)
			}
			st, err := l.status(l.lbs[2])
			if err != nil {
				return err
			}
			for _, ns := range st.GetNodes() {
				for _, v := range ns.GetVips() {
					if ns.GetId() == y.id && v.GetAddress() == priv.String() && strings.Contains(v.GetReason(), want) {
						return nil
					}
				}
			}
			return fmt.Errorf("no reason %q in %v", want, st.GetNodes())
		})
		// The public VIP is not the private pool's: whoever holds it keeps
		// serving it.
		if err := l.get(pub); err != nil {
			t.Fatalf("%s while eth1 of %s is down: %v", pub, y.id, err)
		}
		privWatch.Reset()
		must(y.host.IP("link", "set", "eth1", "up"))
		served(x)
		waitFor(t, settleTimeout, "the announcement on eth1 again", func() error {
			if !seenFrom(privWatch.Seen(priv), eth1[y.id]) {
				return fmt.Errorf("no gratuitous ARP for %s from %s's eth1", priv, y.id)
			}
			return nil
		})
	})
	t.Logf("lab ran %s", time.Since(start).Round(time.Millisecond))
}

// seenFrom reports whether one of gs came from mac.
func seenFrom(gs []netlab.GratuitousARP, mac net.HardwareAddr) bool {
	return slices.ContainsFunc(gs, func(g netlab.GratuitousARP) bool { return g.MAC.String() == mac.String() })
}
