package agent

import (
	"context"
	"fmt"
	"reflect"
	"slices"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"

	pb "github.com/teapot-lb/teapot-lb/api/proto/teapotv1"
	"github.com/teapot-lb/teapot-lb/tenantsync/translate"
)

// Gateway condition reasons of the agent's own.
const (
	// ReasonRefusedByLB: the LB cluster refused the load balancer (pool,
	// quota, domain, ...); the message is its verdict.
	ReasonRefusedByLB = "RefusedByLoadBalancerCluster"
)

// setCondition sets c in conds, keeping the transition time of a
// condition whose status did not change.
func setCondition(conds *[]metav1.Condition, c metav1.Condition) {
	meta.SetStatusCondition(conds, c)
}

// conditionEqual compares conditions without their transition time.
func conditionEqual(a, b metav1.Condition) bool {
	return a.Type == b.Type && a.Status == b.Status && a.Reason == b.Reason && a.Message == b.Message && a.ObservedGeneration == b.ObservedGeneration
}

// mergeConditions returns want with the transition times of cur where a
// condition's status did not change, and now elsewhere.
func mergeConditions(cur, want []metav1.Condition) []metav1.Condition {
	out := slices.Clone(cur)
	for _, c := range want {
		setCondition(&out, c)
	}
	// Conditions that are no longer reported go away.
	return slices.DeleteFunc(out, func(c metav1.Condition) bool {
		return !slices.ContainsFunc(want, func(w metav1.Condition) bool { return w.Type == c.Type })
	})
}

// gatewayStatus is what a Gateway's status should say, given its
// translation and the LB cluster's answer (nil: none yet).
func gatewayStatus(gw *gwv1.Gateway, d *translate.Desired, st *pb.ObjectStatus) gwv1.GatewayStatus {
	res := d.Gateway
	gen := gw.Generation
	out := gwv1.GatewayStatus{}
	prog := metav1.Condition{Type: string(gwv1.GatewayConditionProgrammed), ObservedGeneration: gen}
	switch {
	case res.AddressNotUsable != "":
		prog.Status, prog.Reason, prog.Message = metav1.ConditionFalse, string(gwv1.GatewayReasonAddressNotUsable), res.AddressNotUsable
	case d.Refused != "":
		prog.Status, prog.Reason, prog.Message = metav1.ConditionFalse, string(gwv1.GatewayReasonInvalid), "not sent to the LB cluster: "+d.Refused
	case st == nil || (st.GetAddress() == "" && st.GetError() == ""):
		prog.Status, prog.Reason, prog.Message = metav1.ConditionFalse, string(gwv1.GatewayReasonPending), "waiting for the LB cluster"
	case st.GetError() != "":
		prog.Status, prog.Reason, prog.Message = metav1.ConditionFalse, ReasonRefusedByLB, "refused by the LB cluster: "+st.GetError()
	default:
		prog.Status, prog.Reason, prog.Message = metav1.ConditionTrue, string(gwv1.GatewayReasonProgrammed), "served on VIP "+st.GetAddress()
	}
	if st != nil && st.GetAddress() != "" {
		t := gwv1.IPAddressType
		out.Addresses = []gwv1.GatewayStatusAddress{{Type: &t, Value: st.GetAddress()}}
	}
	conds := append([]metav1.Condition{res.Accepted, prog}, res.Conditions...)
	if res.ResolvedRefs != nil {
		conds = append(conds, *res.ResolvedRefs)
	}
	out.Conditions = mergeConditions(gw.Status.Conditions, conds)
	if res.ListenerSets != nil || gw.Spec.AllowedListeners != nil {
		n := res.AttachedListenerSets
		out.AttachedListenerSets = &n
	}
	for _, want := range res.Listeners {
		l := *want.DeepCopy()
		if prog.Status != metav1.ConditionTrue {
			for i, c := range l.Conditions {
				if c.Type == string(gwv1.ListenerConditionProgrammed) && c.Status == metav1.ConditionTrue {
					l.Conditions[i].Status, l.Conditions[i].Reason, l.Conditions[i].Message = metav1.ConditionFalse, prog.Reason, prog.Message
				}
			}
		}
		var cur []metav1.Condition
		if i := slices.IndexFunc(gw.Status.Listeners, func(s gwv1.ListenerStatus) bool { return s.Name == l.Name }); i >= 0 {
			cur = gw.Status.Listeners[i].Conditions
		}
		l.Conditions = mergeConditions(cur, l.Conditions)
		out.Listeners = append(out.Listeners, l)
	}
	return out
}

// writeGateway brings one Gateway's status up to date.
func (a *Agent) writeGateway(ctx context.Context, k objKey, d *translate.Desired, st *pb.ObjectStatus) (*gwv1.Gateway, error) {
	if a.src.Gateway == nil {
		return nil, nil
	}
	gw, err := a.src.Gateway.Gateways.Gateways(k.ns).Get(k.name)
	if apierrors.IsNotFound(err) {
		return nil, nil
	} else if err != nil {
		return nil, err
	}
	if d == nil || d.Gateway == nil {
		return gw, nil // not ours: another controller writes its status
	}
	want := gatewayStatus(gw, d, st)
	if err := a.writeListenerSets(ctx, d.Gateway, want.Conditions); err != nil {
		return nil, err
	}
	if reflect.DeepEqual(want.Conditions, gw.Status.Conditions) && reflect.DeepEqual(want.Listeners, gw.Status.Listeners) &&
		reflect.DeepEqual(want.Addresses, gw.Status.Addresses) && reflect.DeepEqual(want.AttachedListenerSets, gw.Status.AttachedListenerSets) {
		return gw, nil
	}
	c := gw.DeepCopy()
	c.Status.Conditions, c.Status.Listeners, c.Status.Addresses = want.Conditions, want.Listeners, want.Addresses
	c.Status.AttachedListenerSets = want.AttachedListenerSets
	if _, err := a.gw.client.GatewayV1().Gateways(gw.Namespace).UpdateStatus(ctx, c, metav1.UpdateOptions{}); err != nil {
		return nil, fmt.Errorf("update status of Gateway %s/%s: %w", gw.Namespace, gw.Name, err)
	}
	return gw, nil
}

// routeParents merges the parent statuses the agent's Gateways give a
// route into its current ones: entries of other controllers stay, the
// agent's are replaced, transition times kept where nothing changed.
func routeParents(cur []gwv1.RouteParentStatus, ours []gwv1.RouteParentStatus, controller string) []gwv1.RouteParentStatus {
	var out []gwv1.RouteParentStatus
	for _, p := range cur {
		if string(p.ControllerName) != controller {
			out = append(out, p)
		}
	}
	for _, p := range ours {
		p = *p.DeepCopy()
		var prev []metav1.Condition
		if i := slices.IndexFunc(cur, func(c gwv1.RouteParentStatus) bool {
			return string(c.ControllerName) == controller && reflect.DeepEqual(c.ParentRef, p.ParentRef)
		}); i >= 0 {
			prev = cur[i].Conditions
		}
		p.Conditions = mergeConditions(prev, p.Conditions)
		out = append(out, p)
	}
	return out
}

// writeRoute brings the agent's entries in a route's status.parents up
// to date.
func (a *Agent) writeRoute(ctx context.Context, k objKey) error {
	gs := a.src.Gateway
	if gs == nil {
		return nil
	}
	ours := a.set.routeParents(translate.RouteKey{Kind: k.kind, Namespace: k.ns, Name: k.name})
	controller := a.opts().GatewayControllerName()
	gwc := a.gw.client.GatewayV1()
	opts := metav1.UpdateOptions{}
	var err error
	switch k.kind {
	case translate.KindHTTPRoute:
		if gs.HTTPRoutes == nil {
			return nil
		}
		r, gerr := gs.HTTPRoutes.HTTPRoutes(k.ns).Get(k.name)
		if gerr != nil {
			return ignoreNotFound(gerr)
		}
		if want := routeParents(r.Status.Parents, ours, controller); !reflect.DeepEqual(want, r.Status.Parents) {
			c := r.DeepCopy()
			c.Status.Parents = want
			_, err = gwc.HTTPRoutes(k.ns).UpdateStatus(ctx, c, opts)
		}
	case translate.KindGRPCRoute:
		if gs.GRPCRoutes == nil {
			return nil
		}
		r, gerr := gs.GRPCRoutes.GRPCRoutes(k.ns).Get(k.name)
		if gerr != nil {
			return ignoreNotFound(gerr)
		}
		if want := routeParents(r.Status.Parents, ours, controller); !reflect.DeepEqual(want, r.Status.Parents) {
			c := r.DeepCopy()
			c.Status.Parents = want
			_, err = gwc.GRPCRoutes(k.ns).UpdateStatus(ctx, c, opts)
		}
	case translate.KindTLSRoute:
		if gs.TLSRoutes == nil {
			return nil
		}
		r, gerr := gs.TLSRoutes.TLSRoutes(k.ns).Get(k.name)
		if gerr != nil {
			return ignoreNotFound(gerr)
		}
		if want := routeParents(r.Status.Parents, ours, controller); !reflect.DeepEqual(want, r.Status.Parents) {
			c := r.DeepCopy()
			c.Status.Parents = want
			_, err = gwc.TLSRoutes(k.ns).UpdateStatus(ctx, c, opts)
		}
	case translate.KindTCPRoute:
		if gs.TCPRoutes == nil {
			return nil
		}
		r, gerr := gs.TCPRoutes.TCPRoutes(k.ns).Get(k.name)
		if gerr != nil {
			return ignoreNotFound(gerr)
		}
		if want := routeParents(r.Status.Parents, ours, controller); !reflect.DeepEqual(want, r.Status.Parents) {
			c := r.DeepCopy()
			c.Status.Parents = want
			_, err = gwc.TCPRoutes(k.ns).UpdateStatus(ctx, c, opts)
		}
	case translate.KindUDPRoute:
		if gs.UDPRoutes == nil {
			return nil
		}
		r, gerr := gs.UDPRoutes.UDPRoutes(k.ns).Get(k.name)
		if gerr != nil {
			return ignoreNotFound(gerr)
		}
		if want := routeParents(r.Status.Parents, ours, controller); !reflect.DeepEqual(want, r.Status.Parents) {
			c := r.DeepCopy()
			c.Status.Parents = want
			_, err = gwc.UDPRoutes(k.ns).UpdateStatus(ctx, c, opts)
		}
	}
	if err != nil {
		return fmt.Errorf("update status of %s %s/%s: %w", k.kind, k.ns, k.name, err)
	}
	return nil
}

func ignoreNotFound(err error) error {
	if apierrors.IsNotFound(err) {
		return nil
	}
	return err
}
