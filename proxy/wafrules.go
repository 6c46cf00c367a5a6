package proxy

import (
	"fmt"
	"net/http"
	"strings"
	"weak"

	"github.com/teapot-lb/teapot-lb/proxy/waf"
)

// MaxWAFRuleEngines bounds the engines of tenants' own rules
// (routes[].waf.rules) one tenant holds on a host at once: one per
// distinct list in use, built at a snapshot's compile and shared by the
// tenant's routes with the same list. The API bounds a load balancer's
// distinct lists (api.MaxWAFRuleSetsPerLB); this bounds a tenant's many
// load balancers together. A route past it answers 503 and the log says
// why.
const MaxWAFRuleEngines = 16

// ruleEngine returns the tenant's engine of a list of rules, building it
// when no live route holds one. Engines are held weakly: one no route's
// table refers to any more is freed by the collector and no longer counts.
func (b *wafBudget) ruleEngine(rules string) (*waf.Engine, error) {
	b.rulesMu.Lock()
	defer b.rulesMu.Unlock()
	if wp, ok := b.ruleEngines[rules]; ok {
		if e := wp.Value(); e != nil {
			return e, nil
		}
		delete(b.ruleEngines, rules)
	}
	if len(b.ruleEngines) >= MaxWAFRuleEngines {
		for k, wp := range b.ruleEngines {
			if wp.Value() == nil {
				delete(b.ruleEngines, k)
			}
		}
		if len(b.ruleEngines) >= MaxWAFRuleEngines {
			return nil, fmt.Errorf("%w: the tenant's routes have %d distinct waf.rules lists on this host; at most %d (a fixed bound: give routes the same list)", waf.ErrBuild, len(b.ruleEngines), MaxWAFRuleEngines)
		}
	}
	e, err := waf.Rules(strings.Split(rules, "\n"))
	if err != nil {
		return nil, err
	}
	if b.ruleEngines == nil {
		b.ruleEngines = map[string]weak.Pointer[waf.Engine]{}
	}
	b.ruleEngines[rules] = weak.Make(e)
	return e, nil
}

// RuleEngines returns how many engines of its own rules the tenant
// holds on this host (live ones).
func (p *Proxy) RuleEngines(tenant string) int {
	v, ok := p.wafBudgets.Load(tenant)
	if !ok {
		return 0
	}
	b := v.(*wafBudget)
	b.rulesMu.Lock()
	defer b.rulesMu.Unlock()
	n := 0
	for _, wp := range b.ruleEngines {
		if wp.Value() != nil {
			n++
		}
	}
	return n
}

// wafRulesUnavailable answers a route whose rules' engine could not be
// built: fail closed.
var wafRulesUnavailable = http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
	http.Error(w, "503 service unavailable: this route's WAF rules are not in force (the LB host's log says why)", http.StatusServiceUnavailable)
})
