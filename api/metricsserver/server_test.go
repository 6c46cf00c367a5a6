package metricsserver

import (
	"bytes"
	"compress/gzip"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

func TestProfilesOnLoopback(t *testing.T) {
	srv, err := Listen("127.0.0.1:0", nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go srv.Run(ctx)
	base := "http://" + srv.Addr().String()
	get := func(path string) (int, []byte) {
		t.Helper()
		resp, err := (&http.Client{Timeout: 60 * time.Second}).Get(base + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, b
	}
	if code, body := get("/metrics"); code != 200 || !strings.Contains(string(body), "go_goroutines") {
		t.Fatalf("/metrics: %d %.200s", code, body)
	}
	if code, body := get("/debug/pprof/profile?seconds=0"); code != 400 || !strings.Contains(string(body), "seconds") {
		t.Fatalf("seconds=0: %d %s, want 400 naming seconds", code, body)
	}
	// Two profiles at once: one runs, the other is refused, not queued.
	type result struct {
		code int
		body []byte
	}
	done := make(chan result, 1)
	go func() {
		resp, err := (&http.Client{Timeout: 60 * time.Second}).Get(base + "/debug/pprof/profile?seconds=3")
		if err != nil {
			done <- result{}
			return
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		done <- result{resp.StatusCode, b}
	}()
	var profiles [][]byte
	refused, first := false, false
	for deadline := time.Now().Add(30 * time.Second); !refused && !first && time.Now().Before(deadline); {
		select {
		case r := <-done:
			first = true
			switch r.code {
			case http.StatusOK:
				profiles = append(profiles, r.body)
			case http.StatusTooManyRequests:
				refused = true // one of the loop's profiles was running
			default:
				t.Fatalf("profile: %d %s", r.code, r.body)
			}
			continue
		default:
		}
		code, body := get("/debug/pprof/profile?seconds=1")
		switch code {
		case http.StatusTooManyRequests:
			refused = true
		case http.StatusOK:
			profiles = append(profiles, body)
		default:
			t.Fatalf("profile: %d %s", code, body)
		}
	}
	if !first {
		if r := <-done; r.code == http.StatusOK {
			profiles = append(profiles, r.body)
		}
	}
	if !refused {
		t.Fatal("a profile asked for while another ran was never refused")
	}
	if len(profiles) == 0 {
		t.Fatal("no profile was taken")
	}
	zr, err := gzip.NewReader(bytes.NewReader(profiles[0]))
	if err != nil {
		t.Fatalf("CPU profile is not gzip: %v", err)
	}
	raw, err := io.ReadAll(zr)
	if err != nil || !bytes.Contains(raw, []byte("cpu")) || !bytes.Contains(raw, []byte("nanoseconds")) {
		t.Fatalf("CPU profile (%d bytes, %v) does not name cpu nanoseconds", len(raw), err)
	}
	if code, body := get("/debug/pprof/goroutine?debug=1"); code != 200 || !strings.Contains(string(body), "goroutine profile") {
		t.Fatalf("goroutine profile: %d %.200s", code, body)
	}
}

// A delta profile of a named profile (/debug/pprof/heap?seconds=N) lasts
// N seconds too: it takes the same one-at-a-time turn and cap as a CPU
// profile.
func TestDeltaProfilesLimited(t *testing.T) {
	srv, err := Listen("127.0.0.1:0", nil)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := srv.srv.WriteTimeout, (ProfileMaxSeconds+30)*time.Second; got != want {
		t.Fatalf("loopback WriteTimeout %v, want %v (a profile's duration plus a response's)", got, want)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go srv.Run(ctx)
	base := "http://" + srv.Addr().String()
	get := func(path string) (int, string) {
		t.Helper()
		resp, err := (&http.Client{Timeout: 60 * time.Second}).Get(base + path)
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if code, body := get("/debug/pprof/heap?seconds=121"); code != 400 || !strings.Contains(body, "seconds: give a whole number from 1 to 120") {
		t.Fatalf("heap?seconds=121: %d %.200s, want 400 naming the bound", code, body)
	}
	// A CPU profile and delta heap profiles asked for one after the other:
	// the heap profiles never overlap each other, so any 429 comes from a
	// CPU profile and a delta profile meeting.
	done := make(chan int, 1)
	go func() {
		resp, err := (&http.Client{Timeout: 60 * time.Second}).Get(base + "/debug/pprof/profile?seconds=3")
		if err != nil {
			done <- 0
			return
		}
		defer resp.Body.Close()
		_, _ = io.ReadAll(resp.Body)
		done <- resp.StatusCode
	}()
	refused, cpuDone := false, false
	for deadline := time.Now().Add(30 * time.Second); !refused && !cpuDone && time.Now().Before(deadline); {
		select {
		case code := <-done:
			cpuDone = true
			switch code {
			case http.StatusTooManyRequests:
				refused = true
			case http.StatusOK:
			default:
				t.Fatalf("CPU profile: %d", code)
			}
			continue
		default:
		}
		code, body := get("/debug/pprof/heap?seconds=1")
		switch code {
		case http.StatusTooManyRequests:
			refused = true
		case http.StatusOK:
		default:
			t.Fatalf("heap?seconds=1: %d %.200s", code, body)
		}
	}
	if !cpuDone {
		<-done
	}
	if !refused {
		t.Fatal("a delta heap profile and a CPU profile ran at the same time")
	}
	// Snapshots are not limited.
	if code, body := get("/debug/pprof/heap?debug=1"); code != 200 || !strings.Contains(body, "heap profile") {
		t.Fatalf("heap snapshot: %d %.200s", code, body)
	}
}

// Elsewhere than on loopback there are no profiles, and a response has
// the ordinary write deadline.
func TestNoProfilesOffLoopback(t *testing.T) {
	srv, err := Listen("0.0.0.0:0", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	if got := srv.srv.WriteTimeout; got != 30*time.Second {
		t.Fatalf("WriteTimeout %v off loopback, want 30s (no profiles are served there)", got)
	}
	rec := httptest.NewRecorder()
	srv.srv.Handler.ServeHTTP(rec, httptest.NewRequest("GET", "/debug/pprof/", nil))
	if rec.Code != http.StatusNotFound {
		t.Fatalf("/debug/pprof/ off loopback: %d, want 404", rec.Code)
	}
}
