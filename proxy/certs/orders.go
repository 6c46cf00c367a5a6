package certs

import (
	"errors"
	"fmt"
	"sync"
	"time"
)

// ErrOrderLimited: an ACME order was not placed, because its tenant
// placed its orders of the hour or its name is backing off after
// failures. The cluster shares one ACME account, and the CA's rate limits
// count per account: these bounds keep one tenant's orders (above all its
// failing ones) from spending what the other tenants need.
var ErrOrderLimited = errors.New("certs: ACME order rate limited")

// Bounds of ACME orders, per LB host.
const (
	// DefaultOrdersPerHour is how many new ACME orders one tenant may
	// start in an hour (a burst of as many, then one every hour/N).
	DefaultOrdersPerHour = 10
	// FirstOrderBackoff is how long a name whose order failed waits
	// before its next order; each failure in a row doubles it, up to
	// MaxOrderBackoff.
	FirstOrderBackoff = time.Minute
	MaxOrderBackoff   = 24 * time.Hour
)

// orderLimiter bounds the ACME orders of each tenant (a token bucket of
// perHour an hour) and backs off each failing name (doubling per failure).
// State is per process: it survives config changes, not restarts.
type orderLimiter struct {
	perHour int
	mu      sync.Mutex
	tenants map[string]*orderBucket
	names   map[string]*nameBackoff
}

// orderBucket holds a tenant's credit: an order costs an hour/perHour of
// it, and it grows by the time passed, up to an hour.
type orderBucket struct {
	credit time.Duration
	last   time.Time
}

type nameBackoff struct {
	failures int
	next     time.Time
}

func newOrderLimiter(perHour int) *orderLimiter {
	if perHour <= 0 {
		perHour = DefaultOrdersPerHour
	}
	return &orderLimiter{perHour: perHour, tenants: map[string]*orderBucket{}, names: map[string]*nameBackoff{}}
}

// admit reports whether tenant may start an order for name at now, and
// takes one of the tenant's orders if so. The error says when the next may
// start.
func (l *orderLimiter) admit(tenant, name string, now time.Time) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if b := l.names[name]; b != nil && now.Before(b.next) {
		return fmt.Errorf("%w: the order for %s failed %d times in a row; the next starts after %s (the wait doubles with each failure, up to %s)",
			ErrOrderLimited, name, b.failures, b.next.UTC().Format(time.RFC3339), MaxOrderBackoff)
	}
	cost := time.Hour / time.Duration(l.perHour)
	t := l.tenants[tenant]
	if t == nil {
		t = &orderBucket{credit: time.Hour, last: now}
		l.tenants[tenant] = t
	}
	if el := now.Sub(t.last); el > 0 {
		t.credit = min(t.credit+el, time.Hour)
		t.last = now
	}
	if t.credit < cost {
		return fmt.Errorf("%w: tenant %s started its %d ACME orders of the hour on this LB host; the next may start in %s (the operator raises the bound with --acme-orders-per-tenant)",
			ErrOrderLimited, tenant, l.perHour, (cost - t.credit).Round(time.Second))
	}
	t.credit -= cost
	return nil
}

// done records the end of an order for name: a failure backs the name
// off, a success forgets its failures.
func (l *orderLimiter) done(name string, failed bool, now time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !failed {
		delete(l.names, name)
		return
	}
	b := l.names[name]
	if b == nil {
		b = &nameBackoff{}
		l.names[name] = b
	}
	b.failures++
	d := FirstOrderBackoff
	for i := 1; i < b.failures && d < MaxOrderBackoff; i++ {
		d *= 2
	}
	b.next = now.Add(min(d, MaxOrderBackoff))
}

// forget drops the state of names no longer managed.
func (l *orderLimiter) forget(name string) {
	l.mu.Lock()
	delete(l.names, name)
	l.mu.Unlock()
}
