package vip

import (
	"testing"
	"time"
)

// TestNextRedial: a session that went down after a stable run is dialled
// again after a second; one that keeps going down soon after it comes up
// waits twice as long each time, up to redialMax.
func TestNextRedial(t *testing.T) {
	var hold time.Duration
	var got []time.Duration
	for range 8 {
		hold = nextRedial(hold, 5*time.Second)
		got = append(got, hold)
	}
	want := []time.Duration{1, 2, 4, 8, 16, 32, 32, 32}
	for i := range want {
		if got[i] != want[i]*time.Second {
			t.Fatalf("holds of a session that keeps failing: %v, want %v s", got, want)
		}
	}
	if h := nextRedial(redialMax, stableAfter); h != redialMin {
		t.Errorf("after a session that lasted %s: %s, want %s", stableAfter, h, redialMin)
	}
}
