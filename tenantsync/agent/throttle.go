package agent

import (
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"

	pb "github.com/teapot-lb/teapot-lb/api/proto/teapotv1"
	"github.com/teapot-lb/teapot-lb/tenantsync/translate"
)

// ReasonThrottled is the Event of an object whose change waits for the
// tenant's write budget on the LB host (quotas.writeBytesPerSecond).
const ReasonThrottled = "WritesThrottled"

// throttleLogEvery bounds the agent's log lines about throttled changes.
const throttleLogEvery = 10 * time.Second

// onThrottle is told that a change waits for the tenant's write budget
// before the LB host writes it: the stream takes no further change
// meanwhile, so the agent's sends wait too. It logs why (at most once per
// throttleLogEvery) and records a Warning Event on each object of the
// change the notice names (the recorder folds repeats).
func (a *Agent) onThrottle(th *pb.SyncThrottle) {
	a.metrics.throttled.Add(1)
	now := time.Now().UnixNano()
	if last := a.throttleLogged.Load(); now-last >= int64(throttleLogEvery) && a.throttleLogged.CompareAndSwap(last, now) {
		a.log.Warn("the LB cluster slows this agent's writes", "change", th.GetSeq(), "wait", th.GetWait().AsDuration(), "reason", th.GetReason())
	}
	for _, name := range th.GetNames() {
		k, ok := a.set.sourceOf(name)
		if !ok {
			continue
		}
		if obj := a.sourceObject(k); obj != nil {
			a.events.Event(obj, corev1.EventTypeWarning, ReasonThrottled, boundMessage(th.GetReason()))
		}
	}
}

// sourceObject is the Service, Ingress or Gateway k names, from the
// informers' caches (nil when it is gone).
func (a *Agent) sourceObject(k objKey) runtime.Object {
	switch k.kind {
	case translate.KindService:
		if o, err := a.src.Services.Services(k.ns).Get(k.name); err == nil {
			return o
		}
	case translate.KindIngress:
		if o, err := a.src.Ingresses.Ingresses(k.ns).Get(k.name); err == nil {
			return o
		}
	case translate.KindGateway:
		if a.src.Gateway == nil {
			return nil
		}
		if o, err := a.src.Gateway.Gateways.Gateways(k.ns).Get(k.name); err == nil {
			return o
		}
	}
	return nil
}
