package proxy

import (
	"slices"
	"strings"
	"sync/atomic"
	"syscall"

	"github.com/teapot-lb/teapot-lb/api/observe"
	pb "github.com/teapot-lb/teapot-lb/api/proto/teapotv1"
	"github.com/teapot-lb/teapot-lb/proxy/cpubudget"
	"github.com/teapot-lb/teapot-lb/proxy/l7"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// Budgets are the default descriptor bounds of a host.
type Budgets struct {
	// Host bounds the descriptors the connections of all tenants hold
	// together: client connections, member connections (idle pooled ones
	// included) and UDP flows' sockets.
	Host int
	// Tenant bounds one tenant's, over all its listeners.
	Tenant int
	// Pipes bounds the splice pipes of the host (two descriptors each),
	// shared by every tenant's TCP and TLS passthrough connections while
	// they move bytes; a connection that finds none copies instead.
	Pipes int
}

// maxPipes caps the derived pipe pool: past it, more pipes buy no speed.
const maxPipes = 4096

// DeriveBudgets derives the default bounds from the host's descriptor
// limit (RLIMIT_NOFILE). A tenth of it plus 512 descriptors are kept for
// the admin API, Raft, the cluster API, health checks and files; a
// sixteenth of the rest, in pairs, makes the pipe pool (at most maxPipes
// pipes); the rest is the host's budget, of which one tenant may use a
// quarter. A proxied connection holds two descriptors (its client's and
// its member's), so a tenant's connections default to half its
// descriptors.
func DeriveBudgets(nofile uint64) Budgets {
	const fixedReserve = 512
	reserve := nofile/10 + fixedReserve
	var rest int
	if nofile > reserve {
		rest = int(nofile - reserve)
	}
	pipes := min(rest/16, maxPipes)
	host := max(rest-2*pipes, 2)
	return Budgets{Host: host, Tenant: max(host/4, 2), Pipes: pipes}
}

// DescriptorLimit returns the process's soft RLIMIT_NOFILE (1024 when it
// cannot be read).
func DescriptorLimit() uint64 {
	var r syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &r); err != nil || r.Cur == 0 {
		return 1024
	}
	return r.Cur
}

// tenantBudget is what one tenant holds on this host: its client
// connections and UDP flows (bounded by quotas.connections, else
// Limits.MaxConnectionsPerTenant), and the descriptors they and its member
// connections hold (bounded by twice quotas.connections, else
// Limits.MaxDescriptorsPerTenant). Every descriptor also counts in the
// host's.
type tenantBudget struct {
	p     *Proxy
	name  string
	conns atomic.Int64
	fds   atomic.Int64
	// limit is the descriptor bound under the tenant's quota as the last
	// connection accepted saw it.
	limit atomic.Int64
	// member charges the tenant's L7 member connections.
	member *l7.MemberBudget
	// dialer makes its L7 member connections (nil: the host's
	// namespace, Config.Attachments unset).
	dialer l7.Dialer
	// streams counts the tenant's HTTP/2 streams whose handlers run, at
	// most streamLimit: its connection bound as the last connection
	// accepted saw it. A stream in flight costs the host what an
	// HTTP/1.1 connection does (a goroutine, a request, a member
	// connection), so a tenant's streams are bounded as its connections
	// are, whatever number of connections carry them.
	streams     atomic.Int64
	streamLimit atomic.Int64
	// h3grown is what the tenant's QUIC connections grew their receive
	// windows by past the initial one, at most MaxTenantH3WindowGrowth
	// (h3Window).
	h3grown atomic.Int64
	// h3stopped counts the growths refused at that bound.
	h3stopped atomic.Int64
	// cpu is the tenant's host CPU budget (nil: none applies): each
	// connection or flow admitted counts as work in it.
	cpu *cpubudget.Tenant
}

var _ l7.Descriptors = (*tenantBudget)(nil)

// TakeDescriptor charges one descriptor to the tenant and the host.
func (t *tenantBudget) TakeDescriptor() bool {
	if !takeUnder(&t.fds, t.limit.Load()) {
		return false
	}
	if !takeUnder(&t.p.hostFDs, int64(t.p.cfg.Limits.MaxHostDescriptors)) {
		t.fds.Add(-1)
		return false
	}
	return true
}

// takeUnder adds one to n unless that would pass limit: n never reads
// above its limit, not even for a moment.
func takeUnder(n *atomic.Int64, limit int64) bool {
	for {
		v := n.Load()
		if v >= limit {
			return false
		}
		if n.CompareAndSwap(v, v+1) {
			return true
		}
	}
}

// takeUnderBy adds d to n unless that would take it past limit.
func takeUnderBy(n *atomic.Int64, d, limit int64) bool {
	for {
		v := n.Load()
		if v+d > limit {
			return false
		}
		if n.CompareAndSwap(v, v+d) {
			return true
		}
	}
}

// ReleaseDescriptor gives one back.
func (t *tenantBudget) ReleaseDescriptor() {
	t.fds.Add(-1)
	t.p.hostFDs.Add(-1)
}

// tenantBudget returns the tenant's budget, made on first use.
func (p *Proxy) tenantBudget(tenant string) *tenantBudget {
	if v, ok := p.tenants.Load(tenant); ok {
		return v.(*tenantBudget)
	}
	t := &tenantBudget{p: p, name: tenant, cpu: p.cfg.CPU.Tenant(tenant)}
	t.limit.Store(int64(p.cfg.Limits.MaxDescriptorsPerTenant))
	t.streamLimit.Store(int64(p.cfg.Limits.MaxConnectionsPerTenant))
	var cpu l7.CPU
	if t.cpu != nil {
		// Its HTTP/2 members' frames that no request pays for where it
		// is relayed count in its host CPU budget.
		cpu = t.cpu
	}
	t.member = l7.NewMemberBudget(t, cpu)
	if p.cfg.Attachments != nil {
		t.dialer = tenantDialer{a: p.cfg.Attachments, tenant: tenant}
	}
	v, _ := p.tenants.LoadOrStore(tenant, t)
	return v.(*tenantBudget)
}

// admitTenant counts a connection (or UDP flow) and its descriptor against
// its tenant's bounds (quota is the tenant's quotas.connections; 0 takes
// the defaults) and the host's; done undoes it. It reports nil when a
// bound is reached; reason says which.
func (p *Proxy) admitTenant(tenant string, quota int) (done func(), reason string) {
	if !takeUnder(&p.hostConns, int64(p.cfg.Limits.MaxHostConnections)) {
		return nil, RefusedHostLimit
	}
	t := p.tenantBudget(tenant)
	connLimit, fdLimit := p.cfg.Limits.MaxConnectionsPerTenant, p.cfg.Limits.MaxDescriptorsPerTenant
	if quota > 0 {
		connLimit, fdLimit = quota, 2*quota
	}
	if t.limit.Load() != int64(fdLimit) {
		t.limit.Store(int64(fdLimit))
	}
	if t.streamLimit.Load() != int64(connLimit) {
		t.streamLimit.Store(int64(connLimit))
	}
	if !takeUnder(&t.conns, int64(connLimit)) {
		p.hostConns.Add(-1)
		return nil, RefusedTenantLimit
	}
	if !t.TakeDescriptor() {
		t.conns.Add(-1)
		p.hostConns.Add(-1)
		if p.hostFDs.Load() >= int64(p.cfg.Limits.MaxHostDescriptors) {
			return nil, RefusedHostLimit
		}
		return nil, RefusedTenantLimit
	}
	t.cpu.Work(cpubudget.WorkConn)
	return t.done, ""
}

// done undoes admitTenant.
func (t *tenantBudget) done() {
	t.ReleaseDescriptor()
	t.conns.Add(-1)
	t.p.hostConns.Add(-1)
}

// listenerStreams charges one listener's HTTP/2 streams to its tenant's
// bound, counting the refusals against the listener.
type listenerStreams struct {
	t        *tenantBudget
	lb, name string
}

var _ l7.Streams = (*listenerStreams)(nil)

// TakeStream implements l7.Streams.
func (s *listenerStreams) TakeStream() bool {
	if takeUnder(&s.t.streams, s.t.streamLimit.Load()) {
		return true
	}
	s.t.p.metrics.ConnRefused(s.lb, s.name, RefusedTenantStreams)
	return false
}

// ReleaseStream implements l7.Streams.
func (s *listenerStreams) ReleaseStream() { s.t.streams.Add(-1) }

// TenantStreams reports a tenant's HTTP/2 streams in flight on this host.
func (p *Proxy) TenantStreams(tenant string) int64 {
	v, ok := p.tenants.Load(tenant)
	if !ok {
		return 0
	}
	return v.(*tenantBudget).streams.Load()
}

// TenantUse reports what a tenant holds on this host: its client
// connections and UDP flows, and the descriptors they and its member
// connections hold.
func (p *Proxy) TenantUse(tenant string) (conns, descriptors int64) {
	v, ok := p.tenants.Load(tenant)
	if !ok {
		return 0, 0
	}
	t := v.(*tenantBudget)
	return t.conns.Load(), t.fds.Load()
}

// observeBudgets adds the host's connections and descriptors against its
// bounds, and each selected tenant's holdings, to h.
func (p *Proxy) observeBudgets(f observe.Filter, h *pb.HostObservation) {
	if h.Resources == nil {
		h.Resources = &pb.HostResources{}
	}
	r := h.Resources
	r.Connections, r.MaxConnections = p.hostConns.Load(), int64(p.cfg.Limits.MaxHostConnections)
	r.Descriptors, r.MaxDescriptors = p.hostFDs.Load(), int64(p.cfg.Limits.MaxHostDescriptors)
	p.tenants.Range(func(k, v any) bool {
		name, t := k.(string), v.(*tenantBudget)
		if f.MatchTenant(name) {
			h.TenantUsage = append(h.TenantUsage, &pb.TenantUsage{Tenant: name, Connections: t.conns.Load(), Descriptors: t.fds.Load(), MaxDescriptors: t.limit.Load(),
				Cpu: observeCPU(p.cfg.CPU.Lookup(name))})
		}
		return true
	})
	slices.SortFunc(h.TenantUsage, func(a, b *pb.TenantUsage) int { return strings.Compare(a.Tenant, b.Tenant) })
}

// observeCPU is a tenant's host CPU budget and its use, as the
// accountant last saw them (nil without a budget).
func observeCPU(t *cpubudget.Tenant) *pb.TenantCPUObservation {
	if t == nil {
		return nil
	}
	st := t.HostStat()
	o := &pb.TenantCPUObservation{Millicores: st.Millicores, UsedSeconds: st.Used.Seconds(), WindowSeconds: st.Window.Seconds(),
		ThrottledSeconds: st.Throttled.Seconds(), Throttles: st.Throttles, InDebt: st.InDebt, HostCores: float64(cpubudget.HostCPUs())}
	if !st.At.IsZero() {
		o.Time = timestamppb.New(st.At)
	}
	return o
}

// HostDescriptors reports the descriptors all tenants' connections hold
// on this host.
func (p *Proxy) HostDescriptors() int64 { return p.hostFDs.Load() }

// withBudgets fills the bounds left at zero: from the one of a pair that
// is set (a connection holds two descriptors), else from b.
func (l Limits) withBudgets(b Budgets) Limits {
	pair := func(conns, fds *int, def int) {
		switch {
		case *conns <= 0 && *fds <= 0:
			*conns = max(def/2, 1)
			*fds = 2 * *conns
		case *fds <= 0:
			*fds = 2 * *conns
		case *conns <= 0:
			*conns = max(*fds/2, 1)
		}
	}
	pair(&l.MaxConnectionsPerTenant, &l.MaxDescriptorsPerTenant, b.Tenant)
	pair(&l.MaxHostConnections, &l.MaxHostDescriptors, b.Host)
	if l.SplicePipes == 0 {
		l.SplicePipes = b.Pipes
	}
	return l
}
