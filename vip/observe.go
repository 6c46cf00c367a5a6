package vip

import (
	"github.com/teapot-lb/teapot-lb/api/observe"
	pb "github.com/teapot-lb/teapot-lb/api/proto/teapotv1"
)

var _ observe.Source = (*Manager)(nil)

// Observe adds the VIPs this host holds, announces, or released for a
// reason of its own to h: those used by a load balancer f selects. It is
// safe on a nil Manager.
func (m *Manager) Observe(f observe.Filter, h *pb.HostObservation) {
	if m == nil {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, v := range m.pub.vips {
		if f == (observe.Filter{}) {
			h.Vips = append(h.Vips, cloneHolding(v))
			continue
		}
		for _, lb := range v.LoadBalancers {
			if f.MatchLB(lb) {
				h.Vips = append(h.Vips, cloneHolding(v))
				break
			}
		}
	}
}
