package scenarios

import (
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// historyTimeout bounds the wait for a point of the hosts' history rings:
// they sample every 10 s, so one interval with traffic ends within 10 s,
// and a page reads the rings again every 30 s.
const historyTimeout = 45 * time.Second

// checkMonitoring runs while traffic flows through acme/shop: its charts
// have axes with units and read out a point under the pointer; each
// member's traffic is on its page and in `get lb -o wide`; the page of
// the host holding its VIP shows the host's resources, its listener and
// the tenant's budgets; its stored object is shown as YAML.
func checkMonitoring(t *testing.T, l *vipLab, b *browser, base, carrier, flaky string, shots []string) {
	t.Helper()
	b.do(chromedp.Navigate(base + "/#/lb/acme%2Fshop"))
	// Axes: three values with units on y, three times on x.
	waitEval(b, pageTimeout, "the req/s chart's axes", `(() => {
  const f = document.querySelector('#main [data-lb="acme/shop"] figure[data-metric="rps"]');
  if (!f) return [];
  return [...f.querySelectorAll("text.ylab")].map(x => x.textContent).concat([...f.querySelectorAll("text.xlab")].map(x => x.textContent));
})()`, func(v []string) error {
		if len(v) != 6 || v[0] != "0" || !strings.HasSuffix(v[2], "/s") || !regexp.MustCompile(`^\d\d:\d\d`).MatchString(v[3]) {
			return fmt.Errorf("axis labels %q: want 0, half and top in req/s, and three times", v)
		}
		return nil
	})
	for _, m := range []string{"err", "p99", "active", "cps", "bin", "bout"} {
		waitEval(b, pageTimeout, "the "+m+" chart", `document.querySelectorAll('#main [data-lb="acme/shop"] figure[data-metric="`+m+`"] text.ylab').length`, func(n int) error {
			if n != 3 {
				return fmt.Errorf("%d y labels", n)
			}
			return nil
		})
	}
	// Hovering the req/s chart reads out the value under the pointer.
	waitEval(b, pageTimeout, "a value read out under the pointer", `(() => {
  const f = document.querySelector('#main [data-lb="acme/shop"] figure[data-metric="rps"]');
  const r = f.querySelector("svg").getBoundingClientRect();
  f.dispatchEvent(new MouseEvent("mousemove", { bubbles: true, clientX: r.right - 8, clientY: r.top + r.height / 2 }));
  return f.querySelector(".hover").textContent;
})()`, func(v string) error {
		if !regexp.MustCompile(`^\d\d:\d\d:\d\d: [\d.]+k?/s`).MatchString(v) {
			return fmt.Errorf("read-out %q, want TIME: N/s", v)
		}
		return nil
	})
	// Member traffic: the member that answers carries requests, on the
	// page (the hosts measure every 10 s) and in `get lb -o wide`.
	member := regexp.MustCompile(`web: 192\.0\.2\.50:8080\s+([\d.]+k?)\s+([\d.]+)%\s+(—|[\d.]+ m?s)\s+\d+\s+\d+\s+\d+ s ago`)
	b.waitTextIn(historyTimeout, "#main", "acme/shop's member traffic", func(s string) error {
		m := member.FindStringSubmatch(s)
		if m == nil {
			return errors.New("no member traffic row for 192.0.2.50:8080")
		}
		if f, _ := strconv.ParseFloat(strings.TrimSuffix(m[1], "k"), 64); f <= 0 {
			return fmt.Errorf("192.0.2.50:8080 at %s req/s", m[1])
		}
		return nil
	})
	wide := regexp.MustCompile(`acme/shop\s+web\s+192\.0\.2\.50:8080\s+([\d.]+)\s+[\d.]+%\s+\S+\s+\d+\s+(\d)\s+\d+s`)
	waitFor(t, historyTimeout, "member traffic in get lb -o wide", func() error {
		out, err := l.cli(l.lbs[0], "get", "lb", "acme/shop", "-o", "wide")
		if err != nil {
			return fmt.Errorf("get lb -o wide: %v\n%s", err, out)
		}
		m := wide.FindStringSubmatch(out)
		if m == nil || m[1] == "0" || !regexp.MustCompile(`REQ/S\s+5XX\s+P99\s+CONNS\s+TRAFFIC AGE`).MatchString(out) {
			return fmt.Errorf("no traffic of 192.0.2.50:8080 in:\n%s", out)
		}
		return nil
	})
	// The stored object, as get -o yaml prints it.
	b.waitText("#main pre.yaml", "acme/shop as YAML", func(s string) error {
		if !strings.HasPrefix(s, "kind: LoadBalancer\nname: shop\ntenant: acme\n") || !strings.Contains(s, flaky) {
			return fmt.Errorf("YAML %q", clip(s, 200))
		}
		return nil
	})

	// The host's page: resources with their age, the listener bound, the
	// tenant's budgets, and its charts with CPU and memory.
	b.do(chromedp.Navigate(base + "/#/host/" + carrier))
	b.waitText("#main", "host "+carrier+"'s page", func(s string) error {
		for _, want := range []*regexp.Regexp{
			regexp.MustCompile(`CPU\s+[\d.]+ of \d+ cores`), regexp.MustCompile(`Memory\s+\d+ MB`),
			regexp.MustCompile(`Descriptors \(process\)\s+\d+ / \d+`), regexp.MustCompile(`Connections \(data plane\)\s+\d+ / \d+`),
			regexp.MustCompile(`History ring\s+[\d.]+ [KM]?B of [\d.]+ MB at most`), regexp.MustCompile(`measured \d+ s ago`),
			regexp.MustCompile(`acme/shop\s+Serving\s+192\.0\.2\.201:80/http\s+bound`), regexp.MustCompile(`\nacme\s+\d+\s+\d+\s+\d+\s+\d+ / \d+`),
		} {
			if !want.MatchString(s) {
				return fmt.Errorf("no %s", want)
			}
		}
		return nil
	})
	waitEval(b, pageTimeout, "the host's CPU and memory charts", `["cpu", "mem"].map(k => Number(document.querySelector('#main [data-host] figure[data-metric="' + k + '"]')?.dataset.latest || 0))`, func(v []float64) error {
		if len(v) != 2 || v[1] <= 0 {
			return fmt.Errorf("cpu and memory %v, want memory > 0", v)
		}
		return nil
	})
	b.shot(shots, "dashboard-host.png")
}

// checkHistoryAfterTheFact opens a second dashboard after the traffic
// stopped: it has no live points of that time, yet acme/shop's chart
// shows the traffic from the hosts' history rings.
func checkHistoryAfterTheFact(t *testing.T, l *vipLab, b *browser) {
	t.Helper()
	url := startDashboardAt(t, l, "127.0.0.1:8001")
	// Another host name, so its session cookie does not replace the
	// first dashboard's.
	url = strings.Replace(url, "127.0.0.1", "localhost", 1)
	base := url[:strings.Index(url, "/login")]
	b.do(chromedp.Navigate(url))
	b.waitText("#main", "the second dashboard", func(s string) error {
		if !strings.Contains(s, "Hosts healthy") {
			return errors.New("no cluster page")
		}
		return nil
	})
	count := `(() => {
  const d = chartData.get("lb:acme/shop:rps");
  return d ? [d.ps.filter(p => p.h).length, d.ps.filter(p => p.h && p.rps > 0).length, d.ps.filter(p => !p.h).length] : [];
})()`
	var got []float64
	waitFor(t, historyTimeout, "acme/shop's traffic from the hosts' history in a dashboard opened afterwards", func() error {
		// A fresh load asks the hosts' rings again.
		b.do(chromedp.Navigate("about:blank"), chromedp.Navigate(base+"/#/lb/acme%2Fshop"))
		deadline := time.Now().Add(5 * time.Second)
		for {
			v, err := chromedp.Run(b.ctx, chromedp.Evaluate[[]float64](count))
			if err == nil && len(v) == 3 && v[1] > 0 {
				got = v
				return nil
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("history points (all, with traffic, live): %v %v", v, err)
			}
			time.Sleep(300 * time.Millisecond)
		}
	})
	t.Logf("a dashboard opened after the traffic shows %v history points of acme/shop, %v of them with traffic", got[0], got[1])
}

// checkSearch filters the load balancers by a word, by status, and the
// tenants by a name; typing survives the page's refreshes.
func checkSearch(t *testing.T, b *browser, base string) {
	t.Helper()
	b.do(chromedp.Navigate(base+"/#/lbs"), chromedp.SendKeys("#search", "big", chromedp.NodeVisible))
	b.waitText("#main", "only acme/big listed", func(s string) error {
		if !regexp.MustCompile(`Load balancers 1 of \d+ shown`).MatchString(s) || !strings.Contains(s, "acme/big") || strings.Contains(s, "acme/shop") {
			return fmt.Errorf("the search for big: %q", clip(s, 300))
		}
		return nil
	})
	// Past a few refreshes, still filtered, and the box keeps the text.
	time.Sleep(time.Second)
	waitEval(b, pageTimeout, "the search box kept its text", `[document.getElementById("search").value, document.getElementById("main").innerText.includes("acme/shop")]`, func(v []any) error {
		if len(v) != 2 || v[0] != "big" || v[1] != false {
			return fmt.Errorf("search box and page: %v", v)
		}
		return nil
	})
	// The status filter: only load balancers of acme/big's status.
	waitEval(b, pageTimeout, "a status filter", `(() => {
  const q = document.getElementById("search");
  q.value = "";
  q.dispatchEvent(new Event("input"));
  const want = state.snap.lbs.find(l => l.id === "acme/big").status;
  const st = document.getElementById("status-filter");
  st.value = want;
  st.dispatchEvent(new Event("change"));
  const rows = [...document.querySelectorAll("#main tbody tr")].map(r => r.cells[1].innerText.split("\n")[0]);
  return [want, rows.length, rows.every(x => x === want), document.getElementById("main").innerText.includes("acme/big")];
})()`, func(v []any) error {
		if len(v) != 4 || v[1].(float64) < 1 || v[2] != true || v[3] != true {
			return fmt.Errorf("status filter (status, rows, all of it, acme/big listed): %v", v)
		}
		return nil
	})
	if _, err := chromedp.Run(b.ctx, chromedp.Evaluate[bool](`(() => { const st = document.getElementById("status-filter"); st.value = ""; st.dispatchEvent(new Event("change")); return true; })()`)); err != nil {
		t.Fatalf("clear the status filter: %v", err)
	}
	b.do(chromedp.Navigate(base + "/#/tenants"))

	b.do(chromedp.SendKeys("#search", "nobody-like-this", chromedp.NodeVisible))
	b.waitText("#main", "no tenant matches", func(s string) error {
		if !strings.Contains(s, "No tenant matches the filter.") {
			return fmt.Errorf("tenants page %q", clip(s, 300))
		}
		return nil
	})
}
