package proxy

import (
	"bytes"
	"log/slog"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	pb "github.com/teapot-lb/teapot-lb/api/proto/teapotv1"
)

// syncBuffer is a bytes.Buffer safe for the proxy's goroutines.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

// lines returns the logged lines that contain every one of parts.
func (b *syncBuffer) lines(parts ...string) []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	var out []string
	for line := range strings.Lines(b.buf.String()) {
		ok := true
		for _, p := range parts {
			ok = ok && strings.Contains(line, p)
		}
		if ok {
			out = append(out, line)
		}
	}
	return out
}

// Every line about a member names its tenant, load balancer and pool, once
// per pool that holds it: two load balancers that check one member the
// same way share its health, and an operator greps either one's lines.
func TestMemberLogNamesTenantLBAndPool(t *testing.T) {
	t.Parallel()
	var logs syncBuffer
	p, _ := newProxy(t, Config{Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	member := deadAddr(t)
	check := &pb.HealthCheck{Tcp: &pb.TCPCheck{}, Interval: dur(50 * time.Millisecond), Timeout: dur(time.Second), Rise: 1, Fall: 1}
	web := l4LB("web", "127.0.0.3", freePort(t), "tcp", member)
	web.Pools["app"].HealthCheck = check
	shop := l4LB("shop", "127.0.0.3", freePort(t), "tcp", member)
	shop.Pools["app"].HealthCheck = check
	update(t, p, web, shop)

	want := func(msg string) {
		t.Helper()
		for _, lb := range []string{"acme/web", "acme/shop"} {
			eventually(t, msg+" of "+lb, func() bool {
				return len(logs.lines(`msg="`+msg+`"`, "tenant=acme", "lb="+lb, "pool=app", "member="+member)) > 0
			})
		}
	}
	want("member down")

	l, err := net.Listen("tcp", member)
	if err != nil {
		t.Fatalf("listen on the member's address: %v", err)
	}
	defer l.Close()
	want("member up")

	for _, line := range logs.lines("member=") {
		if !strings.Contains(line, "tenant=") || !strings.Contains(line, "lb=") || !strings.Contains(line, "pool=") {
			t.Errorf("a line about a member does not name its tenant, load balancer and pool: %s", line)
		}
	}
}
