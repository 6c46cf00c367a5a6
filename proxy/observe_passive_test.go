package proxy

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/teapot-lb/teapot-lb/api/observe"
	pb "github.com/teapot-lb/teapot-lb/api/proto/teapotv1"
	"github.com/teapot-lb/teapot-lb/proxy/l7"
)

// assessHere is the observed status of lb as this host alone sees it.
func assessHere(p *Proxy, lb *pb.LoadBalancer) *pb.ObservedStatus {
	h := &pb.HostObservation{NodeId: "n1", Reachable: true}
	p.Observe(observe.Filter{LB: lb.Tenant + "/" + lb.Name}, h)
	return observe.Assess(lb, []*pb.HostObservation{h})
}

// planeLog follows a proxy's observed state from the start: the latest
// state of each load balancer, and how often a revision after the first
// named each.
type planeLog struct {
	mu    sync.Mutex
	state map[string]observe.LBState
	named map[string]int
}

func watchPlane(t *testing.T, p *Proxy) *planeLog {
	l := &planeLog{state: map[string]observe.LBState{}, named: map[string]int{}}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	t.Cleanup(func() { cancel(); <-done })
	w := p.Observed().Watch(0)
	go func() {
		defer close(done)
		for {
			ch, err := w.Next(ctx)
			if err != nil {
				return
			}
			l.mu.Lock()
			if ch.Reset {
				clear(l.state)
			}
			for lb, s := range ch.LBs {
				l.state[lb] = s
				if !ch.Reset {
					l.named[lb]++
				}
			}
			for _, lb := range ch.Gone {
				delete(l.state, lb)
				l.named[lb]++
			}
			l.mu.Unlock()
		}
	}()
	return l
}

// ready returns lb's readiness as the reader last saw it, and whether it
// saw lb at all.
func (l *planeLog) ready(lb string) (string, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	s, ok := l.state[lb]
	return s.Ready, ok
}

// times returns how many revisions after the first named lb.
func (l *planeLog) times(lb string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.named[lb]
}

// A load balancer without health checks whose member answers 502 to
// everything turns Failing with the evidence from what its clients got,
// its readiness says no member is healthy (with an event), and it is
// Serving again once the member's answers are good.
func TestPassiveHealth502IsFailing(t *testing.T) {
	var status atomic.Int32
	status.Store(502)
	be := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(int(status.Load()))
	})}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go be.Serve(ln)
	t.Cleanup(func() { be.Close() })

	srv := l7.New(l7.Config{})
	t.Cleanup(func() { srv.Close() })
	var events eventLog
	p, _ := newProxy(t, Config{HTTP: NewHTTP(srv, nil), Events: events.add})
	plane := watchPlane(t, p)
	port := freePort(t)
	lb := l4LB("web", "127.0.0.2", port, "http", ln.Addr().String())
	lb.Listeners[0].Pool = ""
	lb.Routes = []*pb.Route{{Path: "/", Pool: "app"}}
	lb.Meta = &pb.Meta{Revision: 1}
	update(t, p, lb)

	client := &http.Client{Timeout: 5 * time.Second}
	get := func(n int, want int) {
		t.Helper()
		for range n {
			resp, err := client.Get(fmt.Sprintf("http://127.0.0.2:%d/", port))
			if err != nil {
				t.Fatal(err)
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode != want {
				t.Fatalf("status %d, want %d", resp.StatusCode, want)
			}
		}
	}
	if st := assessHere(p, lb); st.Phase != observe.Serving {
		t.Fatalf("before any traffic: %s %q", st.Phase, st.Reason)
	}
	get(observe.PassiveMinimum-1, 502)
	if st := assessHere(p, lb); st.Phase != observe.Serving {
		t.Fatalf("below the minimum: %s %q", st.Phase, st.Reason)
	}
	get(11, 502)
	// A request is counted once its exchange ends, which may be just
	// after the client read the answer: wait for the last one.
	want := fmt.Sprintf("502 from %s on 30 of 30 requests in the last 60 s", ln.Addr())
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		st := assessHere(p, lb)
		if st.Phase == observe.Failing && strings.Contains(st.Reason, want) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("every answer 502: %s %q, want Failing with %q", st.Phase, st.Reason, want)
		}
	}
	// The data plane's own verdict: readiness and an event.
	deadline := time.Now().Add(3*PassiveTick + 5*time.Second)
	for r, _ := plane.ready("acme/web"); r != observe.NoHealthyMember || p.Readiness()["acme/web"] != observe.NoHealthyMember || !events.has(observe.EventMemberDown, "acme/web"); r, _ = plane.ready("acme/web") {
		if time.Now().After(deadline) {
			t.Fatalf("readiness %q, observed %q, events %d down", p.Readiness()["acme/web"], r, events.count(observe.EventMemberDown))
		}
		time.Sleep(20 * time.Millisecond)
	}

	status.Store(200)
	get(100, 200)
	if st := assessHere(p, lb); st.Phase != observe.Serving {
		t.Fatalf("after the member recovered: %s %q (problems %q)", st.Phase, st.Reason, st.Problems)
	}
	deadline = time.Now().Add(3*PassiveTick + 5*time.Second)
	for r, _ := plane.ready("acme/web"); r != observe.Recovering || !events.has(observe.EventMemberUp, "acme/web"); r, _ = plane.ready("acme/web") {
		if time.Now().After(deadline) {
			t.Fatalf("readiness after recovery %q, observed %q", p.Readiness()["acme/web"], r)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// L4: connects that fail, and a member that resets the connections it
// accepts, make a tcp load balancer Failing with the evidence.
func TestPassiveHealthL4(t *testing.T) {
	t.Run("connect failures", func(t *testing.T) {
		dead := deadAddr(t)
		p, _ := newProxy(t, Config{})
		port := freePort(t)
		lb := l4LB("web", "127.0.0.2", port, "tcp", dead)
		lb.Meta = &pb.Meta{Revision: 1}
		update(t, p, lb)
		for range observe.PassiveMinimum {
			expectRefused(t, vipAddr("127.0.0.2", port))
		}
		want := "connect failures to " + dead + " on "
		if st := assessHere(p, lb); st.Phase != observe.Failing || !strings.Contains(st.Reason, want) || !strings.Contains(st.Reason, "connections in the last 60 s") {
			t.Fatalf("%s %q, want Failing with %q", st.Phase, st.Reason, want)
		}
	})
	t.Run("resets", func(t *testing.T) {
		be := startBackend(t, "127.0.0.1", func(c net.Conn) {
			c.Read(make([]byte, 1))
			c.(*net.TCPConn).SetLinger(0)
			c.Close()
		})
		p, _ := newProxy(t, Config{})
		port := freePort(t)
		lb := l4LB("web", "127.0.0.2", port, "tcp", be.addr)
		lb.Meta = &pb.Meta{Revision: 1}
		update(t, p, lb)
		for range observe.PassiveMinimum {
			c, err := net.Dial("tcp", vipAddr("127.0.0.2", port))
			if err != nil {
				t.Fatal(err)
			}
			c.SetDeadline(time.Now().Add(5 * time.Second))
			c.Write([]byte("x"))
			if _, err := c.Read(make([]byte, 1)); err == nil {
				t.Fatal("the member's reset reached the client as data")
			}
			c.Close()
		}
		want := fmt.Sprintf("resets from %s on 20 of 20 connections in the last 60 s", be.addr)
		eventually(t, "the resets counted", func() bool {
			st := assessHere(p, lb)
			return st.Phase == observe.Failing && strings.Contains(st.Reason, want)
		})
	})
	t.Run("a client that resets is not the member's failure", func(t *testing.T) {
		be := startBackend(t, "127.0.0.1", echo)
		p, _ := newProxy(t, Config{})
		port := freePort(t)
		lb := l4LB("web", "127.0.0.2", port, "tcp", be.addr)
		lb.Meta = &pb.Meta{Revision: 1}
		update(t, p, lb)
		for range observe.PassiveMinimum {
			c, err := net.Dial("tcp", vipAddr("127.0.0.2", port))
			if err != nil {
				t.Fatal(err)
			}
			if err := roundTrip(c, []byte("hello")); err != nil {
				t.Fatal(err)
			}
			c.(*net.TCPConn).SetLinger(0)
			c.Close()
		}
		time.Sleep(100 * time.Millisecond) // the proxy sees the clients' resets
		if st := assessHere(p, lb); st.Phase != observe.Serving {
			t.Fatalf("clients that reset: %s %q", st.Phase, st.Reason)
		}
	})
}
