package snapshot

import (
	"fmt"
	"net/netip"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/teapot-lb/teapot-lb/api"
	pb "github.com/teapot-lb/teapot-lb/api/proto/teapotv1"
	"google.golang.org/protobuf/proto"
)

// largestRouteLB is a load balancer with one route as large as validation
// allows: every match with every header condition at a long value.
func largestRouteLB() *pb.LoadBalancer {
	lb := tcpLB("gw", "192.0.2.1", 22, "10.20.0.1:22")
	lb.Listeners = append(lb.Listeners, &pb.Listener{Port: 80, Protocol: "http"})
	lb.Vip = &pb.VIPRequest{Pool: "public"}
	r := &pb.Route{Host: "www.acme.example", Pool: "app"}
	for i := range api.MaxRouteMatches {
		m := &pb.RouteMatch{Path: fmt.Sprintf("/m%d", i)}
		for j := range api.MaxMatchConditions {
			m.Headers = append(m.Headers, hdr(fmt.Sprintf("x-h%d", j), strings.Repeat("v", 1900)))
		}
		r.Matches = append(r.Matches, m)
	}
	lb.Routes = []*pb.Route{r}
	return lb
}

// oneTenant is the catalog of base(): validation sees the tenant and the
// VIP pool the test load balancers live in.
type oneTenant struct{}

func (oneTenant) Tenant(name string) *pb.Tenant {
	if name != "acme" {
		return nil
	}
	t := base()[0].GetTenant()
	t.Pools = []string{"public"}
	return t
}
func (c oneTenant) Tenants() []*pb.Tenant { return []*pb.Tenant{c.Tenant("acme")} }
func (oneTenant) Pool(name string) *pb.VIPPool {
	if name != "public" {
		return nil
	}
	return base()[1].GetVipPool()
}
func (c oneTenant) Pools() []*pb.VIPPool                       { return []*pb.VIPPool{c.Pool("public")} }
func (oneTenant) LoadBalancer(string, string) *pb.LoadBalancer { return nil }
func (oneTenant) LoadBalancers(string) []*pb.LoadBalancer      { return nil }
func (oneTenant) AddressUsers(netip.Addr) []*pb.LoadBalancer   { return nil }

func heapInUse() uint64 {
	var ms runtime.MemStats
	runtime.GC()
	runtime.GC()
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc
}

// A tenant's largest valid route costs the snapshot a small multiple of
// its encoded size, not a copy of it per match.
func TestCompileLargestRouteMemory(t *testing.T) {
	lb := largestRouteLB()
	if err := api.ValidateLoadBalancer(lb, oneTenant{}); err != nil {
		t.Fatalf("the route is not valid, so it does not show the bound: %v", err)
	}
	in := objs(lb)
	size := uint64(proto.Size(lb))
	before := heapInUse()
	s := Compile(in, 1, Defaults{}, nil)
	after := heapInUse()
	if ps := problemsOf(s, "acme/gw"); len(ps) > 0 {
		t.Fatalf("problems: %v", ps)
	}
	if rt := s.Listener(key("192.0.2.1:80", TCP)).Routes; len(rt.Routes()) != api.MaxRouteMatches {
		t.Fatalf("compiled %d routes, want %d", len(rt.Routes()), api.MaxRouteMatches)
	}
	retained := int64(after) - int64(before)
	t.Logf("encoded route: %d bytes; snapshot retains %d bytes (%.2fx)", size, retained, float64(retained)/float64(size))
	if retained > int64(4*size) {
		t.Errorf("the snapshot retains %d bytes for a load balancer encoded in %d; want under 4x", retained, size)
	}
	runtime.KeepAlive(s)
	runtime.KeepAlive(in)
}

// A regex condition costs a request at most the per-LB instruction
// budget times MaxRegexSubjectLen: longer paths and values are not
// matched against regexes at all (so hostile regexes on a long value
// cost nothing), and values within the bound still match.
func TestRegexSubjectBound(t *testing.T) {
	// Close to the per-LB budget in alternations that keep many threads
	// alive on a run of 'a'.
	var alts []string
	for i := range 12 {
		alts = append(alts, "a*"+strings.Repeat("a", i%5)+"b")
	}
	hostile := "(?:" + strings.Join(alts, "|") + ")*a*"
	n, err := api.CompileRouteRegex(hostile)
	if err != nil {
		t.Fatal(err)
	}
	var routes []*pb.Route
	total := 0
	for i := 0; total+2*n <= api.MaxRegexInstsPerLB; i++ {
		routes = append(routes, &pb.Route{Matches: []*pb.RouteMatch{{
			Path: "/" + hostile, PathType: "regex",
			Headers: []*pb.ValueMatch{{Name: "x-h", Type: "regex", Value: hostile}},
		}}})
		total += 2 * n
	}
	lb := tcpLB("gw", "192.0.2.1", 22, "10.20.0.1:22")
	lb.Listeners = append(lb.Listeners, &pb.Listener{Port: 80, Protocol: "http"})
	lb.Vip = &pb.VIPRequest{Pool: "public"}
	for _, r := range routes {
		r.Pool = "app"
	}
	lb.Routes = routes
	if err := api.ValidateLoadBalancer(lb, oneTenant{}); err != nil {
		t.Fatalf("the regexes (%d instructions) are not valid: %v", total, err)
	}
	rt := compileRoutes(t, routes...)

	within := strings.Repeat("a", api.MaxRegexSubjectLen-1)
	if r := rt.MatchRequest("", "/"+within, req("GET /", "x-h: "+within)); r == nil {
		t.Fatalf("a path and value of %d bytes did not match", len(within))
	}
	if r := rt.MatchRequest("", "/a", req("GET /a", "x-h: "+within+"aa")); r != nil {
		t.Errorf("a value of %d bytes matched a regex condition", len(within)+2)
	}
	long := strings.Repeat("a", 64<<10)
	start := time.Now()
	if r := rt.MatchRequest("", "/"+long, req("GET /", "x-h: a")); r != nil {
		t.Errorf("a path of %d bytes matched a regex route", len(long)+1)
	}
	if r := rt.MatchRequest("", "/a", req("GET /a", "x-h: "+long)); r != nil {
		t.Errorf("a value of %d bytes matched a regex condition", len(long))
	}
	longCost := time.Since(start)
	// The worst within the bounds: every regex runs on 1 KiB.
	start = time.Now()
	edge := strings.Repeat("a", api.MaxRegexSubjectLen-1) + "c"
	if r := rt.MatchRequest("", "/"+edge[1:], req("GET /", "x-h: "+edge)); r != nil {
		t.Errorf("a path ending in c matched")
	}
	edgeCost := time.Since(start)
	t.Logf("%d regexes of %d instructions: 64 KiB path and value %v; %d-byte path at every regex %v", 2*len(routes), n, longCost, len(edge), edgeCost)
	limit := 2 * time.Second // generous: a loaded machine under -race
	if longCost > limit || edgeCost > limit {
		t.Errorf("matching took %v and %v; want under %v", longCost, edgeCost, limit)
	}
}
