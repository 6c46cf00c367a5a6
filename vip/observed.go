package vip

import "context"

// followObserved passes the data plane's observed state (Config.Observed)
// on to the loop until ctx ends: a Reset replaces the readiness
// (setReady), any other change sets that of the load balancers it names
// (setReadyFor), so a change costs what it names. The watch never misses
// a change, so the loop's copy is the data plane's once it has caught up.
// Without Config.Observed nothing is ready.
func (m *Manager) followObserved(ctx context.Context) {
	if m.cfg.Observed == nil {
		return
	}
	w := m.cfg.Observed.Watch(0)
	for {
		ch, err := w.Next(ctx)
		if err != nil {
			return
		}
		ready := make(map[string]string, len(ch.LBs))
		for lb, s := range ch.LBs {
			ready[lb] = s.Ready
		}
		if ch.Reset {
			m.setReady(ready)
		} else {
			m.setReadyFor(ready, ch.Gone)
		}
	}
}
