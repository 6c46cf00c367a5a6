package cli_test

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/teapot-lb/teapot-lb/api"
	pb "github.com/teapot-lb/teapot-lb/api/proto/teapotv1"
)

// t0 is the fake cluster's clock; the CLI's clock is set a little later.
var t0 = time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC)

// fakeAdmin is an admin API over a map, with just enough validation to
// answer the way the real server does.
type fakeAdmin struct {
	pb.UnimplementedAdminServer

	mu       sync.Mutex
	objs     map[string]*pb.Object
	rev      uint64
	now      time.Time
	nextAddr int
	applied  []*pb.ApplyRequest
	// hosts, when set, are what the hosts see (Observe, Events).
	hosts []*pb.HostObservation
	// recovered counts Recover calls.
	recovered int
	// olderHost, when set, is the id of a host that answers cluster
	// status as a release before feature levels does (no level).
	olderHost string
	// afterGet, when set, runs (under the lock) after each Get has read
	// its object: another writer's change between a read and a write.
	afterGet func(f *fakeAdmin)
}

func newFake() *fakeAdmin {
	return &fakeAdmin{objs: map[string]*pb.Object{}, now: t0, nextAddr: 1}
}

func key(r *pb.ObjectRef) string { return r.GetKind() + "/" + r.GetTenant() + "/" + r.GetName() }

// put stores o as if created at the fake's clock; tests move the clock
// between puts to give objects different ages.
func (f *fakeAdmin) put(o *pb.Object) {
	f.rev++
	meta := &pb.Meta{Revision: f.rev, Generation: 1, Created: timestamppb.New(f.now), Updated: timestamppb.New(f.now)}
	switch v := api.Unwrap(o).(type) {
	case *pb.Tenant:
		v.Meta = meta
	case *pb.VIPPool:
		v.Meta = meta
	case *pb.LoadBalancer:
		v.Meta = meta
		if v.GetStatus().GetAddress() == "" {
			addr := v.GetVip().GetAddress()
			if addr == "" {
				addr = fmt.Sprintf("192.0.2.%d", f.nextAddr)
				f.nextAddr++
			}
			v.Status = &pb.LoadBalancerStatus{Address: addr, Problems: v.GetStatus().GetProblems()}
		}
	case *pb.Node:
		v.Meta = meta
	case *pb.Certificate:
		v.Meta = meta
	}
	f.objs[key(api.RefOf(o))] = o
}

func spec(o *pb.Object) *pb.Object {
	c := proto.Clone(o).(*pb.Object)
	switch v := api.Unwrap(c).(type) {
	case *pb.Tenant:
		v.Meta = nil
	case *pb.VIPPool:
		v.Meta = nil
	case *pb.LoadBalancer:
		v.Meta, v.Status = nil, nil
	}
	return c
}

func (f *fakeAdmin) Apply(_ context.Context, req *pb.ApplyRequest) (*pb.ApplyResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.applied = append(f.applied, proto.Clone(req).(*pb.ApplyRequest))
	for _, pc := range req.GetPreconditions() {
		cur, ok := f.objs[key(pc.GetRef())]
		if rev := api.MetaOf(cur).GetRevision(); !ok || rev != pc.GetRevision() {
			return nil, status.Errorf(codes.Aborted, "%s %v (revision %d when read, now %d); nothing was written", api.RefString(pc.GetRef()), api.ErrChanged, pc.GetRevision(), rev)
		}
	}
	resp := &pb.ApplyResponse{}
	pending := map[string]*pb.Object{}
	exists := func(r *pb.ObjectRef) bool {
		_, ok := f.objs[key(r)]
		_, ok2 := pending[key(r)]
		return ok || ok2
	}
	for _, o := range req.GetObjects() {
		ref := api.RefOf(o)
		switch v := api.Unwrap(o).(type) {
		case *pb.Tenant:
			for _, p := range v.GetPools() {
				if !exists(&pb.ObjectRef{Kind: api.KindVIPPool, Name: p}) {
					return nil, status.Errorf(codes.FailedPrecondition, "%s: pools: VIPPool %q does not exist", api.RefString(ref), p)
				}
			}
		case *pb.LoadBalancer:
			if !exists(&pb.ObjectRef{Kind: api.KindTenant, Name: v.GetTenant()}) {
				return nil, status.Errorf(codes.FailedPrecondition, "%s: tenant: Tenant %q does not exist", api.RefString(ref), v.GetTenant())
			}
			for i, l := range v.GetListeners() {
				if l.GetPort() == 0 || l.GetPort() > 65535 {
					return nil, status.Errorf(codes.InvalidArgument, "%s: listeners[%d].port: must be from 1 to 65535, got %d", api.RefString(ref), i, l.GetPort())
				}
			}
		case *pb.VIPPool:
			if len(v.GetCidrs()) == 0 {
				return nil, status.Errorf(codes.InvalidArgument, "%s: cidrs: at least one CIDR or range is needed", api.RefString(ref))
			}
		}
		old, found := f.objs[key(ref)]
		switch {
		case found && req.GetMode() == pb.ApplyMode_APPLY_MODE_CREATE:
			return nil, status.Errorf(codes.AlreadyExists, "%s already exists", api.RefString(ref))
		case !found && req.GetMode() == pb.ApplyMode_APPLY_MODE_UPDATE:
			return nil, status.Errorf(codes.NotFound, "%s not found", api.RefString(ref))
		}
		result := "created"
		if found {
			result = "configured"
			if proto.Equal(spec(old), spec(o)) {
				result = "unchanged"
			}
		}
		pending[key(ref)] = o
		resp.Results = append(resp.Results, result)
	}
	for i, o := range req.GetObjects() {
		o = spec(o)
		if resp.Results[i] != "unchanged" {
			f.put(o)
		}
		resp.Objects = append(resp.Objects, f.objs[key(api.RefOf(o))])
	}
	resp.Revision = f.rev
	return resp, nil
}

func (f *fakeAdmin) Get(_ context.Context, req *pb.GetRequest) (*pb.Object, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if o, ok := f.objs[key(req.GetRef())]; ok {
		if f.afterGet != nil {
			f.afterGet(f)
		}
		return o, nil
	}
	return nil, status.Errorf(codes.NotFound, "%s not found", api.RefString(req.GetRef()))
}

func (f *fakeAdmin) List(_ context.Context, req *pb.ListRequest) (*pb.ListResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	resp := &pb.ListResponse{Revision: f.rev}
	keys := make([]string, 0, len(f.objs))
	for k := range f.objs {
		keys = append(keys, k)
	}
	// Answer in an order the CLI must not rely on.
	sort.Sort(sort.Reverse(sort.StringSlice(keys)))
	for _, k := range keys {
		ref := api.RefOf(f.objs[k])
		if ref.GetKind() == req.GetKind() && (req.GetTenant() == "" || req.GetTenant() == ref.GetTenant()) {
			resp.Objects = append(resp.Objects, f.objs[k])
		}
	}
	return resp, nil
}

func (f *fakeAdmin) Delete(_ context.Context, req *pb.DeleteRequest) (*pb.DeleteResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	ref := req.GetRef()
	if _, ok := f.objs[key(ref)]; !ok {
		return nil, status.Errorf(codes.NotFound, "%s not found", api.RefString(ref))
	}
	if ref.GetKind() == api.KindTenant {
		var names []string
		for _, o := range f.objs {
			if lb := o.GetLoadBalancer(); lb != nil && lb.GetTenant() == ref.GetName() {
				names = append(names, lb.GetName())
			}
		}
		if len(names) > 0 {
			sort.Strings(names)
			return nil, status.Errorf(codes.FailedPrecondition, "%s still has load balancers (%s): delete them first", api.RefString(ref), strings.Join(names, ", "))
		}
	}
	delete(f.objs, key(ref))
	f.rev++
	return &pb.DeleteResponse{Revision: f.rev}, nil
}

func (f *fakeAdmin) ClusterStatus(context.Context, *pb.ClusterStatusRequest) (*pb.ClusterStatusResponse, error) {
	st := f.status()
	for _, n := range st.Nodes {
		if n.Id == f.olderHost {
			n.FeatureLevel, n.Version = 0, "0.9.0"
			st.FeatureLevel = 1
		}
	}
	return st, nil
}

func (f *fakeAdmin) status() *pb.ClusterStatusResponse {
	return &pb.ClusterStatusResponse{
		ClusterId: "c-7f3a", LeaderId: "lb1", Term: 4, CommitIndex: 1207, Revision: 311,
		HeartbeatTimeout: "500ms", ElectionTimeout: "1s", FeatureLevel: 2,
		Problems: []string{"tenant globex: network 10.30.0.0/16 overlaps 10.30.8.0/24 of tenant hooli; narrow one of them (writes of new overlaps are refused)"},
		Nodes: []*pb.NodeStatus{
			{Id: "lb1", RaftAddr: "10.0.0.1:7946", ApiAddr: "10.0.0.1:7443", Suffrage: "voter", State: "leader", Healthy: true, AppliedIndex: 1207, Term: 4, LastContact: "0s", Version: "1.0.0", FeatureLevel: 2, DataPath: "io_uring",
				HeartbeatInterval: "20ms", HeartbeatMisses: 5,
				Vips: []*pb.VIPHolding{
					{Address: "192.0.2.2", Mode: "arp", State: "holding", Since: timestamppb.New(f.now.Add(-3 * time.Minute)), Reason: "holder lb3 unreachable", LoadBalancers: []string{"acme/shop", "acme/api"}},
				}},
			{Id: "lb2", RaftAddr: "10.0.0.2:7946", ApiAddr: "10.0.0.2:7443", Suffrage: "voter", State: "follower", Healthy: true, AppliedIndex: 1207, Term: 4, LastContact: "41ms", Version: "1.0.0", FeatureLevel: 2, DataPath: "epoll",
				HeartbeatInterval: "20ms", HeartbeatMisses: 5,
				Vips: []*pb.VIPHolding{
					{Address: "192.0.2.1", Mode: "arp", State: "holding", Since: timestamppb.New(f.now.Add(-2 * time.Hour)), Reason: "ranked first among live hosts", LoadBalancers: []string{"globex/web"}},
				}},
			{Id: "lb3", RaftAddr: "10.0.0.3:7946", ApiAddr: "10.0.0.3:7443", Suffrage: "voter", State: "unreachable", AppliedIndex: 1150, Term: 3, LastContact: "2m10s", Error: "dial tcp 10.0.0.3:7946: connect: no route to host"},
			{Id: "lb4", RaftAddr: "10.0.0.4:7946", ApiAddr: "10.0.0.4:7443", Suffrage: "nonvoter", State: "follower", Healthy: true, AppliedIndex: 1206, Term: 4, LastContact: "38ms", Draining: true, Version: "1.0.0", FeatureLevel: 2},
		},
	}
}

func (f *fakeAdmin) CreateJoinToken(_ context.Context, req *pb.CreateJoinTokenRequest) (*pb.CreateJoinTokenResponse, error) {
	ttl := req.GetTtlSeconds()
	if ttl == 0 {
		ttl = 3600
	}
	return &pb.CreateJoinTokenResponse{
		Token:   "teapot1." + strings.Repeat("ab", 32) + ".k3x9q.mzxw6ytboi4dcmrtgq3tmnzy",
		Expires: timestamppb.New(f.now.Add(time.Duration(ttl) * time.Second)),
		Servers: []string{"10.0.0.1:7443", "10.0.0.2:7443"},
	}, nil
}

func (f *fakeAdmin) RemoveNode(_ context.Context, req *pb.RemoveNodeRequest) (*pb.RemoveNodeResponse, error) {
	switch req.GetId() {
	case "lb3", "lb4":
		return &pb.RemoveNodeResponse{}, nil
	case "lb1":
		return nil, status.Error(codes.FailedPrecondition, "node lb1 is the leader: transfer leadership first")
	}
	return nil, status.Errorf(codes.NotFound, "Node %s not found", req.GetId())
}

func (f *fakeAdmin) Recover(context.Context, *pb.RecoverRequest) (*pb.RecoverResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.recovered++
	return &pb.RecoverResponse{Forgotten: []string{"lb2", "lb3"}, Revision: f.rev}, nil
}
