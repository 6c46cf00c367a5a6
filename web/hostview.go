package web

import (
	"slices"
	"strings"
	"time"

	"github.com/teapot-lb/teapot-lb/api"
	pb "github.com/teapot-lb/teapot-lb/api/proto/teapotv1"
)

// MemberTraffic is one member's last interval on one host, from the
// host's history ring.
type MemberTraffic struct {
	// RPS is requests (L7) or connects (L4) per second.
	RPS float64 `json:"rps"`
	// Errors is the share answered 5xx or failed, 0..1.
	Errors float64 `json:"err"`
	P99    float64 `json:"p99"`
	// At is when the interval ended; Interval its length in seconds.
	At       time.Time `json:"at"`
	Interval uint32    `json:"interval"`
}

type memberKey struct{ pool, addr string }

type membersTraffic struct {
	of      map[memberKey]*MemberTraffic
	omitted uint32
}

// memberTraffic is the member traffic host h reports for load balancer lb.
func memberTraffic(h *pb.HostObservation, lb string) membersTraffic {
	out := membersTraffic{of: map[memberKey]*MemberTraffic{}}
	for _, t := range h.GetTraffic() {
		if t.GetLoadBalancer() != lb {
			continue
		}
		out.omitted = t.GetMembersOmitted()
		for _, m := range t.GetMembers() {
			out.of[memberKey{m.GetPool(), m.GetAddress()}] = &MemberTraffic{RPS: m.GetRequestsPerSecond(), Errors: m.GetErrorShare(),
				P99: m.GetP99Seconds(), At: m.GetTime().AsTime(), Interval: m.GetIntervalSeconds()}
		}
	}
	return out
}

// HostInfo is one host's own state as it last reported it.
type HostInfo struct {
	Node string `json:"node"`
	// Reachable is whether the host answered this read; Observed when it
	// last did. A host that did not answer keeps its last report.
	Reachable bool      `json:"reachable"`
	Observed  time.Time `json:"observed"`
	// Resources is the process and data-plane budget use (nil: the host
	// reports none, e.g. an earlier release).
	Resources *Resources `json:"resources,omitempty"`
	// Tenants is what each tenant holds on the host, by name.
	Tenants []TenantUse `json:"tenants"`
	// Zones are the zones the host's DNS serves, with their DNSSEC keys.
	Zones []DNSZone `json:"zones"`
}

// Resources is HostResources for the page.
type Resources struct {
	At              time.Time `json:"at"`
	CPU             float64   `json:"cpu"`
	CPUs            uint32    `json:"cpus"`
	Memory          uint64    `json:"memory"`
	Descriptors     uint64    `json:"descriptors"`
	DescriptorLimit uint64    `json:"descriptorLimit"`
	Goroutines      int64     `json:"goroutines"`
	// Conns and FDs are the data plane's own bounds: held and at most.
	Conns      int64  `json:"conns"`
	MaxConns   int64  `json:"maxConns"`
	FDs        int64  `json:"fds"`
	MaxFDs     int64  `json:"maxFds"`
	History    uint64 `json:"history"`
	MaxHistory uint64 `json:"maxHistory"`
}

// TenantUse is what one tenant holds on one host.
type TenantUse struct {
	Tenant         string `json:"tenant"`
	Conns          int64  `json:"conns"`
	FDs            int64  `json:"fds"`
	MaxFDs         int64  `json:"maxFds"`
	LoadBalancers  int    `json:"lbs"`
	ListenersBound int    `json:"listeners"`
	// CPU is the tenant's host CPU budget on the host and its use; nil
	// from a host that reports none (an earlier release).
	CPU *TenantCPU `json:"cpu,omitempty"`
}

// TenantCPU is a tenant's host CPU budget on one host (quotas.cpuMillicores).
type TenantCPU struct {
	// Cores is the budget; Used the cores the tenant used over the host's
	// last window (Window seconds, ended At; zero before one ended).
	Cores     float64   `json:"cores"`
	Used      float64   `json:"used"`
	Window    float64   `json:"window"`
	At        time.Time `json:"at"`
	Throttled float64   `json:"throttled"` // seconds in debt since the host started
	Throttles uint64    `json:"throttles"`
	InDebt    bool      `json:"inDebt"`
}

// hostInfos is each answering host's own report.
func hostInfos(hosts []*pb.HostObservation, now time.Time) []HostInfo {
	var out []HostInfo
	for _, h := range hosts {
		if !h.GetReachable() {
			continue
		}
		hi := HostInfo{Node: h.GetNodeId(), Reachable: true, Observed: now, Tenants: []TenantUse{}, Zones: dnsZones(h)}
		if r := h.GetResources(); r != nil {
			hi.Resources = &Resources{At: r.GetTime().AsTime(), CPU: r.GetCpu(), CPUs: r.GetCpus(), Memory: r.GetMemoryBytes(),
				Descriptors: r.GetOpenDescriptors(), DescriptorLimit: r.GetDescriptorLimit(), Goroutines: r.GetGoroutines(),
				Conns: r.GetConnections(), MaxConns: r.GetMaxConnections(), FDs: r.GetDescriptors(), MaxFDs: r.GetMaxDescriptors(),
				History: r.GetHistoryBytes(), MaxHistory: r.GetHistoryMaxBytes()}
			if r.GetTime() == nil {
				hi.Resources.At = now
			}
		}
		use := map[string]*TenantUse{}
		get := func(t string) *TenantUse {
			u := use[t]
			if u == nil {
				u = &TenantUse{Tenant: t}
				use[t] = u
			}
			return u
		}
		for _, u := range h.GetTenantUsage() {
			t := get(u.GetTenant())
			t.Conns, t.FDs, t.MaxFDs = u.GetConnections(), u.GetDescriptors(), u.GetMaxDescriptors()
			if c := u.GetCpu(); c != nil {
				t.CPU = &TenantCPU{Cores: float64(c.GetMillicores()) / 1000, Window: c.GetWindowSeconds(),
					Throttled: c.GetThrottledSeconds(), Throttles: c.GetThrottles(), InDebt: c.GetInDebt()}
				if c.GetWindowSeconds() > 0 {
					t.CPU.Used = c.GetUsedSeconds() / c.GetWindowSeconds()
				}
				if c.GetTime() != nil {
					t.CPU.At = c.GetTime().AsTime()
				}
			}
		}
		lbs := map[string]bool{}
		for _, l := range h.GetListeners() {
			tenant, _, _ := strings.Cut(l.GetLoadBalancer(), "/")
			if !lbs[l.GetLoadBalancer()] {
				lbs[l.GetLoadBalancer()] = true
				get(tenant).LoadBalancers++
			}
			if l.GetBound() {
				get(tenant).ListenersBound++
			}
		}
		for _, u := range use {
			hi.Tenants = append(hi.Tenants, *u)
		}
		slices.SortFunc(hi.Tenants, func(a, b TenantUse) int { return strings.Compare(a.Tenant, b.Tenant) })
		out = append(out, hi)
	}
	slices.SortFunc(out, func(a, b HostInfo) int { return strings.Compare(a.Node, b.Node) })
	return nonNil(out)
}

// keepHosts adds to cur, for each host of prev that did not answer this
// read, its last report marked not reachable.
func keepHosts(prev, cur []HostInfo, nodes []Node) []HostInfo {
	have := map[string]bool{}
	for _, h := range cur {
		have[h.Node] = true
	}
	inCluster := map[string]bool{}
	for _, n := range nodes {
		inCluster[n.ID] = true
	}
	for _, h := range prev {
		if have[h.Node] || (len(nodes) > 0 && !inCluster[h.Node]) {
			continue
		}
		h.Reachable = false
		cur = append(cur, h)
	}
	slices.SortFunc(cur, func(a, b HostInfo) int { return strings.Compare(a.Node, b.Node) })
	return nonNil(cur)
}

// objectIndex indexes a read's objects by kind and name.
func objectIndex(objs map[string][]*pb.Object) map[string]map[string]*pb.Object {
	out := make(map[string]map[string]*pb.Object, len(objs))
	for kind, os := range objs {
		m := make(map[string]*pb.Object, len(os))
		for _, o := range os {
			m[objectName(o)] = o
		}
		out[kind] = m
	}
	return out
}

// objectName is "tenant/name" for namespaced kinds, else the name.
func objectName(o *pb.Object) string {
	ref := api.RefOf(o)
	if ref.GetTenant() != "" {
		return ref.GetTenant() + "/" + ref.GetName()
	}
	return ref.GetName()
}
