package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"net"
	"os"
	"runtime"
	"syscall"
	"time"

	pb "github.com/teapot-lb/teapot-lb/api/proto/teapotv1"
	"github.com/teapot-lb/teapot-lb/proxy"
	"google.golang.org/protobuf/proto"
)

// child measures one size and writes its point as JSON to stdout.
func child(args []string) error {
	fs := flag.NewFlagSet("child", flag.ContinueOnError)
	n := fs.Int("lbs", 1000, "number of load balancers")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if err := raiseFDLimit(*n + 500); err != nil {
		return err
	}
	port, err := freePort()
	if err != nil {
		return err
	}
	pt := point{LBs: *n}
	if pt.BaseKiB, err = procStatus("VmRSS"); err != nil {
		return err
	}
	lbs := scaleLBs(*n, port)
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
		if len(ps) > 0 {
			return fmt.Errorf("%s: %v", lb, ps)
		}
	}

	i := *n / 2
	lbs[i] = proto.Clone(lbs[i]).(*pb.LoadBalancer)
	lbs[i].Pools["app"].Members[0].Address = "127.99.0.1:1"
	objs = objects(lbs)
	start = time.Now()
	if err := p.Update(objs, 2); err != nil {
		return fmt.Errorf("one-LB change: %w", err)
	}
	pt.Change = time.Since(start)

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
	runtime.KeepAlive(objs)
	return json.NewEncoder(os.Stdout).Encode(pt)
}

// scaleLBs is n load balancers with one tcp listener on port and ten
// members each, on VIPs spread over 127.16.0.0/12.
func scaleLBs(n, port int) []*pb.LoadBalancer {
	out := make([]*pb.LoadBalancer, n)
	for i := range n {
		ms := make([]*pb.Member, 10)
		for j := range ms {
			ms[j] = &pb.Member{Address: fmt.Sprintf("127.%d.%d.%d:%d", 32+i/65536, i/256%256, i%256, 30000+j)}
		}
		out[i] = &pb.LoadBalancer{
			Name:      fmt.Sprintf("lb-%d", i),
			Tenant:    "bench",
			Listeners: []*pb.Listener{{Port: uint32(port), Protocol: "tcp", Pool: "app"}},
			Pools:     map[string]*pb.BackendPool{"app": {Members: ms}},
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
