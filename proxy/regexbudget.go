package proxy

import (
	"net/http"
	"sync/atomic"
	"time"

	"github.com/teapot-lb/teapot-lb/api"
	"github.com/teapot-lb/teapot-lb/proxy/l7"
	"github.com/teapot-lb/teapot-lb/proxy/snapshot"
)

// The regex CPU budget of a tenant on this host (quotas.regexCpuMillicores)
// is a token bucket kept as a theoretical arrival time (GCRA): matching
// that costs c of CPU moves it c x 1000 / millicores forward; a lookup
// that would run a regular expression is refused while its reservation
// would take it more than regexBurst ahead of now. A tenant at its budget therefore spends at
// most its millicores of a core on regexes, after a burst of
// regexBurst x millicores / 1000 (20 ms at the default 100), and its
// requests that need a regex are answered 429 at once; other tenants
// never wait for them.
const (
	regexBurst = 200 * time.Millisecond
	// regexNsPerStep is what one program step (an instruction on one
	// byte) is reserved at before a lookup runs, so that lookups running
	// at once cannot overdraw the budget by more than one burst. The
	// worst patterns measure 8-10 ns per step in Go's NFA on the 2-core
	// test machine (BenchmarkRegexMatch); the time measured replaces the
	// reservation when the lookup ends.
	regexNsPerStep = 10
)

// regexEpoch is the origin of the budgets' clock (monotonic).
var regexEpoch = time.Now()

func regexNow() int64 { return int64(time.Since(regexEpoch)) }

// regexBudget is one tenant's regex CPU budget on this host, shared by
// its listeners and kept across snapshots.
type regexBudget struct {
	tat        atomic.Int64 // ns on regexNow's clock
	millicores atomic.Int64
	// refused counts the lookups refused.
	refused atomic.Int64
}

// scale turns CPU time into budget time.
func (b *regexBudget) scale(cpu int64) int64 {
	mc := b.millicores.Load()
	if mc <= 0 {
		mc = api.DefaultRegexCPUMillicores
	}
	return cpu * 1000 / mc
}

// reserve takes cpu from the budget at now, unless what is left of the
// burst cannot hold it. A reservation larger than the whole burst is
// taken only from a full budget, so lookups that are dear run one at a
// time, and cheap ones many at once.
func (b *regexBudget) reserve(now, cpu int64) bool {
	d := b.scale(cpu)
	for {
		t := b.tat.Load()
		start := max(t, now)
		if start > now && start+d-now > int64(regexBurst) {
			return false
		}
		if b.tat.CompareAndSwap(t, start+d) {
			return true
		}
	}
}

// waitFor is how long from now until reserve(_, cpu) can succeed, if
// nothing else takes from the budget.
func (b *regexBudget) waitFor(now, cpu int64) time.Duration {
	return time.Duration(b.tat.Load() + b.scale(cpu) - int64(regexBurst) - now)
}

// force takes cpu from the budget at now, whatever is left of it.
func (b *regexBudget) force(now, cpu int64) {
	d := b.scale(cpu)
	for {
		t := b.tat.Load()
		if b.tat.CompareAndSwap(t, max(t, now)+d) {
			return
		}
	}
}

// settle charges used instead of the reserved.
func (b *regexBudget) settle(reserved, used int64) {
	b.tat.Add(b.scale(used) - b.scale(reserved))
}

// regexBudget returns the tenant's budget, with its quota (0: default).
func (p *Proxy) regexBudget(tenant string, millicores int) *regexBudget {
	v, _ := p.regexBudgets.Load(tenant)
	if v == nil {
		v, _ = p.regexBudgets.LoadOrStore(tenant, &regexBudget{})
	}
	b := v.(*regexBudget)
	b.millicores.Store(int64(millicores))
	return b
}

// RegexRefused returns how many of the tenant's requests this host
// refused because its regex CPU budget was spent.
func (p *Proxy) RegexRefused(tenant string) int64 {
	v, _ := p.regexBudgets.Load(tenant)
	if v == nil {
		return 0
	}
	return v.(*regexBudget).refused.Load()
}

// lookup routes a request of the listener (req nil: by host and path
// alone, see snapshot.RouteTable.Match), charging the regular
// expressions it runs to the tenant's budget. blocked says the budget is
// spent and the request needs a regex: it gets 429.
func (l *ListenerSnapshot) lookup(host, path string, req snapshot.Request) (r *snapshot.Route, blocked bool) {
	rt := l.Routes
	if !rt.Regex() || l.regex == nil {
		if req == nil {
			return rt.Match(host, path), false
		}
		return rt.Select(host, path, req), false
	}
	b := l.regex
	start := regexNow()
	reserved := int64(rt.RegexSteps(len(path))) * regexNsPerStep
	if !b.reserve(start, reserved) {
		r, blocked = rt.Lookup(host, path, req, false)
		if blocked {
			b.refused.Add(1)
		}
		return r, blocked
	}
	r, _ = rt.Lookup(host, path, req, true)
	used := regexNow() - start
	b.settle(reserved, used)
	l.cpu.ChargeDirect(time.Duration(used))
	return r, false
}

// regexRefusal answers the requests of a tenant whose regex CPU budget
// is spent.
var regexRefusal = http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Retry-After", "1")
	http.Error(w, "429 too many requests: this load balancer's regular-expression routes are over their CPU budget (quotas.regexCpuMillicores)", http.StatusTooManyRequests)
})

// regexRefusedRoute is the l7 route of such a refusal.
func regexRefusedRoute(lb string) *l7.Route {
	return &l7.Route{Name: lb + "/regex-budget", Handler: regexRefusal}
}
