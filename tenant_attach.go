package main

import (
	"context"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/teapot-lb/teapot-lb/api/observe"
	pb "github.com/teapot-lb/teapot-lb/api/proto/teapotv1"
	"github.com/teapot-lb/teapot-lb/proxy"
	"github.com/teapot-lb/teapot-lb/vip/attach"
)

// attachedFirst is the committed state's watch as the data plane reads
// it, with the attachments converged on each revision before the data
// plane sees it: an attached tenant's members are never dialled, even for
// a moment, from the host's routing table.
type attachedFirst struct {
	proxy.Watcher
	am    *attach.Manager
	state func() ([]*pb.Object, uint64)
}

func (w attachedFirst) Next(ctx context.Context) (proxy.Revision, error) {
	r, err := w.Watcher.Next(ctx)
	if err == nil {
		followAttachments(w.am, r, w.state)
	}
	return r, err
}

// followAttachments passes the committed state to the attachments after
// a reset and after each revision that changed a tenant.
func followAttachments(am *attach.Manager, r proxy.Revision, state func() ([]*pb.Object, uint64)) {
	if r.Reset {
		am.Update(r.Objects)
		return
	}
	for prev, next := range r.Transitions() {
		if prev.GetTenant() != nil || next.GetTenant() != nil {
			objs, _ := state()
			am.Update(objs)
			return
		}
	}
}

// settleAttachments settles the attachments (attach.Manager.Settle) once
// the state they follow is the cluster's committed one: this host is a
// member that has caught up (ready closes after a read barrier) and the
// feed, which passes each revision to the attachments before the data
// plane, has applied the revision reached then. Before that a restarted
// host's view is the state it restored, in which tenants it still
// attaches may be missing.
func settleAttachments(ctx context.Context, am *attach.Manager, ready <-chan struct{}, revision func() uint64, feed *proxy.Feed) {
	select {
	case <-ready:
	case <-ctx.Done():
		return
	}
	if feed.WaitApplied(ctx, revision()) == nil {
		am.Settle()
	}
}

// attachmentSource reports the attachments in the host's observation.
type attachmentSource struct{ am *attach.Manager }

func (s attachmentSource) Observe(f observe.Filter, h *pb.HostObservation) {
	for _, o := range s.am.Observe(f.Tenant) {
		if !f.MatchTenant(o.Tenant) {
			continue
		}
		h.TenantAttachments = append(h.TenantAttachments, &pb.TenantAttachmentObservation{
			Tenant: o.Tenant, Namespace: o.Namespace, State: o.State, Reason: o.Reason, Vni: o.VNI, Address: o.Address,
			Since: timestamppb.New(o.Since),
		})
	}
}

var descAttachment = prometheus.NewDesc("teapot_lb_tenant_attachment_up",
	"1 when the tenant's attachment (its namespace and VXLAN device) is up on this host, 0 when it failed or lists no address for this host.",
	[]string{"tenant", "state"}, nil)

// attachmentCollector exports each attachment's state on this host.
type attachmentCollector struct{ am *attach.Manager }

func (c attachmentCollector) Describe(ch chan<- *prometheus.Desc) { ch <- descAttachment }

func (c attachmentCollector) Collect(ch chan<- prometheus.Metric) {
	for _, o := range c.am.Observe("") {
		v := 0.0
		if o.State == attach.StateUp {
			v = 1
		}
		ch <- prometheus.MustNewConstMetric(descAttachment, prometheus.GaugeValue, v, o.Tenant, o.State)
	}
}
