package tenantsync

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"

	"github.com/teapot-lb/teapot-lb/api"
	"github.com/teapot-lb/teapot-lb/api/observe"
	pb "github.com/teapot-lb/teapot-lb/api/proto/teapotv1"
	"github.com/teapot-lb/teapot-lb/consensus"
	"github.com/teapot-lb/teapot-lb/tenantsync/syncspec"
)

// stream is one agent's open stream.
type stream struct {
	srv    *Server
	ss     pb.TenantSync_SyncServer
	caller caller
	agent  string
	cancel context.CancelCauseFunc

	sendMu sync.Mutex
	sent   time.Time

	mu sync.Mutex
	// last is the status the agent was last told per load balancer.
	last map[string]*pb.ObjectStatus
	// revs is the revision at which the stream knows each load balancer
	// (fence.go).
	revs map[string]uint64

	// quota is the tenant's effective quotas as this stream last saw the
	// tenant (its welcome, then the watch).
	quota atomic.Pointer[pb.Quotas]
}

// setQuotas records the tenant's effective quotas.
func (st *stream) setQuotas(t *pb.Tenant) { st.quota.Store(api.EffectiveQuotas(t)) }

// quotas returns the tenant's effective quotas (the defaults before the
// welcome read them).
func (st *stream) quotas() *pb.Quotas {
	if q := st.quota.Load(); q != nil {
		return q
	}
	return api.EffectiveQuotas(nil)
}

func (st *stream) send(m *pb.SyncResponse) error {
	st.sendMu.Lock()
	defer st.sendMu.Unlock()
	st.sent = time.Now()
	return st.ss.Send(m)
}

// sendMsg is send for a message encoded beforehand (grpc.PreparedMsg)
// or not.
func (st *stream) sendMsg(m any) error {
	st.sendMu.Lock()
	defer st.sendMu.Unlock()
	st.sent = time.Now()
	return st.ss.SendMsg(m)
}

// sendAck adds the members' health to the statuses an ack tells the
// agent, records them and sends it, with no status push in between: the
// agent takes the last status it gets, so an ack that followed a push of
// the same revision must not tell less than the push did.
func (st *stream) sendAck(ack *pb.SyncAck) error {
	st.withMembers(ack.GetResults())
	st.sendMu.Lock()
	defer st.sendMu.Unlock()
	st.record(ack.GetResults())
	st.sent = time.Now()
	return st.ss.Send(&pb.SyncResponse{Msg: &pb.SyncResponse_Ack{Ack: ack}})
}

// record notes statuses the agent is being told in an ack.
func (st *stream) record(results []*pb.ObjectStatus) {
	st.mu.Lock()
	defer st.mu.Unlock()
	for _, r := range results {
		if r.GetError() != "" {
			continue
		}
		if r.GetRemoved() {
			delete(st.last, r.GetName())
			continue
		}
		st.last[r.GetName()] = r
	}
}

// changed keeps the statuses that differ from what the agent was told and
// records them as told.
func (st *stream) changed(in []*pb.ObjectStatus) []*pb.ObjectStatus {
	st.mu.Lock()
	defer st.mu.Unlock()
	var out []*pb.ObjectStatus
	for _, s := range in {
		prev, known := st.last[s.GetName()]
		switch {
		case s.GetRemoved() && !known:
			continue
		case s.GetRemoved():
			delete(st.last, s.GetName())
		case known && proto.Equal(prev, s):
			continue
		default:
			st.last[s.GetName()] = s
		}
		out = append(out, s)
	}
	slices.SortFunc(out, func(a, b *pb.ObjectStatus) int { return strings.Compare(a.GetName(), b.GetName()) })
	return out
}

// healthPushEvery is the shortest time between two member-health pushes
// of a stream. A push costs its load balancers' members (a status of
// each, compared with what the agent was told and sent): a tenant whose
// members change health one at a time (1,000 members going down in turn)
// would otherwise make each of its streams rebuild its whole load
// balancer once per member, and the host spend in proportion to the
// square of its members.
const healthPushEvery = 250 * time.Millisecond

// follow watches the state from revision from: it pushes status changes
// of the tenant's load balancers, passes on changes of the tenant, ends
// the stream when the tenant goes away or revokes the caller's credential,
// and sends a heartbeat on a quiet stream. It follows the observed state
// through observed (nil: none) and pushes the members' health of the
// load balancers whose state changed, as soon as it changes.
func (st *stream) follow(ctx context.Context, from uint64, observed *observe.PlaneWatcher) {
	w := st.srv.cfg.Store.Watch(from)
	tick := time.NewTicker(st.srv.cfg.Heartbeat / 2)
	defer tick.Stop()
	events := make(chan consensus.Event)
	go func() {
		defer close(events)
		for {
			ev, err := w.Next(ctx)
			if err != nil {
				return
			}
			select {
			case events <- ev:
			case <-ctx.Done():
				return
			}
		}
	}()
	var health chan []string
	if observed != nil {
		health = make(chan []string)
		cpu := st.cpu()
		go func() {
			var pushed time.Time
			for {
				// One push per healthPushEvery at most: the changes of
				// the wait are taken together by the next Next. A change
				// after a quiet spell goes at once.
				if wait := healthPushEvery - time.Since(pushed); wait > 0 {
					t := time.NewTimer(wait)
					select {
					case <-t.C:
					case <-ctx.Done():
						t.Stop()
						return
					}
				}
				// A tenant in debt of its CPU budget waits for its
				// pushes too; the changes meanwhile go together.
				if cpu != nil && !cpu.Wait(ctx) {
					return
				}
				ch, err := observed.Next(ctx)
				if err != nil {
					return
				}
				pushed = time.Now()
				prefix := st.caller.tenant + "/"
				names := make([]string, 0, len(ch.LBs))
				for lb := range ch.LBs {
					names = append(names, strings.TrimPrefix(lb, prefix))
				}
				select {
				case health <- names:
				case <-ctx.Done():
					return
				}
			}
		}()
	}
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
			st.sendMu.Lock()
			idle := time.Since(st.sent) >= st.srv.cfg.Heartbeat
			st.sendMu.Unlock()
			if idle {
				if err := st.send(&pb.SyncResponse{Msg: &pb.SyncResponse_Status{Status: &pb.SyncStatus{Revision: st.srv.cfg.Store.Revision()}}}); err != nil {
					st.cancel(err)
					return
				}
			}
		case names := <-health:
			if err := st.chargedPushHealth(names); err != nil {
				st.cancel(err)
				return
			}
		case ev, ok := <-events:
			if !ok {
				return
			}
			if err := st.handle(ev); err != nil {
				st.cancel(err)
				return
			}
		}
	}
}

// handle turns one committed revision into a status push.
func (st *stream) handle(ev consensus.Event) error {
	tenant := st.caller.tenant
	var tenantObj *pb.Tenant
	tenantTouched := false
	var statuses []*pb.ObjectStatus
	lbs := map[string]*pb.LoadBalancer{} // the load balancers behind statuses
	certsTouched := false
	if ev.Reset {
		seen := map[string]bool{}
		tenantTouched = true
		for _, o := range ev.Objects {
			if t := o.GetTenant(); t.GetName() == tenant {
				tenantObj = t
			}
			if lb := o.GetLoadBalancer(); lb.GetTenant() == tenant && syncspec.Managed(lb.GetName()) {
				seen[lb.GetName()] = true
				lbs[lb.GetName()] = lb
				statuses = append(statuses, statusOf(lb))
			}
		}
		st.mu.Lock()
		for name := range st.last {
			if !seen[name] {
				statuses = append(statuses, &pb.ObjectStatus{Name: name, Removed: true})
			}
		}
		st.mu.Unlock()
	}
	for _, c := range ev.Changes {
		switch c.Ref.GetKind() {
		case api.KindTenant:
			if c.Ref.GetName() == tenant {
				tenantTouched = true
				tenantObj = c.Object.GetTenant()
			}
		case api.KindLoadBalancer:
			if c.Ref.GetTenant() != tenant || !syncspec.Managed(c.Ref.GetName()) {
				continue
			}
			if c.Type == consensus.ChangeDelete {
				statuses = append(statuses, &pb.ObjectStatus{Name: c.Ref.GetName(), Removed: true})
			} else {
				lbs[c.Ref.GetName()] = c.Object.GetLoadBalancer()
				statuses = append(statuses, statusOf(c.Object.GetLoadBalancer()))
			}
		case api.KindCertificate:
			certsTouched = certsTouched || c.Ref.GetTenant() == tenant
		}
	}
	statuses = st.withCertificates(statuses, lbs, certsTouched)
	st.withMembers(statuses)
	if tenantTouched {
		if err := st.caller.admit(tenantObj); err != nil {
			return err
		}
		st.setQuotas(tenantObj)
	}
	push := &pb.SyncStatus{Objects: st.changed(statuses), Revision: ev.Revision}
	if tenantTouched {
		push.Tenant = tenantObj
	}
	if len(push.Objects) == 0 && push.Tenant == nil {
		return nil
	}
	if err := st.send(&pb.SyncResponse{Msg: &pb.SyncResponse_Status{Status: push}}); err != nil {
		return fmt.Errorf("push status: %w", err)
	}
	return nil
}

// withCertificates adds certificate states to the statuses of load
// balancers serving https and, when the tenant's certificates changed,
// statuses for all its https load balancers. It reads this host's state
// only when there is something to add.
func (st *stream) withCertificates(statuses []*pb.ObjectStatus, lbs map[string]*pb.LoadBalancer, certsTouched bool) []*pb.ObjectStatus {
	need := certsTouched
	for _, lb := range lbs {
		need = need || len(tlsHosts(lb)) > 0
	}
	if !need {
		return statuses
	}
	tenant := st.caller.tenant
	objs, _ := st.srv.cfg.Store.LocalList(api.KindCertificate)
	var certs []*pb.Certificate
	for _, o := range objs {
		if c := o.GetCertificate(); c != nil && c.GetTenant() == tenant {
			certs = append(certs, c)
		}
	}
	if certsTouched {
		objs, _ = st.srv.cfg.Store.LocalList(api.KindLoadBalancer)
	} else {
		objs = nil
	}
	for _, o := range objs {
		if lb := o.GetLoadBalancer(); lb.GetTenant() == tenant && syncspec.Managed(lb.GetName()) && lbs[lb.GetName()] == nil && len(tlsHosts(lb)) > 0 {
			lbs[lb.GetName()] = lb
			statuses = append(statuses, statusOf(lb))
		}
	}
	for _, s := range statuses {
		if lb := lbs[s.GetName()]; lb != nil && !s.GetRemoved() {
			if hosts := tlsHosts(lb); len(hosts) > 0 {
				s.Certificates = certificateStates(hosts, certs)
			}
		}
	}
	return statuses
}

// withMembers adds the members' health to the statuses of stored load
// balancers, as the observed state tells it now.
func (st *stream) withMembers(statuses []*pb.ObjectStatus) {
	plane := st.srv.cfg.Observed
	if plane == nil {
		return
	}
	for _, s := range statuses {
		if !s.GetRemoved() && s.GetError() == "" {
			s.Members = memberStates(plane, st.caller.tenant+"/"+s.GetName())
		}
	}
}

// memberStates is the observed health of lb's members in the form of the
// tenant's status.
func memberStates(plane *observe.Plane, lb string) []*pb.MemberState {
	state, _ := plane.Get(lb)
	var out []*pb.MemberState
	for _, m := range state.Members {
		out = append(out, &pb.MemberState{Pool: m.Pool, Address: m.Addr.String(), Healthy: m.Healthy})
	}
	return out
}

// cpu is the stream's tenant's CPU budget (nil: none is charged).
func (st *stream) cpu() TenantCPU {
	if st.srv.cfg.CPU == nil {
		return nil
	}
	return st.srv.cfg.CPU(st.caller.tenant)
}

// chargedPushHealth is pushHealth charged to the tenant's CPU budget: a
// push rebuilds and sends its load balancers' whole member lists, once
// per stream, which a tenant with many members and streams makes the
// host do four times a second each (1,000 members on seven streams took
// a tenth of the host's CPU under the noisy neighbour's abuses).
//
// The push is built and encoded under the charge, and sent after it: a
// send waits while the agent does not read, and the charge holds its
// thread.
func (st *stream) chargedPushHealth(names []string) error {
	cpu := st.cpu()
	if cpu == nil {
		return st.pushHealth(names)
	}
	var (
		msg any
		err error
	)
	cpu.Run(func() {
		push := st.healthPush(names)
		if push == nil {
			return
		}
		pm := &grpc.PreparedMsg{}
		if err = pm.Encode(st.ss, push); err != nil {
			msg, err = push, nil // sent as it is, encoded by the send
			return
		}
		msg = pm
	})
	if err != nil || msg == nil {
		return err
	}
	if err := st.sendMsg(msg); err != nil {
		return fmt.Errorf("push member health: %w", err)
	}
	return nil
}

// pushHealth sends the statuses of the load balancers names (the observed
// state changed theirs) whose members' health differs from what the agent
// was last told: health changes without any change of the stored state.
// Load balancers the agent was not told of are left to the store's watch.
func (st *stream) pushHealth(names []string) error {
	push := st.healthPush(names)
	if push == nil {
		return nil
	}
	if err := st.send(push); err != nil {
		return fmt.Errorf("push member health: %w", err)
	}
	return nil
}

// healthPush is pushHealth's message, nil when there is nothing to tell.
func (st *stream) healthPush(names []string) *pb.SyncResponse {
	st.mu.Lock()
	var statuses []*pb.ObjectStatus
	for _, name := range names {
		if last := st.last[name]; last != nil {
			statuses = append(statuses, proto.Clone(last).(*pb.ObjectStatus))
		}
	}
	st.mu.Unlock()
	if len(statuses) == 0 {
		return nil
	}
	st.withMembers(statuses)
	changed := st.changed(statuses)
	if len(changed) == 0 {
		return nil
	}
	push := &pb.SyncStatus{Objects: changed, Revision: st.srv.cfg.Store.Revision()}
	return &pb.SyncResponse{Msg: &pb.SyncResponse_Status{Status: push}}
}
