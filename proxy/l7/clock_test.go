package l7

import (
	"testing"
	"time"
)

// TestClock checks that nowNano tells Unix time and that a deadline made
// with timeAt is as far away as asked.
func TestClock(t *testing.T) {
	if d := time.Duration(nowNano() - time.Now().UnixNano()); d < -time.Second || d > time.Second {
		t.Fatalf("nowNano is %v away from the wall clock", d)
	}
	at := timeAt(nowNano() + int64(time.Hour))
	if d := time.Until(at); d < time.Hour-time.Second || d > time.Hour {
		t.Fatalf("a deadline an hour away is %v away", d)
	}
	if at.Equal(at.Round(0)) && at.String() == at.Round(0).String() {
		t.Fatal("timeAt carries no monotonic reading")
	}
	a := nowNano()
	time.Sleep(10 * time.Millisecond)
	if d := time.Duration(nowNano() - a); d < 10*time.Millisecond {
		t.Fatalf("10ms of sleep measured %v", d)
	}
}

// TestAppendRequestID checks the generated request IDs: 32 lower-case
// hex digits appended to what is there, different each time.
func TestAppendRequestID(t *testing.T) {
	a := string(appendRequestID([]byte("id=")))
	b := string(appendRequestID(nil))
	if len(a) != 35 || a[:3] != "id=" || len(b) != 32 || a[3:] == b {
		t.Fatalf("ids %q and %q", a, b)
	}
	for _, c := range a[3:] + b {
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			t.Fatalf("ids %q and %q: %q is no lower-case hex digit", a, b, c)
		}
	}
}
