package scenarios

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/teapot-lb/teapot-lb/api/porttest"
)

const metricsVIP = "127.0.0.81"

// sample is one line of the Prometheus text format.
type sample struct {
	labels map[string]string
	value  float64
}

// scrape returns the samples of one host's /metrics by name.
func scrape(n *node) (map[string][]sample, error) { return scrapeAddr(n.metricsAddr, nil) }

// scrapeAddr returns the samples of the /metrics served on addr by name;
// dial, if not nil, opens the connection (from a lab host's namespace).
func scrapeAddr(addr string, dial func(ctx context.Context, network, addr string) (net.Conn, error)) (map[string][]sample, error) {
	// 20 s: a host of 5,000 load balancers under -race on a loaded 2-core
	// machine took over 5 s to answer (Prometheus's own default is 10 s).
	cl := &http.Client{Timeout: 20 * time.Second, Transport: &http.Transport{DialContext: dial, DisableKeepAlives: true}}
	resp, err := cl.Get("http://" + addr + "/metrics")
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		return nil, fmt.Errorf("GET http://%s/metrics: %s", addr, resp.Status)
	}
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	return parseExposition(string(body))
}

// parseExposition reads the Prometheus text format.
func parseExposition(text string) (map[string][]sample, error) {
	out := map[string][]sample{}
	for line := range strings.Lines(text) {
		line = strings.TrimSpace(line)
		if line == "" || line[0] == '#' {
			continue
		}
		name, rest, labels := line, "", map[string]string{}
		if i := strings.IndexAny(line, "{ "); i >= 0 {
			name, rest = line[:i], line[i:]
		}
		if strings.HasPrefix(rest, "{") {
			rest = rest[1:]
			for !strings.HasPrefix(rest, "}") {
				eq := strings.Index(rest, `="`)
				if eq < 0 {
					return nil, fmt.Errorf("bad labels in %q", line)
				}
				key := strings.TrimPrefix(rest[:eq], ",")
				rest = rest[eq+2:]
				var val strings.Builder
				for {
					if rest == "" {
						return nil, fmt.Errorf("unterminated label value in %q", line)
					}
					if rest[0] == '\\' && len(rest) > 1 {
						val.WriteByte(rest[1])
						rest = rest[2:]
						continue
					}
					if rest[0] == '"' {
						rest = rest[1:]
						break
					}
					val.WriteByte(rest[0])
					rest = rest[1:]
				}
				labels[key] = val.String()
				rest = strings.TrimPrefix(rest, ",")
			}
			rest = rest[1:]
		}
		fields := strings.Fields(rest)
		if len(fields) == 0 {
			return nil, fmt.Errorf("no value in %q", line)
		}
		v, err := strconv.ParseFloat(fields[0], 64)
		if err != nil {
			return nil, fmt.Errorf("value in %q: %w", line, err)
		}
		out[name] = append(out[name], sample{labels, v})
	}
	return out, nil
}

// sum adds the samples of name whose labels include match.
func sum(samples map[string][]sample, name string, match map[string]string) float64 {
	var v float64
next:
	for _, s := range samples[name] {
		for k, want := range match {
			if s.labels[k] != want {
				continue next
			}
		}
		v += s.value
	}
	return v
}

// TestMetricsDuringTrafficAndFailover scrapes every host of a three-host
// cluster while HTTP traffic flows and the leader is killed: requests,
// members and leader changes move as they should, and every query of the
// Grafana dashboard names metrics that the hosts export.
func TestMetricsDuringTrafficAndFailover(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: starts a three-node cluster")
	}
	raceHosts(t) // scrapes during traffic and a failover
	backend := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "hello from the member\n")
	})}
	bl, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go backend.Serve(bl)
	t.Cleanup(func() { backend.Close() })

	c := newCluster(t)
	c.start3()
	port := freePortOn(t, metricsVIP)
	manifest := fmt.Sprintf(`
kind: VIPPool
name: local
cidrs: [%[1]s/32]
mode: static
---
kind: Tenant
name: acme
domains: [acme.example]
networks: [127.0.0.1/32]
pools: [local]
---
kind: LoadBalancer
name: shop
tenant: acme
vip: { pool: local, address: "%[1]s" }
listeners: [{ port: %[2]d, protocol: http }]
routes: [{ host: shop.acme.example, path: /, pool: web }]
pools: { web: { members: ["%[3]s"] } }
accessLog: { enabled: true, sample: 1.0 }
`, metricsVIP, port, bl.Addr().String())
	mpath := filepath.Join(c.dir, "shop.yaml")
	if err := os.WriteFile(mpath, []byte(manifest), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := c.cli(c.nodes[0], "apply", "-f", mpath); err != nil {
		t.Fatalf("apply: %v\n%s", err, out)
	}

	// Traffic until the test ends: one request at a time on new
	// connections, so that a host taking over the listener gets them.
	var ok, failed atomic.Int64
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		cl := &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
		url := "http://" + net.JoinHostPort(metricsVIP, strconv.Itoa(port)) + "/"
		for {
			select {
			case <-stop:
				return
			default:
			}
			req, _ := http.NewRequest("GET", url, nil)
			req.Host = "shop.acme.example"
			resp, err := cl.Do(req)
			if err == nil {
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
			}
			if err == nil && resp.StatusCode == 200 {
				ok.Add(1)
			} else {
				failed.Add(1)
				time.Sleep(20 * time.Millisecond)
			}
		}
	}()
	t.Cleanup(func() { close(stop); <-done })

	total := func(nodes []*node, name string, match map[string]string) (float64, error) {
		var v float64
		for _, n := range nodes {
			s, err := scrape(n)
			if err != nil {
				return 0, err
			}
			v += sum(s, name, match)
		}
		return v, nil
	}
	twoXX := map[string]string{"lb": "acme/shop", "code_class": "2xx"}
	waitFor(t, startTimeout, "2xx requests counted by the hosts", func() error {
		v, err := total(c.nodes, "teapot_lb_http_requests_total", twoXX)
		if err != nil {
			return err
		}
		if v < 50 {
			return fmt.Errorf("%v 2xx requests counted, %d answered", v, ok.Load())
		}
		return nil
	})
	// Every host exports the same families; the names feed the dashboard
	// check below.
	names := map[string]bool{}
	for _, n := range c.nodes {
		s, err := scrape(n)
		if err != nil {
			t.Fatal(err)
		}
		for name := range s {
			names[name] = true
		}
		if got := sum(s, "teapot_lb_raft_has_leader", nil); got != 1 {
			t.Errorf("%s: teapot_lb_raft_has_leader = %v, want 1", n.id, got)
		}
		if got := sum(s, "teapot_lb_member_up", map[string]string{"lb": "acme/shop", "member": bl.Addr().String()}); got != 1 {
			t.Errorf("%s: teapot_lb_member_up of the member = %v, want 1", n.id, got)
		}
	}
	leaders, err := total(c.nodes, "teapot_lb_raft_leader", nil)
	if err != nil || leaders != 1 {
		t.Fatalf("teapot_lb_raft_leader summed over the hosts = %v (%v), want 1", leaders, err)
	}

	// Failover: kill the leader; the survivors count a leader change and
	// requests keep being counted.
	leader := c.waitLeader()
	var survivors []*node
	for _, n := range c.nodes {
		if n != leader {
			survivors = append(survivors, n)
		}
	}
	changesBefore, err := total(survivors, "teapot_lb_raft_leader_changes_total", nil)
	if err != nil {
		t.Fatal(err)
	}
	c.kill(leader)
	t.Logf("killed leader %s", leader.id)
	newLeader := c.waitLeader()
	waitFor(t, startTimeout, "the survivors to count the leader change", func() error {
		v, err := total(survivors, "teapot_lb_raft_leader_changes_total", nil)
		if err != nil {
			return err
		}
		if v < changesBefore+1 {
			return fmt.Errorf("leader changes %v, before the kill %v", v, changesBefore)
		}
		return nil
	})
	before, err := total(survivors, "teapot_lb_http_requests_total", twoXX)
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, startTimeout, "requests counted on the survivors after the failover", func() error {
		v, err := total(survivors, "teapot_lb_http_requests_total", twoXX)
		if err != nil {
			return err
		}
		if v < before+20 {
			return fmt.Errorf("%v 2xx requests on the survivors, %v right after the failover", v, before)
		}
		return nil
	})
	t.Logf("new leader %s; %d requests answered, %d failed", newLeader.id, ok.Load(), failed.Load())

	checkDashboard(t, names)
	checkRules(t, names)
	checkAlertingSeries(t, survivors, bl.Addr().String())
	checkAccessLog(t, c.nodes, bl.Addr().String())

	// A clean SIGTERM of a survivor logs no ERROR and exits 0.
	var follower *node
	for _, n := range survivors {
		if n != newLeader {
			follower = n
		}
	}
	terminate(t, c, follower)
}

// checkAccessLog finds the load balancer's access-log lines (stderr, in
// the hosts' logs) and checks one.
func checkAccessLog(t *testing.T, nodes []*node, member string) {
	t.Helper()
	lines := 0
	var first map[string]any
	for _, n := range nodes {
		data, err := os.ReadFile(n.logPath)
		if err != nil {
			t.Fatal(err)
		}
		for line := range strings.Lines(string(data)) {
			if !strings.HasPrefix(line, "{") || !strings.Contains(line, `"lb":"acme/shop"`) {
				continue
			}
			lines++
			if first == nil {
				if err := json.Unmarshal([]byte(line), &first); err != nil {
					t.Fatalf("access-log line %q: %v", line, err)
				}
			}
		}
	}
	if lines == 0 {
		t.Fatal("no access-log line for acme/shop in the hosts' logs")
	}
	for k, want := range map[string]any{"tenant": "acme", "host": "shop.acme.example", "method": "GET", "path": "/",
		"status": 200.0, "upstream": member, "outcome": "ok"} {
		if first[k] != want {
			t.Errorf("access-log line %v: %s = %v, want %v", first, k, first[k], want)
		}
	}
	t.Logf("%d access-log lines", lines)
}

// terminate sends SIGTERM to n, waits for it to exit, and fails the test
// if its last run logged an ERROR or exited with an error.
func terminate(t *testing.T, c *cluster, n *node) {
	t.Helper()
	n.mu.Lock()
	cmd, exited := n.cmd, n.exited
	n.mu.Unlock()
	st, err := os.Stat(n.logPath)
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case <-exited:
	case <-time.After(startTimeout):
		t.Fatalf("%s did not exit within %s of SIGTERM", n.id, startTimeout)
	}
	data, err := os.ReadFile(n.logPath)
	if err != nil {
		t.Fatal(err)
	}
	log := string(data[st.Size():])
	for line := range strings.Lines(log) {
		if strings.Contains(line, "level=ERROR") {
			t.Errorf("%s logged an ERROR around its SIGTERM: %s", n.id, strings.TrimSpace(line))
		}
	}
	if !strings.Contains(log, "exited at") || !strings.Contains(log, ": exit status 0 ====") {
		t.Errorf("%s did not exit cleanly after SIGTERM; its log ends:\n%s", n.id, tail(n.logPath, 5))
	}
}

// freePortOn returns a TCP port free on addr.
func freePortOn(tb testing.TB, addr string) int {
	tb.Helper()
	return porttest.Pick(tb, addr)
}

// checkDashboard parses every query of the Grafana dashboard and fails
// the test for each metric name the hosts do not export. names are the
// sample names scraped (histograms as _bucket, _sum, _count).
func checkDashboard(t *testing.T, names map[string]bool) {
	t.Helper()
	for _, n := range eventMetricNames(t) {
		names[n] = true
	}
	data, err := os.ReadFile(filepath.Join("..", "packaging", "grafana", "teapot-lb.json"))
	if err != nil {
		t.Fatal(err)
	}
	var dash struct {
		Panels []struct {
			Title   string
			Targets []struct{ Expr string }
		}
		Templating struct {
			List []struct {
				Name  string
				Type  string
				Query json.RawMessage
			}
		}
	}
	if err := json.Unmarshal(data, &dash); err != nil {
		t.Fatalf("packaging/grafana/teapot-lb.json: %v", err)
	}
	var queries []string
	for _, p := range dash.Panels {
		for _, tg := range p.Targets {
			queries = append(queries, tg.Expr)
		}
	}
	for _, v := range dash.Templating.List {
		if v.Type != "query" {
			continue
		}
		var q struct{ Query string }
		if err := json.Unmarshal(v.Query, &q); err != nil {
			t.Fatalf("variable %s: %v", v.Name, err)
		}
		queries = append(queries, q.Query)
	}
	if len(queries) < 20 {
		t.Fatalf("the dashboard has %d queries; expected its panels to be read", len(queries))
	}
	used := 0
	for _, q := range queries {
		metrics, err := promqlMetrics(q)
		if err != nil {
			t.Errorf("query %q: %v", q, err)
			continue
		}
		if len(metrics) == 0 {
			t.Errorf("query %q names no metric", q)
		}
		for _, m := range metrics {
			used++
			if !names[m] {
				t.Errorf("query %q uses %s, which no host exports", q, m)
			}
		}
	}
	t.Logf("dashboard: %d queries, %d metric references, all exported", len(queries), used)
}
