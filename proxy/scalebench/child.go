package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"runtime"
	"runtime/pprof"
	"slices"
	"syscall"
	"time"

	pb "github.com/teapot-lb/teapot-lb/api/proto/teapotv1"
	"github.com/teapot-lb/teapot-lb/proxy"
	"github.com/teapot-lb/teapot-lb/proxy/snapshot"
	"google.golang.org/protobuf/proto"
)

// changes is how many one-member changes are timed through ApplyChange.
const changes = 200

// child measures one size and writes its point as JSON to stdout.
func child(args []string) error {
	fs := flag.NewFlagSet("child", flag.ContinueOnError)
	n := fs.Int("lbs", 1000, "number of load balancers")
	memprofile := fs.String("memprofile", "", "write a heap profile after the changes to this file")
	if err := fs.Parse(args); err != nil {
		return err
	}
	pt := point{LBs: *n, Bound: raiseFDLimit(*n+500) == nil}
	port, err := freePort()
	if err != nil {
		return err
	}
	if pt.BaseKiB, err = procStatus("VmRSS"); err != nil {
		return err
	}
	lbs := scaleLBs(*n, port, pt.Bound)
	objs := objects(lbs)
	if pt.ObjectsKiB, err = procStatus("VmRSS"); err != nil {
		return err
	}

	p := proxy.New(proxy.Config{DrainTimeout: time.Millisecond})
	defer p.Close()
	start := time.Now()
	if err := p.Update(objs, 1); err != nil {
		return fmt.Errorf("first update: %w", err)
	}
	pt.First = time.Since(start)
	st := p.Status()
	if len(st) != *n {
		return fmt.Errorf("status of %d load balancers, want %d", len(st), *n)
	}
	for lb, ps := range st {
		// Unbound, each listener says the L7 handler is missing.
		if len(ps) > 0 && pt.Bound {
			return fmt.Errorf("%s: %v", lb, ps)
		}
	}

	// One member of one load balancer, the whole state through Update.
	i := *n / 2
	lbs[i] = proto.Clone(lbs[i]).(*pb.LoadBalancer)
	lbs[i].Pools["app"].Members[0].Address = "127.99.0.1:1"
	objs = objects(lbs)
	start = time.Now()
	if err := p.Update(objs, 2); err != nil {
		return fmt.Errorf("one-LB change: %w", err)
	}
	pt.Change = time.Since(start)

	// One member of a random load balancer, the change alone through
	// ApplyChange, many times.
	rng := rand.New(rand.NewPCG(17, uint64(*n)))
	var lat []time.Duration
	for c := range changes {
		i := rng.IntN(*n)
		lb := proto.Clone(lbs[i]).(*pb.LoadBalancer)
		lb.Pools["app"].Members[rng.IntN(10)].Address = fmt.Sprintf("127.%d.%d.%d:%d", 100+c%50, rng.IntN(256), rng.IntN(256), 1+rng.IntN(60000))
		lbs[i] = lb
		start := time.Now()
		if _, err := p.ApplyChange(snapshot.Change{Put: []*pb.Object{{Kind: &pb.Object_LoadBalancer{LoadBalancer: lb}}}}, uint64(3+c)); err != nil {
			return fmt.Errorf("change %d: %w", c, err)
		}
		lat = append(lat, time.Since(start))
	}
	slices.Sort(lat)
	pt.DeltaP50, pt.DeltaP99 = lat[len(lat)/2], lat[(len(lat)*99+99)/100-1]
	// A revision that changes no load balancer.
	start = time.Now()
	if _, err := p.ApplyChange(snapshot.Change{}, uint64(3+changes)); !errors.Is(err, proxy.ErrNoChanges) {
		return fmt.Errorf("empty change: %v, want ErrNoChanges", err)
	}
	pt.Quiet = time.Since(start)

	if pt.RSSKiB, err = procStatus("VmRSS"); err != nil {
		return err
	}
	if pt.PeakKiB, err = procStatus("VmHWM"); err != nil {
		return err
	}
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	pt.HeapKiB = int64(ms.HeapInuse / 1024)
	if *memprofile != "" {
		f, err := os.Create(*memprofile)
		if err != nil {
			return err
		}
		if err := pprof.WriteHeapProfile(f); err != nil {
			f.Close()
			return err
		}
		if err := f.Close(); err != nil {
			return err
		}
	}
	runtime.KeepAlive(objs)
	return json.NewEncoder(os.Stdout).Encode(pt)
}

// scaleLBs is n load balancers of one listener on port and ten members
// each, on VIPs spread over 127.16.0.0/12: tcp listeners when bound, else
// http listeners, which a proxy without an L7 handler compiles and serves
// in its snapshot without opening.
func scaleLBs(n, port int, bound bool) []*pb.LoadBalancer {
	proto, routes := "tcp", []*pb.Route(nil)
	if !bound {
		proto, routes = "http", []*pb.Route{{Path: "/", Pool: "app"}}
	}
	out := make([]*pb.LoadBalancer, n)
	for i := range n {
		ms := make([]*pb.Member, 10)
		for j := range ms {
			ms[j] = &pb.Member{Address: fmt.Sprintf("127.%d.%d.%d:%d", 32+i/65536, i/256%256, i%256, 30000+j)}
		}
		out[i] = &pb.LoadBalancer{
			Name:      fmt.Sprintf("lb-%d", i),
			Tenant:    "bench",
			Listeners: []*pb.Listener{{Port: uint32(port), Protocol: proto, Pool: "app"}},
			Pools:     map[string]*pb.BackendPool{"app": {Members: ms}},
			Routes:    routes,
			Status:    &pb.LoadBalancerStatus{Address: fmt.Sprintf("127.%d.%d.%d", 16+i/65536, i/256%256, i%256)},
		}
	}
	return out
}

// objects is the full desired state: the tenant, the VIP pool and lbs.
func objects(lbs []*pb.LoadBalancer) []*pb.Object {
	out := []*pb.Object{
		{Kind: &pb.Object_Tenant{Tenant: &pb.Tenant{Name: "bench", Networks: []string{"127.0.0.0/8"}}}},
		{Kind: &pb.Object_VipPool{VipPool: &pb.VIPPool{Name: "lo", Cidrs: []string{"127.0.0.0/8"}, Mode: "static"}}},
	}
	for _, lb := range lbs {
		out = append(out, &pb.Object{Kind: &pb.Object_LoadBalancer{LoadBalancer: lb}})
	}
	return out
}

// raiseFDLimit raises the soft descriptor limit to the hard one and fails
// when need descriptors still do not fit.
func raiseFDLimit(need int) error {
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		return fmt.Errorf("read the file descriptor limit: %w", err)
	}
	if lim.Cur < lim.Max {
		lim.Cur = lim.Max
		if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
			return fmt.Errorf("raise the file descriptor limit: %w", err)
		}
	}
	if lim.Cur < uint64(need) {
		return fmt.Errorf("needs %d file descriptors and the hard limit is %d: raise it (ulimit -Hn) or pass smaller -sizes", need, lim.Cur)
	}
	return nil
}

// freePort is a TCP port free on 127.0.0.1 now; the VIPs of 127.16.0.0/12
// are assumed to have it free too.
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}
