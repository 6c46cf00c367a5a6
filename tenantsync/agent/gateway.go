package agent

import (
	"context"
	"fmt"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/informers"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"
	gwclient "sigs.k8s.io/gateway-api/pkg/client/clientset/versioned"
	gwinformers "sigs.k8s.io/gateway-api/pkg/client/informers/externalversions"

	"github.com/teapot-lb/teapot-lb/tenantsync/translate"
)

// discoveryTimeout bounds the look-up of the Gateway API resources.
const discoveryTimeout = 30 * time.Second

// gatewayWatch holds the Gateway API informers, when the CRDs exist.
type gatewayWatch struct {
	client  gwclient.Interface
	factory gwinformers.SharedInformerFactory
	// core watches Namespaces (allowedRoutes selectors) and TLS Secrets
	// (certificateRefs), only when Gateways are served.
	core informers.SharedInformerFactory
}

// watchGateways asks the API server which Gateway API resources it
// serves and watches those. Without the Gateway and GatewayClass CRDs it
// logs that once and watches nothing; Services and Ingresses never need
// them.
func (a *Agent) watchGateways(ctx context.Context) {
	if a.cfg.Gateway == nil {
		return
	}
	dctx, cancel := context.WithTimeout(ctx, discoveryTimeout)
	defer cancel()
	have, err := a.gatewayResources(dctx)
	if err != nil {
		a.log.Info("Gateway API not served by this cluster; Gateways and routes are not watched (install the CRDs and restart the agent to serve them)", "reason", err)
		return
	}
	if !have["gateways"] || !have["gatewayclasses"] {
		a.log.Info("Gateway API CRDs for Gateway and GatewayClass are not installed; Gateways are not watched (install them and restart the agent)")
		return
	}
	a.checkAccess(dctx, have)
	if !have["gateways"] || !have["gatewayclasses"] || !have["namespaces"] || !have["secrets"] {
		a.log.Warn("the agent may not read Gateways, GatewayClasses, Namespaces or TLS Secrets; Gateways are not watched (apply the ClusterRole of packaging/k8s/10-rbac.yaml)")
		return
	}
	f := gwinformers.NewSharedInformerFactory(a.cfg.Gateway, resyncPeriod)
	core := informers.NewSharedInformerFactoryWithOptions(a.kube, resyncPeriod)
	secrets := informers.NewSharedInformerFactoryWithOptions(a.kube, resyncPeriod, informers.WithTweakListOptions(func(o *metav1.ListOptions) {
		o.FieldSelector = fields.OneTermEqualSelector("type", string(corev1.SecretTypeTLS)).String()
	}))
	v1 := f.Gateway().V1()
	gs := &translate.GatewaySources{
		Classes:    v1.GatewayClasses().Lister(),
		Gateways:   v1.Gateways().Lister(),
		Namespaces: core.Core().V1().Namespaces().Lister(),
		Secrets:    secrets.Core().V1().Secrets().Lister(),
	}
	allGateways := func(any) { a.set.mark(objKey{translate.KindGateway, "*", "*"}) }
	onClass := func(obj any) {
		if gc, ok := unwrap[*gwv1.GatewayClass](obj); ok {
			a.queue.Add(objKey{translate.KindGatewayClass, "", gc.Name})
		}
		allGateways(obj)
	}
	onGateway := func(obj any) {
		if gw, ok := unwrap[*gwv1.Gateway](obj); ok {
			k := objKey{translate.KindGateway, gw.Namespace, gw.Name}
			a.set.mark(k)
			a.queue.Add(k)
		}
	}
	route := func(kind string) func(any) {
		return func(obj any) {
			if m, ok := unwrap[metav1.Object](obj); ok {
				a.queue.Add(objKey{kind, m.GetNamespace(), m.GetName()})
			}
			allGateways(obj)
		}
	}
	type reg = informerReg
	regs := []reg{
		{v1.GatewayClasses().Informer(), onClass},
		{v1.Gateways().Informer(), onGateway},
		{core.Core().V1().Namespaces().Informer(), allGateways},
		{secrets.Core().V1().Secrets().Informer(), allGateways},
	}
	if have["configmaps"] {
		// The CA bundles of spec.tls.frontend.
		gs.ConfigMaps = core.Core().V1().ConfigMaps().Lister()
		regs = append(regs, reg{core.Core().V1().ConfigMaps().Informer(), allGateways})
	}
	if have["referencegrants"] {
		gs.ReferenceGrants = v1.ReferenceGrants().Lister()
		regs = append(regs, reg{v1.ReferenceGrants().Informer(), allGateways})
	}
	btls, cms := a.watchBackendTLS(have, v1, gs, allGateways)
	regs = append(regs, btls...)
	if have["listenersets"] {
		gs.ListenerSets = v1.ListenerSets().Lister()
		regs = append(regs, reg{v1.ListenerSets().Informer(), allGateways})
	}
	var kinds []string
	if have["httproutes"] {
		gs.HTTPRoutes = v1.HTTPRoutes().Lister()
		regs = append(regs, reg{v1.HTTPRoutes().Informer(), route(translate.KindHTTPRoute)})
		kinds = append(kinds, translate.KindHTTPRoute)
	}
	if have["grpcroutes"] {
		gs.GRPCRoutes = v1.GRPCRoutes().Lister()
		regs = append(regs, reg{v1.GRPCRoutes().Informer(), route(translate.KindGRPCRoute)})
		kinds = append(kinds, translate.KindGRPCRoute)
	}
	if have["tlsroutes"] {
		gs.TLSRoutes = v1.TLSRoutes().Lister()
		regs = append(regs, reg{v1.TLSRoutes().Informer(), route(translate.KindTLSRoute)})
		kinds = append(kinds, translate.KindTLSRoute)
	}
	if have["tcproutes"] {
		gs.TCPRoutes = v1.TCPRoutes().Lister()
		regs = append(regs, reg{v1.TCPRoutes().Informer(), route(translate.KindTCPRoute)})
		kinds = append(kinds, translate.KindTCPRoute)
	}
	if have["udproutes"] {
		gs.UDPRoutes = v1.UDPRoutes().Lister()
		regs = append(regs, reg{v1.UDPRoutes().Informer(), route(translate.KindUDPRoute)})
		kinds = append(kinds, translate.KindUDPRoute)
	}
	for _, r := range regs {
		_, _ = r.inf.AddEventHandler(both(r.fn))
		a.synced = append(a.synced, r.inf.HasSynced)
	}
	a.src.Gateway = gs
	a.gw = &gatewayWatch{client: a.cfg.Gateway, factory: f, core: core}
	f.Start(ctx.Done())
	core.Start(ctx.Done())
	secrets.Start(ctx.Done())
	if cms != nil {
		cms.Start(ctx.Done())
	}
	stopEdge := a.watchEdgePolicies(ctx, gs)
	a.gwShutdown = func() {
		f.Shutdown()
		core.Shutdown()
		secrets.Shutdown()
		if cms != nil {
			cms.Shutdown()
		}
		if stopEdge != nil {
			stopEdge()
		}
	}
	a.log.Info("watching Gateway API objects", "routes", kinds, "controller", a.opts().GatewayControllerName())
}

// checkAccess drops from have the resources the agent may not list (an
// older ClusterRole), so that an informer never waits for a cache it
// cannot fill; it adds namespaces and secrets when they may be listed.
func (a *Agent) checkAccess(ctx context.Context, have map[string]bool) {
	one := metav1.ListOptions{Limit: 1}
	gw := a.cfg.Gateway.GatewayV1()
	checks := map[string]func() error{
		"gatewayclasses":  func() error { _, err := gw.GatewayClasses().List(ctx, one); return err },
		"gateways":        func() error { _, err := gw.Gateways("").List(ctx, one); return err },
		"httproutes":      func() error { _, err := gw.HTTPRoutes("").List(ctx, one); return err },
		"grpcroutes":      func() error { _, err := gw.GRPCRoutes("").List(ctx, one); return err },
		"tlsroutes":       func() error { _, err := gw.TLSRoutes("").List(ctx, one); return err },
		"tcproutes":       func() error { _, err := gw.TCPRoutes("").List(ctx, one); return err },
		"udproutes":       func() error { _, err := gw.UDPRoutes("").List(ctx, one); return err },
		"referencegrants": func() error { _, err := gw.ReferenceGrants("").List(ctx, one); return err },
		"listenersets":    func() error { _, err := gw.ListenerSets("").List(ctx, one); return err },
		"namespaces":      func() error { _, err := a.kube.CoreV1().Namespaces().List(ctx, one); return err },
		"secrets":         func() error { _, err := a.kube.CoreV1().Secrets("").List(ctx, one); return err },
		"backendtlspolicies": func() error {
			_, err := gw.BackendTLSPolicies("").List(ctx, one)
			return err
		},
		"configmaps": func() error { _, err := a.kube.CoreV1().ConfigMaps("").List(ctx, one); return err },
	}
	have["namespaces"], have["secrets"], have["configmaps"] = true, true, true
	for name, check := range checks {
		if !have[name] {
			continue
		}
		if err := check(); err != nil {
			a.log.Warn("cannot list a resource the Gateway API needs; it is not watched", "resource", name, "err", err)
			have[name] = false
		}
	}
}

// gatewayResources returns the resource names of
// gateway.networking.k8s.io/v1 that the API server serves.
func (a *Agent) gatewayResources(ctx context.Context) (map[string]bool, error) {
	type result struct {
		list *metav1.APIResourceList
		err  error
	}
	ch := make(chan result, 1)
	go func() {
		l, err := a.kube.Discovery().ServerResourcesForGroupVersion(gwv1.GroupVersion.String())
		ch <- result{l, err}
	}()
	select {
	case <-ctx.Done():
		return nil, fmt.Errorf("discovery of %s: %w", gwv1.GroupVersion, ctx.Err())
	case r := <-ch:
		if r.err != nil {
			return nil, r.err
		}
		have := map[string]bool{}
		for _, res := range r.list.APIResources {
			have[res.Name] = true
		}
		return have, nil
	}
}

// writeGatewayClass accepts a GatewayClass of the agent's controller.
func (a *Agent) writeGatewayClass(ctx context.Context, name string) error {
	if a.src.Gateway == nil {
		return nil
	}
	gc, err := a.src.Gateway.Classes.Get(name)
	if apierrors.IsNotFound(err) {
		return nil
	} else if err != nil {
		return err
	}
	if !translate.OwnsClass(gc, a.opts()) {
		return nil
	}
	c := gc.DeepCopy()
	setCondition(&c.Status.Conditions, metav1.Condition{
		Type: string(gwv1.GatewayClassConditionStatusAccepted), Status: metav1.ConditionTrue,
		Reason: string(gwv1.GatewayClassReasonAccepted), Message: "served by teapot-lb", ObservedGeneration: gc.Generation,
	})
	if slices.EqualFunc(c.Status.Conditions, gc.Status.Conditions, conditionEqual) {
		return nil
	}
	_, err = a.gw.client.GatewayV1().GatewayClasses().UpdateStatus(ctx, c, metav1.UpdateOptions{})
	if err != nil {
		return fmt.Errorf("update status of GatewayClass %s: %w", name, err)
	}
	return nil
}
