package ratelimit

import "testing"

// The reference vector of the SipHash paper (appendix A): key 00..0f,
// message 00..0e.
func TestSipHashVector(t *testing.T) {
	t.Parallel()
	var k [16]byte
	for i := range k {
		k[i] = byte(i)
	}
	m := make([]byte, 15)
	for i := range m {
		m[i] = byte(i)
	}
	if got := sipKeyOf(k).sum64(string(m)); got != 0xa129ca6149be45e5 {
		t.Fatalf("SipHash-2-4 = %#x, want 0xa129ca6149be45e5", got)
	}
}
