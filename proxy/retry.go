package proxy

import "time"

// Defaults of Config.BindRetry and Config.MaxBindRetry.
const (
	DefaultBindRetry    = time.Second
	DefaultMaxBindRetry = 30 * time.Second
)

// retryState is the timer that tries again to open the listeners that
// could not be opened; guarded by Proxy.mu.
type retryState struct {
	timer *time.Timer
	delay time.Duration
	gen   int
}

func (r *retryState) stop() {
	if r.timer != nil {
		r.timer.Stop()
		r.timer = nil
	}
	r.gen++
}

// scheduleRetry arms the retry timer while listeners are missing (under
// p.mu); reset starts the backoff again from BindRetry.
func (p *Proxy) scheduleRetry(reset bool) {
	p.failedAnew = false
	if p.missing == 0 || p.closed {
		p.retry.stop()
		p.retry.delay = 0
		return
	}
	if reset || p.retry.delay == 0 {
		p.retry.delay = p.cfg.BindRetry
	} else {
		p.retry.delay = min(2*p.retry.delay, p.cfg.MaxBindRetry)
	}
	p.retry.stop()
	gen := p.retry.gen
	p.retry.timer = time.AfterFunc(p.retry.delay, func() { p.retryBind(gen) })
}

// retryBind tries the missing listeners again with the snapshot in service.
func (p *Proxy) retryBind(gen int) {
	p.mu.Lock()
	if p.closed || gen != p.retry.gen || p.snap == nil {
		p.mu.Unlock()
		return
	}
	before := p.missing
	opened := p.apply(p.snap, true)
	p.scheduleRetry(false)
	after, rev := p.missing, p.snap.Revision
	p.mu.Unlock()
	if opened && after < before {
		// apply published the state of their load balancers.
		p.log.Info("listener opened on retry", "revision", rev, "missing", after)
	}
}

// armRetry keeps the retry timer running as it is after a change (under
// p.mu): a change does not reset the backoff of listeners it did not
// touch. A listener that failed anew starts the backoff again from
// BindRetry.
func (p *Proxy) armRetry() {
	if p.failedAnew || p.retry.timer == nil || p.missing == 0 {
		p.scheduleRetry(true)
	}
}
