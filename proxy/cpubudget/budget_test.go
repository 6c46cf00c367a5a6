package cpubudget

import (
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"errors"
	"io"
	"sync"
	"testing"
	"time"
)

// burner is a signer whose signature burns d of CPU.
type burner struct {
	crypto.Signer
	d time.Duration
}

func (b burner) Sign(io.Reader, []byte, crypto.SignerOpts) ([]byte, error) {
	// measure runs Sign on a thread of its own: burn that thread's CPU.
	start, _ := threadCPU()
	for now := start; now-start < b.d; now, _ = threadCPU() {
	}
	return []byte("sig"), nil
}

func key(t *testing.T) crypto.Signer {
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// A tenant past its CPU budget has its signatures refused once MaxWait
// passed, and only that tenant: another's sign at once.
func TestOverBudgetTenantIsRefusedAlone(t *testing.T) {
	t.Parallel()
	b := New(Options{Rate: 0.1, Burst: 20 * time.Millisecond, Concurrency: 1, MaxWait: 20 * time.Millisecond})
	noisy := b.Tenant("b").Signer(burner{Signer: key(t), d: 30 * time.Millisecond})
	if _, err := noisy.Sign(rand.Reader, nil, nil); err != nil {
		t.Fatalf("first signature within the burst: %v", err)
	}
	// 30 ms of debt at 0.1 CPU-s/s takes 300 ms to repay: the next waits
	// MaxWait and is refused.
	start := time.Now()
	if _, err := noisy.Sign(rand.Reader, nil, nil); !errors.Is(err, ErrOverBudget) {
		t.Fatalf("second signature: %v, want ErrOverBudget", err)
	}
	if el := time.Since(start); el < 20*time.Millisecond {
		t.Errorf("refused after %s, want a wait of MaxWait first", el)
	}
	st := b.Tenant("b").Stat()
	if st.Refused != 1 || st.Signed != 1 || st.Spent < 30*time.Millisecond {
		t.Errorf("b's account %+v", st)
	}
	quiet := b.Tenant("a").Signer(key(t))
	d := sha256.Sum256([]byte("hello"))
	if _, err := quiet.Sign(rand.Reader, d[:], crypto.SHA256); err != nil {
		t.Fatalf("another tenant: %v", err)
	}
	if st := b.Tenant("a").Stat(); st.Refused != 0 || st.Signed != 1 {
		t.Errorf("a's account %+v", st)
	}
}

// A tenant's signatures in progress are bounded: with Concurrency 1, a
// second signature waits for the first and is refused when the first
// outlasts MaxWait.
func TestConcurrencyBound(t *testing.T) {
	t.Parallel()
	b := New(Options{Rate: 100, Burst: time.Second, Concurrency: 1, MaxWait: 10 * time.Millisecond})
	s := b.Tenant("b").Signer(burner{Signer: key(t), d: 200 * time.Millisecond})
	done := make(chan error, 1)
	go func() { _, err := s.Sign(rand.Reader, nil, nil); done <- err }()
	for len(b.Tenant("b").sem) == 0 {
		time.Sleep(time.Millisecond)
	}
	if _, err := s.Sign(rand.Reader, nil, nil); !errors.Is(err, ErrOverBudget) {
		t.Fatalf("second concurrent signature: %v, want ErrOverBudget", err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// Health checks wait for the budget instead of failing: Wait returns
// once the debt is repaid, and the wait is counted.
func TestWaitDelaysUntilRepaid(t *testing.T) {
	t.Parallel()
	b := New(Options{Rate: 1, Burst: time.Millisecond})
	tn := b.Tenant("b")
	s := tn.ClientSigner(burner{Signer: key(t), d: 20 * time.Millisecond})
	if _, err := s.Sign(rand.Reader, nil, nil); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if !tn.Wait(context.Background()) {
		t.Fatal("Wait gave up")
	}
	if el := time.Since(start); el < 10*time.Millisecond {
		t.Errorf("waited %s for ~19 ms of debt at 1 CPU-s/s", el)
	}
	if st := tn.Stat(); st.Delayed != 1 {
		t.Errorf("account %+v, want one delay", st)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, _ = s.Sign(rand.Reader, nil, nil)
	if tn.Wait(ctx) {
		t.Error("Wait with an ended context reported the budget free while in debt")
	}
}

// A ClientHello is admitted before any key exchange and charged
// Overhead; while the tenant is in debt it waits MaxWait and is refused.
func TestHelloIsAdmittedBeforeTheKeyExchange(t *testing.T) {
	t.Parallel()
	b := New(Options{Rate: 0.01, Burst: time.Millisecond, Overhead: 400 * time.Microsecond, MaxWait: 5 * time.Millisecond})
	tn := b.Tenant("b")
	for i := range 3 {
		if err := tn.Hello(); err != nil {
			t.Fatalf("hello %d: %v", i+1, err)
		}
	}
	// 1 ms of burst, 1.2 ms charged: in debt for ~20 ms at 0.01.
	if err := tn.Hello(); !errors.Is(err, ErrOverBudget) {
		t.Fatalf("hello in debt: %v", err)
	}
	if st := tn.Stat(); st.Hellos != 3 || st.Refused != 1 || st.Spent != 1200*time.Microsecond {
		t.Errorf("account %+v", st)
	}
	if err := b.Tenant("a").Hello(); err != nil {
		t.Errorf("another tenant's hello: %v", err)
	}
}

// A tenant's slots of background computing are its host budget in cores,
// rounded up; they are handed out in the order asked; an ask whose
// context ends leaves the queue, and a slot handed to it as it ended
// passes on.
func TestComputeSlotsInOrder(t *testing.T) {
	b := New(Options{HostMillicores: 500})
	tn := b.Tenant("t")
	if n := tn.ComputeSlots(); n != 1 {
		t.Fatalf("500 millicores: %d slots, want 1", n)
	}
	if _, ok := tn.Compute(context.Background()); !ok {
		t.Fatal("first ask refused")
	}
	var order []int
	var mu sync.Mutex
	var wg sync.WaitGroup
	gone, cancel := context.WithCancel(context.Background())
	for i := range 3 {
		ctx := context.Background()
		if i == 1 {
			ctx = gone
		}
		wg.Go(func() {
			if _, ok := tn.Compute(ctx); !ok {
				return
			}
			mu.Lock()
			order = append(order, i)
			mu.Unlock()
			tn.ComputeDone()
		})
		for tn.ComputeStat().Waiting != i+1 {
			time.Sleep(time.Millisecond)
		}
	}
	cancel()
	for tn.ComputeStat().Waiting != 2 {
		time.Sleep(time.Millisecond)
	}
	tn.ComputeDone()
	wg.Wait()
	if len(order) != 2 || order[0] != 0 || order[1] != 2 {
		t.Errorf("slots went to %v, want [0 2] (1's context ended)", order)
	}
	if s := tn.ComputeStat(); s.Running != 0 || s.Waiting != 0 || s.Waits != 2 {
		t.Errorf("after: %+v, want nothing running or waiting and 2 waits", s)
	}
	tn.SetMillicores(2500)
	if n := tn.ComputeSlots(); n != 3 {
		t.Errorf("2500 millicores: %d slots, want 3", n)
	}
}
