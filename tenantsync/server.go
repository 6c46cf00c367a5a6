package tenantsync

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/teapot-lb/teapot-lb/api"
	"github.com/teapot-lb/teapot-lb/api/observe"
	"github.com/teapot-lb/teapot-lb/api/pki"
	pb "github.com/teapot-lb/teapot-lb/api/proto/teapotv1"
	"github.com/teapot-lb/teapot-lb/consensus"
	"github.com/teapot-lb/teapot-lb/tenantsync/syncspec"
)

// Errors of the server.
var (
	// ErrUnauthenticated: the caller presented no usable certificate.
	ErrUnauthenticated = errors.New("unauthenticated")
	// ErrRevoked: the caller's credential was revoked.
	ErrRevoked = fmt.Errorf("credential revoked: %w", api.ErrForbidden)
	// ErrProtocol: the agent broke the stream's rules.
	ErrProtocol = fmt.Errorf("stream protocol: %w", api.ErrInvalid)
	// ErrOutdated: a load balancer a stream writes changed since the
	// stream read or wrote it (fence.go).
	ErrOutdated = errors.New("stream outdated")
)

// Store is what the server needs of the replicated state and the host;
// consensus.Node implements it.
type Store interface {
	Apply(ctx context.Context, req *pb.ApplyRequest, internal bool) (*pb.ApplyResponse, error)
	Delete(ctx context.Context, req *pb.DeleteRequest, internal bool) (*pb.DeleteResponse, error)
	Get(ctx context.Context, ref *pb.ObjectRef) (*pb.Object, error)
	List(ctx context.Context, kind, tenant string) ([]*pb.Object, uint64, error)
	LocalList(kind string) ([]*pb.Object, uint64)
	Revision() uint64
	Watch(from uint64) *consensus.Watcher
	// CA signs tenant credentials; APIAddrs are where agents connect.
	CA() *pki.CA
	APIAddrs() []string
	// ChargeWrites takes a tenant's writes from its write budget, which
	// the leader keeps for the cluster, and says how long they wait.
	ChargeWrites(ctx context.Context, tenant string, bytes int) (consensus.WriteCharge, error)
}

var _ Store = (*consensus.Node)(nil)

// featureLeveler is implemented by a Store that knows the cluster's
// feature level, which the welcome tells the agent.
type featureLeveler interface {
	ClusterFeatureLevel() uint32
}

var _ featureLeveler = (*consensus.Node)(nil)

// Defaults of Config.
const (
	DefaultMaxBatch     = syncspec.DefaultMaxBatch
	DefaultRate         = 2000  // objects per second per tenant and host
	DefaultBurst        = 10000 // an agent's first sync of 10,000 Services is not slowed
	DefaultMaxStreams   = 8
	DefaultApplyTimeout = 30 * time.Second
	DefaultHeartbeat    = 10 * time.Second
	DefaultHelloTimeout = 10 * time.Second
)

// Config configures a Server; zero fields take the defaults.
type Config struct {
	Store  Store
	Logger *slog.Logger
	// Rate and Burst bound the objects (upserts and removals) one tenant
	// changes per second on this host; a faster agent is slowed down, not
	// refused.
	Rate  float64
	Burst int
	// MaxStreams bounds one tenant's open streams on this host.
	MaxStreams int
	// MaxBatch bounds the objects in one change.
	MaxBatch int
	// InFlight bounds the changes of one stream written at once (see
	// pipeline); 1 writes them one after the other.
	InFlight int
	// ApplyTimeout bounds one change's writes; a change that cannot be
	// written in time (no leader) ends the stream and the agent resyncs.
	ApplyTimeout time.Duration
	// Heartbeat is how often an idle stream carries an empty status, so
	// that an agent notices a silent host.
	Heartbeat time.Duration
	// HelloTimeout bounds the wait for a stream's hello; a stream that
	// says nothing is closed and frees its slot.
	HelloTimeout time.Duration
	// Observed, if set, is this host's data plane's observed state: the
	// statuses carry the health of each load balancer's members as it
	// tells, and each stream follows it to push their changes.
	Observed *observe.Plane
	// Events receives a tenant-refused event when an object of a tenant
	// is refused, once per object and reason; nil drops them.
	Events func(*pb.Event)
	// Certificates stores the certificates agents upload (nil: refused).
	Certificates CertificateStore
	// CPU, if set, returns a tenant's host CPU budget (the data plane's
	// quotas.cpuMillicores): the member-health pushes of the tenant's
	// streams are charged to it where they are built and sent, and wait
	// while the tenant is in debt. nil: not charged.
	CPU func(tenant string) TenantCPU
}

// TenantCPU is one tenant's host CPU budget as its streams charge it.
type TenantCPU interface {
	// Wait returns once the tenant is not in debt of its budget, false
	// if ctx ended first.
	Wait(ctx context.Context) bool
	// Run runs f and charges the tenant the CPU time f spent.
	Run(f func())
}

// Server serves the TenantSync stream and the TenantCredentials calls.
type Server struct {
	pb.UnimplementedTenantSyncServer
	cfg Config
	log *slog.Logger

	refusals refusals
	mu       sync.Mutex
	streams  map[string]map[*stream]struct{}
	limiters map[string]*bucket
	budgets  writeBudgets

	hostsMu  sync.Mutex
	hostsRev uint64
	hosts    *api.HostPorts

	metrics *syncMetrics
}

var _ pb.TenantSyncServer = (*Server)(nil)

// New returns a server over cfg.Store.
func New(cfg Config) *Server {
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Rate <= 0 {
		cfg.Rate = DefaultRate
	}
	if cfg.Burst <= 0 {
		cfg.Burst = DefaultBurst
	}
	if cfg.MaxStreams <= 0 {
		cfg.MaxStreams = DefaultMaxStreams
	}
	if cfg.MaxBatch <= 0 {
		cfg.MaxBatch = DefaultMaxBatch
	}
	if cfg.InFlight <= 0 {
		cfg.InFlight = DefaultInFlight
	}
	if cfg.ApplyTimeout <= 0 {
		cfg.ApplyTimeout = DefaultApplyTimeout
	}
	if cfg.Heartbeat <= 0 {
		cfg.Heartbeat = DefaultHeartbeat
	}
	if cfg.HelloTimeout <= 0 {
		cfg.HelloTimeout = DefaultHelloTimeout
	}
	return &Server{
		cfg:      cfg,
		log:      cfg.Logger.With("component", "tenantsync"),
		streams:  map[string]map[*stream]struct{}{},
		limiters: map[string]*bucket{},
		metrics:  newSyncMetrics(),
	}
}

// toStatus turns an error into a gRPC status with a message a person can
// act on.
func toStatus(err error) error {
	if errors.Is(err, ErrUnauthenticated) {
		return status.Error(codes.Unauthenticated, err.Error())
	}
	return api.ToStatus(err)
}

// recvHello waits at most HelloTimeout for the stream's first message.
func (s *Server) recvHello(ss pb.TenantSync_SyncServer) (*pb.SyncRequest, error) {
	type recv struct {
		m   *pb.SyncRequest
		err error
	}
	ch := make(chan recv, 1)
	go func() {
		m, err := ss.Recv()
		ch <- recv{m, err}
	}()
	t := time.NewTimer(s.cfg.HelloTimeout)
	defer t.Stop()
	select {
	case r := <-ch:
		return r.m, r.err
	case <-t.C:
		// Returning ends the stream, which ends the Recv above.
		return nil, status.Errorf(codes.DeadlineExceeded, "no hello within %s; the stream is closed", s.cfg.HelloTimeout)
	}
}

// Sync serves one agent's stream.
func (s *Server) Sync(ss pb.TenantSync_SyncServer) error {
	c, err := authenticate(ss.Context())
	if err != nil {
		return toStatus(err)
	}
	ctx, cancel := context.WithCancelCause(ss.Context())
	defer cancel(nil)
	st := &stream{srv: s, ss: ss, caller: c, cancel: cancel, last: map[string]*pb.ObjectStatus{}, revs: map[string]uint64{}}
	if err := s.register(st); err != nil {
		return toStatus(err)
	}
	defer s.unregister(st)

	first, err := s.recvHello(ss)
	if err != nil {
		return err
	}
	hello := first.GetHello()
	if hello == nil {
		return toStatus(fmt.Errorf("the first message must be a hello: %w", ErrProtocol))
	}
	st.agent = hello.GetAgent()
	log := s.log.With("tenant", c.tenant, "agent", hello.GetAgent(), "credential", c.serial)

	// The observed state is followed from before the welcome reads it,
	// so that no change of member health falls in between.
	var observed *observe.PlaneWatcher
	if s.cfg.Observed != nil {
		observed = s.cfg.Observed.Watch(s.cfg.Observed.Revision()).Only(c.tenant + "/")
	}
	welcome, err := s.welcome(ctx, st)
	if err != nil {
		return toStatus(err)
	}
	if err := st.send(&pb.SyncResponse{Msg: &pb.SyncResponse_Welcome{Welcome: welcome}}); err != nil {
		return err
	}
	log.Info("agent connected", "objects", len(welcome.GetObjects()), "revision", welcome.GetRevision(), "version", hello.GetVersion())
	go st.follow(ctx, welcome.GetRevision()+1, observed)

	msgs := make(chan *pb.SyncRequest)
	recvErr := make(chan error, 1)
	go func() {
		for {
			msg, err := ss.Recv()
			if err != nil {
				recvErr <- err
				return
			}
			select {
			case msgs <- msg:
			case <-ctx.Done():
				return
			}
		}
	}()
	p := newPipeline(ctx, s, st, log)
	defer func() {
		cancel(nil)
		p.close()
	}()
	for {
		var msg *pb.SyncRequest
		select {
		case <-ctx.Done():
			cause := context.Cause(ctx)
			log.Info("stream closed", "reason", cause)
			return toStatus(cause)
		case err := <-recvErr:
			if errors.Is(err, io.EOF) {
				// The changes sent before the end are written and acked.
				p.acked.Wait()
				log.Info("agent disconnected")
				return nil
			}
			log.Info("agent stream ended", "err", err)
			return err
		case msg = <-msgs:
		}
		ch := msg.GetChange()
		if ch == nil {
			return toStatus(fmt.Errorf("after the hello only changes may be sent: %w", ErrProtocol))
		}
		n := len(ch.GetUpserts()) + len(ch.GetRemovals()) + len(ch.GetCertificates()) + len(ch.GetCertificateRemovals())
		if n > s.cfg.MaxBatch {
			return toStatus(fmt.Errorf("change %d holds %d objects; at most %d: %w", ch.GetSeq(), n, s.cfg.MaxBatch, ErrProtocol))
		}
		if err := s.limiter(c.tenant).wait(ctx, n); err != nil {
			return toStatus(cmpCause(ctx, err))
		}
		if err := s.chargeWrite(ctx, st, ch); err != nil {
			return toStatus(cmpCause(ctx, err))
		}
		if err := p.start(ch); err != nil {
			return toStatus(cmpCause(ctx, err))
		}
	}
}

// cmpCause prefers the reason a stream was cancelled for over err.
func cmpCause(ctx context.Context, err error) error {
	if cause := context.Cause(ctx); cause != nil && !errors.Is(cause, context.Canceled) {
		return cause
	}
	return err
}

// welcome reads the tenant and its managed load balancers, linearizably.
func (s *Server) welcome(ctx context.Context, st *stream) (*pb.SyncWelcome, error) {
	ctx, cancel := context.WithTimeout(ctx, s.cfg.ApplyTimeout)
	defer cancel()
	var tenant *pb.Tenant
	o, err := s.cfg.Store.Get(ctx, &pb.ObjectRef{Kind: api.KindTenant, Name: st.caller.tenant})
	switch {
	case err == nil:
		tenant = o.GetTenant()
	case !errors.Is(err, api.ErrNotFound):
		return nil, err
	}
	if err := st.caller.admit(tenant); err != nil {
		return nil, err
	}
	st.setQuotas(tenant)
	lbs, rev, err := s.cfg.Store.List(ctx, api.KindLoadBalancer, st.caller.tenant)
	if err != nil {
		return nil, err
	}
	w := &pb.SyncWelcome{Tenant: tenant, Revision: rev, MaxBatch: uint32(s.cfg.MaxBatch)}
	if fl, ok := s.cfg.Store.(featureLeveler); ok {
		w.FeatureLevel = fl.ClusterFeatureLevel()
	}
	for _, o := range lbs {
		lb := o.GetLoadBalancer()
		if !syncspec.Managed(lb.GetName()) {
			continue
		}
		stat := statusOf(lb)
		st.withMembers([]*pb.ObjectStatus{stat})
		w.Objects = append(w.Objects, stat)
		st.last[lb.GetName()] = stat
		st.revs[lb.GetName()] = lb.GetMeta().GetRevision()
	}
	return w, nil
}

// statusOf is what the agent learns about a stored load balancer.
func statusOf(lb *pb.LoadBalancer) *pb.ObjectStatus {
	stat := &pb.ObjectStatus{Name: lb.GetName(), Version: syncspec.Version(lb), Address: lb.GetStatus().GetAddress(), Addresses: lb.GetStatus().GetAddresses()}
	stat.Problems = append(stat.Problems, lb.GetStatus().GetProblems()...)
	stat.Problems = append(stat.Problems, api.LoadBalancerProblems(lb)...)
	return stat
}

// register admits a stream within the tenant's limit.
func (s *Server) register(st *stream) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	set := s.streams[st.caller.tenant]
	if len(set) >= s.cfg.MaxStreams {
		return fmt.Errorf("tenant %s has %d open streams on this host, the most allowed: %w", st.caller.tenant, len(set), api.ErrConflict)
	}
	if set == nil {
		set = map[*stream]struct{}{}
		s.streams[st.caller.tenant] = set
	}
	set[st] = struct{}{}
	return nil
}

func (s *Server) unregister(st *stream) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.streams[st.caller.tenant], st)
	if len(s.streams[st.caller.tenant]) == 0 {
		delete(s.streams, st.caller.tenant)
	}
}

// closeRevoked ends the tenant's streams whose credential is in serials and
// returns how many it ended.
func (s *Server) closeRevoked(tenant string, serials map[string]bool) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for st := range s.streams[tenant] {
		if serials[st.caller.serial] {
			st.cancel(fmt.Errorf("credential %s of tenant %s was revoked: %w", st.caller.serial, tenant, ErrRevoked))
			n++
		}
	}
	return n
}

// Streams returns the number of open streams per tenant on this host.
func (s *Server) Streams() map[string]int {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make(map[string]int, len(s.streams))
	for t, set := range s.streams {
		out[t] = len(set)
	}
	return out
}

func (s *Server) limiter(tenant string) *bucket {
	s.mu.Lock()
	defer s.mu.Unlock()
	b := s.limiters[tenant]
	if b == nil {
		b = newBucket(s.cfg.Rate, s.cfg.Burst)
		s.limiters[tenant] = b
	}
	return b
}

// hostPorts returns the LB hosts' own services at the current revision.
func (s *Server) hostPorts() *api.HostPorts {
	rev := s.cfg.Store.Revision()
	s.hostsMu.Lock()
	defer s.hostsMu.Unlock()
	if s.hosts == nil || s.hostsRev != rev {
		// The hosts alone: every change of a sync moves the revision.
		objs, r := s.cfg.Store.LocalList(api.KindNode)
		s.hosts, s.hostsRev = hostPorts(objs), r
	}
	return s.hosts
}
