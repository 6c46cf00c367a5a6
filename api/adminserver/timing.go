package adminserver

import (
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc/stats"

	pb "github.com/teapot-lb/teapot-lb/api/proto/teapotv1"
)

// adminMethods are the calls Timing measures: the admin API's, by full
// method name. A name a caller makes up is not one (the label stays
// bounded).
var adminMethods = func() map[string]string {
	m := map[string]string{}
	prefix := "/" + pb.Admin_ServiceDesc.ServiceName + "/"
	for _, d := range pb.Admin_ServiceDesc.Methods {
		m[prefix+d.MethodName] = d.MethodName
	}
	for _, d := range pb.Admin_ServiceDesc.Streams {
		m[prefix+d.StreamName] = d.StreamName
	}
	return m
}()

// Timing is a gRPC stats handler that measures each admin call on the
// host, from its headers' arrival to its answer written (validation, the
// store, encoding and the write), by method: the admin API's own share of
// what a caller waits, which the caller's own wait (its machine, the
// network) adds to. Other services pass through unmeasured.
type Timing struct {
	calls *prometheus.HistogramVec
}

var _ stats.Handler = (*Timing)(nil)

// NewTiming returns a Timing with no calls measured yet.
func NewTiming() *Timing {
	return &Timing{calls: prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "teapot_lb_admin_call_seconds",
		Help:    "Admin API calls answered by this host, from the request's headers to the answer written, by method.",
		Buckets: []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10},
	}, []string{"method"})}
}

// Collector exports the measured calls.
func (t *Timing) Collector() prometheus.Collector { return t.calls }

type timingKey struct{}

type callStart struct {
	method string
	at     time.Time
}

// TagRPC notes when an admin call's headers arrived.
func (t *Timing) TagRPC(ctx context.Context, info *stats.RPCTagInfo) context.Context {
	m, ok := adminMethods[info.FullMethodName]
	if !ok {
		return ctx
	}
	return context.WithValue(ctx, timingKey{}, &callStart{method: m, at: time.Now()})
}

// HandleRPC observes an admin call at its end.
func (t *Timing) HandleRPC(ctx context.Context, s stats.RPCStats) {
	if _, ok := s.(*stats.End); !ok {
		return
	}
	if c, ok := ctx.Value(timingKey{}).(*callStart); ok {
		t.calls.WithLabelValues(c.method).Observe(time.Since(c.at).Seconds())
	}
}

// TagConn and HandleConn do nothing: calls are measured, not connections.
func (t *Timing) TagConn(ctx context.Context, _ *stats.ConnTagInfo) context.Context { return ctx }

// HandleConn does nothing.
func (t *Timing) HandleConn(context.Context, stats.ConnStats) {}
