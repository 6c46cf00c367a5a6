package scenarios

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/teapot-lb/teapot-lb/scenarios/netlab"
)

// attachedTenant is a tenant's side in the attachment lab: a host on the
// lab's segment (its VTEP) with a VXLAN device to every LB host, on
// which its echo answers with the tenant's name on 10.0.0.10:8080 and
// from which its client reaches the tenant's private VIP.
type attachedTenant struct {
	name string
	vni  int
	vtep string
	vip  netip.Addr
	host *netlab.Host
}

// newAttachedTenant makes the tenant's host and its VXLAN segment
// 10.0.0.0/24, flooding to each LB host.
func newAttachedTenant(t *testing.T, l *vipLab, name string, vni int, vtep, vip string) *attachedTenant {
	t.Helper()
	h, err := l.lab.AddHost(name, vtep+"/24")
	if err != nil {
		t.Fatal(err)
	}
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(h.IP("link", "add", "vx0", "type", "vxlan", "id", fmt.Sprint(vni), "dstport", "4789", "local", vtep, "dev", "eth0"))
	must(h.IP("addr", "add", "10.0.0.10/24", "dev", "vx0"))
	must(h.IP("link", "set", "vx0", "up"))
	for _, n := range l.lbs {
		ctx, cancel := context.WithTimeout(context.Background(), cliTimeout)
		out, err := h.Exec(ctx, "bridge", "fdb", "append", "00:00:00:00:00:00", "dev", "vx0", "dst", n.ip4.String())
		cancel()
		if err != nil {
			t.Fatalf("bridge fdb append: %v: %s", err, out)
		}
	}
	var ln net.Listener
	must(h.Do(func() (err error) { ln, err = net.Listen("tcp", "10.0.0.10:8080"); return err }))
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "tenant "+name+"\n") }),
		ReadHeaderTimeout: 5 * time.Second}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	return &attachedTenant{name: name, vni: vni, vtep: vtep, vip: netip.MustParseAddr(vip), host: h}
}

// get asks a VIP from the tenant's client and returns the answer.
func (a *attachedTenant) get(vip netip.Addr, timeout time.Duration) (string, error) {
	var c net.Conn
	deadline := time.Now().Add(timeout)
	if err := a.host.Do(func() (err error) {
		c, err = (&net.Dialer{Deadline: deadline}).Dial("tcp", netip.AddrPortFrom(vip, 80).String())
		return err
	}); err != nil {
		return "", err
	}
	defer c.Close()
	_ = c.SetDeadline(deadline)
	io.WriteString(c, "GET / HTTP/1.0\r\nHost: lab\r\n\r\n")
	b, err := io.ReadAll(c)
	if err != nil {
		return "", err
	}
	if !strings.HasPrefix(string(b), "HTTP/1.") || !strings.Contains(firstLine(string(b)), " 200") {
		return "", fmt.Errorf("answer %q", firstLine(string(b)))
	}
	_, body, _ := strings.Cut(string(b), "\r\n\r\n")
	return strings.TrimSpace(body), nil
}

// manifest is the tenant with its attachment on the three LB hosts, a
// pool in the attachment and a load balancer on it; without the pool and
// the load balancer when base (the pool needs the attached tenant first).
func (a *attachedTenant) manifest(base bool) string {
	s := fmt.Sprintf(`
kind: Tenant
name: %[1]s
networks: [10.0.0.0/24]
pools: [%[1]s-private]
attachment:
  vxlan: { vni: %[2]d, remotes: [%[3]s] }
  hosts: { n1: 10.0.0.2/24, n2: 10.0.0.3/24, n3: 10.0.0.4/24 }
`, a.name, a.vni, a.vtep)
	if base {
		return strings.Replace(s, "pools: ["+a.name+"-private]\n", "", 1)
	}
	return s + fmt.Sprintf(`---
kind: VIPPool
name: %[1]s-private
cidrs: [%[2]s/32]
mode: arp
attachment: %[1]s
---
kind: LoadBalancer
name: web
tenant: %[1]s
vip: { pool: %[1]s-private }
listeners: [{ port: 80, protocol: http }]
routes: [{ path: /, pool: echo }]
pools: { echo: { members: ["10.0.0.10:8080"] } }
`, a.name, a.vip)
}

// TestTenantPrivateVIPs: two tenants with the same network 10.0.0.0/24,
// each attached to the three LB hosts over VXLAN, each with a pool of
// its own inside its attachment (VIPPool.attachment) and a load balancer
// on the same VIP, 10.0.0.100. Each tenant's client, on its own VXLAN
// segment, reaches only its own echo through that address, which one
// host holds inside each tenant's namespace and announces over each
// tenant's tunnel; no host has it on its own interface. The holder is
// killed: the VIP moves to another host's namespaces (the time to each
// client's next answer is measured), and explain shows the pool in the
// attachment.
func TestTenantPrivateVIPs(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: builds a network lab with a three-host cluster")
	}
	needTools(t, "bridge")
	teapotBinary(t)
	start := time.Now()
	l := newVIPLab(t, labOptions{teapot: true, hostArgs: func(n *lbHost) []string {
		// Each host of this machine binds its attachments' namespaces in
		// a directory of its own.
		return []string{"--netns-dir", filepath.Join(n.dir, "netns")}
	}})
	t.Logf("cluster formed in %s", time.Since(start).Round(time.Millisecond))
	pid := os.Getpid()
	ta := newAttachedTenant(t, l, "ta", 5100+pid%1000*2, "192.0.2.61", "10.0.0.100")
	tb := newAttachedTenant(t, l, "tb", 5101+pid%1000*2, "192.0.2.62", "10.0.0.100")
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
	apply("base.yaml", ta.manifest(true)+"---"+tb.manifest(true))
	apply("private.yaml", ta.manifest(false)+"---"+tb.manifest(false))
	applied := time.Now()

	// Each client reaches its own tenant's echo through its VIP.
	for _, x := range []*attachedTenant{ta, tb} {
		waitFor(t, settleTimeout, "tenant "+x.name+"'s echo through its private VIP", func() error {
			got, err := x.get(x.vip, labHTTPTimeout)
			if err != nil {
				return err
			}
			if got != "tenant "+x.name {
				return errStop(fmt.Errorf("%s's VIP %s answered %q", x.name, x.vip, got))
			}
			return nil
		})
	}
	t.Logf("both private VIPs (the same address) served %s after the apply", time.Since(applied).Round(time.Millisecond))
	// Each client, on its own tenant's segment, only ever reaches its own
	// tenant's service through the address both use.
	for range 20 {
		for _, x := range []*attachedTenant{ta, tb} {
			if got, err := x.get(x.vip, labHTTPTimeout); err != nil || got != "tenant "+x.name {
				t.Fatalf("tenant %s's client through %s: %q, %v", x.name, x.vip, got, err)
			}
		}
	}
	// No VIP is on a host's own interface.
	for _, n := range l.lbs {
		if on, err := n.host.HasAddr("eth0", ta.vip); err != nil || on {
			t.Fatalf("%s has %s on its eth0 (%v)", n.id, ta.vip, err)
		}
	}

	// holderOf: the host whose status says it holds a.
	holderOf := func(a netip.Addr) (*lbHost, error) {
		st, err := l.status(l.lbs[len(l.lbs)-1])
		if err != nil {
			return nil, err
		}
		var out []*lbHost
		for _, ns := range st.GetNodes() {
			for _, v := range ns.GetVips() {
				if v.GetAddress() == a.String() && v.GetState() == "holding" {
					for _, n := range l.lbs {
						if n.id == ns.GetId() {
							out = append(out, n)
						}
					}
				}
			}
		}
		if len(out) != 1 {
			return nil, fmt.Errorf("%s held by %v", a, ids(out))
		}
		return out[0], nil
	}
	var x *lbHost
	waitFor(t, settleTimeout, "one holder of "+ta.vip.String(), func() (err error) { x, err = holderOf(ta.vip); return err })
	if x == l.lbs[len(l.lbs)-1] {
		t.Logf("%s holds %s; status is read from n1 after it stops", x.id, ta.vip)
	}

	pa := startProber(ta.host, netip.AddrPortFrom(ta.vip, 80), probeInterval, probeMax)
	defer pa.finish()
	pb := startProber(tb.host, netip.AddrPortFrom(tb.vip, 80), probeInterval, probeMax)
	defer pb.finish()
	waitFor(t, settleTimeout, "the probers' first answers", func() error {
		_, oka := pa.firstSuccessAfter(time.Time{})
		_, okb := pb.firstSuccessAfter(time.Time{})
		if !oka || !okb {
			return errors.New("none yet")
		}
		return nil
	})
	killed := l.kill(x, false)
	d := pa.waitRecovery(t, killed, recoverTimeout)
	db := pb.waitRecovery(t, killed, recoverTimeout)
	for _, y := range []*attachedTenant{ta, tb} {
		if got, err := y.get(y.vip, labHTTPTimeout); err != nil || got != "tenant "+y.name {
			t.Fatalf("after the failover, %s answered %s's client %q, %v", y.vip, y.name, got, err)
		}
	}
	var y *lbHost
	waitFor(t, settleTimeout, "the new holder of "+ta.vip.String(), func() error {
		st, err := l.status(firstOther(l.lbs, x))
		if err != nil {
			return err
		}
		for _, ns := range st.GetNodes() {
			for _, v := range ns.GetVips() {
				if v.GetAddress() == ta.vip.String() && v.GetState() == "holding" && ns.GetId() != x.id {
					for _, n := range l.lbs {
						if n.id == ns.GetId() {
							y = n
						}
					}
					return nil
				}
			}
		}
		return errors.New("no other host holds it yet")
	})
	t.Logf("%s moved from %s to %s's namespaces of both tenants: the clients' next answers %s (ta) and %s (tb) after the kill",
		ta.vip, x.id, y.id, d.Round(time.Millisecond), db.Round(time.Millisecond))
	for _, f := range []time.Duration{d, db} {
		if f > arpFailoverBound {
			t.Errorf("failover took %s, want under %s", f, arpFailoverBound)
		}
	}

	out, err := l.cli(firstOther(l.lbs, x), "explain", "tenant", "ta")
	if err != nil || !strings.Contains(out, "ta-private") || !strings.Contains(out, ta.vip.String()) {
		t.Fatalf("explain tenant shows no pool in the attachment: %v\n%s", err, out)
	}
	t.Logf("explain tenant ta:\n%s", out)
	t.Logf("lab ran %s", time.Since(start).Round(time.Millisecond))
}

// firstOther returns the first host of lbs that is not x.
func firstOther(lbs []*lbHost, x *lbHost) *lbHost {
	for _, n := range lbs {
		if n != x {
			return n
		}
	}
	return nil
}
