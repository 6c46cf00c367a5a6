package consensus

import (
	"cmp"
	"slices"

	"google.golang.org/protobuf/proto"

	"github.com/teapot-lb/teapot-lb/api"
	pb "github.com/teapot-lb/teapot-lb/api/proto/teapotv1"
)

// maxBatchBytes bounds the encoded writes that share one Raft entry; a
// single write larger than it goes alone. A write's cost in the loop
// (validation, encoding, the log write and the apply on every host) grows
// with its bytes, and every write of an entry waits for all of it: a
// tenant's load balancer of 2 MiB must not carry the small writes of
// others with it.
const maxBatchBytes = 1 << 20

// Classes of writes that belong to no tenant.
const (
	classAdmin    = "\x00admin"    // pools, tenants, nodes' objects written by operators
	classInternal = "\x00internal" // the cluster's own transactions (storage, locks, nodes)
)

// writeClass is whose write fw is, for the write loop's turns: the tenant
// its objects belong to, else the operator's or the cluster's class.
func writeClass(fw *pb.ForwardRequest) string {
	if fw.GetTxn() != nil {
		return classInternal
	}
	var ref *pb.ObjectRef
	switch {
	case fw.GetDelete() != nil:
		ref = fw.GetDelete().GetRef()
	case fw.GetChecked().GetDelete() != nil:
		ref = fw.GetChecked().GetDelete().GetRef()
	default:
		objs := fw.GetApply().GetObjects()
		if len(objs) == 0 {
			objs = fw.GetChecked().GetApply().GetObjects()
		}
		if len(objs) > 0 {
			ref = api.RefOf(objs[0])
		}
	}
	if t := ref.GetTenant(); t != "" && ref.GetKind() != api.KindTenant {
		return t
	}
	if fw.GetInternal() {
		return classInternal
	}
	return classAdmin
}

// fairQueue holds the writes waiting for the leader's write loop, one
// queue per class (a tenant, the operators, the cluster), and hands them
// out in turns, so that many small writes of one tenant never wait behind
// a long run of large ones of another, which the channel's arrival order
// would make them do. The class that led a batch least recently leads
// the next (one that never led, first; of those that tie, the one whose
// first write came first), then the others give one write
// each in that order, round after round, while the batch has room.
// Leading is remembered while a class has nothing waiting: a tenant whose
// writes come one at a time does not lead every batch by arriving anew.
type fairQueue struct {
	queues map[string][]*writeReq
	// led is the batch a class last led (0: never); batches counts them.
	led     map[string]uint64
	batches uint64
	n       int
	pushed  uint64 // writes pushed, which orders classes that tie
}

// maxLedClasses bounds the classes whose last lead is remembered; past
// it, those with nothing waiting are forgotten.
const maxLedClasses = 4096

func newFairQueue() *fairQueue {
	return &fairQueue{queues: map[string][]*writeReq{}, led: map[string]uint64{}}
}

func (q *fairQueue) len() int { return q.n }

func (q *fairQueue) push(r *writeReq) {
	q.pushed++
	r.seq = q.pushed
	q.queues[r.class] = append(q.queues[r.class], r)
	q.n++
}

// batch takes the writes of the next Raft entry: at most maxBatch writes
// of at most maxBatchBytes together (the first is taken whatever its
// size), one per class in turn.
func (q *fairQueue) batch() []*writeReq {
	if q.n == 0 {
		return nil
	}
	order := make([]string, 0, len(q.queues))
	for c := range q.queues {
		order = append(order, c)
	}
	slices.SortFunc(order, func(a, b string) int {
		if c := cmp.Compare(q.led[a], q.led[b]); c != 0 {
			return c
		}
		return cmp.Compare(q.queues[a][0].seq, q.queues[b][0].seq)
	})
	var out []*writeReq
	bytes := 0
	full := map[string]bool{} // classes whose next write does not fit
	for len(out) < maxBatch && len(full) < len(order) {
		for _, c := range order {
			if len(out) >= maxBatch {
				break
			}
			qs := q.queues[c]
			if full[c] || len(qs) == 0 {
				full[c] = true
				continue
			}
			r := qs[0]
			if len(out) > 0 && bytes+r.size > maxBatchBytes {
				full[c] = true
				continue
			}
			out = append(out, r)
			bytes += r.size
			qs[0] = nil
			q.queues[c] = qs[1:]
			q.n--
		}
	}
	q.batches++
	q.led[order[0]] = q.batches
	for _, c := range order {
		if len(q.queues[c]) == 0 {
			delete(q.queues, c)
		}
	}
	if len(q.led) > maxLedClasses {
		for c := range q.led {
			if _, waiting := q.queues[c]; !waiting {
				delete(q.led, c)
			}
		}
	}
	return out
}

// sizeOf is a write's encoded size, what its place in a batch costs.
func sizeOf(fw *pb.ForwardRequest) int { return proto.Size(fw) }
