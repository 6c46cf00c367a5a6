package agent

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"unicode/utf8"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	pb "github.com/teapot-lb/teapot-lb/api/proto/teapotv1"
	"github.com/teapot-lb/teapot-lb/tenantsync/translate"
)

// Event reasons the agent records.
const (
	ReasonAssigned    = "VIPAssigned"
	ReasonRefused     = "LoadBalancerRefused"
	ReasonProblem     = "LoadBalancerProblem"
	ReasonTranslation = "TranslationWarning"
	ReasonCertificate = "CertificateProblem"
)

// statusBook holds what the LB cluster last said per load balancer and
// what the agent last reported per object, so that each Event is
// recorded once.
type statusBook struct {
	mu       sync.Mutex
	byName   map[string]*pb.ObjectStatus
	reported map[objKey]string
}

func newStatusBook() *statusBook {
	return &statusBook{byName: map[string]*pb.ObjectStatus{}, reported: map[objKey]string{}}
}

// reset takes the cluster's whole view (a welcome).
func (b *statusBook) reset(objs []*pb.ObjectStatus) {
	b.mu.Lock()
	defer b.mu.Unlock()
	clear(b.byName)
	for _, o := range objs {
		b.byName[o.GetName()] = o
	}
}

// put records statuses. A refusal keeps the address of the version the
// cluster still serves.
func (b *statusBook) put(objs []*pb.ObjectStatus) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, o := range objs {
		if o.GetRemoved() {
			delete(b.byName, o.GetName())
			continue
		}
		if o.GetError() != "" {
			if prev := b.byName[o.GetName()]; prev != nil {
				o = &pb.ObjectStatus{Name: o.GetName(), Version: prev.GetVersion(), Address: prev.GetAddress(), Addresses: prev.GetAddresses(), Problems: prev.GetProblems(), Error: o.GetError()}
			}
		}
		b.byName[o.GetName()] = o
	}
}

func (b *statusBook) get(name string) *pb.ObjectStatus {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.byName[name]
}

// firstReport records text as k's report and says whether it is new.
func (b *statusBook) firstReport(k objKey, text string) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.reported[k] == text {
		return false
	}
	b.reported[k] = text
	return true
}

// onStatus records statuses and queues their objects for a status write.
func (a *Agent) onStatus(objs []*pb.ObjectStatus) {
	if len(objs) == 0 {
		return
	}
	a.book.put(objs)
	for _, o := range objs {
		if k, ok := a.set.sourceOf(o.GetName()); ok {
			a.queue.Add(k)
		}
	}
	a.metrics.statuses.Add(uint64(len(objs)))
}

// runWriter writes status and records Events for queued objects until
// ctx ends.
func (a *Agent) runWriter(ctx context.Context) {
	go func() { <-ctx.Done(); a.queue.ShutDown() }()
	for {
		k, quit := a.queue.Get()
		if quit {
			return
		}
		err := a.write(ctx, k)
		if err != nil {
			if ctx.Err() == nil {
				a.log.Debug("write status", "object", k.source(), "err", err)
			}
			a.queue.AddRateLimited(k)
		} else {
			a.queue.Forget(k)
		}
		a.queue.Done(k)
	}
}

// write brings one object's status and Events up to date.
func (a *Agent) write(ctx context.Context, k objKey) error {
	d, name := a.set.lookup(k)
	var st *pb.ObjectStatus
	if d != nil {
		st = a.book.get(name)
	}
	var obj runtime.Object
	var wrote bool
	var err error
	switch k.kind {
	case translate.KindService:
		svc, gerr := a.src.Services.Services(k.ns).Get(k.name)
		if err = gerr; apierrors.IsNotFound(err) {
			return nil
		} else if err != nil {
			return err
		}
		obj = svc
		if wrote, err = a.writeService(ctx, svc, d, st); err != nil {
			return err
		}
	case translate.KindIngress:
		ing, gerr := a.src.Ingresses.Ingresses(k.ns).Get(k.name)
		if err = gerr; apierrors.IsNotFound(err) {
			return nil
		} else if err != nil {
			return err
		}
		obj = ing
		if wrote, err = a.writeIngress(ctx, ing, d, st); err != nil {
			return err
		}
	case translate.KindGateway:
		gw, err := a.writeGateway(ctx, k, d, st)
		if err != nil || gw == nil {
			return err
		}
		if err := a.writeEdgePolicies(ctx, gw, d); err != nil {
			return err
		}
		obj = gw
	case translate.KindGatewayClass:
		return a.writeGatewayClass(ctx, k.name)
	case translate.KindHTTPRoute, translate.KindGRPCRoute, translate.KindTLSRoute, translate.KindTCPRoute, translate.KindUDPRoute:
		return a.writeRoute(ctx, k)
	case translate.KindBackendTLSPolicy:
		return a.writeBackendTLSPolicy(ctx, k)
	default:
		return nil
	}
	a.recordEvents(k, obj, d, st, wrote)
	return nil
}

// recordEvents records each new verdict on the object once. An assigned
// VIP is announced only when this write put it into the status, so that a
// restarted agent does not repeat it.
func (a *Agent) recordEvents(k objKey, obj runtime.Object, d *translate.Desired, st *pb.ObjectStatus, wrote bool) {
	if d == nil {
		return
	}
	if d.Refused != "" {
		if a.book.firstReport(k, "refused|"+d.Refused) {
			a.events.Event(obj, corev1.EventTypeWarning, ReasonRefused, "not sent to the LB cluster: "+d.Refused)
		}
		return
	}
	var parts []string
	kind, reason, msg := corev1.EventTypeNormal, "", ""
	switch {
	case st == nil:
		return
	case st.GetError() != "":
		kind, reason, msg = corev1.EventTypeWarning, ReasonRefused, "refused by the LB cluster: "+st.GetError()
	case len(st.GetAddresses()) > 1:
		reason, msg = ReasonAssigned, "VIPs "+strings.Join(st.GetAddresses(), " and ")+" on load balancer "+st.GetName()
	case st.GetAddress() != "":
		reason, msg = ReasonAssigned, "VIP "+st.GetAddress()+" on load balancer "+st.GetName()
	}
	for _, p := range st.GetProblems() {
		parts = append(parts, p.GetField()+": "+p.GetReason())
	}
	if ms := st.GetMembers(); len(ms) > 0 && !slices.ContainsFunc(ms, (*pb.MemberState).GetHealthy) {
		parts = append(parts, fmt.Sprintf("members: none of the %d members passes the LB's health checks", len(ms)))
	}
	var certs []string
	for _, c := range st.GetCertificates() {
		switch c.GetState() {
		case "valid", "pending", "":
		default:
			line := c.GetHost() + ": certificate " + c.GetState()
			if c.GetLastError() != "" {
				line += ": " + c.GetLastError()
			}
			certs = append(certs, line)
		}
	}
	report := reason + "|" + msg + "|" + strings.Join(parts, "; ") + "|" + strings.Join(d.Warnings, "; ") + "|" + strings.Join(certs, "; ")
	if !a.book.firstReport(k, report) {
		return
	}
	if reason == ReasonRefused || (reason == ReasonAssigned && wrote) {
		a.events.Event(obj, kind, reason, msg)
	}
	if len(parts) > 0 {
		a.events.Event(obj, corev1.EventTypeWarning, ReasonProblem, strings.Join(parts, "; "))
	}
	for _, w := range d.Warnings {
		a.events.Event(obj, corev1.EventTypeWarning, ReasonTranslation, w)
	}
	if len(certs) > 0 {
		a.events.Event(obj, corev1.EventTypeWarning, ReasonCertificate, strings.Join(certs, "; "))
	}
}

// serviceIngress is what Service.status.loadBalancer.ingress should say.
func serviceIngress(d *translate.Desired, st *pb.ObjectStatus) []corev1.LoadBalancerIngress {
	if d == nil || st == nil || st.GetAddress() == "" {
		return nil
	}
	mode := corev1.LoadBalancerIPModeVIP
	if d.ProxyMode {
		mode = corev1.LoadBalancerIPModeProxy
	}
	addrs := st.GetAddresses()
	if len(addrs) == 0 {
		addrs = []string{st.GetAddress()}
	}
	out := make([]corev1.LoadBalancerIngress, len(addrs))
	for i, a := range addrs {
		out[i] = corev1.LoadBalancerIngress{IP: a, IPMode: &mode}
	}
	return out
}

func (a *Agent) writeService(ctx context.Context, svc *corev1.Service, d *translate.Desired, st *pb.ObjectStatus) (bool, error) {
	want, touch := serviceIngress(d, st), true
	switch {
	case d != nil && d.Refused != "":
		want = nil // refused: no address, whatever was there before
	case d == nil:
		// No longer ours: clear what the agent wrote, if the object still
		// names our class (or none).
		touch = len(svc.Status.LoadBalancer.Ingress) > 0 && a.ownsClass(svc)
	case st == nil || (st.GetAddress() == "" && st.GetError() == ""):
		touch = false // not answered yet; keep the last known state
	case st.GetAddress() == "":
		want = nil
	}
	ingress := touch && !ingressEqual(svc.Status.LoadBalancer.Ingress, want)
	conds := serviceConditions(svc, d, st)
	if !ingress && equality.Semantic.DeepEqual(conds, svc.Status.Conditions) {
		return false, nil
	}
	c := svc.DeepCopy()
	if ingress {
		c.Status.LoadBalancer.Ingress = want
	}
	c.Status.Conditions = conds
	_, err := a.kube.CoreV1().Services(svc.Namespace).UpdateStatus(ctx, c, metav1.UpdateOptions{})
	if err != nil {
		return false, fmt.Errorf("update status of Service %s/%s: %w", svc.Namespace, svc.Name, err)
	}
	return ingress, nil
}

// ConditionAccepted is the Service condition the agent writes when it
// does not serve a Service as asked: False (reason Refused) when the
// Service gets no load balancer, True (reason AcceptedWithChanges) when
// some fields are served differently; the message names the fields and
// what the load balancer does instead (the same words as the Warning
// Events). A Service served as asked carries no such condition.
const (
	ConditionAccepted         = "teapot-lb.io/Accepted"
	ReasonConditionRefused    = "Refused"
	ReasonAcceptedWithChanges = "AcceptedWithChanges"
	maxConditionMessage       = 1024
)

// serviceConditions returns svc's conditions with the agent's brought up
// to date (a copy when it changes; svc's own when it does not). Besides
// the translation's refusal and warnings, a dual-stack Service's
// condition carries what the LB cluster said about its families: its
// refusal (a family with no free address under RequireDualStack) or the
// family left out under PreferDualStack.
func serviceConditions(svc *corev1.Service, d *translate.Desired, st *pb.ObjectStatus) []metav1.Condition {
	var want *metav1.Condition
	var warnings []string
	dual := false
	if d != nil {
		warnings = slices.Clone(d.Warnings)
		dual = len(d.LB.GetVip().GetFamilies()) > 1
	}
	for _, p := range st.GetProblems() {
		if dual && p.GetField() == "vip.families" {
			warnings = append(warnings, "spec.ipFamilyPolicy PreferDualStack: "+p.GetReason())
		}
	}
	switch {
	case d == nil:
	case d.Refused != "":
		want = &metav1.Condition{Type: ConditionAccepted, Status: metav1.ConditionFalse, Reason: ReasonConditionRefused, Message: boundMessage(d.Refused)}
	case dual && st.GetError() != "":
		want = &metav1.Condition{Type: ConditionAccepted, Status: metav1.ConditionFalse, Reason: ReasonConditionRefused,
			Message: boundMessage("spec.ipFamilyPolicy asks for a VIP of each family, and the LB cluster refused the load balancer: " + st.GetError())}
	case len(warnings) > 0:
		want = &metav1.Condition{Type: ConditionAccepted, Status: metav1.ConditionTrue, Reason: ReasonAcceptedWithChanges, Message: boundMessage(strings.Join(warnings, "; "))}
	}
	have := apimeta.FindStatusCondition(svc.Status.Conditions, ConditionAccepted)
	switch {
	case want == nil && have == nil:
		return svc.Status.Conditions
	case want != nil && have != nil && have.Status == want.Status && have.Reason == want.Reason && have.Message == want.Message && have.ObservedGeneration == svc.Generation:
		return svc.Status.Conditions
	}
	out := slices.Clone(svc.Status.Conditions)
	if want == nil {
		apimeta.RemoveStatusCondition(&out, ConditionAccepted)
		return out
	}
	want.ObservedGeneration = svc.Generation
	apimeta.SetStatusCondition(&out, *want)
	return out
}

// boundMessage cuts a condition message to maxConditionMessage bytes.
func boundMessage(s string) string {
	if len(s) <= maxConditionMessage {
		return s
	}
	cut := maxConditionMessage - len("…")
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "…"
}

func (a *Agent) ownsClass(svc *corev1.Service) bool {
	if c := svc.Spec.LoadBalancerClass; c != nil {
		return *c == a.opts().LoadBalancerClass || (a.opts().LoadBalancerClass == "" && *c == translate.LoadBalancerClass)
	}
	return a.cfg.Options.DefaultClass
}

func ingressEqual(a, b []corev1.LoadBalancerIngress) bool {
	return slices.EqualFunc(a, b, func(x, y corev1.LoadBalancerIngress) bool {
		mx, my := "", ""
		if x.IPMode != nil {
			mx = string(*x.IPMode)
		}
		if y.IPMode != nil {
			my = string(*y.IPMode)
		}
		return x.IP == y.IP && x.Hostname == y.Hostname && mx == my
	})
}

func (a *Agent) writeIngress(ctx context.Context, ing *networkingv1.Ingress, d *translate.Desired, st *pb.ObjectStatus) (bool, error) {
	var want []networkingv1.IngressLoadBalancerIngress
	switch {
	case d == nil:
		if len(ing.Status.LoadBalancer.Ingress) == 0 {
			return false, nil
		}
	case st == nil || (st.GetAddress() == "" && st.GetError() == ""):
		return false, nil
	case st.GetAddress() != "":
		want = []networkingv1.IngressLoadBalancerIngress{{IP: st.GetAddress()}}
	}
	if slices.EqualFunc(ing.Status.LoadBalancer.Ingress, want, func(x, y networkingv1.IngressLoadBalancerIngress) bool {
		return x.IP == y.IP && x.Hostname == y.Hostname
	}) {
		return false, nil
	}
	c := ing.DeepCopy()
	c.Status.LoadBalancer.Ingress = want
	_, err := a.kube.NetworkingV1().Ingresses(ing.Namespace).UpdateStatus(ctx, c, metav1.UpdateOptions{})
	if err != nil {
		return false, fmt.Errorf("update status of Ingress %s/%s: %w", ing.Namespace, ing.Name, err)
	}
	return true, nil
}
