package consensus

import (
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
// out in turns: each class gives one write per turn, so that many small
// writes of one tenant never wait behind a long run of large ones of
// another, which the channel's arrival order would make them do.
type fairQueue struct {
	queues map[string][]*writeReq
	// order is the classes with writes waiting, in turn order; the
	// class at next takes the first place of the next batch.
	order []string
	next  int
	n     int
}

func newFairQueue() *fairQueue { return &fairQueue{queues: map[string][]*writeReq{}} }

func (q *fairQueue) len() int { return q.n }

func (q *fairQueue) push(r *writeReq) {
	if len(q.queues[r.class]) == 0 {
		q.order = append(q.order, r.class)
	}
	q.queues[r.class] = append(q.queues[r.class], r)
	q.n++
}

// batch takes the writes of the next Raft entry: at most maxBatch writes
// of at most maxBatchBytes together (the first is taken whatever its
// size), one per class in turn. The class that led this batch is the last
// to lead again.
func (q *fairQueue) batch() []*writeReq {
	if q.n == 0 {
		return nil
	}
	var out []*writeReq
	bytes := 0
	lead := q.order[q.next%len(q.order)]
	full := map[string]bool{} // classes whose next write does not fit
	for len(out) < maxBatch && len(full) < len(q.order) {
		progress := false
		for i := range q.order {
			if len(out) >= maxBatch {
				break
			}
			c := q.order[(q.next+i)%len(q.order)]
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
			progress = true
		}
		if !progress {
			break
		}
	}
	// Drop the classes left empty; the one after the leader leads next.
	kept := q.order[:0]
	nextLead := ""
	for i := range q.order {
		c := q.order[(q.next+i)%len(q.order)]
		if i > 0 && nextLead == "" && len(q.queues[c]) > 0 {
			nextLead = c
		}
	}
	if nextLead == "" && len(q.queues[lead]) > 0 {
		nextLead = lead
	}
	for _, c := range q.order {
		if len(q.queues[c]) > 0 {
			kept = append(kept, c)
		} else {
			delete(q.queues, c)
		}
	}
	q.order = kept
	q.next = 0
	for i, c := range q.order {
		if c == nextLead {
			q.next = i
		}
	}
	return out
}

// sizeOf is a write's encoded size, what its place in a batch costs.
func sizeOf(fw *pb.ForwardRequest) int { return proto.Size(fw) }
