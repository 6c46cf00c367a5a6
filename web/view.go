package web

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/teapot-lb/teapot-lb/api"
	"github.com/teapot-lb/teapot-lb/api/observe"
	pb "github.com/teapot-lb/teapot-lb/api/proto/teapotv1"
)

// Source is the part of the admin API the dashboard reads. The admin
// client's pb.AdminClient (client.Conn.Admin) satisfies it.
type Source interface {
	List(ctx context.Context, in *pb.ListRequest, opts ...grpc.CallOption) (*pb.ListResponse, error)
	ClusterStatus(ctx context.Context, in *pb.ClusterStatusRequest, opts ...grpc.CallOption) (*pb.ClusterStatusResponse, error)
	Observe(ctx context.Context, in *pb.ObserveRequest, opts ...grpc.CallOption) (*pb.ObserveResponse, error)
}

// Load balancer phases (observe.Assess decides them, as for `get lbs`
// and `explain`).
const (
	StatusServing  = observe.Serving
	StatusDegraded = observe.Degraded
	StatusFailing  = observe.Failing
	StatusRefused  = observe.Refused
	StatusPending  = observe.Pending
	StatusUnknown  = observe.Unknown
)

// maxHostEvents bounds the events asked of each host per refresh.
const maxHostEvents = 200

// maxObjects bounds how many objects of one kind the dashboard reads per
// refresh, so a huge cluster cannot make every refresh unbounded.
const maxObjects = 5000

// errTooMany: a kind has more objects than the dashboard reads.
var errTooMany = fmt.Errorf("more than %d objects", maxObjects)

// Snapshot is everything the dashboard shows at one moment. It is sent as
// JSON to the browser.
type Snapshot struct {
	// Time is when this snapshot was read (the dashboard's clock).
	Time     time.Time `json:"time"`
	Revision uint64    `json:"revision"`
	// Reachable is false when no LB host answered this read: the page
	// then shows the last data it had, marked with its age.
	Reachable bool `json:"reachable"`
	// ReadAt is when an LB host last answered (zero: never).
	ReadAt time.Time `json:"readAt"`
	// IntervalSeconds is the refresh interval; StaleAfterSeconds how old
	// data may be before the page marks it stale.
	IntervalSeconds   float64  `json:"intervalSeconds"`
	StaleAfterSeconds float64  `json:"staleAfterSeconds"`
	Cluster           Cluster  `json:"cluster"`
	Tenants           []Tenant `json:"tenants"`
	Pools             []Pool   `json:"pools"`
	LBs               []LB     `json:"lbs"`
	Certs             []Cert   `json:"certs"`
	// Hosts is each host's own state: resources, budgets, tenants' use.
	Hosts []HostInfo `json:"hosts"`
	// BGP is each tenant's BGP sessions with the hosts and how many
	// prefixes each host accepted and dropped (the routes: /api/bgp).
	BGP []TenantBGP `json:"bgp"`
	// Attachments is each attached tenant's namespace on every host: its
	// state, since when, and when the host reported it.
	Attachments []TenantAttachment `json:"attachments"`
	// Errors are what could not be read this time, one line per distinct
	// error with the parts it hit and since when it repeats.
	Errors []ErrorLine `json:"errors,omitempty"`
	// listFailed: a List call failed, so the objects are incomplete.
	listFailed bool
	// objects are the stored objects of this read by kind and name
	// ("tenant/name" for namespaced kinds), for the YAML view.
	objects map[string]map[string]*pb.Object
	// objectsAt is when objects were read.
	objectsAt time.Time
}

// ErrorLine is one error of a read, shown once however many parts it hit.
type ErrorLine struct {
	Message string `json:"message"`
	// Parts are what could not be read ("cluster status", "list Tenant").
	Parts []string `json:"parts"`
	// Count is how many reads in a row failed with it, since Since.
	Count int       `json:"count"`
	Since time.Time `json:"since"`
}

// Cluster is the Raft and VIP picture of the LB hosts.
type Cluster struct {
	ID       string `json:"id"`
	Leader   string `json:"leader"`
	Term     uint64 `json:"term"`
	Commit   uint64 `json:"commit"`
	Nodes    []Node `json:"nodes"`
	VIPs     []VIP  `json:"vips"`
	Timeouts string `json:"timeouts"`
}

// Node is one LB host.
type Node struct {
	ID          string `json:"id"`
	APIAddr     string `json:"apiAddr"`
	Role        string `json:"role"`
	Suffrage    string `json:"suffrage"`
	Healthy     bool   `json:"healthy"`
	LastContact string `json:"lastContact"`
	Applied     uint64 `json:"applied"`
	Version     string `json:"version"`
	Draining    bool   `json:"draining"`
	Error       string `json:"error,omitempty"`
	PeersAlive  int    `json:"peersAlive"`
	Peers       int    `json:"peers"`
	// Reachable is whether the host answered this read; Observed is when
	// it last did (zero: never since the dashboard started).
	Reachable bool      `json:"reachable"`
	Observed  time.Time `json:"observed"`
}

// VIP is one virtual address and the hosts that hold or announce it.
type VIP struct {
	Address string      `json:"address"`
	Mode    string      `json:"mode"`
	Holders []VIPHolder `json:"holders"`
	LBs     []string    `json:"lbs"`
}

// VIPHolder is one host's hold on a VIP.
type VIPHolder struct {
	Node   string    `json:"node"`
	State  string    `json:"state"`
	Since  time.Time `json:"since"`
	Reason string    `json:"reason,omitempty"`
	// Stale marks a hold reported by a host that did not answer this
	// read: the state is its last known one, from Observed.
	Stale    bool      `json:"stale"`
	Observed time.Time `json:"observed"`
}

// Tenant is one tenant with what it uses of its quotas.
type Tenant struct {
	Name     string   `json:"name"`
	UID      string   `json:"uid,omitempty"`
	Pools    []string `json:"pools"`
	Domains  []string `json:"domains"`
	Networks []string `json:"networks"`
	Quotas   []Quota  `json:"quotas"`
	// RevokedCredentials are the serials of revoked agent credentials.
	RevokedCredentials []string  `json:"revokedCredentials"`
	Updated            time.Time `json:"updated"`
	Generation         uint64    `json:"generation"`
}

// Quota is one budget of a tenant: used of limit (0: the default limit).
type Quota struct {
	Name  string `json:"name"`
	Used  int    `json:"used"`
	Limit uint32 `json:"limit"`
}

// Pool is a VIP pool.
type Pool struct {
	Name    string   `json:"name"`
	Mode    string   `json:"mode"`
	CIDRs   []string `json:"cidrs"`
	Tenants []string `json:"tenants"`
	Shared  bool     `json:"shared"`
}

// LB is one load balancer with its status and spec.
type LB struct {
	ID      string `json:"id"` // tenant/name
	Tenant  string `json:"tenant"`
	Name    string `json:"name"`
	Address string `json:"address"`
	// Addresses are every VIP of the load balancer (one per family of a
	// dual-stack one), Address first.
	Addresses []string  `json:"addresses"`
	Status    string    `json:"status"`
	Reasons   []string  `json:"reasons,omitempty"`
	Listeners []string  `json:"listeners"`
	Updated   time.Time `json:"updated"`
	Revision  uint64    `json:"revision"`
	// HeldBy are the hosts holding or announcing the address, by this
	// read; HeldByStale those that did so when last heard from.
	HeldBy      []string `json:"heldBy"`
	HeldByStale []string `json:"heldByStale"`
	// LastStatus is the status when an LB host last answered (it differs
	// from Status, Unknown, while none answers).
	LastStatus string `json:"lastStatus"`
	// Hosts is what each host sees of it: listeners, members, problems.
	Hosts []LBHost `json:"hosts"`
	// Spec is the stored object as protojson, for the detail view.
	Spec json.RawMessage `json:"spec"`
}

// LBHost is one host's view of one load balancer.
type LBHost struct {
	Node      string          `json:"node"`
	Reachable bool            `json:"reachable"`
	Error     string          `json:"error,omitempty"`
	Listeners []ListenerState `json:"listeners"`
	Members   []MemberState   `json:"members"`
	Problems  []string        `json:"problems"`
	// Observed is when the host last answered (zero: never).
	Observed time.Time `json:"observed"`
	// MembersOmitted is how many members the host left out of its member
	// traffic (over its bound).
	MembersOmitted uint32 `json:"membersOmitted,omitempty"`
	// Counts and MembersLeftOut are set in the stream (streamed), whose
	// Members are only those down or with traffic: how many members are
	// in each state, and how many the stream left out (/api/members
	// pages through them all).
	Counts         MemberCounts `json:"memberCounts"`
	MembersLeftOut int          `json:"membersLeftOut,omitempty"`
}

// ListenerState is one listen socket on one host.
type ListenerState struct {
	Address  string    `json:"address"`
	Protocol string    `json:"protocol"`
	Bound    bool      `json:"bound"`
	Error    string    `json:"error,omitempty"`
	Since    time.Time `json:"since"`
}

// MemberState is one member's health by one host's checks.
type MemberState struct {
	Pool      string    `json:"pool"`
	Address   string    `json:"address"`
	Healthy   bool      `json:"healthy"`
	Reason    string    `json:"reason,omitempty"`
	LastCheck time.Time `json:"lastCheck"`
	InFlight  int64     `json:"inFlight"`
	// Traffic is the member's last interval on this host (nil: the host
	// did not report it, e.g. over its bound of members reported).
	Traffic *MemberTraffic `json:"traffic,omitempty"`
}

// Cert is a certificate as stored.
type Cert struct {
	Name     string    `json:"name"`
	Tenant   string    `json:"tenant"`
	Hosts    []string  `json:"hosts"`
	Source   string    `json:"source"`
	Issuer   string    `json:"issuer"`
	NotAfter time.Time `json:"notAfter"`
	State    string    `json:"state"`
	Error    string    `json:"error,omitempty"`
	// PerHost is the state each host reports for the certificate's names.
	PerHost []CertHost `json:"perHost"`
}

// CertHost is one host's certificate for one name.
type CertHost struct {
	Node     string    `json:"node"`
	Host     string    `json:"host"`
	State    string    `json:"state"`
	NotAfter time.Time `json:"notAfter"`
	Error    string    `json:"error,omitempty"`
}

// gather reads the cluster through src and builds a snapshot. A part that
// cannot be read is named in Errors; the rest is still shown.
func gather(ctx context.Context, src Source, now time.Time, eventsAfter map[string]uint64) (*Snapshot, *pb.ObserveResponse) {
	s := &Snapshot{Time: now}
	fail := func(part string, err error) { s.Errors = addError(s.Errors, part, err.Error(), now) }
	// The calls go out together, so a read takes as long as its slowest
	// call, not their sum.
	kinds := []string{api.KindTenant, api.KindVIPPool, api.KindLoadBalancer, api.KindNode, api.KindCertificate}
	type listed struct {
		objs []*pb.Object
		rev  uint64
		err  error
	}
	lists := make([]listed, len(kinds))
	var (
		wg            sync.WaitGroup
		st            *pb.ClusterStatusResponse
		obs           *pb.ObserveResponse
		stErr, obsErr error
	)
	wg.Add(2 + len(kinds))
	go func() {
		defer wg.Done()
		st, stErr = src.ClusterStatus(ctx, &pb.ClusterStatusRequest{})
	}()
	go func() {
		defer wg.Done()
		obs, obsErr = src.Observe(ctx, &pb.ObserveRequest{EventsAfter: eventsAfter, MaxEvents: maxHostEvents})
	}()
	for i, kind := range kinds {
		go func() {
			defer wg.Done()
			l := &lists[i]
			l.objs, l.rev, l.err = listAll(ctx, src, kind)
		}()
	}
	wg.Wait()
	if stErr != nil {
		fail("cluster status", stErr)
		st = nil
	} else {
		s.Reachable, s.ReadAt = true, now
	}
	if obsErr != nil {
		fail("observe the hosts", obsErr)
		obs = nil
	}
	objs := map[string][]*pb.Object{}
	for i, kind := range kinds {
		l := lists[i]
		if l.err != nil {
			fail("list "+kind, l.err)
			s.listFailed = s.listFailed || !errors.Is(l.err, errTooMany)
		}
		objs[kind] = l.objs
		s.Revision = max(s.Revision, l.rev)
	}
	draining := map[string]bool{}
	for _, o := range objs[api.KindNode] {
		if n := o.GetNode(); n != nil {
			draining[n.GetId()] = n.GetDraining()
		}
	}
	s.Cluster = clusterView(st, draining)
	vips := map[string]*VIP{}
	for i := range s.Cluster.VIPs {
		vips[s.Cluster.VIPs[i].Address] = &s.Cluster.VIPs[i]
	}
	for _, o := range objs[api.KindLoadBalancer] {
		if lb := o.GetLoadBalancer(); lb != nil {
			s.LBs = append(s.LBs, lbView(lb, vips, obs.GetHosts()))
		}
	}
	for _, o := range objs[api.KindTenant] {
		if t := o.GetTenant(); t != nil {
			s.Tenants = append(s.Tenants, tenantView(t, objs[api.KindLoadBalancer], objs[api.KindCertificate]))
		}
	}
	for _, o := range objs[api.KindVIPPool] {
		if p := o.GetVipPool(); p != nil {
			s.Pools = append(s.Pools, Pool{Name: p.GetName(), Mode: p.GetMode(), CIDRs: nonNil(p.GetCidrs()), Tenants: nonNil(p.GetTenants()), Shared: p.GetAllowShared()})
		}
	}
	for _, o := range objs[api.KindCertificate] {
		if c := o.GetCertificate(); c != nil {
			s.Certs = append(s.Certs, Cert{
				Name: c.GetName(), Tenant: c.GetTenant(), Hosts: nonNil(c.GetHosts()), Source: c.GetSource(),
				Issuer: c.GetIssuer(), NotAfter: c.GetNotAfter().AsTime(), State: c.GetState(), Error: c.GetLastError(),
				PerHost: certHosts(c.GetTenant(), c.GetHosts(), obs.GetHosts()),
			})
		}
	}
	s.Hosts = hostInfos(obs.GetHosts(), now)
	s.BGP = bgpViews(obs.GetHosts(), now)
	s.Attachments = attachViews(obs.GetHosts(), now)
	s.objects, s.objectsAt = objectIndex(objs), now
	s.Tenants, s.Pools, s.LBs, s.Certs = nonNil(s.Tenants), nonNil(s.Pools), nonNil(s.LBs), nonNil(s.Certs)
	return s, obs
}

// listAll reads up to maxObjects objects of kind, page by page.
func listAll(ctx context.Context, src Source, kind string) ([]*pb.Object, uint64, error) {
	var out []*pb.Object
	var rev uint64
	token := ""
	for {
		resp, err := src.List(ctx, &pb.ListRequest{Kind: kind, PageToken: token})
		if err != nil {
			return out, rev, err
		}
		out = append(out, resp.GetObjects()...)
		rev = max(rev, resp.GetRevision())
		token = resp.GetNextPageToken()
		if token == "" {
			return out, rev, nil
		}
		if len(out) >= maxObjects {
			return out, rev, fmt.Errorf("%w; the dashboard shows the first %d", errTooMany, len(out))
		}
	}
}

func clusterView(st *pb.ClusterStatusResponse, draining map[string]bool) Cluster {
	c := Cluster{
		ID: st.GetClusterId(), Leader: st.GetLeaderId(), Term: st.GetTerm(), Commit: st.GetCommitIndex(),
		Timeouts: "heartbeat " + st.GetHeartbeatTimeout() + ", election " + st.GetElectionTimeout(),
	}
	vips := map[string]*VIP{}
	for _, n := range st.GetNodes() {
		alive := 0
		for _, p := range n.GetPeers() {
			if p.GetAlive() {
				alive++
			}
		}
		c.Nodes = append(c.Nodes, Node{
			ID: n.GetId(), APIAddr: n.GetApiAddr(), Role: n.GetState(), Suffrage: n.GetSuffrage(),
			Healthy: n.GetHealthy(), LastContact: n.GetLastContact(), Applied: n.GetAppliedIndex(),
			Version: n.GetVersion(), Draining: draining[n.GetId()], Error: n.GetError(),
			PeersAlive: alive, Peers: len(n.GetPeers()),
		})
		for _, h := range n.GetVips() {
			v := vips[h.GetAddress()]
			if v == nil {
				v = &VIP{Address: h.GetAddress(), Mode: h.GetMode()}
				vips[h.GetAddress()] = v
			}
			v.Holders = append(v.Holders, VIPHolder{Node: n.GetId(), State: h.GetState(), Since: h.GetSince().AsTime(), Reason: h.GetReason()})
			for _, lb := range h.GetLoadBalancers() {
				if !slices.Contains(v.LBs, lb) {
					v.LBs = append(v.LBs, lb)
				}
			}
		}
	}
	slices.SortFunc(c.Nodes, func(a, b Node) int { return strings.Compare(a.ID, b.ID) })
	for _, v := range vips {
		slices.Sort(v.LBs)
		c.VIPs = append(c.VIPs, *v)
	}
	slices.SortFunc(c.VIPs, func(a, b VIP) int { return compareAddr(a.Address, b.Address) })
	c.Nodes, c.VIPs = nonNil(c.Nodes), nonNil(c.VIPs)
	return c
}

func compareAddr(a, b string) int {
	pa, ea := netip.ParseAddr(a)
	pb, eb := netip.ParseAddr(b)
	if ea != nil || eb != nil {
		return strings.Compare(a, b)
	}
	return pa.Compare(pb)
}

// lbHosts is each host's view of the load balancer id.
func lbHosts(id string, hosts []*pb.HostObservation) []LBHost {
	var out []LBHost
	for _, h := range hosts {
		v := LBHost{Node: h.GetNodeId(), Reachable: h.GetReachable(), Error: h.GetError(),
			Listeners: []ListenerState{}, Members: []MemberState{}, Problems: []string{}}
		for _, l := range h.GetListeners() {
			if l.GetLoadBalancer() == id {
				v.Listeners = append(v.Listeners, ListenerState{Address: l.GetAddress(), Protocol: l.GetProtocol(), Bound: l.GetBound(), Error: l.GetError(), Since: l.GetSince().AsTime()})
			}
		}
		traffic := memberTraffic(h, id)
		v.MembersOmitted = traffic.omitted
		for _, p := range h.GetPools() {
			if p.GetLoadBalancer() != id {
				continue
			}
			for _, m := range p.GetMembers() {
				v.Members = append(v.Members, MemberState{Pool: p.GetPool(), Address: m.GetAddress(), Healthy: m.GetHealthy(),
					Reason: m.GetReason(), LastCheck: m.GetLastCheck().AsTime(), InFlight: m.GetInFlight(),
					Traffic: traffic.of[memberKey{p.GetPool(), m.GetAddress()}]})
			}
		}
		for _, p := range h.GetProblems() {
			if p.GetLoadBalancer() == id {
				v.Problems = append(v.Problems, p.GetField()+": "+p.GetReason())
			}
		}
		out = append(out, v)
	}
	slices.SortFunc(out, func(a, b LBHost) int { return strings.Compare(a.Node, b.Node) })
	return nonNil(out)
}

func certHosts(tenant string, names []string, hosts []*pb.HostObservation) []CertHost {
	var out []CertHost
	for _, h := range hosts {
		for _, c := range h.GetCertificates() {
			if c.GetTenant() == tenant && slices.Contains(names, c.GetHost()) {
				out = append(out, CertHost{Node: h.GetNodeId(), Host: c.GetHost(), State: c.GetState(), NotAfter: c.GetNotAfter().AsTime(), Error: c.GetLastError()})
			}
		}
	}
	return nonNil(out)
}

func lbView(lb *pb.LoadBalancer, vips map[string]*VIP, obs []*pb.HostObservation) LB {
	addr := lb.GetStatus().GetAddress()
	addrs := nonNil(api.StatusAddresses(lb))
	id := lb.GetTenant() + "/" + lb.GetName()
	hosts := lbHosts(id, obs)
	st := observe.Assess(lb, obs)
	reasons := []string{}
	if st.GetReason() != "" {
		reasons = append(reasons, st.GetReason())
	}
	for _, p := range st.GetProblems() {
		if p != st.GetReason() {
			reasons = append(reasons, p)
		}
	}
	v := LB{
		ID: id, Tenant: lb.GetTenant(), Name: lb.GetName(),
		Address: addr, Addresses: addrs, Status: st.GetPhase(), LastStatus: st.GetPhase(), Reasons: reasons,
		Updated: lb.GetMeta().GetUpdated().AsTime(), Revision: lb.GetMeta().GetRevision(),
		Hosts: hosts,
	}
	for _, a := range addrs {
		fresh, stale := holders(vips[a])
		for _, h := range fresh {
			if !slices.Contains(v.HeldBy, h) {
				v.HeldBy = append(v.HeldBy, h)
			}
		}
		for _, h := range stale {
			if !slices.Contains(v.HeldByStale, h) {
				v.HeldByStale = append(v.HeldByStale, h)
			}
		}
	}
	v.HeldBy, v.HeldByStale = nonNil(v.HeldBy), nonNil(v.HeldByStale)
	for _, l := range lb.GetListeners() {
		v.Listeners = append(v.Listeners, fmt.Sprintf("%d/%s", l.GetPort(), l.GetProtocol()))
	}
	v.Listeners = nonNil(v.Listeners)
	spec, err := protojson.Marshal(api.RedactLoadBalancer(lb))
	if err != nil {
		spec = []byte("null")
	}
	v.Spec = spec
	return v
}

// holders are the hosts holding or announcing vip, those of this read
// and those last known from hosts that did not answer.
func holders(vip *VIP) (fresh, stale []string) {
	if vip != nil {
		for _, h := range vip.Holders {
			switch {
			case !observe.Held(h.State):
			case h.Stale:
				stale = append(stale, h.Node)
			default:
				fresh = append(fresh, h.Node)
			}
		}
	}
	return nonNil(fresh), nonNil(stale)
}

func tenantView(t *pb.Tenant, lbs, certs []*pb.Object) Tenant {
	var nLB, nListeners, nRoutes, nMembers, nChecks, nCerts int
	addrs := map[string]bool{}
	for _, o := range lbs {
		lb := o.GetLoadBalancer()
		if lb.GetTenant() != t.GetName() {
			continue
		}
		nLB++
		nListeners += len(lb.GetListeners())
		nRoutes += len(lb.GetRoutes())
		for _, a := range api.StatusAddresses(lb) {
			addrs[a] = true
		}
		for _, p := range lb.GetPools() {
			nMembers += len(p.GetMembers())
			if p.GetHealthCheck() != nil {
				nChecks += len(p.GetMembers())
			}
		}
	}
	for _, o := range certs {
		if o.GetCertificate().GetTenant() == t.GetName() {
			nCerts++
		}
	}
	q := t.GetQuotas()
	return Tenant{
		Name: t.GetName(), UID: t.GetUid(), Pools: nonNil(t.GetPools()), Domains: nonNil(t.GetDomains()),
		Networks: nonNil(t.GetNetworks()), RevokedCredentials: nonNil(t.GetRevokedCredentials()),
		Updated: t.GetMeta().GetUpdated().AsTime(), Generation: t.GetMeta().GetGeneration(),
		Quotas: []Quota{
			{"load balancers", nLB, q.GetLoadBalancers()},
			{"addresses", len(addrs), q.GetAddresses()},
			{"certificates", nCerts, q.GetCertificates()},
			{"listeners", nListeners, q.GetListeners()},
			{"routes", nRoutes, q.GetRoutes()},
			{"members", nMembers, q.GetMembers()},
			{"health checks", nChecks, q.GetHealthChecks()},
		},
	}
}

func nonNil[T any](s []T) []T {
	if s == nil {
		return []T{}
	}
	return s
}
