package scenarios

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	yaml "go.yaml.in/yaml/v2"
)

// The shipped alerting rules and their promtool unit tests.
var (
	rulesDir  = filepath.Join("..", "packaging", "prometheus")
	rulesFile = "teapot-lb.rules.yml"
	rulesTest = "teapot-lb.rules.test.yml"
)

// alertRule is one alerting rule of the rules file.
type alertRule struct {
	Alert string `yaml:"alert"`
	Expr  string `yaml:"expr"`
}

// readAlertRules returns the alerting rules of the shipped rules file.
func readAlertRules(t *testing.T) []alertRule {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(rulesDir, rulesFile))
	if err != nil {
		t.Fatal(err)
	}
	var f struct {
		Groups []struct {
			Rules []alertRule `yaml:"rules"`
		} `yaml:"groups"`
	}
	if err := yaml.Unmarshal(data, &f); err != nil {
		t.Fatalf("%s: %v", rulesFile, err)
	}
	var out []alertRule
	for _, g := range f.Groups {
		out = append(out, g.Rules...)
	}
	if len(out) < 9 {
		t.Fatalf("%s has %d alerts; expected the rules to be read", rulesFile, len(out))
	}
	return out
}

// TestAlertRulesPromtool: promtool accepts the rules file and its unit
// tests pass, and the unit tests have, for every alert, a case where it
// fires and one where it does not.
func TestAlertRulesPromtool(t *testing.T) {
	rules := readAlertRules(t)
	data, err := os.ReadFile(filepath.Join(rulesDir, rulesTest))
	if err != nil {
		t.Fatal(err)
	}
	var tests struct {
		Tests []struct {
			AlertRuleTest []struct {
				Alertname string `yaml:"alertname"`
				ExpAlerts []any  `yaml:"exp_alerts"`
			} `yaml:"alert_rule_test"`
		} `yaml:"tests"`
	}
	if err := yaml.Unmarshal(data, &tests); err != nil {
		t.Fatalf("%s: %v", rulesTest, err)
	}
	fires, quiet := map[string]bool{}, map[string]bool{}
	for _, tc := range tests.Tests {
		for _, a := range tc.AlertRuleTest {
			if len(a.ExpAlerts) > 0 {
				fires[a.Alertname] = true
			} else {
				quiet[a.Alertname] = true
			}
		}
	}
	for _, r := range rules {
		if !fires[r.Alert] {
			t.Errorf("%s has no case where %s fires", rulesTest, r.Alert)
		}
		if !quiet[r.Alert] && r.Alert != "TeapotLBNoHostScraped" {
			t.Errorf("%s has no case where %s does not fire", rulesTest, r.Alert)
		}
	}
	if !quiet["TeapotLBNoHostScraped"] {
		t.Errorf("%s has no case where TeapotLBNoHostScraped does not fire", rulesTest)
	}

	promtool, err := exec.LookPath("promtool")
	if err != nil {
		// Under CI (which installs it) a missing promtool fails the test.
		unavailable(t, "promtool is not on PATH (Debian: apt-get install prometheus), so the rules were not checked or unit-tested by Prometheus: %v", err)
	}
	for _, args := range [][]string{{"check", "rules", rulesFile}, {"test", "rules", rulesTest}} {
		cmd := exec.Command(promtool, args...)
		cmd.Dir = rulesDir
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Errorf("promtool %s: %v\n%s", strings.Join(args, " "), err, out)
		} else {
			t.Logf("promtool %s: %s", strings.Join(args, " "), strings.TrimSpace(string(out)))
		}
	}
}

// notOurs are the series the rules use that Prometheus or the Go client
// library provide rather than teapot-lb's collectors.
func notOurs(name string) bool {
	return name == "up" || strings.HasPrefix(name, "process_") || strings.HasPrefix(name, "go_")
}

// documentedMetrics returns the metric names of docs/metrics.md's tables.
func documentedMetrics(t *testing.T) map[string]bool {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("..", "docs", "metrics.md"))
	if err != nil {
		t.Fatal(err)
	}
	names := map[string]bool{}
	for _, m := range regexp.MustCompile("(?m)^\\| `(teapot_lb_[a-z0-9_]+)`").FindAllStringSubmatch(string(data), -1) {
		names[m[1]] = true
	}
	if len(names) < 30 {
		t.Fatalf("docs/metrics.md lists %d metrics; expected its tables to be read", len(names))
	}
	return names
}

// TestAlertRulesUseDocumentedMetrics: every teapot-lb series an alert
// uses is listed in docs/metrics.md (TestMetricsDuringTrafficAndFailover
// checks them against a real scrape), so a renamed series breaks this
// test instead of silencing an alert.
func TestAlertRulesUseDocumentedMetrics(t *testing.T) {
	t.Parallel()
	docs := documentedMetrics(t)
	for _, r := range readAlertRules(t) {
		names, err := promqlMetrics(r.Expr)
		if err != nil || len(names) == 0 {
			t.Errorf("%s: expression %q: %v, names %v", r.Alert, r.Expr, err, names)
			continue
		}
		for _, n := range names {
			if !notOurs(n) && !docs[histogramBase(n)] {
				t.Errorf("%s uses %s, which docs/metrics.md does not list", r.Alert, n)
			}
		}
	}
}

// histogramBase returns a histogram's name for one of its series.
func histogramBase(name string) string {
	for _, s := range []string{"_bucket", "_sum", "_count"} {
		if b, ok := strings.CutSuffix(name, s); ok {
			return b
		}
	}
	return name
}

// checkRules fails the test for each teapot-lb series the alerting rules
// use that the hosts do not export. names are the sample names scraped,
// with eventMetricNames added by checkDashboard.
func checkRules(t *testing.T, names map[string]bool) {
	t.Helper()
	var used []string
	for _, r := range readAlertRules(t) {
		ms, err := promqlMetrics(r.Expr)
		if err != nil {
			t.Errorf("%s: %v", r.Alert, err)
			continue
		}
		for _, m := range ms {
			if m == "up" {
				continue // Prometheus's own
			}
			if !names[m] {
				t.Errorf("alert %s uses %s, which no host exports", r.Alert, m)
			}
			used = append(used, m)
		}
	}
	slices.Sort(used)
	t.Logf("alert rules: %d series, all exported: %s", len(slices.Compact(used)), strings.Join(slices.Compact(used), " "))
}

// checkAlertingSeries checks, on the live hosts of a cluster that lost
// one of its three voters and serves acme/shop over its member, the
// series added for alerting: the build, member counters by pool, a
// stream gauge at 0 for a tenant without an agent, quotas and their
// usage, and the voters the leader reaches.
func checkAlertingSeries(t *testing.T, live []*node, member string) {
	t.Helper()
	var requests float64
	for _, n := range live {
		s, err := scrape(n)
		if err != nil {
			t.Fatal(err)
		}
		if bi := s["teapot_lb_build_info"]; len(bi) != 1 || bi[0].value != 1 || bi[0].labels["version"] == "" ||
			bi[0].labels["commit"] == "" || !strings.HasPrefix(bi[0].labels["goversion"], "go") {
			t.Errorf("%s: teapot_lb_build_info %+v, want one series of 1 naming version, commit and goversion", n.id, bi)
		}
		requests += sum(s, "teapot_lb_member_requests_total", map[string]string{"lb": "acme/shop", "pool": "web", "member": member})
		if st := s["teapot_lb_tenant_sync_streams"]; !slices.ContainsFunc(st, func(x sample) bool { return x.labels["tenant"] == "acme" && x.value == 0 }) {
			t.Errorf("%s: teapot_lb_tenant_sync_streams %+v, want acme at 0 (no agent)", n.id, st)
		}
		lbs := map[string]string{"tenant": "acme", "resource": "load_balancers"}
		if used, limit := sum(s, "teapot_lb_tenant_quota_used", lbs), sum(s, "teapot_lb_tenant_quota_limit", lbs); used != 1 || limit != 100 {
			t.Errorf("%s: acme uses %v of %v load balancers, want 1 of 100", n.id, used, limit)
		}
		if v := sum(s, "teapot_lb_raft_voters", nil); v != 3 {
			t.Errorf("%s: teapot_lb_raft_voters = %v, want 3", n.id, v)
		}
	}
	if requests == 0 {
		t.Errorf("no teapot_lb_member_requests_total of acme/shop with pool=web, member=%s", member)
	}
	// The exposition, new series included, passes Prometheus's own lint.
	if promtool, err := exec.LookPath("promtool"); err != nil {
		t.Logf("promtool is not installed: the scrape is not linted")
	} else {
		resp, err := http.Get("http://" + live[0].metricsAddr + "/metrics")
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
			t.Errorf("promtool check metrics of %s: %v\n%s", live[0].id, err, out)
		}
	}
	waitFor(t, startTimeout, "the leader to count 2 voters reachable of 3", func() error {
		reachable := 0.0
		for _, n := range live {
			s, err := scrape(n)
			if err != nil {
				return err
			}
			reachable += sum(s, "teapot_lb_raft_voters_reachable", nil)
		}
		if reachable != 2 {
			return fmt.Errorf("voters reachable (summed over the live hosts, the leader only exports it) = %v", reachable)
		}
		return nil
	})
}
