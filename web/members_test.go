package web

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	pb "github.com/teapot-lb/teapot-lb/api/proto/teapotv1"
)

// bigLB is acme/big with n members in pool web (the first with weight
// 5) on hosts n1 and n2; on n1 the members in down are down, and
// 192.0.2.50:20001 has traffic.
func bigLB(n int, down map[int]bool) *cluster {
	var members []*pb.Member
	var obs []*pb.MemberObservation
	for i := range n {
		a := fmt.Sprintf("192.0.2.50:%d", 20000+i)
		m := &pb.Member{Address: a}
		if i == 0 {
			w := uint32(5)
			m.Weight = &w
		}
		members = append(members, m)
		obs = append(obs, &pb.MemberObservation{Address: a, Healthy: true})
	}
	n1 := make([]*pb.MemberObservation, n)
	for i, m := range obs {
		n1[i] = m
		if down[i] {
			n1[i] = &pb.MemberObservation{Address: m.GetAddress(), Down: true, Reason: "connect: connection refused"}
		}
	}
	lb := &pb.Object{Kind: &pb.Object_LoadBalancer{LoadBalancer: &pb.LoadBalancer{
		Name: "big", Tenant: "acme", Listeners: []*pb.Listener{{Port: 80, Protocol: "http"}},
		Pools:  map[string]*pb.BackendPool{"web": {Members: members}},
		Status: &pb.LoadBalancerStatus{Address: "192.0.2.202"},
	}}}
	host := func(id string, ms []*pb.MemberObservation) *pb.HostObservation {
		return &pb.HostObservation{NodeId: id, Reachable: true, Revision: 100,
			Pools: []*pb.PoolObservation{{LoadBalancer: "acme/big", Pool: "web", Members: ms}}}
	}
	h1 := host("n1", n1)
	h1.Traffic = []*pb.TrafficObservation{{LoadBalancer: "acme/big", Members: []*pb.MemberTraffic{
		{Pool: "web", Address: "192.0.2.50:20001", Requests: 10}}}}
	return &cluster{status: &pb.ClusterStatusResponse{LeaderId: "n1", Nodes: []*pb.NodeStatus{node("n1", "leader", true), node("n2", "follower", true)}},
		obs: &pb.ObserveResponse{Hosts: []*pb.HostObservation{h1, host("n2", obs)}}, objs: map[string][]*pb.Object{"LoadBalancer": {lb}}}
}

// TestStreamCarriesMemberCounts: the stream sends each host's member
// counts and only the members down (at most streamMembersDown) or with
// traffic; the snapshot the server keeps has them all.
func TestStreamCarriesMemberCounts(t *testing.T) {
	t.Parallel()
	down := map[int]bool{}
	for i := 100; i < 100+streamMembersDown+10; i++ {
		down[i] = true
	}
	s, err := New(Config{Source: bigLB(1000, down)})
	if err != nil {
		t.Fatal(err)
	}
	s.refresh(context.Background())
	sent := s.sent.LBs[0]
	n1, n2 := sent.Hosts[0], sent.Hosts[1]
	if n1.Counts != (MemberCounts{Up: 1000 - len(down), Down: len(down)}) || n2.Counts != (MemberCounts{Up: 1000}) {
		t.Errorf("counts n1 %+v, n2 %+v", n1.Counts, n2.Counts)
	}
	// n1: the first 64 members down, and the one with traffic.
	if len(n1.Members) != streamMembersDown+1 || n1.Members[0].Address != "192.0.2.50:20001" || n1.Members[0].Traffic == nil ||
		n1.Members[1].Address != "192.0.2.50:20100" || n1.Members[1].Healthy || n1.MembersLeftOut != 1000-streamMembersDown-1 {
		t.Errorf("n1 streams %d members (first %+v), left out %d", len(n1.Members), n1.Members[0], n1.MembersLeftOut)
	}
	if len(n2.Members) != 0 || n2.MembersLeftOut != 1000 {
		t.Errorf("n2 streams %d members, left out %d; want none, 1000", len(n2.Members), n2.MembersLeftOut)
	}
	if v, _ := s.sentAfter(0, time.Time{}); len(v.Snapshot) > 64<<10 {
		t.Errorf("the stream's snapshot of 1,000 members on 2 hosts is %d bytes", len(v.Snapshot))
	}
	if kept := s.current(0, time.Time{}).Snapshot.LBs[0].Hosts[0]; len(kept.Members) != 1000 {
		t.Errorf("the server's snapshot keeps %d members of n1, want 1000", len(kept.Members))
	}
}

// TestMemberPages: /api/members pages through every member, those down
// first, finds them by address and by state, and refuses what it cannot
// answer, naming the bound.
func TestMemberPages(t *testing.T) {
	t.Parallel()
	s, err := New(Config{Source: bigLB(1000, map[int]bool{500: true, 7: true})})
	if err != nil {
		t.Fatal(err)
	}
	s.refresh(context.Background())
	get := func(query string) (int, MemberPage, string) {
		t.Helper()
		rec := httptest.NewRecorder()
		s.members(rec, httptest.NewRequest("GET", "/api/members?"+query, nil))
		var p MemberPage
		if rec.Code == http.StatusOK {
			if err := json.Unmarshal(rec.Body.Bytes(), &p); err != nil {
				t.Fatal(err)
			}
		}
		return rec.Code, p, rec.Body.String()
	}
	lb := "lb=" + url.QueryEscape("acme/big")
	code, p, _ := get(lb)
	if code != 200 || p.Total != 1000 || p.Matching != 1000 || len(p.Rows) != memberPageDefault || strings.Join(p.Hosts, ",") != "n1,n2" {
		t.Fatalf("first page: %d, total %d, matching %d, %d rows, hosts %v", code, p.Total, p.Matching, len(p.Rows), p.Hosts)
	}
	r0, r1, r2 := p.Rows[0], p.Rows[1], p.Rows[2]
	if r0.Address != "192.0.2.50:20007" || r0.On["n1"].State != memberDown || r0.On["n1"].Reason == "" || r0.On["n2"].State != memberUp ||
		r1.Address != "192.0.2.50:20500" || r2.Address != "192.0.2.50:20000" || r2.Weight == nil || *r2.Weight != 5 {
		t.Errorf("first rows %+v %+v %+v: want the members down first, then in order, with weights", r0, r1, r2)
	}
	if code, p, _ := get(lb + "&offset=950&limit=100"); code != 200 || p.Offset != 950 || len(p.Rows) != 50 || p.Rows[49].Address != "192.0.2.50:20999" {
		t.Errorf("last page: %d, offset %d, %d rows", code, p.Offset, len(p.Rows))
	}
	if code, p, _ := get(lb + "&offset=5000&limit=100"); code != 200 || p.Offset != 900 || len(p.Rows) != 100 {
		t.Errorf("past the end: %d, offset %d, %d rows; want the last page", code, p.Offset, len(p.Rows))
	}
	if _, p, _ := get(lb + "&q=" + url.QueryEscape("WEB 192.0.2.50:20999")); p.Matching != 1 || p.Total != 1000 || p.Rows[0].Address != "192.0.2.50:20999" {
		t.Errorf("search: %+v", p)
	}
	if _, p, _ := get(lb + "&state=down"); p.Matching != 2 || len(p.Rows) != 2 {
		t.Errorf("state down: %d matching, want 2", p.Matching)
	}
	for query, want := range map[string]string{
		lb + "&limit=501":      "limit must be 1 to 500",
		lb + "&offset=-1":      "offset must be",
		lb + "&state=sideways": "state must be",
		lb + "&q=" + strings.Repeat("x", memberQueryMax+1): "at most 200",
		"lb=big": "lb must be tenant/name",
	} {
		if code, _, body := get(query); code != http.StatusBadRequest || !strings.Contains(body, want) {
			t.Errorf("%.60s: %d %q, want 400 %q", query, code, body, want)
		}
	}
	if code, _, _ := get("lb=acme/none"); code != http.StatusNotFound {
		t.Errorf("no such load balancer: %d, want 404", code)
	}
}
