package vip

import (
	"bytes"
	"testing"
)

func TestHeartbeatKey(t *testing.T) {
	a, b := HeartbeatKey([]byte("ca key one")), HeartbeatKey([]byte("ca key two"))
	if len(a) != 32 || bytes.Equal(a, b) || !bytes.Equal(a, HeartbeatKey([]byte("ca key one"))) {
		t.Fatalf("keys %x %x: want 32 bytes, stable per CA key, distinct across keys", a, b)
	}
	if bytes.Contains(a, []byte("ca key one")) {
		t.Fatal("the key reveals the CA key")
	}
}
