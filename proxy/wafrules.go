package proxy

import (
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/teapot-lb/teapot-lb/proxy/cpubudget"
	"github.com/teapot-lb/teapot-lb/proxy/snapshot"
	"github.com/teapot-lb/teapot-lb/proxy/waf"
)

// MaxWAFRuleEngines bounds the engines of tenants' own rules
// (routes[].waf.rules) one tenant holds on a host: one per distinct list
// its served listeners use, built when a snapshot is compiled and shared
// by the tenant's routes with the same list. The API bounds a load
// balancer's distinct lists (api.MaxWAFRuleSetsPerLB); this bounds a
// tenant's many load balancers together. A route whose list would pass
// it answers 503; the log and the load balancer's status say why.
const MaxWAFRuleEngines = 16

// ruleEngine is an engine of a tenant's list of rules and how many
// listener snapshots in service hold it. Its engine is nil until built: a
// tenant whose WAF CPU budget cannot pay for the build has it built later
// (buildLater), and the routes of the list answer 503 until then.
type ruleEngine struct {
	list   string
	e      atomic.Pointer[waf.Engine]
	failed atomic.Bool // the build failed: the routes answer 503
	refs   int
}

// Building a tenant's engine costs CPU (0.4-0.7 ms for 32 regex rules on
// the test machine, 1.5-2 ms under -race), which is charged to the
// tenant's WAF CPU budget (quotas.wafCpuMillicores) like its
// inspections: a build is made when the snapshot is compiled if the
// budget can pay buildEstimate; otherwise it waits, off the compile, in
// the tenant's queue of builds, built one at a time as the budget pays,
// and the routes of its list answer 503 with Retry-After until then. A
// tenant that churns its rules therefore spends its own budget (its
// inspections get 429) and waits for its own builds; the compile that
// serves every tenant makes no more of its builds than its budget pays
// for. A deferred build that waited wafBuildWait is made and charged
// anyway (its tenant's inspections kept the budget spent), so a tenant's
// builds cost at most its budget, or one build a wafBuildWait when a
// build costs more than that much of its budget. The Core Rule Set of a paranoia level is built once per process
// (waf.Get, at most four) and charged to the tenant whose route first
// asks for it.
const (
	wafBuildReserve = int64(time.Millisecond)
	// wafBuildWait bounds how long a deferred build waits for the
	// budget before it is charged anyway, so that a tenant whose
	// inspections keep its budget spent still gets its rules.
	wafBuildWait = time.Second
)

// listenerRules are the lists of rules a listener snapshot holds the
// engines of.
type listenerRules struct {
	b     *wafBudget
	lists []string
	// problems name the routes whose lists are not in force (the load
	// balancer's status shows them).
	problems []Problem
}

// acquireRules builds or takes the engines of the distinct lists of
// rules of l's routes (off the request path: at the snapshot's build).
// A list past the tenant's bound is left out, and its routes fail closed.
func (p *Proxy) acquireRules(l *snapshot.Listener) listenerRules {
	var r listenerRules
	srs := l.Routes.Routes()
	for i := range srs {
		w := srs[i].WAF
		if !w.On || w.Rules == "" || slices.Contains(r.lists, w.Rules) {
			continue
		}
		if r.b == nil {
			r.b = p.wafBudget(l.Tenant, l.Limits.WAFCPUMillicores)
		}
		if err := r.b.acquireRules(w.Rules); err != nil {
			p.log.Error("WAF rules not in force; the route answers 503", "lb", l.LB, "route", srs[i].Index, "error", err)
			r.problems = append(r.problems, Problem{Field: fmt.Sprintf("routes[%d].waf.rules", srs[i].Index),
				Reason: fmt.Sprintf("not in force on this host, the route answers 503: %v", err)})
			continue
		}
		r.lists = append(r.lists, w.Rules)
	}
	return r
}

// release gives the engines back.
func (r listenerRules) release() {
	for _, list := range r.lists {
		r.b.releaseRules(list)
	}
}

func (b *wafBudget) acquireRules(list string) error {
	b.rulesMu.Lock()
	defer b.rulesMu.Unlock()
	if re := b.ruleEngines[list]; re != nil {
		re.refs++
		return nil
	}
	if len(b.ruleEngines) >= MaxWAFRuleEngines {
		return fmt.Errorf("%w: the tenant's routes have more than %d distinct waf.rules lists on this host (a fixed bound: give routes the same list)", waf.ErrBuild, MaxWAFRuleEngines)
	}
	if b.ruleEngines == nil {
		b.ruleEngines = map[string]*ruleEngine{}
	}
	re := &ruleEngine{list: list, refs: 1}
	if est := b.buildEstimate(); len(b.buildQueue) == 0 && b.reserve(regexNow(), est) {
		e, err := b.build(list, est)
		if err != nil {
			return err
		}
		re.e.Store(e)
		b.ruleEngines[list] = re
		return nil
	}
	// Over budget: built later, in turn.
	b.ruleEngines[list] = re
	b.deferred.Add(1)
	b.buildQueue = append(b.buildQueue, re)
	if !b.building {
		b.building = true
		go b.buildLater()
	}
	return nil
}

// buildEstimate is what a build reserves: what the tenant's last build
// took, at least wafBuildReserve.
func (b *wafBudget) buildEstimate() int64 { return max(wafBuildReserve, b.lastBuild.Load()) }

// build builds an engine of list, charging its CPU (reserved before) to
// the tenant's budget.
func (b *wafBudget) build(list string, reserved int64) (*waf.Engine, error) {
	var e *waf.Engine
	var err error
	used := int64(cpubudget.Measure(func() { e, err = waf.Rules(splitRules(list)) }))
	b.settle(reserved, used)
	b.buildCPU.Add(used)
	b.lastBuild.Store(used)
	b.built.Add(1)
	return e, err
}

// buildLater builds the queued engines one at a time, each once the
// tenant's budget can pay for it; a list no listener holds any more is
// dropped unbuilt.
func (b *wafBudget) buildLater() {
	for {
		b.rulesMu.Lock()
		b.buildQueue = slices.DeleteFunc(b.buildQueue, func(re *ruleEngine) bool { return re.refs <= 0 })
		if len(b.buildQueue) == 0 {
			b.building = false
			b.rulesMu.Unlock()
			return
		}
		re := b.buildQueue[0]
		b.rulesMu.Unlock()
		est := b.buildEstimate()
		// The tenant's inspections take from the same budget: a build
		// that waited wafBuildWait takes its share anyway (the budget
		// overdrawn, the inspections get 429 until it is paid back).
		for now, until := regexNow(), regexNow()+int64(wafBuildWait); !b.reserve(now, est); now = regexNow() {
			if now >= until {
				b.force(now, est)
				break
			}
			time.Sleep(min(max(time.Millisecond, b.waitFor(now, est)), time.Duration(until-now)))
		}
		e, err := b.build(re.list, est)
		if err != nil {
			re.failed.Store(true)
		} else {
			re.e.Store(e)
		}
		b.rulesMu.Lock()
		b.buildQueue = slices.DeleteFunc(b.buildQueue, func(q *ruleEngine) bool { return q == re })
		b.rulesMu.Unlock()
	}
}

func (b *wafBudget) releaseRules(list string) {
	b.rulesMu.Lock()
	defer b.rulesMu.Unlock()
	if re := b.ruleEngines[list]; re != nil {
		if re.refs--; re.refs <= 0 {
			delete(b.ruleEngines, list)
		}
	}
}

// ruleEngine returns the engine entry of a list the tenant's listeners
// hold (its engine nil until built), nil if none does.
func (b *wafBudget) ruleEngine(list string) *ruleEngine {
	b.rulesMu.Lock()
	defer b.rulesMu.Unlock()
	return b.ruleEngines[list]
}

// RuleEngines returns how many engines of its own rules the tenant
// holds on this host.
func (p *Proxy) RuleEngines(tenant string) int {
	v, ok := p.wafBudgets.Load(tenant)
	if !ok {
		return 0
	}
	b := v.(*wafBudget)
	b.rulesMu.Lock()
	defer b.rulesMu.Unlock()
	return len(b.ruleEngines)
}

// splitRules splits a spec's rules (one a line).
func splitRules(list string) []string {
	var out []string
	for line := range strings.Lines(list) {
		out = append(out, strings.TrimSuffix(line, "\n"))
	}
	return out
}

// wafRulesBuilding answers a route whose rules' engine waits for the
// tenant's WAF CPU budget: fail closed, for a moment.
var wafRulesBuilding = http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Retry-After", "1")
	http.Error(w, "503 service unavailable: this route's WAF rules are being built, after the load balancer's WAF CPU budget (quotas.wafCpuMillicores) is paid for", http.StatusServiceUnavailable)
})

// wafRulesUnavailable answers a route whose rules' engine could not be
// built: fail closed.
var wafRulesUnavailable = http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
	http.Error(w, "503 service unavailable: this route's WAF rules are not in force (the LB host's log says why)", http.StatusServiceUnavailable)
})
