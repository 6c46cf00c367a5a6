package proxy

import (
	"net/http"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"github.com/teapot-lb/teapot-lb/api"
	"github.com/teapot-lb/teapot-lb/proxy/cpubudget"
	"github.com/teapot-lb/teapot-lb/proxy/snapshot"
	"github.com/teapot-lb/teapot-lb/proxy/waf"
)

// wafBudget is a tenant's WAF CPU budget on this host
// (quotas.wafCpuMillicores), kept like its regex budget, with its counts.
type wafBudget struct {
	regexBudget
	inspected, blocked, detected atomic.Int64
	cpu                          atomic.Int64 // ns charged
	// ruleEngines: the engines of the tenant's own rules, by their list
	// (wafrules.go).
	rulesMu     sync.Mutex
	ruleEngines map[string]*ruleEngine
	// buildQueue: the engines waiting for the budget, built in turn by
	// one goroutine while building (wafrules.go).
	buildQueue []*ruleEngine
	building   bool
	// built and deferred count the engines built and those that waited
	// for the budget; buildCPU the CPU time the builds were charged;
	// lastBuild the last one's (what the next reserves).
	built, deferred, buildCPU, lastBuild atomic.Int64
}

// wafReserve is what an inspection reserves before it runs: about what
// the Core Rule Set costs a small request at paranoia level 1 on the
// 2-core test machine (1-2 ms); the time it took replaces it.
const wafReserve = int64(2e6)

// WAFStats are a tenant's WAF counts on this host.
type WAFStats struct {
	// Inspected requests; Blocked of them answered 403 (block mode);
	// Detected of them rejected by the rules in detect mode (served);
	// Refused answered
	// 429 because the tenant's WAF CPU budget was spent.
	Inspected, Blocked, Detected, Refused int64
	// CPU is the CPU time the inspections were charged (the Core Rule
	// Set's and the tenant's own rules').
	CPU time.Duration
	// Built counts the engines of the tenant's own rules built, Deferred
	// those that waited for its budget (wafrules.go), BuildCPU the CPU
	// time the builds (and a Core Rule Set's first load) were charged.
	Built, Deferred int64
	BuildCPU        time.Duration
}

func (p *Proxy) wafBudget(tenant string, millicores int) *wafBudget {
	if millicores <= 0 {
		millicores = api.DefaultWAFCPUMillicores
	}
	v, ok := p.wafBudgets.Load(tenant)
	if !ok {
		v, _ = p.wafBudgets.LoadOrStore(tenant, &wafBudget{})
	}
	b := v.(*wafBudget)
	b.millicores.Store(int64(millicores))
	return b
}

// WAFStats returns the tenant's WAF counts on this host.
func (p *Proxy) WAFStats(tenant string) WAFStats {
	v, ok := p.wafBudgets.Load(tenant)
	if !ok {
		return WAFStats{}
	}
	b := v.(*wafBudget)
	return WAFStats{Inspected: b.inspected.Load(), Blocked: b.blocked.Load(), Detected: b.detected.Load(), Refused: b.refused.Load(), CPU: time.Duration(b.cpu.Load()),
		Built: b.built.Load(), Deferred: b.deferred.Load(), BuildCPU: time.Duration(b.buildCPU.Load())}
}

// wafInspect returns the Inspect of a route with a WAF: the shared engine
// of its spec, run within the tenant's WAF CPU budget.
func (p *Proxy) wafInspect(ls *ListenerSnapshot, sr *snapshot.Route) func(*http.Request, []byte, netip.AddrPort, netip.AddrPort) (http.Handler, int, string) {
	b := p.wafBudget(ls.Tenant, ls.Limits.WAFCPUMillicores)
	var e *waf.Engine
	var err error
	if waf.Built(sr.WAF.Paranoia) {
		e, err = waf.Get(sr.WAF.Paranoia)
	} else {
		// The Core Rule Set's first load at this level in the process
		// (170 ms): charged to the tenant that asks for it.
		used := int64(cpubudget.Measure(func() { e, err = waf.Get(sr.WAF.Paranoia) }))
		b.settle(0, used)
		b.buildCPU.Add(used)
	}
	if err != nil {
		p.log.Error("WAF rule set not built; the route answers 503", "lb", ls.LB, "error", err)
		return wafNotReady
	}
	var re *ruleEngine
	if sr.WAF.Rules != "" {
		// Built with the listener snapshot (acquireRules), once per
		// distinct list of the tenant's, or later when the tenant's
		// budget could not pay for it then; never per request.
		if re = b.ruleEngine(sr.WAF.Rules); re == nil {
			return wafRulesNotReady
		}
	}
	lb, block, exclude := ls.LB, sr.WAF.Block, waf.ParseExclusions(sr.WAF.Exclude)
	log := p.log
	var last atomic.Int64 // ns of CPU the route's last inspection took
	return func(r *http.Request, body []byte, client, local netip.AddrPort) (http.Handler, int, string) {
		var own *waf.Engine
		if re != nil {
			if own = re.e.Load(); own == nil {
				if re.failed.Load() {
					return wafRulesUnavailable, http.StatusServiceUnavailable, ""
				}
				return wafRulesBuilding, http.StatusServiceUnavailable, ""
			}
		}
		start := regexNow()
		reserve := wafReserve
		if own != nil {
			// A tenant's own rules may cost far more than the Core Rule
			// Set: reserve what the route's last inspection took, so that
			// concurrent expensive requests are refused up front rather
			// than charged after they spent the core.
			reserve = max(reserve, last.Load())
		}
		if !b.reserve(start, reserve) {
			b.refused.Add(1)
			return wafBudgetRefusal, http.StatusTooManyRequests, ""
		}
		// Charged the CPU the inspection took, not its wall time: on a
		// busy core the wall time counts the other goroutines too.
		var v waf.Verdict
		used := cpubudget.Measure(func() {
			v = e.Inspect(r, body, client, local, exclude)
			if own != nil && !(v.Rejected && block) {
				// The tenant's rules, after the Core Rule Set and in the
				// same measure: their CPU is the tenant's too.
				ov := own.Inspect(r, body, client, local, nil)
				v.Rules = append(v.Rules, ov.Rules...)
				if ov.Rejected && !v.Rejected {
					v.Rejected, v.Status = true, ov.Status
				}
			}
		})
		b.settle(reserve, int64(used))
		b.cpu.Add(int64(used))
		ls.cpu.ChargeDirect(used)
		if own != nil {
			last.Store(int64(used))
		}
		b.inspected.Add(1)
		var rules string
		if len(v.Rules) > 0 {
			rules = waf.RuleList(v.Rules)
		}
		switch {
		case v.Rejected && block:
			if b.blocked.Add(1)%100 == 1 { // rate-limited: the first of each hundred
				log.Info("WAF blocked a request", "lb", lb, "client", client.Addr().String(), "rules", rules)
			}
			return wafBlocked(v.Status), v.Status, rules
		case v.Rejected:
			if b.detected.Add(1)%100 == 1 {
				log.Info("WAF detected a request it would block", "lb", lb, "client", client.Addr().String(), "rules", rules)
			}
		}
		return nil, 0, rules
	}
}

// wafRulesNotReady is the Inspect of a route whose own rules' engine
// could not be built: fail closed.
func wafRulesNotReady(*http.Request, []byte, netip.AddrPort, netip.AddrPort) (http.Handler, int, string) {
	return wafRulesUnavailable, http.StatusServiceUnavailable, ""
}

// wafNotReady is the Inspect of a WAF route without an engine: fail
// closed.
func wafNotReady(*http.Request, []byte, netip.AddrPort, netip.AddrPort) (http.Handler, int, string) {
	return wafUnavailable, http.StatusServiceUnavailable, ""
}

var wafUnavailable = http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
	http.Error(w, "503 service unavailable: the web application firewall is not ready", http.StatusServiceUnavailable)
})

var wafBudgetRefusal = http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Retry-After", "1")
	http.Error(w, "429 too many requests: this load balancer's WAF is over its CPU budget (quotas.wafCpuMillicores)", http.StatusTooManyRequests)
})

// wafBlocked answers a request the rules rejected. The rules are not
// named to the client (they would guide an attacker past them); the log
// names them.
func wafBlocked(status int) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		http.Error(w, http.StatusText(status), status)
	})
}
