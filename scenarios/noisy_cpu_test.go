package scenarios

import (
	"fmt"
	"strings"
)

// tenantCPU is what the host charged each tenant's host CPU budget
// (quotas.cpuMillicores), scraped from its metrics.
type tenantCPU map[string]struct{ spent, throttled, throttles, cores float64 }

func scrapeTenantCPU(n *node) (tenantCPU, error) {
	ss, err := scrape(n)
	if err != nil {
		return nil, err
	}
	out := tenantCPU{}
	for _, m := range []string{"teapot_lb_tenant_cpu_seconds_total", "teapot_lb_tenant_cpu_throttled_seconds_total", "teapot_lb_tenant_cpu_throttles_total", "teapot_lb_tenant_cpu_budget_cores"} {
		for _, s := range ss[m] {
			t := out[s.labels["tenant"]]
			switch m {
			case "teapot_lb_tenant_cpu_seconds_total":
				t.spent = s.value
			case "teapot_lb_tenant_cpu_throttled_seconds_total":
				t.throttled = s.value
			case "teapot_lb_tenant_cpu_throttles_total":
				t.throttles = s.value
			default:
				t.cores = s.value
			}
			out[s.labels["tenant"]] = t
		}
	}
	return out, nil
}

// cpuNote says what each tenant was charged since before and how long
// it was held, for a phase's notes.
func cpuNote(n *node, before tenantCPU) string {
	now, err := scrapeTenantCPU(n)
	if err != nil {
		return "tenant CPU: " + err.Error()
	}
	var parts []string
	for _, name := range []string{"a", "b"} {
		c, b := now[name], before[name]
		parts = append(parts, fmt.Sprintf("%s charged %.2f s of CPU (budget %.2f cores), held %.2f s in %.0f throttles", name, c.spent-b.spent, c.cores, c.throttled-b.throttled, c.throttles-b.throttles))
	}
	return "tenant CPU: " + strings.Join(parts, "; ")
}
