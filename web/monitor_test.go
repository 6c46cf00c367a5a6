package web

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	pb "github.com/teapot-lb/teapot-lb/api/proto/teapotv1"
)

// login opens a session on s and returns a GET on its routes.
func login(t *testing.T, s *Server) func(path string) (int, []byte) {
	t.Helper()
	ts := httptest.NewServer(s.Handler())
	t.Cleanup(ts.Close)
	c := &http.Client{Timeout: 5 * time.Second, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	r, err := c.Get(ts.URL + "/login?token=" + s.LoginToken())
	if err != nil {
		t.Fatal(err)
	}
	cookies := r.Cookies()
	return func(path string) (int, []byte) {
		t.Helper()
		req, _ := http.NewRequest("GET", ts.URL+path, nil)
		for _, ck := range cookies {
			req.AddCookie(ck)
		}
		resp, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var b strings.Builder
		buf := make([]byte, 32<<10)
		for {
			n, err := resp.Body.Read(buf)
			b.Write(buf[:n])
			if err != nil {
				break
			}
		}
		return resp.StatusCode, []byte(b.String())
	}
}

func hp(sec int64, rps, errShare, p99 float64) *pb.HistoryPoint {
	return &pb.HistoryPoint{Time: timestamppb.New(time.Unix(sec, 0)), RequestsPerSecond: rps, ErrorShare: errShare, P99Seconds: p99,
		ConnectionsPerSecond: rps / 2, BytesInPerSecond: 100, BytesOutPerSecond: 1000, ActiveConnections: 3, Cpu: 0.5, MemoryBytes: 1 << 20}
}

// A page opened after an incident shows what led up to it: the hosts'
// history rings, a load balancer's series summed over its hosts point by
// point (error shares weighted by requests, the highest p99), each
// host's own series, and the hosts whose history is missing, and why.
func TestHistoryEndpoint(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	ring := func(id string, lb []*pb.HistoryPoint) *pb.HostObservation {
		h := hostObs(id, "")
		h.History = []*pb.HistorySeries{{IntervalSeconds: 10, Points: []*pb.HistoryPoint{hp(1000, 5, 0, 0.01)}}, {LoadBalancer: "acme/shop", IntervalSeconds: 10, Points: lb}}
		return h
	}
	older := hostObs("n3", "")
	c := &cluster{
		status: &pb.ClusterStatusResponse{LeaderId: "n1", Nodes: []*pb.NodeStatus{node("n1", "leader", true), node("n2", "follower", true), node("n3", "follower", true), node("n4", "follower", false)}},
		obs: &pb.ObserveResponse{Hosts: []*pb.HostObservation{
			ring("n1", []*pb.HistoryPoint{hp(990, 100, 0.5, 0.2), hp(1000, 30, 0, 0.1)}),
			ring("n2", []*pb.HistoryPoint{hp(1000, 10, 1, 0.3)}),
			older, unreachable("n4"),
		}},
		objs: map[string][]*pb.Object{"LoadBalancer": {shop()}},
	}
	s, err := New(Config{Source: c, Now: func() time.Time { return now }})
	if err != nil {
		t.Fatal(err)
	}
	s.refresh(context.Background())
	get := login(t, s)
	code, body := get("/api/history?lb=acme/shop")
	if code != http.StatusOK {
		t.Fatalf("GET /api/history: %d %s", code, body)
	}
	var h History
	if err := json.Unmarshal(body, &h); err != nil {
		t.Fatal(err)
	}
	if len(h.LB) != 2 || h.IntervalSeconds != 10 {
		t.Fatalf("lb series %+v", h.LB)
	}
	if p := h.LB[0]; p.RPS != 100 || p.Errors != 0.5 || p.Hosts != 1 || p.CPU != 0 {
		t.Errorf("first point %+v: want n1's alone, no CPU (a host's)", p)
	}
	if p := h.LB[1]; p.RPS != 40 || !near(p.Errors, 10.0/40) || p.P99 != 0.3 || p.Hosts != 2 || p.CPS != 20 || p.BytesOut != 2000 || p.Active != 6 {
		t.Errorf("summed point %+v: want 40 req/s, 25%% errors, p99 0.3, 2 hosts, 20 conn/s, 2000 B/s out, 6 active", p)
	}
	if len(h.Hosts) != 2 || h.Hosts["n1"][0].CPU != 0.5 || h.Hosts["n2"][0].Memory != 1<<20 {
		t.Errorf("host series %+v", h.Hosts)
	}
	if got := strings.Join(h.Missing, "; "); !strings.Contains(got, "n3: keeps no history") || !strings.Contains(got, "n4: did not answer (deadline exceeded)") {
		t.Errorf("missing: %s", got)
	}
	if code, _ := get("/api/history?lb=" + strings.Repeat("x", 400)); code != http.StatusBadRequest {
		t.Errorf("an overlong lb: %d, want 400", code)
	}
	c.set(func() { c.down = errors.New("connection refused") })
	if code, body := get("/api/history?lb=acme/other"); code != http.StatusBadGateway || !strings.Contains(string(body), "connection refused") {
		t.Errorf("no host answers: %d %s", code, body)
	}
}

// The stored object as `get -o yaml` prints it, without a health
// check's client key, with when it was read; an unknown one is 404.
func TestObjectYAML(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	o := shop()
	o.GetLoadBalancer().Pools["web"].HealthCheck = &pb.HealthCheck{Https: &pb.HTTPSCheck{ClientCertPem: "CERT", ClientKeyPem: "SECRET-KEY"}}
	c := &cluster{status: &pb.ClusterStatusResponse{LeaderId: "n1", Nodes: []*pb.NodeStatus{node("n1", "leader", true)}},
		obs: &pb.ObserveResponse{Hosts: []*pb.HostObservation{hostObs("n1", "")}}, objs: map[string][]*pb.Object{"LoadBalancer": {o}}}
	s, err := New(Config{Source: c, Now: func() time.Time { return now }})
	if err != nil {
		t.Fatal(err)
	}
	get := login(t, s)
	if code, _ := get("/api/object?kind=LoadBalancer&name=acme/shop"); code != http.StatusServiceUnavailable {
		t.Errorf("before the first read: %d, want 503", code)
	}
	s.refresh(context.Background())
	code, body := get("/api/object?kind=LoadBalancer&name=acme/shop")
	var v ObjectView
	if err := json.Unmarshal(body, &v); code != http.StatusOK || err != nil {
		t.Fatalf("GET /api/object: %d %s", code, body)
	}
	if !strings.HasPrefix(v.YAML, "kind: LoadBalancer\nname: shop\ntenant: acme\n") || !strings.Contains(v.YAML, "192.0.2.50:8080") ||
		strings.Contains(v.YAML, "SECRET") || !strings.Contains(v.YAML, "CERT") || !v.ReadAt.Equal(now) {
		t.Errorf("object view %+v", v)
	}
	if code, _ := get("/api/object?kind=LoadBalancer&name=acme/nope"); code != http.StatusNotFound {
		t.Errorf("unknown object: %d, want 404", code)
	}
}

// Each member's traffic of the host's last interval is on the load
// balancer's page, per host, with when it was measured; a host's own
// report (resources, tenants' use) stays, marked unreachable, when the
// host stops answering.
func TestMemberTrafficAndHostInfo(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	h := hostObs("n1", "")
	h.Traffic = []*pb.TrafficObservation{{LoadBalancer: "acme/shop", MembersOmitted: 3, Members: []*pb.MemberTraffic{
		{Pool: "web", Address: "192.0.2.51:8080", RequestsPerSecond: 42, ErrorShare: 0.5, P99Seconds: 0.15, Time: timestamppb.New(now.Add(-4 * time.Second)), IntervalSeconds: 10}}}}
	h.Resources = &pb.HostResources{Time: timestamppb.New(now), Cpu: 0.3, Cpus: 2, MemoryBytes: 50 << 20, OpenDescriptors: 40, DescriptorLimit: 1024,
		Connections: 5, MaxConnections: 500, Descriptors: 10, MaxDescriptors: 1000}
	h.TenantUsage = []*pb.TenantUsage{{Tenant: "acme", Connections: 5, Descriptors: 10, MaxDescriptors: 100,
		Cpu: &pb.TenantCPUObservation{Millicores: 500, UsedSeconds: 2, WindowSeconds: 10, Time: timestamppb.New(now.Add(-3 * time.Second)), ThrottledSeconds: 1.5, Throttles: 3, InDebt: true}}}
	c := &cluster{status: &pb.ClusterStatusResponse{LeaderId: "n1", Nodes: []*pb.NodeStatus{node("n1", "leader", true), node("n2", "follower", true)}},
		obs: &pb.ObserveResponse{Hosts: []*pb.HostObservation{h, hostObs("n2", "")}}, objs: map[string][]*pb.Object{"LoadBalancer": {shop()}}}
	s, err := New(Config{Source: c, Now: func() time.Time { return now }})
	if err != nil {
		t.Fatal(err)
	}
	s.refresh(context.Background())
	v := s.current(0, time.Time{}).Snapshot
	n1 := v.LBs[0].Hosts[0]
	if m := n1.Members[1]; m.Traffic == nil || m.Traffic.RPS != 42 || m.Traffic.Errors != 0.5 || !m.Traffic.At.Equal(now.Add(-4*time.Second)) || n1.MembersOmitted != 3 {
		t.Errorf("n1's members %+v (omitted %d)", n1.Members, n1.MembersOmitted)
	}
	if m := n1.Members[0]; m.Traffic != nil {
		t.Errorf("a member the host did not report has traffic %+v", m.Traffic)
	}
	if len(v.Hosts) != 2 || v.Hosts[0].Resources.MaxConns != 500 || v.Hosts[0].Tenants[0].MaxFDs != 100 || v.Hosts[0].Tenants[0].LoadBalancers != 1 ||
		v.Hosts[0].Tenants[0].ListenersBound != 1 {
		t.Errorf("hosts %+v", v.Hosts)
	}
	if c := v.Hosts[0].Tenants[0].CPU; c == nil || c.Cores != 0.5 || c.Used != 0.2 || c.Window != 10 || !c.At.Equal(now.Add(-3*time.Second)) ||
		c.Throttles != 3 || c.Throttled != 1.5 || !c.InDebt {
		t.Errorf("acme's CPU budget on n1 %+v: want 0.5 cores, 0.2 used over 10 s 3 s ago, 3 throttles, in debt", c)
	}
	// n1 stops answering: its report stays, unreachable, from then.
	first := now
	now = now.Add(5 * time.Second)
	c.set(func() {
		c.obs = &pb.ObserveResponse{Hosts: []*pb.HostObservation{unreachable("n1"), hostObs("n2", "")}}
	})
	s.refresh(context.Background())
	v = s.current(0, time.Time{}).Snapshot
	if len(v.Hosts) != 2 || v.Hosts[0].Node != "n1" || v.Hosts[0].Reachable || !v.Hosts[0].Observed.Equal(first) || v.Hosts[0].Resources == nil {
		t.Errorf("after n1 stopped answering: %+v", v.Hosts)
	}
	if m := v.LBs[0].Hosts[0].Members[1]; m.Traffic == nil || !m.Traffic.At.Equal(first.Add(-4*time.Second)) || v.LBs[0].Hosts[0].Reachable {
		t.Errorf("n1's last member traffic must stay with its time, unreachable: %+v", v.LBs[0].Hosts[0])
	}
}
