package cpubudget

import (
	"context"
	"time"
)

// Verify runs f, the check of a client's certificate chain in a handshake
// on one of the tenant's listeners, charged to the tenant as a signature
// is: while the bucket is in debt, or every slot is taken, it waits up to
// MaxWait and then fails with ErrOverBudget without running f (the
// handshake fails); otherwise f's CPU time is charged. It returns f's
// error.
func (t *Tenant) Verify(f func() error) error {
	ctx := context.Background()
	deadline := time.Now().Add(t.b.o.MaxWait)
	if !t.waitTokens(ctx, deadline) || !t.throttleUntil(ctx, deadline) || !t.acquire(ctx, deadline) {
		t.refused.Add(1)
		return ErrOverBudget
	}
	_, cost, err := measure(func() ([]byte, error) { return nil, f() })
	<-t.sem
	t.charge(cost)
	t.verified.Add(1)
	return err
}
