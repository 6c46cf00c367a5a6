package tenantsync

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"

	pb "github.com/teapot-lb/teapot-lb/api/proto/teapotv1"
)

// DefaultInFlight bounds the changes of one stream written at once.
const DefaultInFlight = 8

// pipeline writes a stream's changes, several at once when they do not
// depend on each other, and acks them in the order they came. A change
// of upserts alone whose names no change in flight names is independent:
// the leader folds the changes waiting for it into one Raft entry, and
// validates each against the state plus the writes before it, as it
// would one after the other. Any other change (removals, a resync end,
// certificates, a name in flight) waits until every earlier one is
// written, so that it meets the state the agent meant it for, and the
// changes after it wait for it in turn.
type pipeline struct {
	srv *Server
	st  *stream
	ctx context.Context
	log *slog.Logger

	queue chan *inFlight // in order; the acker takes them
	slots chan struct{}
	acked sync.WaitGroup // changes started and not yet acked
	ended chan struct{}  // the acker returned

	mu    sync.Mutex
	names map[string]int // load balancer names in flight
	// barriers counts the changes in flight that are not independent.
	barriers int
}

// inFlight is one change being written.
type inFlight struct {
	ch      *pb.SyncChange
	barrier bool
	names   []string
	start   time.Time
	ack     *pb.SyncAck
	err     error
	done    chan struct{}
}

func newPipeline(ctx context.Context, srv *Server, st *stream, log *slog.Logger) *pipeline {
	p := &pipeline{
		srv: srv, st: st, ctx: ctx, log: log,
		queue: make(chan *inFlight, srv.cfg.InFlight),
		slots: make(chan struct{}, srv.cfg.InFlight),
		ended: make(chan struct{}),
		names: map[string]int{},
	}
	go p.acker()
	return p
}

// barrier reports whether ch must be written alone: after every change
// before it and before any after it.
func barrier(ch *pb.SyncChange) bool {
	return len(ch.GetRemovals()) > 0 || ch.GetResyncEnd() || len(ch.GetCertificates()) > 0 || len(ch.GetCertificateRemovals()) > 0
}

// independent reports whether ch may be written beside the changes in
// flight. Called by the one goroutine that starts changes.
func (p *pipeline) independent(ch *pb.SyncChange) bool {
	if barrier(ch) {
		return false
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.barriers > 0 {
		return false
	}
	for _, up := range ch.GetUpserts() {
		if p.names[up.GetLoadBalancer().GetName()] > 0 {
			return false
		}
	}
	return true
}

// start begins writing ch once it may; its ack follows those of the
// changes started before it. It returns early only when the stream ends.
func (p *pipeline) start(ch *pb.SyncChange) error {
	if !p.independent(ch) {
		p.acked.Wait()
	}
	select {
	case p.slots <- struct{}{}:
	case <-p.ctx.Done():
		return context.Cause(p.ctx)
	}
	f := &inFlight{ch: ch, barrier: barrier(ch), start: time.Now(), done: make(chan struct{})}
	p.mu.Lock()
	if f.barrier {
		p.barriers++
	}
	for _, up := range ch.GetUpserts() {
		name := up.GetLoadBalancer().GetName()
		f.names = append(f.names, name)
		p.names[name]++
	}
	p.mu.Unlock()
	p.acked.Add(1)
	p.queue <- f // never blocks: a slot is held for it
	go func() {
		defer close(f.done)
		f.ack, f.err = p.srv.applyChange(p.ctx, p.st, ch)
	}()
	return nil
}

// acker sends the acks in order. A change that could not be written ends
// the stream (the agent resyncs on its next one); the changes after it
// get no ack.
func (p *pipeline) acker() {
	defer close(p.ended)
	failed := false
	for f := range p.queue {
		<-f.done
		tenant := p.st.caller.tenant
		p.srv.metrics.note(tenant, f.ack, f.err, time.Since(f.start))
		switch {
		case failed:
		case f.err != nil:
			failed = true
			if errors.Is(f.err, ErrOutdated) {
				p.srv.noteOutdated(tenant, p.st.agent, f.err)
			}
			p.log.Warn("change not applied; the agent resyncs on its next stream", "seq", f.ch.GetSeq(), "err", f.err)
			p.st.cancel(cmpCause(p.ctx, f.err))
		default:
			if err := p.st.sendAck(f.ack); err != nil {
				failed = true
				p.st.cancel(err)
			}
		}
		p.mu.Lock()
		if f.barrier {
			p.barriers--
		}
		for _, name := range f.names {
			if p.names[name]--; p.names[name] == 0 {
				delete(p.names, name)
			}
		}
		p.mu.Unlock()
		p.acked.Done()
		<-p.slots
	}
}

// close waits for the changes in flight (the stream's context is done, so
// they end soon) and for the acker.
func (p *pipeline) close() {
	close(p.queue)
	<-p.ended
}
