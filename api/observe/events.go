package observe

import (
	"slices"
	"sync"
	"time"
	"unicode/utf8"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	pb "github.com/teapot-lb/teapot-lb/api/proto/teapotv1"
)

// Event types.
const (
	EventVIPTaken      = "vip-taken"
	EventVIPReleased   = "vip-released"
	EventBindFailed    = "bind-failed"
	EventBindOK        = "bind-ok"
	EventMemberDown    = "member-down"
	EventMemberUp      = "member-up"
	EventCertIssued    = "cert-issued"
	EventCertFailed    = "cert-failed"
	EventTenantRefused = "tenant-refused"
	// EventTenantThrottled: a tenant's changes wait for its write budget
	// (quotas.writeBytesPerSecond) on the host.
	EventTenantThrottled = "tenant-throttled"
	// EventTenantOutdated: a tenant's stream ended because a load
	// balancer its change writes was written by another stream or the
	// operator since the stream read it (the fence); its agent resyncs.
	EventTenantOutdated = "tenant-outdated"
	EventLeaderChange   = "leader-change"
	// EventRouteDropped: a tenant's BGP speaker announced a route that
	// was dropped, or its session was closed for its prefix count.
	EventRouteDropped = "route-dropped"
	// EventClientSourceFailed: a pool's member connections are made from
	// the client's address (pools.*.clientSource) and this host cannot:
	// its connections are refused, the message says why.
	EventClientSourceFailed = "client-source-failed"
)

// Severities.
const (
	Info    = "info"
	Warning = "warning"
)

// DefaultEvents is the ring's size when NewEvents is given 0.
const DefaultEvents = 1000

// Limits on what one query returns.
const (
	DefaultMaxEvents = 100
	MaxEvents        = 1000
	// maxMessage bounds an event's message and maxField each of its other
	// strings: a tenant may influence them, and a query of MaxEvents
	// events of every host must fit one admin API message.
	maxMessage = 512
	maxField   = 256
)

// clip cuts s to at most max bytes at a character boundary (an event is
// protobuf: its strings stay valid UTF-8), marking the cut.
func clip(s string, max int) string {
	if len(s) <= max {
		return s
	}
	for max > 0 && !utf8.RuneStart(s[max]) {
		max--
	}
	return s[:max] + "…"
}

// Events is a bounded ring of a host's recent events. The oldest event is
// dropped when it is full. It is safe for concurrent use.
type Events struct {
	mu      sync.Mutex
	node    string
	buf     []*pb.Event // ring, len == capacity once full
	head    int         // index of the oldest event once full
	seq     uint64      // sequence number of the newest event
	changed chan struct{}
	now     func() time.Time
}

// NewEvents returns an empty ring of capacity events (0: DefaultEvents)
// stamped with node.
func NewEvents(node string, capacity int) *Events {
	if capacity <= 0 {
		capacity = DefaultEvents
	}
	return &Events{node: node, buf: make([]*pb.Event, 0, capacity), changed: make(chan struct{}), now: time.Now}
}

// Add records an event; it stamps the sequence number, the node and (when
// unset) the time. A nil ring records nothing.
func (e *Events) Add(ev *pb.Event) {
	if e == nil {
		return
	}
	ev = proto.Clone(ev).(*pb.Event)
	ev.Message = clip(ev.Message, maxMessage)
	ev.Type, ev.Severity = clip(ev.Type, maxField), clip(ev.Severity, maxField)
	ev.Tenant, ev.LoadBalancer, ev.Host = clip(ev.Tenant, maxField), clip(ev.LoadBalancer, maxField), clip(ev.Host, maxField)
	if ev.Severity == "" {
		ev.Severity = Info
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	e.seq++
	ev.Seq, ev.NodeId = e.seq, e.node
	if ev.Time == nil {
		ev.Time = timestamppb.New(e.now())
	}
	if len(e.buf) < cap(e.buf) {
		e.buf = append(e.buf, ev)
	} else {
		e.buf[e.head] = ev
		e.head = (e.head + 1) % len(e.buf)
	}
	close(e.changed)
	e.changed = make(chan struct{})
}

// Changed returns a channel closed at the next Add.
func (e *Events) Changed() <-chan struct{} {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.changed
}

// Last is the sequence number of the newest event (0: none yet).
func (e *Events) Last() uint64 {
	if e == nil {
		return 0
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.seq
}

// Since returns the events newer than after that f selects, oldest first,
// at most max (the newest ones), and the newest sequence number.
func (e *Events) Since(after uint64, f Filter, max int) ([]*pb.Event, uint64) {
	if e == nil {
		return nil, 0
	}
	if max <= 0 {
		max = DefaultMaxEvents
	}
	max = min(max, MaxEvents)
	e.mu.Lock()
	defer e.mu.Unlock()
	var out []*pb.Event
	n := len(e.buf)
	for i := n - 1; i >= 0 && len(out) < max; i-- {
		ev := e.buf[(e.head+i)%n]
		if ev.Seq <= after {
			break
		}
		if f.MatchEvent(ev) {
			out = append(out, ev)
		}
	}
	for i, j := 0, len(out)-1; i < j; i, j = i+1, j-1 {
		out[i], out[j] = out[j], out[i]
	}
	return out, e.seq
}

// MatchEvent reports whether f selects ev. A certificate event (no load
// balancer, a DNS name in host) is selected by its tenant, and by a
// load balancer of that tenant: which names a load balancer serves is in
// the stored object, which the host does not consult here, so the admin
// API narrows it with KeepCertEventsOf.
func (f Filter) MatchEvent(ev *pb.Event) bool {
	if ev.GetLoadBalancer() == "" && ev.GetHost() != "" {
		return f.MatchTenant(ev.GetTenant())
	}
	return f.Match(ev.GetTenant(), ev.GetLoadBalancer())
}

// LBNames are the DNS names lb serves: its routes' and SNI routes' hosts.
// A certificate for one of them is the load balancer's.
func LBNames(lb *pb.LoadBalancer) []string {
	var out []string
	add := func(h string) {
		if h != "" && !slices.Contains(out, h) {
			out = append(out, h)
		}
	}
	for _, r := range lb.GetRoutes() {
		add(r.GetHost())
	}
	for _, l := range lb.GetListeners() {
		for _, r := range l.GetSniRoutes() {
			add(r.GetHost())
		}
	}
	return out
}

// KeepCertEventsOf drops from every host's events the certificate events
// of names lb does not serve (lb nil: every certificate event), so a
// selection of one load balancer has its own certificates' events and
// not those of the tenant's other load balancers.
func KeepCertEventsOf(hosts []*pb.HostObservation, lb *pb.LoadBalancer) {
	names := LBNames(lb)
	for _, h := range hosts {
		h.Events = slices.DeleteFunc(h.Events, func(ev *pb.Event) bool {
			return ev.GetLoadBalancer() == "" && ev.GetHost() != "" &&
				(ev.GetTenant() != lb.GetTenant() || !slices.Contains(names, ev.GetHost()))
		})
	}
}
