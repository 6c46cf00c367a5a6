package scenarios

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"
)

// tenantBGPVIP is the private VIP of the bgp pool in the tenant's
// attachment: inside the tenant's networks but off its segment
// (10.0.0.0/24), so that the tenant's client reaches it only through the
// route its BIRD learns, never by ARP on the segment.
const tenantBGPVIP = "10.0.5.100"

// startTenantBird runs BIRD on the tenant's host as a tenant's speaker
// (a router of the tenant's network, or Calico's BIRD on a node): eBGP
// with each LB host's address in the attachment, taking what they
// announce into its kernel table, announcing nothing.
func startTenantBird(t *testing.T, l *vipLab, x *attachedTenant) (birdc func(args ...string) (string, error)) {
	t.Helper()
	var peers strings.Builder
	for i := range l.lbs {
		fmt.Fprintf(&peers, "protocol bgp n%d from lb { neighbor 10.0.0.%d as %d; }\n", i+1, 2+i, labASN)
	}
	conf := fmt.Sprintf(`log "%s" all;
router id 10.0.0.10;
protocol device { scan time 10; }
protocol kernel { ipv4 { import none; export all; }; }
template bgp lb {
  local 10.0.0.10 as %d;
  ipv4 { import all; export none; };
  connect retry time 1; connect delay time 1; error wait time 1, 2;
}
%s`, filepath.Join(l.dir, "bird-"+x.name+".log"), attachNodeASN, peers.String())
	path := filepath.Join(l.dir, "bird-"+x.name+".conf")
	if err := os.WriteFile(path, []byte(conf), 0o644); err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(l.dir, "bird-"+x.name+".ctl")
	p, err := x.host.Start(filepath.Join(l.dir, "bird-"+x.name+".out"), nil, "bird", "-f", "-c", path, "-s", sock,
		"-P", filepath.Join(l.dir, "bird-"+x.name+".pid"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Kill() })
	birdc = func(args ...string) (string, error) {
		ctx, cancel := context.WithTimeout(context.Background(), cliTimeout)
		defer cancel()
		out, err := x.host.Exec(ctx, "birdc", append([]string{"-s", sock}, args...)...)
		return string(out), err
	}
	waitFor(t, 10*time.Second, "the tenant's BIRD to start", func() error {
		if !p.Running() {
			return errStop(fmt.Errorf("bird exited: %s", tail(filepath.Join(l.dir, "bird-"+x.name+".out"), 20)))
		}
		_, err := birdc("show", "status")
		return err
	})
	return birdc
}

var tenantViaRE = regexp.MustCompile(`via (10\.0\.0\.[0-9]+) on vx0`)

// TestTenantBGPVIP: a bgp pool in a tenant's attachment. The tenant's
// BIRD, inside its network (over VXLAN to the three LB hosts), learns the
// VIP from every host, each with next hop its own address in the
// attachment, and the tenant's client reaches the VIP's load balancer
// through that route (the VIP is off the segment: nothing else leads
// there). The fabric router learns nothing of it. explain tenant and the
// metrics show what each host announces. The host BIRD's route goes
// through is killed: BIRD keeps the routes of the two others and the
// client is served again (the time from the kill to its next answer is
// logged).
func TestTenantBGPVIP(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: builds a network lab with a three-host cluster")
	}
	needTools(t, "bridge", "bird", "birdc")
	teapotBinary(t)
	start := time.Now()
	l := newVIPLab(t, labOptions{teapot: true, bgp: true, hostArgs: func(n *lbHost) []string {
		return []string{"--netns-dir", filepath.Join(n.dir, "netns")}
	}})
	t.Logf("cluster formed in %s", time.Since(start).Round(time.Millisecond))
	pid := os.Getpid()
	x := newAttachedTenant(t, l, "ta", 5300+pid%1000, "192.0.2.63", tenantBGPVIP)
	birdc := startTenantBird(t, l, x)
	base := fmt.Sprintf(`
kind: Tenant
name: ta
networks: [10.0.0.0/24, 10.0.5.0/24]
attachment:
  vxlan: { vni: %d, remotes: [%s] }
  hosts: { n1: 10.0.0.2/24, n2: 10.0.0.3/24, n3: 10.0.0.4/24 }
bgp: { asn: %d, peers: [10.0.0.10] }
`, x.vni, x.vtep, attachNodeASN)
	full := strings.Replace(base, "networks:", "pools: [ta-bgp]\nnetworks:", 1) + `---
kind: VIPPool
name: ta-bgp
cidrs: [` + tenantBGPVIP + `/32]
mode: bgp
attachment: ta
---
kind: LoadBalancer
name: web
tenant: ta
vip: { pool: ta-bgp }
listeners: [{ port: 80, protocol: http }]
routes: [{ path: /, pool: echo }]
pools: { echo: { members: ["10.0.0.10:8080"] } }
`
	apply := func(name, doc string) {
		t.Helper()
		p := filepath.Join(l.dir, name)
		if err := os.WriteFile(p, []byte(doc), 0o644); err != nil {
			t.Fatal(err)
		}
		if out, err := l.cli(l.lbs[0], "apply", "-f", p); err != nil {
			t.Fatalf("apply %s: %v: %s", name, err, out)
		}
	}
	apply("base.yaml", base)
	apply("bgp-vip.yaml", full)
	applied := time.Now()

	vip := netip.MustParseAddr(tenantBGPVIP)
	all := []string{"10.0.0.2", "10.0.0.3", "10.0.0.4"}
	hops := func() ([]string, error) {
		out, err := birdc("show", "route", "all", "for", tenantBGPVIP+"/32")
		if err != nil {
			return nil, err
		}
		var hs []string
		for _, m := range tenantViaRE.FindAllStringSubmatch(out, -1) {
			if !slices.Contains(hs, m[1]) {
				hs = append(hs, m[1])
			}
		}
		slices.Sort(hs)
		return hs, nil
	}
	waitFor(t, settleTimeout, "the tenant's BIRD to learn the VIP from every host", func() error {
		hs, err := hops()
		if err != nil {
			return err
		}
		if !slices.Equal(hs, all) {
			return fmt.Errorf("BIRD has %s via %v, want via %v", tenantBGPVIP, hs, all)
		}
		return nil
	})
	learned := time.Since(applied)
	waitFor(t, settleTimeout, "the tenant's client through the VIP", func() error {
		got, err := x.get(vip, labHTTPTimeout)
		if err != nil {
			return err
		}
		if got != "tenant ta" {
			return errStop(fmt.Errorf("the VIP answered %q", got))
		}
		return nil
	})
	t.Logf("BIRD learned %s from the three hosts %s after the apply; the client was served %s after it",
		vip, learned.Round(time.Millisecond), time.Since(applied).Round(time.Millisecond))
	// The client's route to the VIP is BIRD's: via one host's address in
	// the attachment.
	route := func() (string, error) {
		ctx, cancel := context.WithTimeout(context.Background(), cliTimeout)
		defer cancel()
		out, err := x.host.Exec(ctx, "ip", "route", "show", tenantBGPVIP)
		if err != nil {
			return "", err
		}
		m := regexp.MustCompile(`via (10\.0\.0\.[0-9]+) dev vx0 proto bird`).FindStringSubmatch(string(out))
		if m == nil {
			return "", fmt.Errorf("the tenant's route to %s: %q", tenantBGPVIP, out)
		}
		return m[1], nil
	}
	var via string
	waitFor(t, settleTimeout, "BIRD's route in the tenant's kernel", func() (err error) { via, err = route(); return err })
	// The fabric router learns nothing of the tenant's VIP.
	if out, err := l.birdc("show", "route"); err != nil || strings.Contains(out, "10.0.5.") {
		t.Fatalf("the fabric router's routes (%v):\n%s", err, out)
	}
	// No host has the VIP on its own interface.
	for _, n := range l.lbs {
		if on, err := n.host.HasAddr("eth0", vip); err != nil || on {
			t.Fatalf("%s has %s on its eth0 (%v)", n.id, vip, err)
		}
	}
	out, err := l.cli(l.lbs[0], "explain", "tenant", "ta")
	if err != nil || !strings.Contains(out, "VIPs announced to the tenant's speakers") ||
		!strings.Contains(out, "n1: "+tenantBGPVIP+"/32 via 10.0.0.2 (prefixes sent: 10.0.0.10 1)") {
		t.Fatalf("explain tenant ta does not show the VIP announced (%v):\n%s", err, out)
	}
	t.Logf("explain tenant ta:\n%s", out)
	waitFor(t, settleTimeout, "the metric of the VIPs announced", func() error {
		v, err := l.vipMetrics("teapot_lb_tenant_bgp_vips_announced", map[string]string{"tenant": "ta", "attachment": "teapot-att-ta"})
		if err != nil {
			return err
		}
		if v != float64(len(l.lbs)) {
			return fmt.Errorf("%v VIPs announced over the hosts, want %d", v, len(l.lbs))
		}
		return nil
	})

	// The host the client's route goes through is killed.
	var dead *lbHost
	for i, n := range l.lbs {
		if all[i] == via {
			dead = n
		}
	}
	if dead == nil {
		t.Fatalf("no host has %s", via)
	}
	p := startProber(x.host, netip.AddrPortFrom(vip, 80), probeInterval, probeMax)
	defer p.finish()
	waitFor(t, settleTimeout, "the prober's first answer", func() error {
		if _, ok := p.firstSuccessAfter(time.Time{}); !ok {
			return errors.New("none yet")
		}
		return nil
	})
	killed := l.kill(dead, false)
	d := p.waitRecovery(t, killed, recoverTimeout)
	var rest []string
	for _, a := range all {
		if a != via {
			rest = append(rest, a)
		}
	}
	waitFor(t, settleTimeout, "BIRD to keep the VIP from the other hosts only", func() error {
		hs, err := hops()
		if err != nil {
			return err
		}
		if !slices.Equal(hs, rest) {
			return fmt.Errorf("BIRD has %s via %v, want via %v", tenantBGPVIP, hs, rest)
		}
		return nil
	})
	after, err := route()
	if err != nil || after == via {
		t.Fatalf("after the kill the client's route goes via %s (%v), the dead host's address", after, err)
	}
	if got, err := x.get(vip, labHTTPTimeout); err != nil || got != "tenant ta" {
		t.Fatalf("after the failover the VIP answered %q, %v", got, err)
	}
	t.Logf("%s (via %s) killed: BIRD's route goes via %s, the client's next answer %s after the kill",
		dead.id, via, after, d.Round(time.Millisecond))
	t.Logf("lab ran %s", time.Since(start).Round(time.Millisecond))
}
