package proxy

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	pb "github.com/teapot-lb/teapot-lb/api/proto/teapotv1"
)

// TestHitlessConfigChanges applies hundreds of config changes while long
// TCP streams echo continuously and short connections keep arriving on a
// load balancer that exists throughout: no connect may fail and no stream
// may be reset.
func TestHitlessConfigChanges(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: runs for several seconds")
	}
	const (
		streams     = 50
		changes     = 250
		shortActors = 4
		budget      = 60 * time.Second
	)
	backends := make([]*backend, 3)
	addrs := make([]string, 3)
	for i := range backends {
		backends[i] = startBackend(t, "127.0.0.1", echo)
		addrs[i] = backends[i].addr
	}
	spare := startBackend(t, "127.0.0.1", echo)
	p, _ := newProxy(t, Config{DrainTimeout: 100 * time.Millisecond})
	mainPort := freePort(t)
	otherPorts := []int{freePort(t), freePort(t), freePort(t)}
	main := l4LB("main", "127.0.0.2", mainPort, "tcp", addrs...)
	update(t, p, main)
	target := vipAddr("127.0.0.2", mainPort)

	var (
		stop       atomic.Bool
		failures   atomic.Int64
		roundTrips atomic.Int64
		shortConns atomic.Int64
		firstErr   sync.Once
		errText    atomic.Value
	)
	fail := func(err error) {
		failures.Add(1)
		firstErr.Do(func() { errText.Store(err.Error()) })
	}
	var wg sync.WaitGroup
	ready := make(chan struct{}, streams)
	for i := range streams {
		wg.Go(func() {
			c, err := net.Dial("tcp", target)
			if err != nil {
				fail(fmt.Errorf("stream %d connect: %w", i, err))
				ready <- struct{}{}
				return
			}
			defer c.Close()
			ready <- struct{}{}
			msg := []byte(fmt.Sprintf("stream %d says hello", i))
			for !stop.Load() {
				if err := roundTrip(c, msg); err != nil {
					fail(fmt.Errorf("stream %d: %w", i, err))
					return
				}
				roundTrips.Add(1)
				time.Sleep(2 * time.Millisecond)
			}
		})
	}
	for range streams {
		<-ready
	}
	for i := range shortActors {
		wg.Go(func() {
			for !stop.Load() {
				c, err := net.Dial("tcp", target)
				if err != nil {
					fail(fmt.Errorf("short connection of actor %d: %w", i, err))
					return
				}
				err = roundTrip(c, []byte("short"))
				c.Close()
				if err != nil {
					fail(fmt.Errorf("short connection of actor %d: %w", i, err))
					return
				}
				shortConns.Add(1)
			}
		})
	}

	rng := rand.New(rand.NewPCG(1, 2))
	start := time.Now()
	applied := 0
	for n := 0; n < changes && time.Since(start) < budget; n++ {
		lbs := []*pb.LoadBalancer{withWeights(main, rng)}
		// Up to three other load balancers come and go on other VIPs and
		// ports, with changing members.
		for j, port := range otherPorts {
			if rng.IntN(3) == 0 {
				continue
			}
			members := []string{addrs[rng.IntN(3)]}
			if rng.IntN(2) == 0 {
				members = append(members, spare.addr)
			}
			other := l4LB(fmt.Sprintf("other-%d", j), fmt.Sprintf("127.0.0.%d", 3+rng.IntN(6)), port, "tcp", members...)
			if rng.IntN(4) == 0 {
				other.Listeners = append(other.Listeners, &pb.Listener{Port: uint32(port), Protocol: "udp", Pool: "app"})
			}
			lbs = append(lbs, other)
		}
		if err := p.Update(labObjects(lbs...), uint64(n+2)); err != nil && !errors.Is(err, ErrNoChanges) {
			t.Fatalf("change %d: %v", n, err)
		} else if err == nil {
			applied++
		}
		time.Sleep(time.Duration(rng.IntN(8)) * time.Millisecond)
	}
	// Let traffic run on the last configuration for a moment.
	time.Sleep(50 * time.Millisecond)
	stop.Store(true)
	wg.Wait()
	t.Logf("%d changes applied in %v; %d stream round trips, %d short connections, %d failures",
		applied, time.Since(start).Round(time.Millisecond), roundTrips.Load(), shortConns.Load(), failures.Load())
	if f := failures.Load(); f != 0 {
		t.Fatalf("%d failures; first: %v", f, errText.Load())
	}
	if applied < 200 {
		t.Errorf("only %d changes applied, want at least 200", applied)
	}
	if shortConns.Load() < 100 {
		t.Errorf("only %d short connections ran", shortConns.Load())
	}
}

// withWeights returns lb with random member weights, at least one above 0.
func withWeights(lb *pb.LoadBalancer, rng *rand.Rand) *pb.LoadBalancer {
	lb = clone(lb)
	ms := lb.Pools["app"].Members
	for _, m := range ms {
		w := uint32(rng.IntN(4))
		m.Weight = &w
	}
	w := uint32(1 + rng.IntN(5))
	ms[rng.IntN(len(ms))].Weight = &w
	return lb
}
