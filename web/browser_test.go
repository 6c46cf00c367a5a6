package web

import (
	"context"
	"fmt"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"
	"google.golang.org/protobuf/types/known/timestamppb"

	pb "github.com/teapot-lb/teapot-lb/api/proto/teapotv1"
)

// chromium is the Debian package's browser (`chromium`).
const chromium = "/usr/bin/chromium"

// TestTenantPagesInBrowser opens the dashboard in headless Chromium,
// served from an in-memory cluster whose tenant wrote markup into a DNS
// name, a BGP peer and a dropped prefix's reason: the tenant's page shows
// the names with what each host answers, the sessions (those closed for a
// bound say so) and the prefixes, all as text (no element of the
// tenant's making), and a host's page its DNS zones with the DS to
// publish. When a host stops answering, its DNS and BGP show unknown and
// stale, never fresh. No page throws a script error.
func TestTenantPagesInBrowser(t *testing.T) {
	t.Parallel()
	if _, err := os.Stat(chromium); err != nil {
		if os.Getenv("CI") == "1" {
			t.Fatalf("no Chromium at %s (Debian package chromium): %v", chromium, err)
		}
		t.Skipf("no Chromium at %s (Debian package chromium)", chromium)
	}
	host := func(id string) *pb.HostObservation {
		h := tenantBGP(id, 3)
		h.Listeners = []*pb.ListenerObservation{{LoadBalancer: "acme/shop", Address: "192.0.2.200:80", Protocol: "http", Bound: true}}
		h.TenantUsage = []*pb.TenantUsage{{Tenant: "acme", Connections: 2, Descriptors: 4, MaxDescriptors: 100,
			Cpu: &pb.TenantCPUObservation{Millicores: 500, UsedSeconds: 2, WindowSeconds: 10, Time: timestamppb.Now(), ThrottledSeconds: 1.5, Throttles: 3, InDebt: true}}}
		h.DnsZones = []*pb.DNSZoneObservation{{Zone: "lb.acme.example.", Signed: true, KeyTag: 4711, Ds: "lb.acme.example. 3600 IN DS 4711 13 2 ABCDEF",
			// A key rollover: both DS shown.
			NextKeyTag: 815, NextDs: "lb.acme.example. 3600 IN DS 815 13 2 FEDCBA"}}
		state, reason := "up", ""
		if id == "n2" {
			state, reason = "failed", "add VXLAN device (VNI 1001, port 4789): address already in use"
		}
		h.TenantAttachments = []*pb.TenantAttachmentObservation{{Tenant: "acme", Namespace: "teapot-att-acme", State: state, Reason: reason,
			Vni: 1001, Address: "10.20.0.2/16", Since: timestamppb.New(time.Now().Add(-time.Minute))}}
		// n1 re-announces the tenant's routes; n2's speaker refused them.
		b := h.TenantBgp[0]
		b.ReannounceSince = timestamppb.New(time.Now().Add(-time.Minute))
		if id == "n1" {
			b.Reannounced, b.FabricSessions = 3, 2
		} else {
			b.ReannounceError = "announce tenant route 10.2.0.0/24: " + hostile
			// n2 cannot announce the attachment's bgp VIP.
			b.AnnounceError, b.AnnounceSince = "no address in the attachment: "+hostile, timestamppb.New(time.Now().Add(-time.Minute))
		}
		return h
	}
	c := &netCluster{cluster: &cluster{
		status: &pb.ClusterStatusResponse{LeaderId: "n1", Nodes: []*pb.NodeStatus{node("n1", "leader", true), node("n2", "follower", true)}},
		obs:    &pb.ObserveResponse{Hosts: []*pb.HostObservation{host("n1"), host("n2")}},
		objs: map[string][]*pb.Object{"LoadBalancer": {shop()}, "Tenant": {acmeTenant()},
			"VIPPool": {{Kind: &pb.Object_VipPool{VipPool: &pb.VIPPool{Name: "acme-private", Cidrs: []string{"10.20.0.100/32"}, Mode: "arp", Attachment: "acme"}}}}},
	}}
	c.setDNS(&pb.ObserveResponse{Hosts: []*pb.HostObservation{dnsNames("n1", 3), dnsNames("n2", 3)}})
	s, err := New(Config{Source: c, Interval: 300 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	go s.Run(ctx)
	ts := httptest.NewServer(s.Handler())
	defer ts.Close()
	base := strings.Replace(ts.URL, "127.0.0.1", "localhost", 1)

	actx, acancel := chromedp.NewExecAllocator(ctx, chromedp.ExecPath(chromium), chromedp.Flag("headless", true), chromedp.NoSandbox,
		chromedp.DisableGPU, chromedp.NoFirstRun, chromedp.NoDefaultBrowserCheck, chromedp.Flag("disable-dev-shm-usage", true),
		chromedp.Flag("disable-background-networking", true), chromedp.UserDataDir(t.TempDir()), chromedp.WindowSize(1280, 900))
	defer acancel()
	bctx, bcancel := chromedp.NewContext(actx, chromedp.WithLogf(t.Logf))
	defer bcancel()
	var mu sync.Mutex
	var scriptErrs []string
	if err := chromedp.Do(bctx); err != nil {
		t.Fatalf("start Chromium: %v", err)
	}
	if err := chromedp.Listen(bctx, func(ev any) {
		mu.Lock()
		defer mu.Unlock()
		switch e := ev.(type) {
		case *runtime.EventExceptionThrown:
			scriptErrs = append(scriptErrs, e.ExceptionDetails.Text+" "+fmt.Sprint(e.ExceptionDetails.Exception.Description))
		case *runtime.EventConsoleAPICalled:
			if e.Type == runtime.ConsoleAPICalledTypeError {
				scriptErrs = append(scriptErrs, "console.error")
			}
		}
	}); err != nil {
		t.Fatal(err)
	}
	do := func(a ...chromedp.Action[chromedp.Void]) {
		t.Helper()
		if err := chromedp.Do(bctx, a...); err != nil {
			t.Fatalf("browser: %v", err)
		}
	}
	// wait polls expr (a JavaScript expression giving a string) until it
	// is "" and fails with its last value.
	wait := func(what, expr string) {
		t.Helper()
		deadline := time.Now().Add(60 * time.Second)
		last := ""
		for time.Now().Before(deadline) {
			v, err := chromedp.Run(bctx, chromedp.Evaluate[string](expr))
			if err == nil && v == "" {
				return
			}
			last = fmt.Sprint(v, err)
			time.Sleep(100 * time.Millisecond)
		}
		t.Fatalf("waiting for %s: %s", what, last)
	}
	do(chromedp.Navigate(base + "/login?token=" + s.LoginToken()))
	do(chromedp.Navigate(base + "/#/tenant/acme"))
	wait("the tenant's DNS names and BGP", `(() => {
	  const m = document.getElementById("main"), dns = document.querySelector("#dns-table table.dns"), bgp = document.querySelector("#bgp-table table");
	  if (!dns || !bgp) return "no tables yet: " + m.innerText.slice(0, 300);
	  const t = m.innerText;
	  const want = [`+"`"+hostile+"`"+`, "192.0.2.201", "no member of acme/shop is up", "closed for its prefix count", "closed for its update rate",
	    "established", "BFD up since", "BFD down (", "172.16.0.0/24", "not inside the tenant's networks", "accepted", "dropped",
	    "Attachment", "teapot-att-acme", "10.20.0.2/16", "error", "address already in use", "VIP pools in the attachment", "acme-private", "10.20.0.100/32",
	    "from namespace teapot-att-acme", "sessions and routes in namespace teapot-att-acme"];
	  const miss = want.filter(w => !t.includes(w));
	  if (miss.length) return "missing " + JSON.stringify(miss);
	  if (document.querySelectorAll("#main img, #main [onerror]").length) return "the tenant's markup made an element";
	  if (dns.querySelectorAll('td[data-state="answered"]').length !== 6 || dns.querySelectorAll('td[data-state="left-out"]').length !== 6) return "dns cells: " + dns.innerText.slice(0, 300);
	  const up = document.querySelector('#main [data-reannounce="ok"]'), down = document.querySelector('#main [data-reannounce="failed"]');
	  if (!up || !up.innerText.includes("re-announced 3 on 2 fabric sessions since") || !down || !down.innerText.includes("not re-announced since") || !down.innerText.includes("announce tenant route 10.2.0.0/24: <img"))
	    return "re-announcement: " + (up ? up.innerText : "none") + " / " + (down ? down.innerText : "none");
	  const ann = document.querySelector('#main [data-announce="ok"]'), nann = document.querySelector('#main [data-announce="failed"]'), sent = document.querySelector("#main [data-advertised]");
	  if (!ann || !ann.innerText.includes("VIPs announced to the tenant's speakers since") || !ann.innerText.includes("10.20.5.100/32 via 10.20.0.2") ||
	    !nann || !nann.innerText.includes("VIPs not announced since") || !nann.innerText.includes("no address in the attachment: <img") || !sent || sent.innerText !== "sent 1")
	    return "VIP announcements: " + (ann ? ann.innerText : "none") + " / " + (nann ? nann.innerText : "none") + " / " + (sent ? sent.innerText : "no sent count");
	  if (document.querySelectorAll("#main time.seen.stale").length) return "stale ages while every host answers";
	  return "";
	})()`)
	do(chromedp.Navigate(base + "/#/host/n1"))
	wait("the host's DNS zones", `(() => {
	  const t = document.getElementById("main").innerText;
	  return t.includes("lb.acme.example.") && t.includes("3600 IN DS 4711 13 2 ABCDEF") && t.includes("4711 and 815") &&
	    t.includes("the new key's DS lb.acme.example. 3600 IN DS 815 13 2 FEDCBA") ? "" : t.slice(-400);
	})()`)
	wait("the tenant's CPU budget on the host", `(() => {
	  const t = document.getElementById("main").innerText;
	  return t.includes("0.20 / 0.50") && t.includes("over 10 s") && t.includes("in debt") && t.includes("held 3 times, 1.5 s in all") ? "" : t.slice(-600);
	})()`)

	// n2 stops answering.
	c.set(func() {
		c.obs = &pb.ObserveResponse{Hosts: []*pb.HostObservation{host("n1"), {NodeId: "n2", Error: "connection refused"}}}
	})
	c.setDNS(&pb.ObserveResponse{Hosts: []*pb.HostObservation{dnsNames("n1", 3), {NodeId: "n2", Error: "connection refused"}}})
	do(chromedp.Navigate(base + "/#/tenant/acme"))
	wait("n2 unknown and stale on the tenant's page", `(() => {
	  const dns = document.querySelector("#dns-table table.dns"), m = document.getElementById("main");
	  if (!dns) return "no DNS table";
	  const stale = dns.querySelectorAll('td[data-state="stale"]').length;
	  if (stale !== 6) return stale + " DNS cells stale, want n2's 6: " + dns.innerText.slice(0, 300);
	  if (!m.querySelector(".host-ages time.seen.stale")) return "n2's DNS age not stale: " + m.querySelector(".host-ages").innerText;
	  const t = m.innerText;
	  if (!t.includes("was established") || !t.includes("was dropped") || !t.includes("unreachable")) return "BGP of n2 not unknown: " + t.slice(0, 600);
	  return "";
	})()`)
	mu.Lock()
	defer mu.Unlock()
	if len(scriptErrs) > 0 {
		t.Errorf("script errors: %q", scriptErrs)
	}
}
