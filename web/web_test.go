package web

import (
	"bufio"
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/protobuf/types/known/timestamppb"

	pb "github.com/teapot-lb/teapot-lb/api/proto/teapotv1"
)

// cluster is an in-memory admin API: what a real one answers, set by the test.
type cluster struct {
	mu     sync.Mutex
	status *pb.ClusterStatusResponse
	obs    *pb.ObserveResponse
	objs   map[string][]*pb.Object
	// down, when set, is the error every call gets (no server answers).
	down error
}

func (c *cluster) ClusterStatus(context.Context, *pb.ClusterStatusRequest, ...grpc.CallOption) (*pb.ClusterStatusResponse, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.down != nil {
		return nil, c.down
	}
	return c.status, nil
}

func (c *cluster) List(_ context.Context, in *pb.ListRequest, _ ...grpc.CallOption) (*pb.ListResponse, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.down != nil {
		return nil, c.down
	}
	return &pb.ListResponse{Objects: c.objs[in.GetKind()], Revision: 7}, nil
}

func (c *cluster) Observe(context.Context, *pb.ObserveRequest, ...grpc.CallOption) (*pb.ObserveResponse, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.down != nil {
		return nil, c.down
	}
	return c.obs, nil
}

func (c *cluster) set(f func()) {
	c.mu.Lock()
	defer c.mu.Unlock()
	f()
}

func node(id, state string, healthy bool, vips ...*pb.VIPHolding) *pb.NodeStatus {
	return &pb.NodeStatus{Id: id, State: state, Healthy: healthy, Suffrage: "voter", Vips: vips}
}

func holding(addr, state, reason string) *pb.VIPHolding {
	return &pb.VIPHolding{Address: addr, Mode: "arp", State: state, Reason: reason, Since: timestamppb.Now(), LoadBalancers: []string{"acme/shop"}}
}

func shop(problems ...*pb.Problem) *pb.Object {
	return &pb.Object{Kind: &pb.Object_LoadBalancer{LoadBalancer: &pb.LoadBalancer{
		Name: "shop", Tenant: "acme",
		Listeners: []*pb.Listener{{Port: 80, Protocol: "http"}},
		Pools:     map[string]*pb.BackendPool{"web": {Members: []*pb.Member{{Address: "192.0.2.50:8080"}, {Address: "192.0.2.51:8080"}}}},
		Status:    &pb.LoadBalancerStatus{Address: "192.0.2.200", Problems: problems},
	}}}
}

func first[A, B any](a A, _ B) A { return a }

// hostObs is one reachable host serving acme/shop with its listener
// bound, member .50 up and member .51 up or down.
func hostObs(id string, memberDown string) *pb.HostObservation {
	m51 := &pb.MemberObservation{Address: "192.0.2.51:8080", Healthy: memberDown == "", Down: memberDown != "", Reason: memberDown}
	return &pb.HostObservation{
		NodeId: id, Reachable: true, Revision: 100,
		Listeners: []*pb.ListenerObservation{{LoadBalancer: "acme/shop", Address: "192.0.2.200:80", Protocol: "http", Bound: true}},
		Pools: []*pb.PoolObservation{{LoadBalancer: "acme/shop", Pool: "web", Members: []*pb.MemberObservation{
			{Address: "192.0.2.50:8080", Healthy: true}, m51}}},
	}
}

func TestLBView(t *testing.T) {
	vips := map[string]*VIP{"192.0.2.200": {Address: "192.0.2.200", Holders: []VIPHolder{{Node: "n1", State: "holding"}}}}
	v := lbView(shop().GetLoadBalancer(), vips, []*pb.HostObservation{hostObs("n1", ""), hostObs("n2", "connect: connection refused")})
	if v.Status != StatusDegraded || len(v.Reasons) != 1 || !strings.Contains(v.Reasons[0], "n2: pool web member 192.0.2.51:8080 is down: connect: connection refused") {
		t.Errorf("status %s %q, want Degraded naming n2's member", v.Status, v.Reasons)
	}
	if strings.Join(v.HeldBy, ",") != "n1" || len(v.Hosts) != 2 || v.Hosts[1].Node != "n2" || v.Hosts[1].Members[1].Healthy || v.Hosts[1].Members[1].Reason == "" || !v.Hosts[0].Listeners[0].Bound {
		t.Errorf("per host view %+v", v)
	}
	v = lbView(shop().GetLoadBalancer(), vips, []*pb.HostObservation{hostObs("n1", "")})
	if v.Status != StatusServing || len(v.Reasons) != 0 {
		t.Errorf("status %s %q, want Serving", v.Status, v.Reasons)
	}
}

// The detail view's spec never carries a health check's client key.
func TestLBViewSpecLeavesOutClientKeys(t *testing.T) {
	lb := shop().GetLoadBalancer()
	lb.Pools["web"].HealthCheck = &pb.HealthCheck{Https: &pb.HTTPSCheck{InsecureSkipVerify: true,
		ClientCertPem: "-----BEGIN CERTIFICATE-----\nCERT\n-----END CERTIFICATE-----\n",
		ClientKeyPem:  "-----BEGIN PRIVATE KEY-----\nSECRET\n-----END PRIVATE KEY-----\n"}}
	v := lbView(lb, nil, nil)
	if spec := string(v.Spec); strings.Contains(spec, "SECRET") || !strings.Contains(spec, "CERT") {
		t.Errorf("spec %s: want the certificate and not the key", spec)
	}
	if lb.Pools["web"].HealthCheck.Https.ClientKeyPem == "" {
		t.Error("the view removed the key from the stored object")
	}
}

func TestDiffTimeline(t *testing.T) {
	base := func() *pb.ClusterStatusResponse {
		return &pb.ClusterStatusResponse{LeaderId: "n1", Term: 2, Nodes: []*pb.NodeStatus{
			node("n1", "leader", true, holding("192.0.2.200", "holding", "ranks first among the live hosts")),
			node("n2", "follower", true), node("n3", "follower", true),
		}}
	}
	c := &cluster{status: base(), objs: map[string][]*pb.Object{"LoadBalancer": {shop()}},
		obs: &pb.ObserveResponse{Hosts: []*pb.HostObservation{hostObs("n1", ""), hostObs("n2", ""), hostObs("n3", "")}}}
	prev := first(gather(context.Background(), c, time.Now(), nil))
	if len(prev.Errors) > 0 || len(prev.LBs) != 1 || prev.LBs[0].Status != StatusServing || strings.Join(prev.LBs[0].HeldBy, ",") != "n1" {
		t.Fatalf("first snapshot: %+v", prev)
	}
	if ev := diff(nil, prev, map[string][]string{}); len(ev) != 0 {
		t.Errorf("first snapshot made events %v", ev)
	}
	c.set(func() {
		c.status = &pb.ClusterStatusResponse{LeaderId: "n2", Term: 3, Nodes: []*pb.NodeStatus{
			{Id: "n1", State: "unreachable", Error: "connection refused"},
			node("n2", "leader", true, holding("192.0.2.200", "holding", "took over: n1 is unreachable")),
			node("n3", "follower", true),
		}}
		c.objs["LoadBalancer"] = append(c.objs["LoadBalancer"], &pb.Object{Kind: &pb.Object_LoadBalancer{LoadBalancer: &pb.LoadBalancer{Name: "blog", Tenant: "acme"}}})
	})
	cur := first(gather(context.Background(), c, time.Now(), nil))
	var msgs []string
	for _, e := range diff(prev, cur, map[string][]string{"192.0.2.200": {"n1"}}) {
		msgs = append(msgs, e.Kind+": "+e.Message)
	}
	want := []string{
		"leader-change: leader moved n1 → n2 (term 3)",
		"node: n1 unhealthy: connection refused",
		"vip-move: VIP 192.0.2.200 moved n1 → n2 (took over: n1 is unreachable)",
		"lb: load balancer acme/blog created: Pending (no address allocated yet)",
	}
	if strings.Join(msgs, "\n") != strings.Join(want, "\n") {
		t.Errorf("events:\n%s\nwant:\n%s", strings.Join(msgs, "\n"), strings.Join(want, "\n"))
	}
}

func TestLoginAndStream(t *testing.T) {
	c := &cluster{status: &pb.ClusterStatusResponse{LeaderId: "n1", Nodes: []*pb.NodeStatus{node("n1", "leader", true)}}, objs: map[string][]*pb.Object{}}
	s, err := New(Config{Source: c, Interval: 20 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go s.Run(ctx)
	ts := httptest.NewServer(s.Handler())
	defer ts.Close()
	noFollow := &http.Client{Timeout: 5 * time.Second, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	get := func(path string, cookie *http.Cookie, host string) *http.Response {
		t.Helper()
		req, _ := http.NewRequest("GET", ts.URL+path, nil)
		if cookie != nil {
			req.AddCookie(cookie)
		}
		if host != "" {
			req.Host = host
		}
		resp, err := noFollow.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		return resp
	}
	for _, p := range []string{"/", "/api/snapshot", "/api/stream", "/static/app.js"} {
		if r := get(p, nil, ""); r.StatusCode != http.StatusUnauthorized {
			t.Errorf("GET %s without a session: %d, want 401", p, r.StatusCode)
		}
	}
	if r := get("/login?token=wrong", nil, ""); r.StatusCode != http.StatusForbidden {
		t.Errorf("wrong token: %d, want 403", r.StatusCode)
	}
	tok := s.LoginToken()
	r := get("/login?token="+tok, nil, "")
	if r.StatusCode != http.StatusSeeOther || r.Header.Get("Location") != "/" {
		t.Fatalf("login: %d %q", r.StatusCode, r.Header.Get("Location"))
	}
	var session *http.Cookie
	for _, ck := range r.Cookies() {
		if ck.Name == cookieName {
			session = ck
		}
	}
	if session == nil || !session.HttpOnly || session.SameSite != http.SameSiteStrictMode {
		t.Fatalf("session cookie %+v: want HttpOnly, SameSite=Strict", session)
	}
	if r := get("/login?token="+tok, nil, ""); r.StatusCode != http.StatusForbidden {
		t.Errorf("second use of the login token: %d, want 403", r.StatusCode)
	}
	if s.LoginToken() != "" {
		t.Errorf("login token still offered after use")
	}
	if r := get("/", session, "evil.example:80"); r.StatusCode != http.StatusMisdirectedRequest {
		t.Errorf("foreign Host: %d, want 421", r.StatusCode)
	}
	if r := get("/", session, ""); r.StatusCode != http.StatusOK || !strings.Contains(r.Header.Get("Content-Security-Policy"), "default-src 'self'") {
		t.Errorf("page: %d, CSP %q", r.StatusCode, r.Header.Get("Content-Security-Policy"))
	}
	if r := get("/static/app.js", session, ""); r.StatusCode != http.StatusOK {
		t.Errorf("app.js: %d", r.StatusCode)
	}

	// The stream sends a view, then a leader change as it happens.
	resp := get("/api/stream", session, "")
	defer resp.Body.Close()
	if ct := resp.Header.Get("Content-Type"); ct != "text/event-stream" {
		t.Fatalf("stream Content-Type %q", ct)
	}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(nil, 1<<20)
	next := func() view {
		t.Helper()
		for sc.Scan() {
			line, ok := strings.CutPrefix(sc.Text(), "data: ")
			if !ok {
				continue
			}
			var v view
			if err := json.Unmarshal([]byte(line), &v); err != nil {
				t.Fatal(err)
			}
			return v
		}
		t.Fatalf("stream ended: %v", sc.Err())
		return view{}
	}
	if v := next(); v.Snapshot.Cluster.Leader != "n1" {
		t.Fatalf("first view leader %q", v.Snapshot.Cluster.Leader)
	}
	c.set(func() {
		c.status = &pb.ClusterStatusResponse{LeaderId: "n2", Term: 5, Nodes: []*pb.NodeStatus{node("n2", "leader", true)}}
	})
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		v := next()
		for _, e := range v.Events {
			if e.Kind == EventLeader && strings.Contains(e.Message, "n1 → n2") {
				return
			}
		}
	}
	t.Fatal("no leader change streamed within 10s")
}

func TestCheckLoopback(t *testing.T) {
	for addr, ok := range map[string]bool{
		"127.0.0.1:0": true, "[::1]:8080": true, "localhost:9000": true,
		"0.0.0.0:8080": false, ":8080": false, "192.0.2.1:80": false, "nonsense": false,
	} {
		if err := checkLoopback(addr); (err == nil) != ok {
			t.Errorf("checkLoopback(%q) = %v, want ok=%v", addr, err, ok)
		}
	}
}

func TestDiffVIPMoveAcrossAGap(t *testing.T) {
	snap := func(holder string) *Snapshot {
		v := VIP{Address: "192.0.2.201", Holders: []VIPHolder{{Node: "n3", State: "released", Reason: "sees 1 of the cluster's hosts"}}}
		if holder != "" {
			v.Holders = append(v.Holders, VIPHolder{Node: holder, State: "holding", Reason: "took over: n2 is unreachable"})
		}
		return &Snapshot{Cluster: Cluster{Leader: "n1", VIPs: []VIP{v}}}
	}
	last := map[string][]string{}
	var msgs []string
	prev := (*Snapshot)(nil)
	for _, h := range []string{"n2", "", "n1"} {
		cur := snap(h)
		for _, e := range diff(prev, cur, last) {
			msgs = append(msgs, e.Message)
		}
		prev = cur
	}
	want := "VIP 192.0.2.201 no longer held (was n2) (sees 1 of the cluster's hosts)\nVIP 192.0.2.201 moved n2 → n1 (took over: n2 is unreachable)"
	if got := strings.Join(msgs, "\n"); got != want {
		t.Errorf("events:\n%s\nwant:\n%s", got, want)
	}
}

func TestHostEventsOnTheTimelineOnce(t *testing.T) {
	ev := func(seq uint64, typ, msg string) *pb.Event {
		return &pb.Event{Seq: seq, NodeId: "n1", Type: typ, Severity: "warning", LoadBalancer: "acme/shop", Message: msg, Time: timestamppb.Now()}
	}
	c := &cluster{status: &pb.ClusterStatusResponse{LeaderId: "n1", Nodes: []*pb.NodeStatus{node("n1", "leader", true)}}, objs: map[string][]*pb.Object{}}
	c.obs = &pb.ObserveResponse{Hosts: []*pb.HostObservation{{NodeId: "n1", Reachable: true, LastEvent: 2, Events: []*pb.Event{
		ev(1, "member-down", "member 192.0.2.51:8080 of pool web is down"), ev(2, EventLeader, "n1 is the leader"),
	}}}}
	s, err := New(Config{Source: c})
	if err != nil {
		t.Fatal(err)
	}
	s.refresh(context.Background())
	s.refresh(context.Background()) // the same events again: already seen
	c.set(func() {
		c.obs.Hosts[0].Events = append(c.obs.Hosts[0].Events, ev(3, "member-up", "member 192.0.2.51:8080 of pool web is up"))
		c.obs.Hosts[0].LastEvent = 3
	})
	s.refresh(context.Background())
	var got []string
	for _, e := range s.current(0, time.Time{}).Events {
		got = append(got, e.Kind+" "+e.Subject+" "+e.Message)
	}
	want := []string{
		"member-down acme/shop n1: member 192.0.2.51:8080 of pool web is down",
		"member-up acme/shop n1: member 192.0.2.51:8080 of pool web is up",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("timeline:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// The dashboard command logs at Info to the terminal that shows its login
// URL: timeline events are logged at Debug, so they do not scroll the URL
// away (the page shows them).
func TestTimelineEventsDoNotScrollTheLoginURLAway(t *testing.T) {
	var out strings.Builder
	c := &cluster{status: &pb.ClusterStatusResponse{LeaderId: "n1", Nodes: []*pb.NodeStatus{node("n1", "leader", true)}}, objs: map[string][]*pb.Object{}}
	c.obs = &pb.ObserveResponse{Hosts: []*pb.HostObservation{{NodeId: "n1", Reachable: true, LastEvent: 1, Events: []*pb.Event{
		{Seq: 1, NodeId: "n1", Type: "member-down", Severity: "warning", LoadBalancer: "acme/shop", Message: "member 192.0.2.51:8080 of pool web is down", Time: timestamppb.Now()},
	}}}}
	s, err := New(Config{Source: c, Logger: slog.New(slog.NewTextHandler(&out, nil))})
	if err != nil {
		t.Fatal(err)
	}
	s.refresh(context.Background())
	if n := len(s.current(0, time.Time{}).Events); n != 1 {
		t.Fatalf("timeline has %d events, want 1", n)
	}
	if strings.Contains(out.String(), "dashboard event") {
		t.Errorf("an event was logged at Info, under the login URL:\n%s", out.String())
	}
}

// A dual-stack load balancer lists both VIPs, and the hosts holding
// either.
func TestLBViewDualStack(t *testing.T) {
	lb := shop().GetLoadBalancer()
	lb.Vip = &pb.VIPRequest{Families: []string{"ipv4", "ipv6"}}
	lb.Status.Addresses = []string{"192.0.2.200", "2001:db8::200"}
	vips := map[string]*VIP{
		"192.0.2.200":   {Address: "192.0.2.200", Holders: []VIPHolder{{Node: "n1", State: "holding"}}},
		"2001:db8::200": {Address: "2001:db8::200", Holders: []VIPHolder{{Node: "n2", State: "holding"}, {Node: "n1", State: "released"}}},
	}
	v := lbView(lb, vips, []*pb.HostObservation{hostObs("n1", "")})
	if strings.Join(v.Addresses, ",") != "192.0.2.200,2001:db8::200" || v.Address != "192.0.2.200" || strings.Join(v.HeldBy, ",") != "n1,n2" {
		t.Errorf("addresses %v (address %s) held by %v; want both VIPs, held by n1 and n2", v.Addresses, v.Address, v.HeldBy)
	}
}
