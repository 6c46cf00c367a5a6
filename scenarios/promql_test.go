package scenarios

import (
	"fmt"
	"regexp"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/teapot-lb/teapot-lb/proxy/certs"
	"github.com/teapot-lb/teapot-lb/tenantsync"
	"github.com/teapot-lb/teapot-lb/vip"
)

// eventMetricNames are the metric names that a host exports only once
// something happened: VIPs (hosts with --vip-interface or BGP), agent
// streams and changes (per tenant), certificate expiry (per certificate).
// They are taken from the descriptions of their collectors.
func eventMetricNames(t *testing.T) []string {
	t.Helper()
	ch := make(chan *prometheus.Desc, 64)
	(*vip.Manager)(nil).Collector().Describe(ch)
	tenantsync.New(tenantsync.Config{}).Collector().Describe(ch)
	(*certs.Manager)(nil).Collector().Describe(ch)
	close(ch)
	fq := regexp.MustCompile(`fqName: "([^"]+)"`)
	var out []string
	for d := range ch {
		m := fq.FindStringSubmatch(d.String())
		if m == nil {
			t.Fatalf("no name in %s", d)
		}
		out = append(out, m[1])
	}
	if len(out) == 0 {
		t.Fatal("the collectors describe no metric")
	}
	return out
}

// promqlKeywords are words of PromQL (and Grafana's label_values) that
// are not metric names.
var promqlKeywords = map[string]bool{
	"by": true, "without": true, "on": true, "ignoring": true, "group_left": true, "group_right": true,
	"bool": true, "and": true, "or": true, "unless": true, "offset": true, "inf": true, "nan": true,
}

// promqlMetrics returns the metric names a PromQL query (or a Grafana
// label_values(...) variable query) selects. It tokenises the query:
// strings, label matchers {…}, ranges […], numbers and $variables are
// skipped; a name before "(" is a function or aggregation; the label
// lists after by/without/on/ignoring/group_left/group_right are labels.
var aggregationModifier = regexp.MustCompile(`^(?i)(by|without)\s*\(`)

func promqlMetrics(q string) ([]string, error) {
	if strings.HasPrefix(q, "label_values(") {
		inner := strings.TrimSuffix(strings.TrimPrefix(q, "label_values("), ")")
		i := strings.LastIndex(inner, ",")
		if i < 0 {
			return nil, fmt.Errorf("label_values needs a metric and a label")
		}
		q = strings.TrimSpace(inner[:i])
	}
	var out []string
	isStart := func(c byte) bool { return c == '_' || c == ':' || (c|0x20 >= 'a' && c|0x20 <= 'z') }
	isPart := func(c byte) bool { return isStart(c) || (c >= '0' && c <= '9') }
	skipSpace := func(i int) int {
		for i < len(q) && (q[i] == ' ' || q[i] == '\t' || q[i] == '\n') {
			i++
		}
		return i
	}
	closing := func(i int, open, close byte) (int, error) {
		depth := 0
		for j := i; j < len(q); j++ {
			switch q[j] {
			case '"', '\'', '`':
				k := strings.IndexByte(q[j+1:], q[j])
				if k < 0 {
					return 0, fmt.Errorf("unterminated string at %d", j)
				}
				j += k + 1
			case open:
				depth++
			case close:
				depth--
				if depth == 0 {
					return j + 1, nil
				}
			}
		}
		return 0, fmt.Errorf("unbalanced %c at %d", open, i)
	}
	for i := 0; i < len(q); {
		c := q[i]
		switch {
		case c == '"' || c == '\'' || c == '`':
			k := strings.IndexByte(q[i+1:], c)
			if k < 0 {
				return nil, fmt.Errorf("unterminated string at %d", i)
			}
			i += k + 2
		case c == '{':
			j, err := closing(i, '{', '}')
			if err != nil {
				return nil, err
			}
			i = j
		case c == '[':
			j, err := closing(i, '[', ']')
			if err != nil {
				return nil, err
			}
			i = j
		case c == '$':
			i++
			for i < len(q) && (isPart(q[i]) || q[i] == '{' || q[i] == '}') {
				i++
			}
		case c >= '0' && c <= '9' || c == '.':
			for i < len(q) && (isPart(q[i]) || q[i] == '.') {
				i++
			}
		case isStart(c):
			j := i
			for j < len(q) && isPart(q[j]) {
				j++
			}
			word := q[i:j]
			k := skipSpace(j)
			lower := strings.ToLower(word)
			switch {
			case promqlKeywords[lower]:
				if k < len(q) && q[k] == '(' && lower != "and" && lower != "or" && lower != "unless" {
					// A label list.
					end, err := closing(k, '(', ')')
					if err != nil {
						return nil, err
					}
					k = end
				}
				i = k
			case k < len(q) && q[k] == '(':
				i = k // a function or aggregation
			case aggregationModifier.MatchString(q[k:]):
				i = k // an aggregation: "sum by (x) (…)"
			default:
				out = append(out, word)
				i = j
			}
		default:
			i++
		}
	}
	return out, nil
}

func TestPromQLMetrics(t *testing.T) {
	tests := []struct {
		q    string
		want string
	}{
		{`sum by (code_class) (rate(teapot_lb_http_requests_total{lb=~"$lb",x="a{b}"}[$__rate_interval]))`, "teapot_lb_http_requests_total"},
		{`histogram_quantile(0.99, sum by (le) (rate(a_bucket{instance=~"$instance"}[5m])))`, "a_bucket"},
		{`sum(rate(a[1m])) / on (lb) group_left (tenant) b > bool 0.5 unless c offset 5m`, "a b c"},
		{`time() - max by (instance) (x > 0)`, "x"},
		{`label_values(teapot_lb_connections_total{tenant=~"$tenant"}, lb)`, "teapot_lb_connections_total"},
		{`1e3 * process_cpu_seconds_total`, "process_cpu_seconds_total"},
	}
	for _, tt := range tests {
		got, err := promqlMetrics(tt.q)
		if err != nil || strings.Join(got, " ") != tt.want {
			t.Errorf("promqlMetrics(%q) = %q, %v; want %q", tt.q, got, err, tt.want)
		}
	}
	if _, err := promqlMetrics(`sum(rate(a{b="c"[5m]))`); err == nil {
		t.Error("an unbalanced query is accepted")
	}
}
