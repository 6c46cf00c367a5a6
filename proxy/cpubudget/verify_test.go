package cpubudget

import (
	"errors"
	"testing"
	"time"
)

// A client certificate check is charged what it costs and, past the
// tenant's budget, refused without being run; other tenants keep theirs.
func TestVerifyIsCharged(t *testing.T) {
	t.Parallel()
	b := New(Options{Rate: 0.1, Burst: 20 * time.Millisecond, Concurrency: 1, MaxWait: 20 * time.Millisecond})
	burn := func() error {
		// 40 ms of this thread's CPU (measure runs f locked to it).
		start, _ := threadCPU()
		for now := start; now-start < 40*time.Millisecond; now, _ = threadCPU() {
		}
		return nil
	}
	if err := b.Tenant("b").Verify(burn); err != nil {
		t.Fatalf("first check within the burst: %v", err)
	}
	ran := false
	if err := b.Tenant("b").Verify(func() error { ran = true; return nil }); !errors.Is(err, ErrOverBudget) || ran {
		t.Fatalf("second check: %v (ran %v), want ErrOverBudget without running", err, ran)
	}
	if st := b.Tenant("b").Stat(); st.Refused != 1 || st.Verified != 1 || st.Spent < 20*time.Millisecond {
		t.Errorf("b's account %+v", st)
	}
	bad := errors.New("bad chain")
	if err := b.Tenant("a").Verify(func() error { return bad }); err != bad {
		t.Errorf("another tenant's check: %v, want its own error", err)
	}
}
