package certs

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	pb "github.com/teapot-lb/teapot-lb/api/proto/teapotv1"
	"github.com/teapot-lb/teapot-lb/proxy/certs/pebbletest"
)

// TestChallengeOutcomes has a real ACME server (pebble) validate a
// tenant's HTTP-01 challenges: the one it validates counts valid in
// teapot_lb_acme_challenges_total{tenant,type,outcome}; once the host's
// HTTP listener is gone, a new name's challenges count invalid (the CA
// could not connect). Its TLS-ALPN-01 port stays closed, so a TLS-ALPN-01
// challenge, if acmez tries one first, counts invalid too. The series
// pass Prometheus's lint.
func TestChallengeOutcomes(t *testing.T) {
	t.Parallel()
	ports := pebbletest.FreePorts(t, 2) // ports[1] stays closed
	peb := pebbletest.Start(t, pebbletest.Options{HTTPPort: ports[0], TLSPort: ports[1]})
	store := newMemStore()
	m, err := New(Config{Store: store, Host: "h1", CA: peb.Directory, Roots: peb.Roots, Logger: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(func() { cancel(); m.Close() })
	go m.Run(ctx)
	hs := &http.Server{Handler: m.HTTPChallengeHandler(), ReadHeaderTimeout: 5 * time.Second}
	hl, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", ports[0]))
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = hs.Serve(hl) }()
	t.Cleanup(func() { hs.Close() })
	objs := []*pb.Object{acmeTenant("acme", 0, "acme.example"), acmeLB("acme", "web", "www.acme.example")}
	deadline := time.Now().Add(90 * time.Second)
	for store.cert("acme", "www.acme.example").GetState() != StateValid {
		if time.Now().After(deadline) {
			t.Fatalf("not issued: %v", store.cert("acme", "www.acme.example"))
		}
		m.Update(store.objectsWith(objs...))
		time.Sleep(200 * time.Millisecond)
	}
	got := m.iss.chal.snapshot()
	t.Logf("after the issue: %v", got)
	if got[challengeKey{"acme", "http-01", ChallengeValid}] != 1 {
		t.Fatalf("challenges after one name was issued by HTTP-01: %v, want one valid http-01 of acme", got)
	}
	for k, n := range got {
		if k.outcome == ChallengeUnfinished || k.tenant != "acme" || (k.outcome == ChallengeInvalid && k.typ != "tls-alpn-01") {
			t.Fatalf("challenges after one name was issued: %v (%v: %d)", got, k, n)
		}
	}
	if problems, err := testutil.CollectAndLint(m.Collector(), "teapot_lb_acme_challenges_total"); err != nil || len(problems) > 0 {
		t.Fatalf("lint: %v %v", problems, err)
	}

	// The HTTP listener is gone: the CA cannot validate a new name.
	hs.Close()
	objs = append(objs, acmeLB("acme", "web2", "www2.acme.example"))
	deadline = time.Now().Add(90 * time.Second)
	for m.iss.chal.snapshot()[challengeKey{"acme", "http-01", ChallengeInvalid}] == 0 {
		if time.Now().After(deadline) {
			t.Fatalf("no invalid http-01 challenge counted: %v; certificate %v", m.iss.chal.snapshot(), store.cert("acme", "www2.acme.example"))
		}
		m.Update(store.objectsWith(objs...))
		time.Sleep(200 * time.Millisecond)
	}
	t.Logf("after a failed order: %v", m.iss.chal.snapshot())
	if n := testutil.CollectAndCount(m.Collector(), "teapot_lb_acme_challenges_total"); n < 2 {
		t.Fatalf("%d series of teapot_lb_acme_challenges_total, want valid and invalid", n)
	}
}
