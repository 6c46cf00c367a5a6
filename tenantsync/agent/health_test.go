package agent

import (
	"context"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"
)

func TestHealthProbes(t *testing.T) {
	a := &Agent{}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.serveHealth(ctx, ln) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	})
	get := func(path string) (int, string) {
		t.Helper()
		c := &http.Client{Timeout: 10 * time.Second}
		resp, err := c.Get("http://" + ln.Addr().String() + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, strings.TrimSpace(string(b))
	}
	steps := []struct {
		name                     string
		synced, leading, connect bool
		ready                    int
		why                      string
	}{
		{"starting", false, false, false, 503, "informers' caches not synced"},
		{"standby", true, false, false, 200, "standby, caches synced"},
		{"leading before the stream", true, true, false, 503, "leading, but not connected to the LB cluster"},
		{"leading and connected", true, true, true, 200, "leading, connected to the LB cluster"},
		{"stream lost", true, true, false, 503, "leading, but not connected to the LB cluster"},
	}
	for _, s := range steps {
		t.Run(s.name, func(t *testing.T) {
			a.health.synced.Store(s.synced)
			a.health.leading.Store(s.leading)
			a.health.connected.Store(s.connect)
			if code, body := get("/healthz"); code != 200 || body != "ok" {
				t.Errorf("/healthz: %d %q, want 200 ok", code, body)
			}
			if code, body := get("/readyz"); code != s.ready || body != s.why {
				t.Errorf("/readyz: %d %q, want %d %q", code, body, s.ready, s.why)
			}
			if a.Ready() != (s.ready == 200) {
				t.Errorf("Ready() = %v", a.Ready())
			}
		})
	}
	if code, _ := get("/other"); code != 404 {
		t.Errorf("/other: %d, want 404", code)
	}
}
