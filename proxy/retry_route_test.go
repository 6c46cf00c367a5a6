package proxy

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	pb "github.com/teapot-lb/teapot-lb/api/proto/teapotv1"
	"github.com/teapot-lb/teapot-lb/proxy/l7"
	"github.com/teapot-lb/teapot-lb/proxy/metrics"
)

// retryMember answers the first request of each id (the query's id) 503
// when the query has fail, and every other "attempt n set=<X-Set>".
func retryMember(t *testing.T) *httptest.Server {
	var mu sync.Mutex
	tries := map[string]int{}
	member := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		tries[r.URL.Query().Get("id")]++
		n := tries[r.URL.Query().Get("id")]
		mu.Unlock()
		if n == 1 && r.URL.Query().Get("fail") != "" {
			w.WriteHeader(503)
			return
		}
		fmt.Fprintf(w, "attempt %d set=%s", n, r.Header.Get("X-Set"))
	}))
	t.Cleanup(member.Close)
	return member
}

// TestRouteRetryFromModel compiles routes with retry and a backend's
// request header changes from the model and sends requests through a
// real listener, engine and member: a retried 503 is answered by the
// second attempt and counted in the metrics, the same route without retry
// answers 503, and a backend's header change reaches that backend only.
func TestRouteRetryFromModel(t *testing.T) {
	t.Parallel()
	member := retryMember(t)
	m := &metrics.Memory{}
	srv := l7.New(l7.Config{Metrics: m})
	t.Cleanup(func() { srv.Close() })
	p := New(Config{HTTP: NewHTTP(srv, nil), Metrics: m, DrainTimeout: 200 * time.Millisecond})
	t.Cleanup(func() { p.Close() })
	port := freePort(t)
	lb := &pb.LoadBalancer{
		Name: "gw", Tenant: "acme",
		Listeners: []*pb.Listener{{Port: uint32(port), Protocol: "http"}},
		Status:    &pb.LoadBalancerStatus{Address: "127.0.0.2"},
		Pools:     map[string]*pb.BackendPool{"main": {Members: []*pb.Member{{Address: member.Listener.Addr().String()}}}, "other": {Members: []*pb.Member{{Address: member.Listener.Addr().String()}}}},
		Routes: []*pb.Route{
			{Host: "gw.acme.example", Path: "/retry/", Pool: "main",
				Retry: &pb.RouteRetry{Codes: []uint32{503}, Attempts: proto.Uint32(2), Backoff: dur(time.Millisecond)}},
			{Host: "gw.acme.example", Path: "/plain/", Pool: "main"},
			{Host: "gw.acme.example", Path: "/backends/", Backends: []*pb.RouteBackend{
				{Pool: "main", Weight: proto.Uint32(1), RequestHeaderModifier: &pb.HeaderModifier{Set: []*pb.HeaderValue{{Name: "x-set", Value: "main"}}}},
				{Pool: "other", Weight: proto.Uint32(0)},
			}},
		},
	}
	update(t, p, lb)
	if st := p.Status()["acme/gw"]; len(st) != 0 {
		t.Fatalf("problems: %v", st)
	}
	target := vipAddr("127.0.0.2", port)
	for _, tc := range []struct{ path, want string }{
		{"/retry/x?id=a&fail=1", "200 attempt 2 set=client"},
		{"/plain/x?id=b&fail=1", "503 "},
		{"/backends/x?id=c", "200 attempt 1 set=main"},
	} {
		resp, err := doVia(target, "GET", "http://gw.acme.example"+tc.path, http.Header{"X-Set": {"client"}}, "")
		if err != nil {
			t.Fatal(err)
		}
		data, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if got := fmt.Sprintf("%d %s", resp.StatusCode, data); got != tc.want {
			t.Errorf("%s: got %q, want %q", tc.path, got, tc.want)
		}
	}
	hs, _ := m.HTTP()
	var retries, denied int64
	for _, h := range hs {
		retries += h.Retries
		denied += h.RetriesDenied
	}
	if retries != 1 || denied != 0 {
		t.Errorf("metrics count %d retries and %d denied, want 1 and 0", retries, denied)
	}
}

// A route's retry applies to HTTP/3 requests as to the others: a GET over
// HTTP/3 (whose body quic-go reports as of unknown length, though the
// stream ended with its head) whose first attempt the member fails is
// retried.
func TestRouteRetryOverHTTP3(t *testing.T) {
	t.Parallel()
	member := retryMember(t)
	srv := l7.New(l7.Config{})
	t.Cleanup(func() { srv.Close() })
	p, _ := newProxy(t, Config{HTTP: newH3Term(t, srv)})
	port := freePort(t)
	lb := h3LB(port, map[string]*routingBackend{"main": {addr: member.Listener.Addr().String()}})
	lb.Routes = []*pb.Route{{Host: "gw.acme.example", Path: "/", Pool: "main",
		Retry: &pb.RouteRetry{Codes: []uint32{503}, Attempts: proto.Uint32(1), Backoff: dur(time.Millisecond)}}}
	update(t, p, lb)
	if st := p.Status()["acme/gw"]; len(st) != 0 {
		t.Fatalf("problems: %v", st)
	}
	target := vipAddr("127.0.0.2", port)
	c := newH3Client(t, target)
	for _, tc := range []struct{ method, id, body, want string }{
		{"GET", "get", "", "200 attempt 2 set="},
		{"POST", "post", "a body", "200 attempt 2 set="},
	} {
		resp, err := c.do(tc.method, "https://gw.acme.example:"+portOf(target)+"/x?fail=1&id="+tc.id, nil, tc.body)
		if err != nil {
			t.Fatal(err)
		}
		data, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if got := fmt.Sprintf("%d %s", resp.StatusCode, data); got != tc.want || resp.ProtoMajor != 3 {
			t.Errorf("%s over %s: got %q, want %q", tc.method, resp.Proto, got, tc.want)
		}
	}
}
