package scenarios

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/vishvananda/netlink"

	"github.com/teapot-lb/teapot-lb/scenarios/netlab"
)

// The tenant BGP lab: the VIP lab's three LB hosts and router, plus one
// node of a tenant's Kubernetes cluster (192.0.2.60 on the bridge) with a
// pod behind it (10.244.1.10, in the node's pod range 10.244.1.0/24,
// which nothing routes to). The node runs BIRD as Calico does and
// announces its pod range with next hop itself, along with routes the
// tenant does not own.
const (
	tenantNodeASN = 64600
	tenantNode    = "192.0.2.60"
	tenantPod     = "10.244.1.10"
	tenantVIP     = "192.0.2.201"
	// tenantRouteProto is vip/tenantbgp.RouteProtocol.
	tenantRouteProto = 196
)

// tenantAccepted is what the node announces inside the tenant's
// networks; tenantDropped what it announces outside them, with the reason
// explain gives.
var (
	tenantAccepted = []string{"10.244.1.0/24"}
	tenantDropped  = map[string]string{
		"0.0.0.0/0":       "default route",
		"10.99.0.0/16":    "outside the tenant's networks",
		"10.0.0.0/8":      "outside the tenant's networks",
		"192.0.2.11/32":   "outside the tenant's networks",
		"203.0.113.0/28":  "outside the tenant's networks",
		"10.244.7.0/24":   "overlaps VIP pool inner",
		"10.244.1.128/30": "more specific than the tenant's maxPrefixLength",
		"10.244.2.0/24":   "next hop outside the tenant's networks",
	}
)

const tenantBGPManifest = `
kind: VIPPool
name: inner
cidrs: ["10.244.7.0/28"]
mode: static
---
kind: Tenant
name: kube
networks: [192.0.2.60/32, 10.244.0.0/16]
pools: [l2]
bgp: { asn: %d, peers: [%s], maxPrefixes: %d, maxPrefixLength: 28 }
---
kind: LoadBalancer
name: pods
tenant: kube
vip: { pool: l2, address: "%s" }
listeners: [{ port: 80, protocol: http }]
routes: [{ path: /, pool: web }]
pools: { web: { members: ["%s:8080"] } }
`

// tenantBird is the tenant node's BIRD: an eBGP session with each LB host,
// exporting its static routes (n extra /32s in the pod range besides the
// fixed ones, to go over the session's prefix bound).
func tenantBird(dir string, lbs []*lbHost, extra int) string {
	var b strings.Builder
	fmt.Fprintf(&b, `log "%s" all;
router id %s;
protocol device { scan time 10; }
protocol static pods {
  ipv4;
  route 10.244.1.0/24 blackhole;
  route 0.0.0.0/0 blackhole;
  route 10.99.0.0/16 blackhole;
  route 10.0.0.0/8 blackhole;
  route 192.0.2.11/32 blackhole;
  route 203.0.113.0/28 blackhole;
  route 10.244.7.0/24 blackhole;
  route 10.244.1.128/30 blackhole;
  route 10.244.2.0/24 blackhole;
`, filepath.Join(dir, "tenant-bird.log"), tenantNode)
	for i := range extra {
		fmt.Fprintf(&b, "  route 10.244.%d.%d/32 blackhole;\n", 100+i/250, 1+i%250)
	}
	fmt.Fprintf(&b, `}
filter hops {
  if net = 10.244.2.0/24 then bgp_next_hop = 192.0.2.99;
  accept;
}
template bgp lb {
  local %s as %d;
  ipv4 { import none; export filter hops; };
  connect retry time 1; connect delay time 1; error wait time 1, 2;
}
`, tenantNode, tenantNodeASN)
	for _, n := range lbs {
		fmt.Fprintf(&b, "protocol bgp %s from lb { neighbor %s as %d; }\n", n.id, n.ip4, labASN)
	}
	return b.String()
}

// tenantRoutes returns the routes the relay installed in n's kernel
// (prefix -> next hop), and n's default route's next hops.
func tenantRoutes(n *lbHost) (map[string]string, []string, error) {
	got := map[string]string{}
	var defaults []string
	err := n.host.Do(func() error {
		rs, err := netlink.RouteList(nil, netlink.FAMILY_V4)
		if err != nil {
			return err
		}
		for _, r := range rs {
			if r.Dst == nil || r.Dst.IP.IsUnspecified() {
				if r.Gw != nil {
					defaults = append(defaults, r.Gw.String())
				}
				continue
			}
			if r.Protocol == tenantRouteProto {
				got[r.Dst.String()] = fmt.Sprint(r.Gw)
			}
		}
		return nil
	})
	return got, defaults, err
}

func TestTenantBGP(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: builds a network lab with a three-host cluster, a router and a tenant node running BIRD")
	}
	needTools(t, "bird", "birdc")
	l := newVIPLab(t, labOptions{bgp: true, teapot: true})
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	node, err := l.lab.AddHost("tnode", tenantNode+"/24")
	must(err)
	pod, err := l.lab.AddBareHost("pod")
	must(err)
	must(l.lab.Connect(node, "eth1", []string{"10.244.1.1/24"}, pod, "eth0", []string{tenantPod + "/24"}))
	must(pod.IP("route", "add", "default", "via", "10.244.1.1"))
	must(node.Sysctl("net.ipv4.ip_forward", "1"))
	servePod(t, pod)
	conf := filepath.Join(l.dir, "tenant-bird.conf")
	sock := filepath.Join(l.dir, "tenant-bird.ctl")
	must(os.WriteFile(conf, []byte(tenantBird(l.dir, l.lbs, 0)), 0o644))
	bird, err := node.Start(filepath.Join(l.dir, "tenant-bird.out"), nil, "bird", "-f", "-c", conf, "-s", sock, "-P", filepath.Join(l.dir, "tenant-bird.pid"))
	must(err)
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("---- tenant BIRD log ----\n%s", tail(filepath.Join(l.dir, "tenant-bird.log"), 40))
		}
	})
	waitFor(t, 10*time.Second, "the tenant's BIRD to start", func() error {
		if !bird.Running() {
			return errStop(fmt.Errorf("bird exited: %s", tail(filepath.Join(l.dir, "tenant-bird.out"), 20)))
		}
		_, err := os.Stat(sock)
		return err
	})
	const maxPrefixes = 20
	manifest := filepath.Join(l.dir, "tenant-bgp.yaml")
	must(os.WriteFile(manifest, []byte(fmt.Sprintf(tenantBGPManifest, tenantNodeASN, tenantNode, maxPrefixes, tenantVIP, tenantPod)), 0o644))
	applied := time.Now()
	if _, err := l.cli(l.lbs[0], "apply", "-f", manifest); err != nil {
		t.Fatal(err)
	}

	// Every host learns the pod range, and only it, via the node.
	for _, n := range l.lbs {
		waitFor(t, settleTimeout, n.id+" installs the tenant's pod range", func() error {
			got, _, err := tenantRoutes(n)
			if err != nil {
				return err
			}
			if got["10.244.1.0/24"] != tenantNode {
				return fmt.Errorf("tenant routes %v", got)
			}
			return nil
		})
	}
	t.Logf("pod range installed on every host %s after the apply", time.Since(applied).Round(time.Millisecond))
	waitFor(t, settleTimeout, "the client reaches the pod through the VIP", func() error {
		return httpGet(l.client, netip.AddrPortFrom(netip.MustParseAddr(tenantVIP), 80), labHTTPTimeout)
	})
	t.Logf("pod served through the VIP %s after the apply", time.Since(applied).Round(time.Millisecond))

	t.Run("nothing outside the tenant's networks reaches a host's table", func(t *testing.T) {
		must := func(err error) {
			t.Helper()
			if err != nil {
				t.Fatal(err)
			}
		}
		// The explain below shows every drop: by then each host has judged
		// the whole announcement.
		waitExplain(t, l, func(out string) error {
			for p := range tenantDropped {
				if !strings.Contains(out, p) {
					return fmt.Errorf("%s is not listed", p)
				}
			}
			return nil
		})
		for _, n := range l.lbs {
			got, defaults, err := tenantRoutes(n)
			must(err)
			if want := map[string]string{"10.244.1.0/24": tenantNode}; !mapsEqual(got, want) {
				t.Errorf("%s installed %v, want %v", n.id, got, want)
			}
			if !slices.Equal(defaults, []string{"192.0.2.1"}) {
				t.Errorf("%s's default route goes via %v, want 192.0.2.1 alone", n.id, defaults)
			}
			for p := range tenantDropped {
				if p == "0.0.0.0/0" {
					continue
				}
				if hops, err := routesTo(n.host, netip.MustParsePrefix(p)); err != nil || len(hops) > 0 {
					t.Errorf("%s has a route to %s via %v (%v)", n.id, p, hops, err)
				}
			}
		}
		// explain above shows what any host judged: each host's /metrics
		// shows its own once it has judged the whole announcement.
		for _, n := range l.lbs {
			waitFor(t, settleTimeout, n.id+"'s /metrics counts the tenant's routes", func() error {
				s, err := l.scrape(n)
				if err != nil {
					return err
				}
				kube := map[string]string{"tenant": "kube"}
				if up := sum(s, "teapot_lb_tenant_bgp_sessions_established", kube); up != 1 {
					return fmt.Errorf("%v sessions established in /metrics, want 1", up)
				}
				for result, want := range map[string]int{"accepted": len(tenantAccepted), "dropped": len(tenantDropped)} {
					if got := sum(s, "teapot_lb_tenant_bgp_routes", map[string]string{"tenant": "kube", "result": result}); got != float64(want) {
						return fmt.Errorf("%v routes %s in /metrics, want %d", got, result, want)
					}
				}
				return nil
			})
		}
		// BIRD's table on the fabric router holds the VIPs and nothing of
		// the tenant's.
		out, err := l.birdc("show", "route")
		must(err)
		if !strings.Contains(out, bgpVIP4.String()) || strings.Contains(out, "10.244.") || strings.Contains(out, "0.0.0.0/0") {
			t.Errorf("the tenant's route reached the fabric router:\n%s", out)
		}
	})

	t.Run("explain lists the sessions, the accepted and the dropped routes with the reason", func(t *testing.T) {
		out := waitExplain(t, l, func(out string) error {
			if strings.Count(out, "established") < len(l.lbs) {
				return fmt.Errorf("not every session is established")
			}
			return nil
		})
		for _, p := range tenantAccepted {
			if !regexpLine(out, p+`\s+`+tenantNode+`\s+`+tenantNode+`\s+installed`) {
				t.Errorf("explain does not show %s installed:\n%s", p, out)
			}
		}
		for p, why := range tenantDropped {
			if !strings.Contains(out, p) || !regexpLine(out, strings.ReplaceAll(p, ".", `\.`)+`\s.*dropped: `+why) {
				t.Errorf("explain does not show %s dropped (%s):\n%s", p, why, out)
			}
		}
	})

	t.Run("a hostile tenant's 100,000 prefixes are bounded and disturb no one else", func(t *testing.T) {
		hostileSpeaker(t, l)
	})

	t.Run("accepted routes are re-announced to the fabric router with the tenant's community", func(t *testing.T) {
		must := func(err error) {
			t.Helper()
			if err != nil {
				t.Fatal(err)
			}
		}
		reannounce := strings.Replace(fmt.Sprintf(tenantBGPManifest, tenantNodeASN, tenantNode, maxPrefixes, tenantVIP, tenantPod),
			"maxPrefixLength: 28 }", `maxPrefixLength: 28, reannounce: true, community: "64512:60" }`, 1)
		must(os.WriteFile(manifest, []byte(reannounce), 0o644))
		if _, err := l.cli(l.lbs[0], "apply", "-f", manifest); err != nil {
			t.Fatal(err)
		}
		applied := time.Now()
		waitFor(t, settleTimeout, "the fabric router learns the pod range from every host, with the community", func() error {
			out, err := l.birdc("show", "route", "all", "for", "10.244.1.10")
			if err != nil {
				return err
			}
			if !strings.Contains(out, "10.244.1.0/24") || strings.Count(out, "BGP.community: (64512,60)") < len(l.lbs) {
				return fmt.Errorf("the pod range is not learned from every host with the community:\n%s", out)
			}
			for _, n := range l.lbs {
				if !strings.Contains(out, "via "+n.ip4.String()) {
					return fmt.Errorf("not via %s:\n%s", n.id, out)
				}
			}
			return nil
		})
		t.Logf("the pod range reached the fabric router from every host %s after the apply", time.Since(applied).Round(time.Millisecond))
		// explain tenant says, per host, what it re-announces and on how
		// many sessions with the fabric router.
		onFabric := regexp.MustCompile(`(?m)^  (\S+): \d+ routes? on [1-9]\d* established fabric sessions since `)
		waitFor(t, settleTimeout, "explain tenant shows the re-announced routes of every host", func() error {
			out, err := l.cli(l.lbs[0], "explain", "tenant", "kube")
			if err != nil {
				return err
			}
			if got := len(onFabric.FindAllString(out, -1)); got != len(l.lbs) {
				return fmt.Errorf("%d hosts re-announce on the fabric session, want %d:\n%s", got, len(l.lbs), out)
			}
			return nil
		})
		out, err := l.birdc("show", "route")
		must(err)
		for p := range tenantDropped {
			if strings.Contains(out, p) {
				t.Errorf("dropped route %s reached the fabric router:\n%s", p, out)
			}
		}
	})

	t.Run("a session over maxPrefixes is closed and its routes go", func(t *testing.T) {
		must(os.WriteFile(conf, []byte(tenantBird(l.dir, l.lbs, maxPrefixes)), 0o644))
		if _, err := node.Exec(t.Context(), "birdc", "-s", sock, "configure"); err != nil {
			t.Fatal(err)
		}
		for _, n := range l.lbs {
			waitFor(t, settleTimeout, n.id+" removes the tenant's routes", func() error {
				got, _, err := tenantRoutes(n)
				if err != nil {
					return err
				}
				if len(got) > 0 {
					return fmt.Errorf("still has %v", got)
				}
				return nil
			})
		}
		out := waitExplain(t, l, func(out string) error {
			if strings.Count(out, "prefix-limit") < len(l.lbs) {
				return fmt.Errorf("not every session is closed for its prefix count")
			}
			return nil
		})
		if !strings.Contains(out, "announced more than maxPrefixes (20)") {
			t.Errorf("explain does not say why the session is down:\n%s", out)
		}
		// Re-announced above: withdrawn from the fabric with the session.
		waitFor(t, settleTimeout, "the pod range withdrawn from the fabric router", func() error {
			out, err := l.birdc("show", "route")
			if err != nil {
				return err
			}
			if strings.Contains(out, "10.244.") {
				return fmt.Errorf("the fabric router still has the tenant's routes:\n%s", out)
			}
			return nil
		})
		for _, n := range l.lbs {
			s, err := l.scrape(n)
			if err != nil {
				t.Fatal(err)
			}
			if got := sum(s, "teapot_lb_tenant_bgp_prefix_limit_total", map[string]string{"tenant": "kube"}); got != 1 {
				t.Errorf("%s: %v sessions closed for their prefix count in /metrics, want 1", n.id, got)
			}
		}
	})
}

// waitExplain waits until `explain tenant kube` satisfies ok, and returns it.
func waitExplain(t *testing.T, l *vipLab, ok func(string) error) string {
	t.Helper()
	var out string
	waitFor(t, settleTimeout, "explain tenant kube", func() error {
		var err error
		if out, err = l.cli(l.lbs[0], "explain", "tenant", "kube"); err != nil {
			return err
		}
		if err := ok(out); err != nil {
			return fmt.Errorf("%w:\n%s", err, out)
		}
		return nil
	})
	return out
}

// routesTo returns the next hops of h's routes whose destination is p.
func routesTo(h *netlab.Host, p netip.Prefix) ([]string, error) {
	var hops []string
	err := h.Do(func() error {
		dst := &net.IPNet{IP: p.Addr().AsSlice(), Mask: net.CIDRMask(p.Bits(), p.Addr().BitLen())}
		rs, err := netlink.RouteListFiltered(netlink.FAMILY_V4, &netlink.Route{Dst: dst}, netlink.RT_FILTER_DST)
		for _, r := range rs {
			hops = append(hops, fmt.Sprint(r.Gw))
		}
		return err
	})
	return hops, err
}

// servePod runs an HTTP server on :8080 in the pod.
func servePod(t *testing.T, pod *netlab.Host) {
	var ln net.Listener
	if err := pod.Do(func() (err error) { ln, err = net.Listen("tcp", ":8080"); return err }); err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{
		Handler:           http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "pod\n") }),
		ReadHeaderTimeout: 5 * time.Second,
	}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
}

func mapsEqual(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}

func regexpLine(s, pattern string) bool {
	return regexp.MustCompile(`(?m)` + pattern).MatchString(s)
}
