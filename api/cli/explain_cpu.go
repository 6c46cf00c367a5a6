package cli

import (
	"fmt"
	"io"
	"strconv"
	"time"

	pb "github.com/teapot-lb/teapot-lb/api/proto/teapotv1"
)

// writeTenantCPU prints the tenant's host CPU budget as each host holds
// it (quotas.cpuMillicores): the budget in effect, what the tenant used
// of it over the host's last window, how long and how often it was held
// in debt, and how old those figures are.
func writeTenantCPU(w io.Writer, now time.Time, tn *pb.Tenant, hosts []*pb.HostObservation) {
	quota := "unset: each host's default (serve --cpu-per-tenant, else a quarter of its CPUs)"
	if mc := tn.GetQuotas().GetCpuMillicores(); mc > 0 {
		quota = cores(float64(mc) / 1000)
	}
	fmt.Fprintf(w, "\nCPU budget (quotas.cpuMillicores: %s; each host holds the tenant to it on its own)\n", quota)
	t := newTable(w)
	t.row("  HOST", "BUDGET", "USED", "THROTTLED", "THROTTLES", "STATE", "AS OF")
	for _, h := range hosts {
		if !h.GetReachable() {
			continue
		}
		var c *pb.TenantCPUObservation
		for _, u := range h.GetTenantUsage() {
			if u.GetTenant() == tn.GetName() {
				c = u.GetCpu()
			}
		}
		if c == nil {
			t.row("  "+h.GetNodeId(), "-", "-", "-", "-", "unknown: the host reports no budget of the tenant (an older release, or none of its listeners there yet)", stamp(now, h.GetTime()))
			continue
		}
		used := "- (no window ended yet)"
		if win := c.GetWindowSeconds(); win > 0 {
			used = cores(c.GetUsedSeconds()/win) + " over " + (time.Duration(win * float64(time.Second))).Round(time.Second).String()
		}
		state := cpuState(c)
		asOf := stamp(now, c.GetTime())
		if c.GetTime() == nil {
			asOf = stamp(now, h.GetTime())
		}
		t.row("  "+h.GetNodeId(), cores(float64(c.GetMillicores())/1000), used,
			(time.Duration(c.GetThrottledSeconds() * float64(time.Second))).Round(time.Millisecond).String(),
			strconv.FormatUint(c.GetThrottles(), 10), state, asOf)
	}
	_ = t.flush()
}

// cores renders a number of CPU cores.
func cores(n float64) string { return fmt.Sprintf("%.2f cores", n) }

// cpuState says whether a host holds the tenant to its budget now, and
// when the budget is more than the host's CPUs, that it never does.
func cpuState(c *pb.TenantCPUObservation) string {
	switch n := c.GetHostCores(); {
	case c.GetInDebt():
		return "in debt: its work waits"
	case n > 0 && float64(c.GetMillicores()) >= n*1000:
		return fmt.Sprintf("never held: the budget is not less than this host's %g CPUs", n)
	default:
		return "within budget"
	}
}
