package proxy

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/teapot-lb/teapot-lb/api/observe"
	pb "github.com/teapot-lb/teapot-lb/api/proto/teapotv1"
	"github.com/teapot-lb/teapot-lb/proxy/health"
	"github.com/teapot-lb/teapot-lb/proxy/snapshot"
)

// bindFailure is a listener that could not be opened.
type bindFailure struct {
	err   string
	since time.Time
}

var _ observe.Source = (*Proxy)(nil)

// Observe adds this host's listeners (bound or why not), the health of
// every member by this host's checks, and the load balancers' problems to
// h, for the load balancers f selects.
func (p *Proxy) Observe(f observe.Filter, h *pb.HostObservation) {
	p.mu.Lock()
	if p.snap != nil {
		h.Revision = p.snap.Revision
		for _, k := range sortedKeys(p.snap.Listeners) {
			l := p.snap.Listener(k)
			if !f.MatchLB(l.LB) {
				continue
			}
			lo := &pb.ListenerObservation{LoadBalancer: l.LB, Index: uint32(l.Index), Address: k.Addr.String(), Protocol: string(l.Protocol)}
			if s := p.sockets[k]; s != nil {
				lo.Bound, lo.Since = true, timestamppb.New(s.opened)
			} else if bf, ok := p.failed[k]; ok {
				lo.Error, lo.Since = bf.err, timestamppb.New(bf.since)
			} else {
				lo.Error = "not opened"
			}
			h.Listeners = append(h.Listeners, lo)
			if l.HTTP3 && l.Protocol == snapshot.ProtoHTTPS {
				h.Listeners = append(h.Listeners, p.observeH3(l, p.sockets[k]))
			}
		}
	}
	p.mu.Unlock()

	cur := p.current.Load()
	pools := make([]*snapshot.Pool, 0, cur.pools.Len())
	for spec := range cur.pools.All() {
		if f.MatchLB(spec.LB) {
			pools = append(pools, spec)
		}
	}
	slices.SortFunc(pools, func(a, b *snapshot.Pool) int {
		if c := strings.Compare(a.LB, b.LB); c != 0 {
			return c
		}
		return strings.Compare(a.Name, b.Name)
	})
	now := time.Now()
	for _, spec := range pools {
		po := &pb.PoolObservation{LoadBalancer: spec.LB, Pool: spec.Name}
		lp, _ := cur.pools.Get(spec)
		unit := unitOf(lp)
		for _, m := range lp.members {
			mo := &pb.MemberObservation{Address: m.Addr.String(), Healthy: m.Usable(), Passive: passiveHealth(Target(m), unit, now)}
			if m.Weight == 0 {
				mo.Reason = "weight 0 (drained)"
			}
			if t, ok := m.State.(*health.Target); ok {
				st := t.Status()
				mo.Down, mo.Ejected, mo.InFlight = st.Down, st.Ejected, t.InFlight()
				if !st.LastCheck.IsZero() {
					mo.LastCheck = timestamppb.New(st.LastCheck)
				}
				switch {
				case st.Down && st.LastError != "":
					mo.Reason = "health check fails: " + st.LastError
				case st.Down:
					mo.Reason = "health check failed; not yet back up"
				case st.Ejected:
					mo.Reason = "ejected after consecutive connect failures"
				}
			}
			po.Members = append(po.Members, mo)
		}
		h.Pools = append(h.Pools, po)
	}

	p.observeBudgets(f, h)

	status, unhealthy := p.Status(), p.Unhealthy()
	lbs := make([]string, 0, len(status))
	for lb := range status {
		if f.MatchLB(lb) {
			lbs = append(lbs, lb)
		}
	}
	slices.Sort(lbs)
	for _, lb := range lbs {
		for _, pr := range status[lb] {
			h.Problems = append(h.Problems, &pb.LoadBalancerProblem{LoadBalancer: lb, Field: pr.Field, Reason: pr.Reason})
		}
		if r := unhealthy[lb]; r != "" {
			h.Problems = append(h.Problems, &pb.LoadBalancerProblem{LoadBalancer: lb, Field: "pools", Reason: r})
		}
	}
}

// event hands ev to the configured sink.
func (p *Proxy) event(ev *pb.Event) {
	if p.cfg.Events != nil {
		p.cfg.Events(ev)
	}
}

// bindFailed records a listener that could not be opened (under p.mu); the
// first failure of a listener is an event.
func (p *Proxy) bindFailed(l *snapshot.Listener, err error) {
	if _, ok := p.failed[l.Key]; ok {
		p.failed[l.Key] = bindFailure{err: err.Error(), since: p.failed[l.Key].since}
		return
	}
	p.failed[l.Key] = bindFailure{err: err.Error(), since: time.Now()}
	p.failedAnew = true
	p.event(&pb.Event{Type: observe.EventBindFailed, Severity: observe.Warning, Tenant: l.Tenant, LoadBalancer: l.LB,
		Message: fmt.Sprintf("listeners[%d] cannot listen on %s: %v", l.Index, l.Key, err)})
}

// bindOK records a listener opened (under p.mu); one that had failed
// before is an event.
func (p *Proxy) bindOK(l *snapshot.Listener) {
	bf, ok := p.failed[l.Key]
	if !ok {
		return
	}
	delete(p.failed, l.Key)
	p.event(&pb.Event{Type: observe.EventBindOK, Tenant: l.Tenant, LoadBalancer: l.LB,
		Message: fmt.Sprintf("listeners[%d] listens on %s after failing for %s", l.Index, l.Key, time.Since(bf.since).Round(time.Second))})
}

// memberOwners returns the served pools that hold t, for its log lines.
func (p *Proxy) memberOwners(t *health.Target) []*snapshot.Pool {
	pools, _ := p.current.Load().byTarget.Get(t)
	specs := make([]*snapshot.Pool, len(pools))
	for i, pool := range pools {
		specs[i] = pool.Spec
	}
	return specs
}

// memberChanged turns a member's health change into an event for every
// load balancer whose pools hold it, and publishes their state. It reads
// the pools that hold the member, not every pool.
func (p *Proxy) memberChanged(t *health.Target, healthy bool, reason string) {
	cur := p.current.Load()
	pools, _ := cur.byTarget.Get(t)
	var lbs []string
	for _, pool := range pools {
		spec := pool.Spec
		if slices.Contains(lbs, spec.LB) {
			continue
		}
		lbs = append(lbs, spec.LB)
		ev := &pb.Event{Type: observe.EventMemberUp, LoadBalancer: spec.LB,
			Message: fmt.Sprintf("member %s of pool %s is up: %s", t.Name(), spec.Name, reason)}
		if !healthy {
			ev.Type, ev.Severity = observe.EventMemberDown, observe.Warning
			ev.Message = fmt.Sprintf("member %s of pool %s is down: %s", t.Name(), spec.Name, reason)
		}
		p.event(ev)
	}
	p.publish(lbs)
}
