package proxy

import (
	"fmt"
	"net/http"
	"slices"
	"strings"

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
// listener snapshots in service hold it.
type ruleEngine struct {
	e    *waf.Engine
	refs int
}

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
	e, err := waf.Rules(splitRules(list))
	if err != nil {
		return err
	}
	if b.ruleEngines == nil {
		b.ruleEngines = map[string]*ruleEngine{}
	}
	b.ruleEngines[list] = &ruleEngine{e: e, refs: 1}
	return nil
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

// ruleEngine returns the engine of a list the tenant's listeners hold,
// nil if none does.
func (b *wafBudget) ruleEngine(list string) *waf.Engine {
	b.rulesMu.Lock()
	defer b.rulesMu.Unlock()
	if re := b.ruleEngines[list]; re != nil {
		return re.e
	}
	return nil
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

// wafRulesUnavailable answers a route whose rules' engine could not be
// built: fail closed.
var wafRulesUnavailable = http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
	http.Error(w, "503 service unavailable: this route's WAF rules are not in force (the LB host's log says why)", http.StatusServiceUnavailable)
})
