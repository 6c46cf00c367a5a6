package proxy

import (
	"errors"
	"iter"
	"strings"
	"time"

	"github.com/teapot-lb/teapot-lb/api"
	pb "github.com/teapot-lb/teapot-lb/api/proto/teapotv1"
	"github.com/teapot-lb/teapot-lb/proxy/snapshot"
)

// Feed hands committed revisions of the desired state to a Proxy and logs
// each load balancer's problems when they change ("load balancer has
// problems", then "load balancer serving" once they are gone). The first
// state, and the whole state after the store's history was lost, go
// through Reset; every other revision through Apply with its changes
// alone, so that a change costs what it changes: the proxy compiles what
// it touches, and only the problems of the load balancers it touched are
// looked at. A Feed is used from one goroutine (Follow's); Applied,
// WaitApplied and Alive may be called from any.
type Feed struct {
	p        *Proxy
	reported map[string]string // "tenant/name" -> problems last logged ("" serving)
	applied  appliedWatch      // Follow's progress, read by other goroutines
}

// NewFeed returns a Feed of p; it logs with p's Logger.
func NewFeed(p *Proxy) *Feed {
	f := &Feed{p: p, reported: map[string]string{}}
	f.applied.advanced, f.applied.done = make(chan struct{}), make(chan struct{})
	return f
}

// Reset makes objs, the whole desired state at revision, the proxy's
// configuration (Update) and logs the problems of every load balancer.
// Finding nothing to change is not an error.
func (f *Feed) Reset(objs []*pb.Object, revision uint64) error {
	err := f.p.Update(objs, revision)
	if err != nil && !errors.Is(err, ErrNoChanges) {
		return err
	}
	status := f.p.Status()
	for lb := range f.reported {
		if _, ok := status[lb]; !ok {
			delete(f.reported, lb)
		}
	}
	f.log(status)
	return nil
}

// Apply applies the writes of one revision (each object's reference and
// the object as written, nil for a delete; kinds the data plane does not
// read are passed over) with ApplyChange, logs the problems of the load
// balancers it touched, and returns them ("tenant/name", sorted; none when
// nothing served changed). The first state must come through Reset.
// committed is when this host committed the revision (zero: unknown);
// the "configuration applied" line says how long the change waited from
// then and how long it took.
func (f *Feed) Apply(writes iter.Seq2[*pb.ObjectRef, *pb.Object], revision uint64, committed time.Time) ([]string, error) {
	var ch snapshot.Change
	for ref, obj := range writes {
		switch ref.GetKind() {
		case api.KindLoadBalancer, api.KindTenant, api.KindVIPPool, api.KindNode:
			if obj == nil {
				ch.Deleted = append(ch.Deleted, ref)
			} else {
				ch.Put = append(ch.Put, obj)
			}
		}
	}
	touched, err := f.p.applyChange(ch, revision, committed)
	if errors.Is(err, ErrNoChanges) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	status := f.p.StatusOf(touched)
	for _, lb := range touched {
		if _, ok := status[lb]; !ok {
			delete(f.reported, lb)
		}
	}
	f.log(status)
	return touched, nil
}

// maxLoggedProblems bounds the problems of one load balancer in one log
// line: a tenant's object may have a problem per route.
const maxLoggedProblems = 4096

// log logs the load balancers of status whose problems differ from those
// last logged, and remembers them.
func (f *Feed) log(status map[string][]Problem) {
	for lb, problems := range status {
		parts := make([]string, 0, len(problems))
		for _, p := range problems {
			parts = append(parts, p.Field+": "+p.Reason)
		}
		now := strings.Join(parts, "; ")
		if now != f.reported[lb] {
			if now == "" {
				f.p.log.Info("load balancer serving", "tenant", tenantOf(lb), "lb", lb)
			} else {
				// Each problem is bounded (api.Reasonf); so is the line.
				f.p.log.Warn("load balancer has problems", "tenant", tenantOf(lb), "lb", lb, "problems", api.Clip(now, maxLoggedProblems))
			}
		}
		f.reported[lb] = now
	}
}
