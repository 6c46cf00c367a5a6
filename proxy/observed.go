package proxy

import "github.com/teapot-lb/teapot-lb/api/observe"

// Observed returns the data plane's observed state, the readiness and
// member health of each load balancer it serves (Config.Observed, or a
// plane of its own). The proxy writes a load balancer's state there
// whenever it may have changed: an Update or ApplyChange that touched it,
// a listener opened on retry, a member's health (active or passive), the
// end of a recovery hold-down.
func (p *Proxy) Observed() *observe.Plane { return p.plane }

// publish writes the readiness and members of lbs to the plane, those
// no longer served as gone. The first call marks the plane reported even
// with no load balancer. Calls are serialized so that the last state
// written is the last computed.
func (p *Proxy) publish(lbs []string) {
	p.publishMu.Lock()
	defer p.publishMu.Unlock()
	ready, gone := p.ReadinessOf(lbs)
	states := make(map[string]observe.LBState, len(ready))
	for lb, why := range ready {
		states[lb] = observe.LBState{Ready: why, Members: p.Members(lb)}
	}
	p.plane.Set(states, gone)
}
