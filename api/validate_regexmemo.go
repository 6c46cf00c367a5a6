package api

import (
	"sync/atomic"

	pb "github.com/teapot-lb/teapot-lb/api/proto/teapotv1"
)

// regexCompiles counts CompileRouteRegex calls (tests read it: a refusal
// must not cost a compile per regular expression written).
var regexCompiles atomic.Int64

// regexMemo is what validating one load balancer spends compiling its
// regular expressions, the costly part of validation (a 60-character
// pattern takes about 0.13 ms of a core, several times that under the
// race detector; a refused load balancer of 1,000 took 2,000 compiles):
// each distinct expression is compiled once, none is compiled when the
// load balancer is refused already by a bound that costs nothing to
// check (more regular expressions than quotas.regexMatchesPerLb allows),
// and none after those compiled so far pass MaxRegexInstsPerLB, so
// what a refused write makes the host spend is bounded by that budget,
// not by how many expressions a tenant writes.
type regexMemo struct {
	// skip: the count is over its quota; nothing is compiled.
	skip bool
	// seen holds the result of each expression compiled.
	seen map[string]regexResult
	// insts sums the programs of the distinct expressions compiled;
	// stopped is set once it passes MaxRegexInstsPerLB and compiling
	// stops (the load balancer is refused on that bound).
	insts   int
	stopped bool
}

type regexResult struct {
	insts int
	err   error
}

// compileRegex checks one regular expression of the load balancer being
// validated (CompileRouteRegex), through ck's memo when it has one. An
// expression that is not compiled (see regexMemo) reports no error and
// no instructions: the load balancer is refused on a bound already.
func (ck *checker) compileRegex(expr string) (int, error) {
	m := ck.rx
	if m == nil {
		return CompileRouteRegex(expr)
	}
	if r, ok := m.seen[expr]; ok {
		return r.insts, r.err
	}
	if m.skip || m.stopped {
		return 0, nil
	}
	n, err := CompileRouteRegex(expr)
	if m.seen == nil {
		m.seen = map[string]regexResult{}
	}
	m.seen[expr] = regexResult{n, err}
	if err == nil {
		m.insts += n
		m.stopped = m.insts > MaxRegexInstsPerLB
	}
	return n, err
}

// regexOverQuota says whether lb has more regular expressions than its
// tenant's quotas.regexMatchesPerLb allows and more than its stored
// version (checkLBBounds refuses it then), without compiling any.
func regexOverQuota(lb *pb.LoadBalancer, tenant *pb.Tenant, c Catalog) bool {
	n := regexCount(lb)
	if n == 0 || n <= int(EffectiveQuotas(tenant).GetRegexMatchesPerLb()) {
		return false
	}
	return n > regexCount(priorOf(c).LoadBalancer(lb.GetTenant(), lb.GetName()))
}

// checkRouteRegexBudget bounds the regular expressions of all routes
// together (MaxRegexInstsPerLB), from what ck compiled.
func checkRouteRegexBudget(ck *checker, lb *pb.LoadBalancer) {
	if ck.rx != nil && ck.rx.skip {
		return
	}
	var u RegexUsage
	for _, r := range lb.GetRoutes() {
		RouteRegexes(r, func(_, expr string) {
			if n, err := ck.compileRegex(expr); err == nil && n > 0 {
				u.Insts += n
				u.Matches++
			}
		})
	}
	if ck.rx != nil && ck.rx.stopped {
		ck.invalidf("routes", "%v: the first %d regular expressions compile to %d instructions together (the rest were not compiled); at most %d per load balancer (a fixed bound): use prefix or exact matches where they do",
			ErrRegexSize, u.Matches, u.Insts, MaxRegexInstsPerLB)
		return
	}
	if err := u.CheckLB(); err != nil {
		ck.invalidf("routes", "%v", err)
	}
}
