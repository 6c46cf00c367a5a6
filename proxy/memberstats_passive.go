package proxy

import (
	"cmp"
	"fmt"
	"slices"
	"time"

	"github.com/teapot-lb/teapot-lb/api/observe"
	pb "github.com/teapot-lb/teapot-lb/api/proto/teapotv1"
	"github.com/teapot-lb/teapot-lb/proxy/health"
)

// PassiveTick is how often the data plane judges its members by what
// their clients got (observe.JudgePassive) and tells the VIP manager and
// the tenants' status of the load balancers whose verdict changed.
const PassiveTick = 2 * time.Second

// passiveHealth returns a member's passive counts over the window as
// observed, nil when nothing was sent to it.
func passiveHealth(t *health.Target, unit string, now time.Time) *pb.PassiveHealth {
	c := t.Passive(now)
	if !c.Any() {
		return nil
	}
	ph := &pb.PassiveHealth{WindowSeconds: uint32(observe.PassiveWindow / time.Second), Unit: unit, Total: c.Total}
	for o, n := range c.Failed {
		if n > 0 {
			ph.Failed += n
			ph.Failures = append(ph.Failures, &pb.PassiveFailure{Kind: health.OutcomeKinds[o], Count: n})
		}
	}
	slices.SortFunc(ph.Failures, func(a, b *pb.PassiveFailure) int { return cmp.Compare(b.Count, a.Count) })
	ph.Verdict, ph.Evidence = observe.JudgePassive(observe.PassiveCounts{Member: t.Name(), Unit: unit, Total: c.Total, Failures: ph.Failures})
	return ph
}

// unitOf is what a pool's passive counts count: requests when an http
// or https listener sends to it, connections otherwise.
func unitOf(pool *Pool) string {
	if pool.http.Load() != nil {
		return observe.UnitRequests
	}
	return observe.UnitConnections
}

// judgePassive judges every member with passive counts and records the
// verdict on its target (Target.PassiveFailing, which readiness reads).
// A verdict that changed is an event for each load balancer whose pools
// hold the member; it returns those load balancers and those whose
// recovery hold-down ended.
func (p *Proxy) judgePassive(now time.Time) []string {
	cur := p.current.Load()
	var lbs []string
	for t, pools := range cur.byTarget.All() {
		c := t.Passive(now)
		var failed uint64
		for _, n := range c.Failed {
			failed += n
		}
		failing := observe.PassiveVerdict(c.Total, failed) == observe.Failing
		if !t.SetPassiveFailing(failing) {
			continue
		}
		var evidence string
		if failing && len(pools) > 0 {
			evidence = passiveHealth(t, unitOf(pools[0]), now).GetEvidence()
		}
		for _, pool := range pools {
			lb := pool.Spec.LB
			if slices.Contains(lbs, lb) {
				continue
			}
			lbs = append(lbs, lb)
			ev := &pb.Event{Type: observe.EventMemberUp, LoadBalancer: lb,
				Message: fmt.Sprintf("member %s of pool %s serves its clients again", t.Name(), pool.Spec.Name)}
			if failing {
				ev.Type, ev.Severity = observe.EventMemberDown, observe.Warning
				ev.Message = fmt.Sprintf("member %s of pool %s is failing: %s", t.Name(), pool.Spec.Name, evidence)
			}
			p.event(ev)
		}
	}
	p.recoverMu.Lock()
	for lb, at := range p.recovering {
		if !at.IsZero() && now.Sub(at) >= observe.RecoverHoldDown && !slices.Contains(lbs, lb) {
			lbs = append(lbs, lb)
		}
	}
	p.recoverMu.Unlock()
	return lbs
}

// watchPassive runs judgePassive every PassiveTick until stop closes.
func (p *Proxy) watchPassive(stop <-chan struct{}) {
	tick := time.NewTicker(PassiveTick)
	defer tick.Stop()
	for {
		select {
		case <-stop:
			return
		case now := <-tick.C:
			if lbs := p.judgePassive(now); len(lbs) > 0 {
				slices.Sort(lbs)
				p.publish(lbs)
			}
		}
	}
}

// memberReadiness is the readiness reason of a load balancer whose
// listeners are open: observe.NoHealthyMember while unservable, then
// observe.Recovering for observe.RecoverHoldDown after it became
// servable again, else "". It remembers, per load balancer, only those
// down or recovering; gone forgets one.
func (p *Proxy) memberReadiness(lb string, down bool, now time.Time) string {
	p.recoverMu.Lock()
	defer p.recoverMu.Unlock()
	at, tracked := p.recovering[lb]
	switch {
	case down:
		if p.recovering == nil {
			p.recovering = map[string]time.Time{}
		}
		p.recovering[lb] = time.Time{}
		return observe.NoHealthyMember
	case !tracked:
		return ""
	case at.IsZero():
		p.recovering[lb] = now
		return observe.Recovering
	case now.Sub(at) < observe.RecoverHoldDown:
		return observe.Recovering
	}
	delete(p.recovering, lb)
	return ""
}

// forgetReadiness drops the hold-down state of load balancers no longer
// served.
func (p *Proxy) forgetReadiness(keep func(lb string) bool) {
	p.recoverMu.Lock()
	defer p.recoverMu.Unlock()
	for lb := range p.recovering {
		if !keep(lb) {
			delete(p.recovering, lb)
		}
	}
}
