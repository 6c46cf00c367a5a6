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

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
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

// textCollector exports one gauge through WriteText.
type textCollector struct{ desc *prometheus.Desc }

func (c textCollector) Describe(ch chan<- *prometheus.Desc) { ch <- c.desc }
func (c textCollector) Collect(ch chan<- prometheus.Metric) {
	ch <- prometheus.MustNewConstMetric(c.desc, prometheus.GaugeValue, 7)
}
func (c textCollector) WriteText(w io.Writer) error {
	_, err := io.WriteString(w, "# HELP big_family A family written as text.\n# TYPE big_family gauge\nbig_family 7\n")
	return err
}

// TestTextWritersFollowTheRegistry: a TextWriter's series are written
// after the registry's in one text response, plain or gzipped, and it
// cannot export a name that is already registered.
func TestTextWritersFollowTheRegistry(t *testing.T) {
	srv, err := Listen("127.0.0.1:0", nil)
	if err != nil {
		t.Fatal(err)
	}
	c := textCollector{prometheus.NewDesc("big_family", "A family written as text.", nil, nil)}
	if err := srv.Register(c); err != nil {
		t.Fatal(err)
	}
	if err := srv.Register(prometheus.NewGauge(prometheus.GaugeOpts{Name: "big_family", Help: "again"})); err == nil {
		t.Fatal("a second collector of big_family was registered")
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go srv.Run(ctx)
	for _, tc := range []struct {
		enc  string
		gzip bool
	}{{"", false}, {"gzip", true}, {"br, gzip;q=0.5", true}, {"gzip;q=0", false}} {
		enc := tc.enc
		req, _ := http.NewRequest("GET", "http://"+srv.Addr().String()+"/metrics", nil)
		req.Header.Set("Accept-Encoding", enc)
		req.Header.Set("Accept", "application/openmetrics-text;version=1.0.0,text/plain;version=0.0.4;q=0.5")
		resp, err := (&http.Transport{DisableCompression: true}).RoundTrip(req)
		if err != nil {
			t.Fatal(err)
		}
		body := io.Reader(resp.Body)
		gzipped := resp.Header.Get("Content-Encoding") == "gzip"
		if gzipped != tc.gzip {
			t.Errorf("Accept-Encoding %q: gzipped %v", enc, gzipped)
		}
		if gzipped {
			if body, err = gzip.NewReader(resp.Body); err != nil {
				t.Fatal(err)
			}
		}
		b, err := io.ReadAll(body)
		resp.Body.Close()
		if err != nil {
			t.Fatal(err)
		}
		if ct := resp.Header.Get("Content-Type"); !strings.HasPrefix(ct, "text/plain; version=0.0.4") {
			t.Errorf("Content-Type %q", ct)
		}
		p := expfmt.NewTextParser(model.LegacyValidation)
		mfs, err := p.TextToMetricFamilies(bytes.NewReader(b))
		if err != nil {
			t.Fatalf("Accept-Encoding %q: %v\n%s", enc, err, b)
		}
		if mfs["big_family"].GetMetric()[0].GetGauge().GetValue() != 7 || mfs["go_goroutines"] == nil {
			t.Errorf("Accept-Encoding %q: big_family %v, go_goroutines %v", enc, mfs["big_family"], mfs["go_goroutines"])
		}
		if n := strings.Count(string(b), "# TYPE big_family"); n != 1 {
			t.Errorf("big_family written %d times", n)
		}
	}
}
