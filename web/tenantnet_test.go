package web

import (
	"context"
	"encoding/json"
	"fmt"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode/utf8"

	"google.golang.org/grpc"
	"google.golang.org/protobuf/types/known/timestamppb"

	pb "github.com/teapot-lb/teapot-lb/api/proto/teapotv1"
)

// hostile is a name a tenant chose to attack the page with.
const hostile = `<img src=x onerror="alert(1)">.acme.example.`

// netCluster answers an Observe that selects a tenant with dns (what the
// hosts' DNS answers for its names), as the hosts do, and every other
// with the cluster's observation.
type netCluster struct {
	*cluster
	mu    sync.Mutex
	dns   *pb.ObserveResponse
	asked int
}

func (c *netCluster) Observe(ctx context.Context, in *pb.ObserveRequest, opts ...grpc.CallOption) (*pb.ObserveResponse, error) {
	if in.GetTenant() == "" {
		return c.cluster.Observe(ctx, in, opts...)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.asked++
	return c.dns, nil
}

func (c *netCluster) setDNS(o *pb.ObserveResponse) { c.mu.Lock(); c.dns = o; c.mu.Unlock() }

func acmeTenant() *pb.Object {
	return &pb.Object{Kind: &pb.Object_Tenant{Tenant: &pb.Tenant{Name: "acme", Domains: []string{"acme.example"}}}}
}

// dnsNames is host id's DNS for n names of acme/shop: 192.0.2.200
// answered, 192.0.2.201 left out for its members.
func dnsNames(id string, n int) *pb.HostObservation {
	h := &pb.HostObservation{NodeId: id, Reachable: true}
	for i := range n {
		name := fmt.Sprintf("n%04d.acme.example.", i)
		if i == 0 {
			name = hostile
		}
		h.DnsNames = append(h.DnsNames,
			&pb.DNSNameObservation{LoadBalancer: "acme/shop", Name: name, Address: "192.0.2.200", Answered: true},
			&pb.DNSNameObservation{LoadBalancer: "acme/shop", Name: name, Address: "192.0.2.201", Reason: "no member of acme/shop is up (" + strings.Repeat("x", 5000) + ")"})
	}
	return h
}

func newNetServer(t *testing.T, c *netCluster, now *time.Time) (*Server, func(path string) (int, []byte)) {
	t.Helper()
	s, err := New(Config{Source: c, Now: func() time.Time { return *now }})
	if err != nil {
		t.Fatal(err)
	}
	s.refresh(context.Background())
	return s, login(t, s)
}

// TestDNSPages: /api/dns asks the hosts about the tenant's names (once
// per refresh interval), joins them per name and address with what each
// host does, pages through 1,000 names (2,000 rows) at most 500 rows a
// time, bounds what a tenant wrote and keeps it data for the page to
// escape; a host that stops answering keeps its last answers, marked
// stale with their age, never fresh.
func TestDNSPages(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	c := &netCluster{cluster: &cluster{
		status: &pb.ClusterStatusResponse{LeaderId: "n1", Nodes: []*pb.NodeStatus{node("n1", "leader", true), node("n2", "follower", true)}},
		obs:    &pb.ObserveResponse{Hosts: []*pb.HostObservation{{NodeId: "n1", Reachable: true}, {NodeId: "n2", Reachable: true}}},
		objs:   map[string][]*pb.Object{"LoadBalancer": {shop()}, "Tenant": {acmeTenant()}},
	}}
	c.setDNS(&pb.ObserveResponse{Hosts: []*pb.HostObservation{dnsNames("n1", 1000), dnsNames("n2", 1000)}})
	_, get := newNetServer(t, c, &now)
	page := func(q string) DNSPage {
		t.Helper()
		code, body := get("/api/dns?" + q)
		if code != 200 {
			t.Fatalf("GET /api/dns?%s: %d %s", q, code, body)
		}
		var p DNSPage
		if err := json.Unmarshal(body, &p); err != nil {
			t.Fatal(err)
		}
		return p
	}
	p := page("tenant=acme")
	if p.Total != 2000 || p.Matching != 2000 || len(p.Rows) != netPageDefault || len(p.Hosts) != 2 || !p.Time.Equal(now) {
		t.Fatalf("first page: total %d, matching %d, %d rows, hosts %+v, time %v", p.Total, p.Matching, len(p.Rows), p.Hosts, p.Time)
	}
	for _, h := range p.Hosts {
		if !h.Reachable || !h.Observed.Equal(now) || h.Names != 2000 {
			t.Errorf("host %+v: want answered now with 2000 rows", h)
		}
	}
	r := p.Rows[0]
	if r.Name != hostile || r.Address != "192.0.2.200" || !r.On["n1"].Answered || !r.On["n2"].Answered || r.On["n1"].Stale {
		t.Errorf("first row %+v: want the hostile name answered with 192.0.2.200 on both hosts", r)
	}
	left := p.Rows[1].On["n1"]
	if left.Answered || len(left.Reason) > textMax+30 || !strings.HasPrefix(left.Reason, "no member of acme/shop is up") || !strings.Contains(left.Reason, "bytes)") {
		t.Errorf("left out: %d bytes %.80q: want the reason cut at %d bytes and marked", len(left.Reason), left.Reason, textMax)
	}
	// The name is data: JSON escapes the markup, the page escapes it again.
	if _, body := get("/api/dns?tenant=acme&limit=1"); strings.Contains(string(body), "<img") || !strings.Contains(string(body), `\u003cimg`) {
		t.Errorf("the hostile name is not escaped in the JSON: %.200s", body)
	}
	if c.asked != 1 {
		t.Errorf("the hosts were asked %d times within one refresh interval, want once", c.asked)
	}

	// Paging: 2,000 rows, 500 at most a page; past the end the last page.
	seen := map[string]bool{}
	for off := 0; off < 2000; off += netPageMax {
		p := page(fmt.Sprintf("tenant=acme&offset=%d&limit=%d", off, netPageMax))
		if p.Offset != off || len(p.Rows) != netPageMax {
			t.Fatalf("page at %d: offset %d, %d rows", off, p.Offset, len(p.Rows))
		}
		for _, r := range p.Rows {
			seen[r.Name+" "+r.Address] = true
		}
	}
	if len(seen) != 2000 {
		t.Errorf("paging saw %d distinct rows, want 2000", len(seen))
	}
	if p := page("tenant=acme&offset=5000&limit=300"); p.Offset != 1800 || len(p.Rows) != 200 || p.Rows[199].Name != "n0999.acme.example." {
		t.Errorf("past the end: offset %d, %d rows; want the last page (1800, 200 rows)", p.Offset, len(p.Rows))
	}
	if p := page("tenant=acme&state=left-out&q=n0999"); p.Matching != 1 || p.Rows[0].Address != "192.0.2.201" {
		t.Errorf("search and filter: %+v", p.Rows)
	}
	for q, want := range map[string]string{
		"tenant=acme&limit=501":                               "limit must be 1 to 500",
		"tenant=acme&offset=-1":                               "offset must be",
		"tenant=acme&state=all":                               "state must be answered, left-out or empty",
		"tenant=acme&q=" + strings.Repeat("a", 201):           "at most 200",
		"tenant=" + url.QueryEscape(strings.Repeat("t", 254)): "at most 253 bytes",
		"": "tenant must be",
	} {
		if code, body := get("/api/dns?" + q); code != 400 || !strings.Contains(string(body), want) {
			t.Errorf("GET /api/dns?%.60s: %d %q, want 400 naming %q", q, code, body, want)
		}
	}
	if code, body := get("/api/dns?tenant=" + url.QueryEscape(hostile)); code != 404 || strings.Contains(string(body), "<img") {
		t.Errorf("an unknown tenant: %d %q, want 404 without the markup", code, body)
	}

	// n2 stops answering: its names are its last answer, marked stale,
	// with the time they were observed.
	first := now
	now = now.Add(10 * time.Second)
	c.setDNS(&pb.ObserveResponse{Hosts: []*pb.HostObservation{dnsNames("n1", 1000), {NodeId: "n2", Error: "context deadline exceeded"}}})
	p = page("tenant=acme")
	n1, n2 := p.Hosts[0], p.Hosts[1]
	if !n1.Reachable || !n1.Observed.Equal(now) || n2.Reachable || !n2.Observed.Equal(first) || n2.Error != "context deadline exceeded" {
		t.Errorf("hosts after n2 stopped answering: %+v", p.Hosts)
	}
	if o := p.Rows[0].On; o["n1"].Stale || !o["n2"].Stale || !o["n2"].Answered {
		t.Errorf("row on the hosts %+v: want n2's last answer marked stale", o)
	}
	if c.asked != 2 {
		t.Errorf("asked %d times, want 2 (once per interval)", c.asked)
	}
}

// tenantBGP is acme's BGP on host id: a session established, one closed
// for its prefix count, one for its update rate, n accepted prefixes
// and n dropped ones (one with a hostile reason).
func tenantBGP(id string, n int) *pb.HostObservation {
	o := &pb.TenantBGPObservation{Tenant: "acme", AcceptedCount: uint32(n), DroppedCount: uint32(n) + 50,
		Sessions: []*pb.TenantBGPSession{
			{Peer: "10.1.0.2", State: "established", Received: uint32(2 * n), Since: timestamppb.New(time.Unix(1000, 0)), Bfd: "up", BfdSince: timestamppb.New(time.Unix(1001, 0))},
			{Peer: "10.1.0.3", State: "prefix-limit", Reason: "announced more than maxPrefixes (100)", Bfd: "down", BfdReason: hostile + strings.Repeat("b", 1000)},
			{Peer: hostile, State: "update-limit", Reason: "sent route changes faster than maxUpdatesPerSecond"},
		}}
	for i := range n {
		o.Accepted = append(o.Accepted, &pb.TenantRoute{Prefix: fmt.Sprintf("10.2.%d.0/24", i), NextHop: "10.1.0.2", Peer: "10.1.0.2"})
		reason := "not inside the tenant's networks"
		if i == 0 {
			reason = hostile + strings.Repeat("y", 1000)
		}
		o.Dropped = append(o.Dropped, &pb.TenantRoute{Prefix: fmt.Sprintf("172.16.%d.0/24", i), NextHop: "10.1.0.2", Peer: "10.1.0.2", Reason: reason})
	}
	if id == "n1" {
		// n1 has the tenant attached: its sessions are made from the
		// tenant's namespace there.
		o.Attachment, o.Sessions[0].Attachment = "teapot-att-acme", "teapot-att-acme"
		// and announces it the VIP of a bgp pool in its attachment.
		o.Announced = []*pb.TenantRoute{{Prefix: "10.20.5.100/32", NextHop: "10.20.0.2"}}
		o.AnnounceSince, o.Sessions[0].Advertised = timestamppb.New(time.Unix(1002, 0)), 1
	}
	return &pb.HostObservation{NodeId: id, Reachable: true, TenantBgp: []*pb.TenantBGPObservation{o}}
}

// TestTenantBGPView: the stream carries each host's sessions of a tenant
// (those closed for a bound named so) and counts; /api/bgp pages through
// the 1,000 prefixes five hosts listed, dropped first with the reason, cut
// to its bound; a host that stops answering keeps its sessions and routes,
// marked unreachable with the time they were observed.
func TestTenantBGPView(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	var nodes []*pb.NodeStatus
	var hosts []*pb.HostObservation
	for i := range 5 {
		id := fmt.Sprintf("n%d", i+1)
		nodes = append(nodes, node(id, "follower", true))
		hosts = append(hosts, tenantBGP(id, 100))
	}
	c := &netCluster{cluster: &cluster{
		status: &pb.ClusterStatusResponse{LeaderId: "n1", Nodes: nodes},
		obs:    &pb.ObserveResponse{Hosts: hosts},
		objs:   map[string][]*pb.Object{"Tenant": {acmeTenant()}},
	}}
	s, get := newNetServer(t, c, &now)
	snap := s.current(0, time.Time{}).Snapshot
	if len(snap.BGP) != 1 || len(snap.BGP[0].Hosts) != 5 {
		t.Fatalf("BGP in the snapshot: %+v", snap.BGP)
	}
	h := snap.BGP[0].Hosts[0]
	if h.Node != "n1" || !h.Reachable || !h.Observed.Equal(now) || h.Accepted != 100 || h.Dropped != 150 || h.Listed != 200 || h.Closed != 2 ||
		h.Sessions[1].Closed != "prefix count" || h.Sessions[2].Closed != "update rate" || h.Sessions[0].Closed != "" ||
		h.Sessions[0].BFD != "up" || h.Sessions[0].BFDSince == nil || !h.Sessions[0].BFDSince.Equal(time.Unix(1001, 0)) ||
		h.Sessions[1].BFD != "down" || len(h.Sessions[1].BFDReason) > textMax+30 || h.Sessions[2].BFD != "" ||
		h.Attachment != "teapot-att-acme" || h.Sessions[0].Attachment != "teapot-att-acme" || h.Sessions[1].Attachment != "" ||
		len(h.Announced) != 1 || h.Announced[0] != (BGPAnnounced{Prefix: "10.20.5.100/32", NextHop: "10.20.0.2"}) ||
		h.AnnounceSince == nil || !h.AnnounceSince.Equal(time.Unix(1002, 0)) || h.Sessions[0].Advertised != 1 || h.Sessions[1].Advertised != 0 {
		t.Errorf("n1's BGP: %+v", h)
	}
	if h := snap.BGP[0].Hosts[1]; h.Attachment != "" || h.Sessions[0].Attachment != "" || h.Announced != nil || h.AnnounceSince != nil {
		t.Errorf("n2's BGP, not attached, names an attachment: %+v", h)
	}
	// The stream sends sessions and counts, not the routes.
	_, body := get("/api/snapshot")
	if !strings.Contains(string(body), `"closed":"update rate"`) || !strings.Contains(string(body), `"bfd":"up"`) || !strings.Contains(string(body), `"attachment":"teapot-att-acme"`) ||
		!strings.Contains(string(body), `"announced":[{"prefix":"10.20.5.100/32","nextHop":"10.20.0.2"}]`) || strings.Contains(string(body), "172.16.") || strings.Contains(string(body), "<img") {
		t.Errorf("the streamed snapshot: sessions with their bounds, no routes, markup escaped: %.300s", body)
	}

	page := func(q string) RoutePage {
		t.Helper()
		code, body := get("/api/bgp?" + q)
		if code != 200 {
			t.Fatalf("GET /api/bgp?%s: %d %s", q, code, body)
		}
		var p RoutePage
		if err := json.Unmarshal(body, &p); err != nil {
			t.Fatal(err)
		}
		return p
	}
	p := page("tenant=acme")
	if p.Total != 1000 || len(p.Rows) != netPageDefault || p.Rows[0].Accepted || p.Rows[0].Node != "n1" || !strings.HasPrefix(p.Rows[0].Reason, hostile) ||
		len(p.Rows[0].Reason) > textMax+30 || len(p.Hosts) != 5 {
		t.Fatalf("first page: total %d, %d rows, first %+v", p.Total, len(p.Rows), p.Rows[0])
	}
	got := map[string]bool{}
	for off := 0; off < 1000; off += netPageMax {
		for _, r := range page(fmt.Sprintf("tenant=acme&offset=%d&limit=%d", off, netPageMax)).Rows {
			got[r.Node+" "+r.Prefix] = true
		}
	}
	if len(got) != 1000 {
		t.Errorf("paging saw %d routes, want 1000", len(got))
	}
	if p := page("tenant=acme&state=accepted&q=n5+10.2.99.0"); p.Matching != 1 || !p.Rows[0].Accepted || p.Rows[0].Node != "n5" {
		t.Errorf("search and filter: %+v", p.Rows)
	}
	if code, _ := get("/api/bgp?tenant=acme&limit=501"); code != 400 {
		t.Errorf("limit 501: %d, want 400", code)
	}

	// n2 stops answering: its BGP stays, unreachable, observed at first.
	first := now
	now = now.Add(10 * time.Second)
	c.set(func() {
		c.obs = &pb.ObserveResponse{Hosts: append([]*pb.HostObservation{hosts[0], {NodeId: "n2", Error: "connection refused"}}, hosts[2:]...)}
	})
	s.refresh(context.Background())
	snap = s.current(0, time.Time{}).Snapshot
	n1, n2 := snap.BGP[0].Hosts[0], snap.BGP[0].Hosts[1]
	if !n1.Reachable || !n1.Observed.Equal(now) || n2.Reachable || !n2.Observed.Equal(first) || n2.Error != "connection refused" || len(n2.Sessions) != 3 {
		t.Errorf("after n2 stopped answering: n1 %+v; n2 %+v", n1, n2)
	}
	p = page("tenant=acme&q=n2&state=accepted")
	if p.Matching != 100 || !p.Rows[0].Stale || !p.Rows[0].Observed.Equal(first) {
		t.Errorf("n2's routes: %d, first %+v; want 100 marked stale from %v", p.Matching, p.Rows[0], first)
	}
	if p := page("tenant=acme&q=n1&state=accepted"); p.Rows[0].Stale || !p.Rows[0].Observed.Equal(now) {
		t.Errorf("n1's routes: %+v, want fresh", p.Rows[0])
	}
}

// A host with more sessions of a tenant than the stream carries: the
// stream sends streamSessionsMax, those not established first, and counts
// the others.
func TestStreamBoundsSessions(t *testing.T) {
	t.Parallel()
	h := BGPHost{Node: "n1"}
	for i := range 100 {
		st := "established"
		if i == 99 {
			st = "active"
		}
		h.Sessions = append(h.Sessions, BGPSession{Peer: fmt.Sprint(i), State: st})
	}
	out := streamedBGP([]TenantBGP{{Tenant: "acme", Hosts: []BGPHost{h}}})
	got := out[0].Hosts[0]
	if len(got.Sessions) != streamSessionsMax || got.SessionsLeftOut != 100-streamSessionsMax || got.Sessions[0].State != "active" {
		t.Errorf("streamed: %d sessions, %d left out, first %+v", len(got.Sessions), got.SessionsLeftOut, got.Sessions[0])
	}
	// A cut keeps whole characters: 128 two-byte ones fit, the rest goes.
	if c := clip(strings.Repeat("é", 200)); !utf8.ValidString(c) || !strings.HasPrefix(c, strings.Repeat("é", 128)+"… (400 bytes)") {
		t.Errorf("clip: %q", c)
	}
}

// TestTenantBGPReannounceView: the stream carries, per host, how many of
// a tenant's routes it re-announces to its fabric routers and since
// when, or why it cannot (cut to its bound); a host that says nothing of
// it carries nothing.
func TestTenantBGPReannounceView(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	since := now.Add(-time.Minute)
	hosts := []*pb.HostObservation{tenantBGP("n1", 3), tenantBGP("n2", 3), tenantBGP("n3", 3)}
	hosts[0].TenantBgp[0].Reannounced, hosts[0].TenantBgp[0].ReannounceSince, hosts[0].TenantBgp[0].FabricSessions = 3, timestamppb.New(since), 2
	hosts[1].TenantBgp[0].ReannounceError, hosts[1].TenantBgp[0].ReannounceSince = hostile+strings.Repeat("z", 1000), timestamppb.New(since)
	c := &netCluster{cluster: &cluster{
		status: &pb.ClusterStatusResponse{LeaderId: "n1", Nodes: []*pb.NodeStatus{node("n1", "leader", true), node("n2", "follower", true), node("n3", "follower", true)}},
		obs:    &pb.ObserveResponse{Hosts: hosts},
		objs:   map[string][]*pb.Object{"Tenant": {acmeTenant()}},
	}}
	s, get := newNetServer(t, c, &now)
	hs := s.current(0, time.Time{}).Snapshot.BGP[0].Hosts
	if n1 := hs[0]; n1.Reannounced != 3 || n1.ReannounceError != "" || n1.ReannounceSince == nil || !n1.ReannounceSince.Equal(since) {
		t.Errorf("n1: reannounced %d, error %q, since %v", n1.Reannounced, n1.ReannounceError, n1.ReannounceSince)
	}
	if n2 := hs[1]; !strings.HasPrefix(n2.ReannounceError, hostile) || len(n2.ReannounceError) > textMax+30 || n2.ReannounceSince == nil {
		t.Errorf("n2: error %.80q (%d bytes), since %v", n2.ReannounceError, len(n2.ReannounceError), n2.ReannounceSince)
	}
	if n3 := hs[2]; n3.ReannounceSince != nil || n3.ReannounceError != "" {
		t.Errorf("n3 says nothing of it, yet carries %+v", n3)
	}
	if _, body := get("/api/snapshot"); !strings.Contains(string(body), `"reannounced":3,"reannounceSince":"2026-01-02T03:03:05Z","fabricSessions":2`) || strings.Contains(string(body), "<img") {
		t.Errorf("the streamed snapshot: %.600s", body)
	}
}
