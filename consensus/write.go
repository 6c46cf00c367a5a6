package consensus

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/hashicorp/raft"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/teapot-lb/teapot-lb/api"
	pb "github.com/teapot-lb/teapot-lb/api/proto/teapotv1"
)

// maxBatch bounds how many writes share one Raft entry.
const maxBatch = 256

// writeReq is one client write waiting for the leader's write loop.
type writeReq struct {
	fw   *pb.ForwardRequest
	done chan writeResp
	// class and size give the write its turn in the loop (fairQueue).
	class string
	size  int
	seq   uint64 // arrival order in the fairQueue
}

type writeResp struct {
	resp *pb.ForwardResponse
	err  error
}

// Apply creates or updates objects, all or none, on whichever host leads.
// internal writes may touch Node and JoinToken objects.
// A dry run (req.DryRun) or a write with revision preconditions travels
// to the leader as a checked write (see forwardApply).
func (n *Node) Apply(ctx context.Context, req *pb.ApplyRequest, internal bool) (*pb.ApplyResponse, error) {
	resp, err := n.write(ctx, forwardApply(req, internal))
	return resp.GetApply(), err
}

// Delete removes one object, or with req.DryRun checks that it may.
func (n *Node) Delete(ctx context.Context, req *pb.DeleteRequest, internal bool) (*pb.DeleteResponse, error) {
	resp, err := n.write(ctx, forwardDelete(req, internal))
	return resp.GetDelete(), err
}

// forwardApply is the leader's request for req. An apply that is a dry run
// or carries preconditions goes in the checked case: a leader of a release
// that does not know those fields finds no write it knows and refuses,
// where in the apply case it would ignore them and write.
func forwardApply(req *pb.ApplyRequest, internal bool) *pb.ForwardRequest {
	if req.GetDryRun() || len(req.GetPreconditions()) > 0 {
		return &pb.ForwardRequest{Write: &pb.ForwardRequest_Checked{Checked: &pb.CheckedWrite{Write: &pb.CheckedWrite_Apply{Apply: req}}}, Internal: internal}
	}
	return &pb.ForwardRequest{Write: &pb.ForwardRequest_Apply{Apply: req}, Internal: internal}
}

// forwardDelete is forwardApply for a delete.
func forwardDelete(req *pb.DeleteRequest, internal bool) *pb.ForwardRequest {
	if req.GetDryRun() {
		return &pb.ForwardRequest{Write: &pb.ForwardRequest_Checked{Checked: &pb.CheckedWrite{Write: &pb.CheckedWrite_Delete{Delete: req}}}, Internal: internal}
	}
	return &pb.ForwardRequest{Write: &pb.ForwardRequest_Delete{Delete: req}, Internal: internal}
}

// unchecked turns a checked write back into the apply or delete it
// carries, which the write loop reads; the fields it carries (dry_run,
// preconditions) are in the request itself.
func unchecked(fw *pb.ForwardRequest) (*pb.ForwardRequest, error) {
	switch w := fw.GetWrite().(type) {
	case nil:
		if len(fw.ProtoReflect().GetUnknown()) > 0 {
			return nil, fmt.Errorf("the leader's release does not know this kind of write (a host of a newer release sent it); nothing was written: upgrade the leader first: %w", api.ErrInvalid)
		}
		return nil, fmt.Errorf("nothing to apply: %w", api.ErrInvalid)
	case *pb.ForwardRequest_Checked:
		out := &pb.ForwardRequest{Internal: fw.GetInternal()}
		switch c := w.Checked.GetWrite().(type) {
		case *pb.CheckedWrite_Apply:
			out.Write = &pb.ForwardRequest_Apply{Apply: c.Apply}
		case *pb.CheckedWrite_Delete:
			out.Write = &pb.ForwardRequest_Delete{Delete: c.Delete}
		default:
			return nil, fmt.Errorf("the leader's release does not know this kind of checked write; nothing was written: upgrade the leader first: %w", api.ErrInvalid)
		}
		return out, nil
	}
	return fw, nil
}

// olderLeader reports whether err is how a leader of a release without
// checked writes refuses one: it finds no write it knows, so nothing to
// apply. A leader that knows them never answers so to a checked write
// that holds a delete or objects to apply.
func olderLeader(fw *pb.ForwardRequest, err error) bool {
	s, ok := status.FromError(err)
	c := fw.GetChecked()
	return ok && (c.GetDelete() != nil || len(c.GetApply().GetObjects()) > 0) &&
		s.Code() == codes.InvalidArgument && strings.HasPrefix(s.Message(), "nothing to apply")
}

// write runs fw on the leader: here if this host leads, else forwarded.
// Writes that fail because leadership moved are retried until ctx ends.
func (n *Node) write(ctx context.Context, fw *pb.ForwardRequest) (*pb.ForwardResponse, error) {
	if err := n.checkFeatures(ctx, fw); err != nil {
		return nil, err
	}
	var last error
	for {
		var resp *pb.ForwardResponse
		var err error
		if n.r().State() == raft.Leader {
			resp, err = n.local(ctx, fw)
		} else if _, addr := n.leaderAPI(); addr != "" {
			resp, err = n.forward(ctx, addr, fw)
		} else {
			err = errRetry
		}
		if err == nil || !retryable(err) {
			return resp, err
		}
		last = err
		if werr := n.waitRetry(ctx, last); werr != nil {
			return nil, werr
		}
	}
}

func retryable(err error) bool {
	if errors.Is(err, errRetry) || errors.Is(err, raft.ErrNotLeader) || errors.Is(err, raft.ErrLeadershipLost) ||
		errors.Is(err, raft.ErrLeadershipTransferInProgress) || errors.Is(err, raft.ErrAbortedByRestore) {
		return true
	}
	if s, ok := status.FromError(err); ok && s.Code() == codes.Unavailable {
		return true
	}
	return false
}

func (n *Node) forward(ctx context.Context, addr string, fw *pb.ForwardRequest) (*pb.ForwardResponse, error) {
	c, err := n.peers.cluster(addr)
	if err != nil {
		return nil, err
	}
	actx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	resp, err := c.Forward(actx, fw)
	if err != nil && actx.Err() != nil && ctx.Err() == nil {
		return nil, errRetry // that leader did not answer in time
	}
	if olderLeader(fw, err) {
		id, _ := n.leaderAPI()
		return nil, fmt.Errorf("the leader (%s) runs a release without dry runs and revision preconditions and refused the request; nothing was written: upgrade it first: %w", id, api.ErrConflict)
	}
	if err != nil && !retryable(err) {
		err = api.FromStatus(err)
	}
	return resp, err
}

// local hands fw to this leader's write loop and waits for its result.
func (n *Node) local(ctx context.Context, fw *pb.ForwardRequest) (*pb.ForwardResponse, error) {
	if rm := fw.GetRemoveNode(); rm != nil {
		return &pb.ForwardResponse{}, n.removeNode(ctx, rm.GetId())
	}
	fw, err := unchecked(fw)
	if err != nil {
		return nil, err
	}
	req := &writeReq{fw: fw, done: make(chan writeResp, 1), class: writeClass(fw), size: sizeOf(fw)}
	select {
	case n.writes <- req:
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-n.stop:
		return nil, ErrClosed
	}
	select {
	case r := <-req.done:
		return r.resp, r.err
	case <-n.stop:
		return nil, ErrClosed
	}
}

// runWrites is the leader's write loop: it takes every write waiting,
// validates and stamps each against the state plus the writes before it,
// and proposes them as one Raft entry (group commit). The writes waiting
// take their places in turns, one per tenant (fairQueue), in entries of
// at most maxBatchBytes, so that one tenant's large writes delay another's
// by one entry at most, not by all of them.
func (n *Node) runWrites() {
	defer n.wg.Done()
	q := newFairQueue()
	for {
		if q.len() == 0 {
			select {
			case r := <-n.writes:
				q.push(r)
			case <-n.stop:
				return
			}
		}
	drain:
		for {
			select {
			case r := <-n.writes:
				q.push(r)
			default:
				break drain
			}
		}
		n.commitBatch(q.batch())
	}
}

// prepared is a write that passed validation and waits for its entry.
type prepared struct {
	req     *writeReq
	txn     int // index in the command; -1 when nothing changes
	refs    []*pb.ObjectRef
	results []string
	objects []*pb.Object // filled for unchanged objects
	// staged are the objects as they would be stored (a dry run answers
	// with them).
	staged []*pb.Object
	// dry is a write checked like any other but never proposed.
	dry bool
}

// isDryRun reports whether fw asks only to check a write.
func isDryRun(fw *pb.ForwardRequest) bool {
	return fw.GetApply().GetDryRun() || fw.GetDelete().GetDryRun()
}

func (n *Node) commitBatch(batch []*writeReq) {
	fail := func(reqs []*writeReq, err error) {
		for _, r := range reqs {
			r.done <- writeResp{err: err}
		}
	}
	if n.r().State() != raft.Leader {
		fail(batch, errRetry)
		return
	}
	// A new leader first applies everything committed before its term so
	// that validation below sees the latest state.
	if term := n.r().CurrentTerm(); n.barrierTerm.Load() != term {
		if err := n.r().Barrier(5 * time.Second).Error(); err != nil {
			fail(batch, errRetry)
			return
		}
		n.barrierTerm.Store(term)
	}

	now := time.Now()
	cmd := &pb.Command{Version: commandVersion, Stamped: timestamppb.New(now)}
	var ready []*prepared
	n.fsm.mu.RLock()
	ov := newOverlay(n.fsm.st)
	for _, r := range batch {
		p, txn, err := prepare(r, ov, now)
		if err != nil {
			r.done <- writeResp{err: err}
			continue
		}
		p.txn = -1
		p.dry = isDryRun(r.fw)
		if txn != nil {
			child := newOverlay(ov)
			if err := checkTxn(child, txn, now); err != nil {
				r.done <- writeResp{err: err}
				continue
			}
			if p.dry {
				// Checked like a real write; never proposed, and the
				// writes after it do not see it.
				ready = append(ready, p)
				continue
			}
			child.mergeInto(ov)
			p.txn = len(cmd.Txns)
			cmd.Txns = append(cmd.Txns, txn)
		}
		ready = append(ready, p)
	}
	rev := n.fsm.st.revision
	n.fsm.mu.RUnlock()

	var res *applyResult
	if len(cmd.Txns) > 0 {
		data, err := proto.Marshal(cmd)
		if err != nil {
			fail(reqsOf(ready), fmt.Errorf("encode command: %w", err))
			return
		}
		start := time.Now()
		f := n.r().Apply(data, 10*time.Second)
		err = f.Error()
		n.metrics.apply.Observe(time.Since(start).Seconds())
		if err != nil {
			// ErrRaftShutdown: a recovery in place replaced Raft underneath.
			if errors.Is(err, raft.ErrNotLeader) || errors.Is(err, raft.ErrLeadershipLost) || errors.Is(err, raft.ErrRaftShutdown) {
				err = errRetry
			}
			fail(reqsOf(ready), err)
			return
		}
		res = f.Response().(*applyResult)
		rev = res.revision
		// Followers learn that the entry committed from the leader's next
		// AppendEntries, which hashicorp/raft sends for new entries or
		// after CommitTimeout without any. A barrier entry is sent at
		// once and carries the commit index: the followers apply this
		// write now, not up to 2×CommitTimeout later. A host alone has
		// no follower to tell, and the entry would cost a second log
		// write (and sync) per write, during which reads wait for Raft's
		// loop to confirm leadership (TestLoneHostWritesOneEntryPerWrite).
		if n.hasPeers() {
			go n.r().Barrier(time.Second)
		}
	}

	n.fsm.mu.RLock()
	defer n.fsm.mu.RUnlock()
	for _, p := range ready {
		if p.txn >= 0 && res.errs[p.txn] != nil {
			p.req.done <- writeResp{err: res.errs[p.txn]}
			continue
		}
		p.req.done <- writeResp{resp: n.respond(p, rev)}
	}
}

func reqsOf(ps []*prepared) []*writeReq {
	out := make([]*writeReq, len(ps))
	for i, p := range ps {
		out[i] = p.req
	}
	return out
}

// respond builds the reply of a committed write from the state.
func (n *Node) respond(p *prepared, rev uint64) *pb.ForwardResponse {
	if p.req.fw.GetDelete() != nil {
		return &pb.ForwardResponse{Delete: &pb.DeleteResponse{Revision: rev, DryRun: p.dry}}
	}
	out := &pb.ApplyResponse{Revision: rev, Results: p.results, DryRun: p.dry}
	for i, ref := range p.refs {
		obj := p.objects[i]
		if obj == nil && p.dry {
			obj = p.staged[i]
		}
		if obj == nil {
			obj = n.fsm.st.get(ref.Kind, keyOf(ref))
		}
		out.Objects = append(out.Objects, obj)
	}
	return &pb.ForwardResponse{Apply: out}
}

// kindOrder is the order in which one write's objects are applied, so that
// a file may hold a pool, a tenant using it and its load balancers.
var kindOrder = map[string]int{
	api.KindVIPPool: 0, api.KindTenant: 1, api.KindLoadBalancer: 2, api.KindCertificate: 3, api.KindNode: 4, api.KindJoinToken: 5,
	api.KindStorageItem: 6, api.KindStorageLock: 7,
}

// adminKinds are the kinds operators write; the others are the cluster's.
var adminKinds = map[string]bool{api.KindVIPPool: true, api.KindTenant: true, api.KindLoadBalancer: true}

// prepare validates a write's shape and stamps it: meta, allocated
// addresses. It returns a nil Txn when nothing would change.
func prepare(r *writeReq, ov *overlay, now time.Time) (*prepared, *pb.Txn, error) {
	p := &prepared{req: r}
	if raw := r.fw.GetTxn(); raw != nil {
		return prepareRaw(p, raw, r.fw.GetInternal(), ov, now)
	}
	if del := r.fw.GetDelete(); del != nil {
		ref := del.GetRef()
		if ref.GetKind() == "" || ref.GetName() == "" {
			return nil, nil, fmt.Errorf("delete needs a kind and a name: %w", api.ErrInvalid)
		}
		if !r.fw.GetInternal() && !adminKinds[ref.GetKind()] && ref.GetKind() != api.KindCertificate {
			return nil, nil, fmt.Errorf("%s objects are managed by the cluster (use `cluster remove` for nodes): %w", ref.GetKind(), api.ErrForbidden)
		}
		return p, &pb.Txn{Ops: []*pb.Op{{Op: &pb.Op_Delete{Delete: ref}}}}, nil
	}
	req := r.fw.GetApply()
	if len(req.GetObjects()) == 0 {
		return nil, nil, fmt.Errorf("nothing to apply: %w", api.ErrInvalid)
	}
	if err := checkPreconditions(req.GetPreconditions(), ov); err != nil {
		return nil, nil, err
	}
	idx := make([]int, len(req.GetObjects()))
	for i := range idx {
		idx[i] = i
	}
	objs := req.GetObjects()
	sort.SliceStable(idx, func(a, b int) bool {
		return kindOrder[api.RefOf(objs[idx[a]]).GetKind()] < kindOrder[api.RefOf(objs[idx[b]]).GetKind()]
	})
	p.refs = make([]*pb.ObjectRef, len(objs))
	p.results = make([]string, len(objs))
	p.objects = make([]*pb.Object, len(objs))
	p.staged = make([]*pb.Object, len(objs))
	seen := make(map[string]int)
	txn := &pb.Txn{}
	// Later objects of this write see the earlier ones (a tenant its new
	// pool) through scratch; checkTxn validates them all for real.
	scratch := newOverlay(ov)
	for _, i := range idx {
		ref := api.RefOf(objs[i])
		switch {
		case ref.Kind == "":
			return nil, nil, fmt.Errorf("objects[%d]: empty object: %w", i, api.ErrInvalid)
		case !r.fw.GetInternal() && !adminKinds[ref.Kind]:
			return nil, nil, fmt.Errorf("objects[%d]: %s objects are managed by the cluster: %w", i, ref.Kind, api.ErrForbidden)
		}
		key := ref.Kind + "\x00" + keyOf(ref)
		if j, dup := seen[key]; dup {
			return nil, nil, fmt.Errorf("objects[%d]: %s is given twice (also objects[%d]): %w", i, api.RefString(ref), j, api.ErrInvalid)
		}
		seen[key] = i
		p.refs[i] = ref

		obj := clone(objs[i])
		existing := scratch.get(ref.Kind, keyOf(ref))
		if t := obj.GetTenant(); t != nil {
			if err := ownTenantFields(t, existing.GetTenant(), r.fw.GetInternal()); err != nil {
				return nil, nil, err
			}
		}
		keepClientKeys(obj.GetLoadBalancer(), existing.GetLoadBalancer())
		switch {
		case req.GetMode() == pb.ApplyMode_APPLY_MODE_CREATE && existing != nil:
			return nil, nil, fmt.Errorf("%s %w", api.RefString(ref), api.ErrExists)
		case req.GetMode() == pb.ApplyMode_APPLY_MODE_UPDATE && existing == nil:
			return nil, nil, fmt.Errorf("%s %w", api.RefString(ref), api.ErrNotFound)
		}
		if existing != nil && specEqual(existing, obj) && !gainsFamily(existing.GetLoadBalancer(), scratch) {
			p.results[i] = "unchanged"
			p.objects[i] = existing
			continue
		}
		stamp(obj, existing, now)
		if lb := obj.GetLoadBalancer(); lb != nil {
			if err := allocate(lb, scratch); err != nil {
				return nil, nil, err
			}
		}
		op := &pb.Op{Op: &pb.Op_Put{Put: obj}}
		switch req.GetMode() {
		case pb.ApplyMode_APPLY_MODE_CREATE:
			op.MustNotExist = true
		case pb.ApplyMode_APPLY_MODE_UPDATE:
			op.MustExist = true
		}
		txn.Ops = append(txn.Ops, op)
		scratch.set(ref, obj)
		p.staged[i] = obj
		if existing == nil {
			p.results[i] = "created"
		} else {
			p.results[i] = "configured"
		}
	}
	if len(txn.Ops) == 0 {
		return p, nil, nil
	}
	return p, txn, nil
}

// checkPreconditions refuses a write when an object it names is no longer
// at the revision given. ov holds the writes committed before this one and
// those earlier in its batch (stamped, with no revision yet), so a change
// made by any of them fails the check, as it should.
func checkPreconditions(pcs []*pb.RevisionPrecondition, ov *overlay) error {
	for i, pc := range pcs {
		ref := pc.GetRef()
		if ref.GetKind() == "" || ref.GetName() == "" {
			return fmt.Errorf("preconditions[%d]: needs a kind and a name: %w", i, api.ErrInvalid)
		}
		cur := ov.get(ref.GetKind(), keyOf(ref))
		if cur == nil {
			return fmt.Errorf("%s %w: it was deleted (revision %d when read); nothing was written", api.RefString(ref), api.ErrChanged, pc.GetRevision())
		}
		if got := api.MetaOf(cur).GetRevision(); got != pc.GetRevision() {
			now := fmt.Sprintf("now %d", got)
			if got == 0 {
				now = "changed by a write just before this one"
			}
			return fmt.Errorf("%s %w (revision %d when read, %s); nothing was written", api.RefString(ref), api.ErrChanged, pc.GetRevision(), now)
		}
	}
	return nil
}

// ownTenantFields sets what the cluster owns in a tenant, whatever the
// writer sent: the uid (new on create, kept for the tenant's life) and the
// revoked credentials (kept; only the cluster's own revoke, an internal
// write, adds to them, and nothing removes one).
func ownTenantFields(t, old *pb.Tenant, internal bool) error {
	given := t.GetRevokedCredentials()
	t.RevokedCredentials = slices.Clone(old.GetRevokedCredentials())
	if old == nil {
		uid, err := newUID()
		if err != nil {
			return err
		}
		t.Uid = uid
	} else {
		t.Uid = old.GetUid()
	}
	if internal {
		for _, s := range given {
			if !slices.Contains(t.RevokedCredentials, s) {
				t.RevokedCredentials = append(t.RevokedCredentials, s)
			}
		}
		slices.Sort(t.RevokedCredentials)
	}
	return nil
}

// keepClientKeys gives back the client keys reads leave out: an HTTPS
// check that names a client certificate without its key keeps the key the
// load balancer stores for that same certificate, so that what get printed
// (or edit showed) applies as it is. A check with another certificate
// needs its key.
func keepClientKeys(lb, old *pb.LoadBalancer) {
	if lb == nil || old == nil {
		return
	}
	stored := map[string]string{}
	for _, bp := range old.GetPools() {
		if h := bp.GetHealthCheck().GetHttps(); h.GetClientCertPem() != "" && h.GetClientKeyPem() != "" {
			stored[h.GetClientCertPem()] = h.GetClientKeyPem()
		}
	}
	for _, bp := range lb.GetPools() {
		if h := bp.GetHealthCheck().GetHttps(); h != nil && h.GetClientCertPem() != "" && h.GetClientKeyPem() == "" {
			h.ClientKeyPem = stored[h.GetClientCertPem()]
		}
	}
}

// newUID is a tenant uid: 128 random bits in hex. The proposer stamps it;
// Apply never draws one.
func newUID() (string, error) {
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", fmt.Errorf("tenant uid: %w", err)
	}
	return hex.EncodeToString(b[:]), nil
}

// prepareRaw stamps an internal transaction of the cluster's own records
// (the certificate store): meta, modification times, lock expiries.
func prepareRaw(p *prepared, raw *pb.Txn, internal bool, ov *overlay, now time.Time) (*prepared, *pb.Txn, error) {
	if !internal {
		return nil, nil, fmt.Errorf("raw transactions are the cluster's own: %w", api.ErrForbidden)
	}
	txn := &pb.Txn{}
	for _, op := range raw.GetOps() {
		op = proto.Clone(op).(*pb.Op)
		if put := op.GetPut(); put != nil {
			ref := api.RefOf(put)
			stamp(put, ov.get(ref.Kind, keyOf(ref)), now)
		}
		txn.Ops = append(txn.Ops, op)
	}
	if len(txn.Ops) == 0 {
		return nil, nil, fmt.Errorf("empty transaction: %w", api.ErrInvalid)
	}
	return p, txn, nil
}

// gainsFamily reports whether a stored load balancer served on fewer
// families than it prefers (familyPolicy prefer) would get more now (its
// pool has an address of a missing family): an apply of the same spec
// then writes it again, with the new address, rather than answer
// unchanged.
func gainsFamily(lb *pb.LoadBalancer, ov *overlay) bool {
	if lb == nil || api.FamilyProblem(lb) == nil {
		return false
	}
	addrs, err := api.AllocateAddresses(lb, catalog{r: ov})
	return err == nil && len(addrs) > len(api.StatusAddrs(lb))
}

// allocate stamps the load balancer's addresses: status.address, and
// with vip.families status.addresses (every family's, address first).
func allocate(lb *pb.LoadBalancer, ov *overlay) error {
	addrs, err := api.AllocateAddresses(lb, catalog{r: ov})
	if err != nil {
		return err
	}
	if lb.Status == nil {
		lb.Status = &pb.LoadBalancerStatus{}
	}
	lb.Status.Address = addrs[0].String()
	lb.Status.Addresses = nil
	if len(lb.GetVip().GetFamilies()) > 0 {
		for _, a := range addrs {
			lb.Status.Addresses = append(lb.Status.Addresses, a.String())
		}
	}
	return nil
}

// stamp sets meta (and keeps the status) of an object about to be written.
func stamp(obj, existing *pb.Object, now time.Time) {
	meta := &pb.Meta{Generation: 1, Created: timestamppb.New(now), Updated: timestamppb.New(now)}
	if old := api.MetaOf(existing); old != nil {
		meta.Generation = old.GetGeneration() + 1
		meta.Created = old.GetCreated()
	}
	switch v := obj.GetKind().(type) {
	case *pb.Object_Tenant:
		v.Tenant.Meta = meta
	case *pb.Object_VipPool:
		v.VipPool.Meta = meta
	case *pb.Object_LoadBalancer:
		v.LoadBalancer.Meta = meta
		v.LoadBalancer.Status = nil
		if old := existing.GetLoadBalancer().GetStatus(); old != nil {
			v.LoadBalancer.Status = &pb.LoadBalancerStatus{Address: old.GetAddress(), Addresses: old.GetAddresses()}
		}
	case *pb.Object_Node:
		v.Node.Meta = meta
	case *pb.Object_Certificate:
		v.Certificate.Meta = meta
	case *pb.Object_JoinToken:
		v.JoinToken.Meta = meta
	case *pb.Object_StorageItem:
		v.StorageItem.Meta = meta
		v.StorageItem.Modified = timestamppb.New(now)
	case *pb.Object_StorageLock:
		v.StorageLock.Meta = meta
		v.StorageLock.Expires = timestamppb.New(now.Add(v.StorageLock.GetTtl().AsDuration()))
	}
}

// specEqual compares what a user wrote, ignoring meta and status.
func specEqual(a, b *pb.Object) bool {
	return proto.Equal(specOf(a), specOf(b))
}

func specOf(o *pb.Object) *pb.Object {
	c := clone(o)
	stamp(c, nil, time.Time{})
	switch v := c.GetKind().(type) {
	case *pb.Object_Tenant:
		v.Tenant.Meta = nil
	case *pb.Object_VipPool:
		v.VipPool.Meta = nil
	case *pb.Object_LoadBalancer:
		v.LoadBalancer.Meta, v.LoadBalancer.Status = nil, nil
	case *pb.Object_Node:
		v.Node.Meta = nil
	case *pb.Object_Certificate:
		v.Certificate.Meta = nil
	case *pb.Object_JoinToken:
		v.JoinToken.Meta = nil
	case *pb.Object_StorageItem:
		v.StorageItem.Meta, v.StorageItem.Modified = nil, nil
	case *pb.Object_StorageLock:
		v.StorageLock.Meta, v.StorageLock.Expires = nil, nil
	}
	return c
}

// hasPeers reports whether the Raft configuration holds a server besides
// this host.
func (n *Node) hasPeers() bool {
	f := n.r().GetConfiguration()
	if f.Error() != nil {
		return true
	}
	for _, s := range f.Configuration().Servers {
		if string(s.ID) != n.cfg.NodeID {
			return true
		}
	}
	return false
}
