package agent

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	discoverylisters "k8s.io/client-go/listers/discovery/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/workqueue"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"
	gwclient "sigs.k8s.io/gateway-api/pkg/client/clientset/versioned"

	"github.com/teapot-lb/teapot-lb/api"
	pb "github.com/teapot-lb/teapot-lb/api/proto/teapotv1"
	"github.com/teapot-lb/teapot-lb/tenantsync/translate"
)

// Defaults of Config.
const (
	DefaultLeaseName     = "teapot-lb-agent"
	DefaultLeaseDuration = 15 * time.Second
	DefaultRenewDeadline = 10 * time.Second
	DefaultRetryPeriod   = 2 * time.Second
	// resyncPeriod re-delivers every object to the handlers, so that a
	// status someone else changed is written again.
	resyncPeriod = 10 * time.Minute
	// writers is how many status writes run at once: a write waits for
	// the API server's round trip (and etcd's), so a few writers leave
	// the rate limit unused.
	writers = 16
	// DefaultKubeQPS and DefaultKubeBurst bound the agent's status writes
	// to its Kubernetes API server (Events have a limiter of their own, a
	// fifth of this). At 200 a second, 10,000 Services' statuses took at
	// least 50 s. The API server's priority and fairness still decides
	// what it admits.
	DefaultKubeQPS   = 1000
	DefaultKubeBurst = 2000
)

// Config configures an Agent.
type Config struct {
	Kube kubernetes.Interface
	// Gateway reads and writes Gateway API objects; nil serves none.
	Gateway gwclient.Interface
	// Dynamic reads and writes EdgePolicies (translate.EdgePolicy); nil
	// reads none.
	Dynamic dynamic.Interface
	// Events records Events (default Kube).
	Events kubernetes.Interface
	// Credentials is the directory of the mounted credentials Secret;
	// Servers, when set, replaces its LB host addresses.
	Credentials string
	Servers     string
	Options     translate.Options
	// LeaderElect makes the replicas elect one leader through a Lease in
	// Namespace; only the leader streams and writes status.
	LeaderElect   bool
	Namespace     string
	LeaseName     string
	LeaseDuration time.Duration
	RenewDeadline time.Duration
	RetryPeriod   time.Duration
	// Identity names this replica (pod name) in the Lease and in logs.
	Identity string
	Version  string
	Logger   *slog.Logger
	// HealthAddr, when set, is where /healthz and /readyz are served.
	HealthAddr string
}

// metrics are counters for logs and tests.
type metrics struct {
	changesSent atomic.Uint64
	objectsSent atomic.Uint64
	statuses    atomic.Uint64
	sessions    atomic.Uint64
	// throttled counts the changes the LB cluster said wait for the
	// tenant's write budget.
	throttled atomic.Uint64
}

// Agent is one replica of teapot-lb agent.
type Agent struct {
	cfg     Config
	log     *slog.Logger
	kube    kubernetes.Interface
	factory informers.SharedInformerFactory
	src     translate.Sources
	synced  []cache.InformerSynced

	set    *desiredSet
	book   *statusBook
	queue  workqueue.TypedRateLimitingInterface[objKey]
	events record.EventRecorder
	bcast  record.EventBroadcaster

	// gw holds the Gateway API watches (nil when not served);
	// gwShutdown stops their informers.
	gw         *gatewayWatch
	gwShutdown func()
	// edgePolicies lists the EdgePolicies (nil when not watched).
	edgePolicies cache.GenericLister

	// nodePortWake asks runNodePorts to converge.
	nodePortWake chan struct{}

	optMu   sync.Mutex
	options translate.Options

	metrics metrics
	health  health
	// throttleLogged is when a throttled change was last logged
	// (UnixNano).
	throttleLogged atomic.Int64
}

// New prepares an agent; Run starts it.
func New(cfg Config) (*Agent, error) {
	if cfg.Kube == nil {
		return nil, errors.New("agent: no Kubernetes client")
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.LeaseName == "" {
		cfg.LeaseName = DefaultLeaseName
	}
	if cfg.LeaseDuration <= 0 {
		cfg.LeaseDuration = DefaultLeaseDuration
	}
	if cfg.RenewDeadline <= 0 {
		cfg.RenewDeadline = DefaultRenewDeadline
	}
	if cfg.RetryPeriod <= 0 {
		cfg.RetryPeriod = DefaultRetryPeriod
	}
	if cfg.LeaderElect && cfg.Namespace == "" {
		return nil, errors.New("agent: leader election needs a namespace for its Lease (--namespace or POD_NAMESPACE)")
	}
	a := &Agent{
		cfg:     cfg,
		log:     cfg.Logger.With("component", "agent"),
		kube:    cfg.Kube,
		factory: informers.NewSharedInformerFactory(cfg.Kube, resyncPeriod),
		set:     newDesiredSet(),
		book:    newStatusBook(),
		queue: workqueue.NewTypedRateLimitingQueue(workqueue.NewTypedItemExponentialFailureRateLimiter[objKey](
			100*time.Millisecond, 30*time.Second)),
		options:      cfg.Options,
		nodePortWake: make(chan struct{}, 1),
	}
	a.set.addr = func(name string) string { return a.book.get(name).GetAddress() }
	// Events on Gateway API objects need their kinds in the scheme.
	if err := gwv1.Install(scheme.Scheme); err != nil {
		return nil, fmt.Errorf("agent: register the Gateway API types: %w", err)
	}
	a.bcast = record.NewBroadcaster()
	a.events = a.bcast.NewRecorder(scheme.Scheme, corev1.EventSource{Component: "teapot-lb-agent"})
	a.watch()
	return a, nil
}

// watch registers the informers and their handlers.
func (a *Agent) watch() {
	f := a.factory
	svcs := f.Core().V1().Services()
	slices := f.Discovery().V1().EndpointSlices()
	nodes := f.Core().V1().Nodes()
	ings := f.Networking().V1().Ingresses()
	classes := f.Networking().V1().IngressClasses()
	// A Service's slices come from an index: listing them by label would
	// read every slice of the namespace for every Service translated.
	var sliceLister discoverylisters.EndpointSliceLister = indexedSlices{EndpointSliceLister: slices.Lister(), idx: slices.Informer().GetIndexer()}
	if err := slices.Informer().AddIndexers(cache.Indexers{byService: sliceService}); err != nil {
		a.log.Warn("EndpointSlices are not indexed by Service; each Service's are found by label", "err", err)
		sliceLister = slices.Lister()
	}
	a.src = translate.Sources{
		Services: svcs.Lister(), EndpointSlices: sliceLister,
		Nodes: nodes.Lister(), Ingresses: ings.Lister(), IngressClasses: classes.Lister(),
	}
	onService := func(obj any) {
		if svc, ok := unwrap[*corev1.Service](obj); ok {
			a.set.markService(svc.Namespace, svc.Name)
			a.queue.Add(objKey{translate.KindService, svc.Namespace, svc.Name})
		}
	}
	onSlice := func(obj any) {
		if es, ok := unwrap[*discoveryv1.EndpointSlice](obj); ok {
			if name := es.Labels[discoveryv1.LabelServiceName]; name != "" {
				a.set.markService(es.Namespace, name)
			}
		}
	}
	onIngress := func(obj any) {
		if ing, ok := unwrap[*networkingv1.Ingress](obj); ok {
			k := objKey{translate.KindIngress, ing.Namespace, ing.Name}
			a.set.mark(k)
			a.queue.Add(k)
		}
	}
	all := func(any) { a.set.markAll() }
	handlers := []struct {
		inf cache.SharedIndexInformer
		h   cache.ResourceEventHandler
	}{
		{svcs.Informer(), both(onService)},
		{slices.Informer(), both(onSlice)},
		{ings.Informer(), both(onIngress)},
		{classes.Informer(), both(all)},
		{nodes.Informer(), cache.ResourceEventHandlerFuncs{
			AddFunc:    all,
			DeleteFunc: all,
			UpdateFunc: func(o, n any) {
				on, ok1 := o.(*corev1.Node)
				nn, ok2 := n.(*corev1.Node)
				if !ok1 || !ok2 || nodeChanged(on, nn) {
					a.set.markAll()
				}
			},
		}},
	}
	for _, h := range handlers {
		_, _ = h.inf.AddEventHandler(h.h)
		a.synced = append(a.synced, h.inf.HasSynced)
	}
}

func both(fn func(any)) cache.ResourceEventHandler {
	return cache.ResourceEventHandlerFuncs{AddFunc: fn, DeleteFunc: fn, UpdateFunc: func(_, n any) { fn(n) }}
}

// unwrap returns the object of an event, also from a tombstone.
func unwrap[T any](obj any) (T, bool) {
	if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = t.Obj
	}
	v, ok := obj.(T)
	return v, ok
}

// opts returns the translation options in force.
func (a *Agent) opts() translate.Options {
	a.optMu.Lock()
	defer a.optMu.Unlock()
	return a.options
}

// setTenant takes what the operator set for the tenant into the options
// and retranslates everything when they changed.
func (a *Agent) setTenant(t *pb.Tenant) {
	if t == nil {
		return
	}
	a.optMu.Lock()
	o := a.options
	o.PodsRoutable = t.GetPodsRoutable()
	o.Domains = strings.Join(t.GetDomains(), ",")
	o.DefaultPool = a.cfg.Options.DefaultPool
	if o.DefaultPool == "" && len(t.GetPools()) > 0 {
		o.DefaultPool = t.GetPools()[0]
	}
	changed := o != a.options
	a.options = o
	a.optMu.Unlock()
	if changed {
		a.log.Info("tenant settings", "tenant", t.GetName(), "podsRoutable", o.PodsRoutable, "defaultPool", o.DefaultPool)
		a.set.markAll()
	}
}

// setFeatureLevel takes what the LB cluster serves (the welcome's
// feature level) into the options and retranslates everything when it
// changed: dual-stack Services ask for a VIP of each family only from a
// cluster whose every host serves them.
func (a *Agent) setFeatureLevel(level uint32) {
	a.optMu.Lock()
	o := a.options
	o.DualStack = level >= api.LevelOf(api.FeatureDualStack)
	o.NotFoundRoutes = level >= api.LevelOf(api.FeatureNotFoundRoutes)
	o.TLSTerminate = level >= api.LevelOf(api.FeatureTLSTerminate)
	o.ClientSource = level >= api.LevelOf(api.FeatureClientSource)
	o.MisdirectedRequests = level >= api.LevelOf(api.FeatureMisdirectedRequests)
	changed := o != a.options
	a.options = o
	a.optMu.Unlock()
	if changed {
		a.log.Info("LB cluster features", "featureLevel", level, "dualStack", o.DualStack, "notFoundRoutes", o.NotFoundRoutes)
		a.set.markAll()
	}
}

// recompute translates what changed and queues status writes for it.
func (a *Agent) recompute() {
	changed := a.set.recompute(a.src, a.opts())
	for _, k := range changed {
		a.queue.Add(k)
	}
	if len(changed) > 0 {
		a.wakeNodePorts()
	}
}

// Run starts the informers, waits for leadership (when elected) and then
// streams until ctx ends.
func (a *Agent) Run(parent context.Context) error {
	// The informers stop with ctx, which ends before Shutdown waits for
	// them (deferred calls run last first).
	ctx, cancel := context.WithCancel(parent)
	defer a.factory.Shutdown()
	defer cancel()
	if a.cfg.HealthAddr != "" {
		ln, err := net.Listen("tcp", a.cfg.HealthAddr)
		if err != nil {
			return fmt.Errorf("--health-addr %s: %w", a.cfg.HealthAddr, err)
		}
		a.log.Info("serving /healthz and /readyz", "addr", ln.Addr().String())
		go func() {
			if err := a.serveHealth(ctx, ln); err != nil {
				a.log.Error("health endpoint stopped", "err", err)
			}
		}()
	}
	a.watchGateways(ctx)
	if a.gwShutdown != nil {
		defer a.gwShutdown()
	}
	a.factory.Start(ctx.Done())
	a.log.Info("waiting for the informers' caches")
	if !cache.WaitForCacheSync(ctx.Done(), a.synced...) {
		return fmt.Errorf("informers did not sync: %w", context.Cause(parent))
	}
	a.log.Info("caches synced")
	a.health.synced.Store(true)
	if !a.cfg.LeaderElect {
		return a.lead(ctx)
	}
	lock := &resourcelock.LeaseLock{
		LeaseMeta:  metav1.ObjectMeta{Name: a.cfg.LeaseName, Namespace: a.cfg.Namespace},
		Client:     a.kube.CoordinationV1(),
		LockConfig: resourcelock.ResourceLockConfig{Identity: a.cfg.Identity},
	}
	result := make(chan error, 1)
	le, err := leaderelection.NewLeaderElector(leaderelection.LeaderElectionConfig{
		Lock:            lock,
		LeaseDuration:   a.cfg.LeaseDuration,
		RenewDeadline:   a.cfg.RenewDeadline,
		RetryPeriod:     a.cfg.RetryPeriod,
		ReleaseOnCancel: true,
		Name:            a.cfg.LeaseName,
		Callbacks: leaderelection.LeaderCallbacks{
			OnStartedLeading: func(ctx context.Context) {
				a.log.Info("leading", "lease", a.cfg.Namespace+"/"+a.cfg.LeaseName, "identity", a.cfg.Identity)
				result <- a.lead(ctx)
			},
			OnStoppedLeading: func() { a.log.Info("stopped leading", "identity", a.cfg.Identity) },
			OnNewLeader: func(id string) {
				if id != a.cfg.Identity {
					a.log.Info("another replica leads", "leader", id)
				}
			},
		},
	})
	if err != nil {
		return fmt.Errorf("leader election: %w", err)
	}
	le.Run(ctx)
	if parent.Err() != nil {
		return nil
	}
	select {
	case err := <-result:
		if err != nil {
			return err
		}
	default:
	}
	return errors.New("lost the leader lease; exiting so that the replica starts afresh")
}

// lead streams to the LB cluster and writes status until ctx ends,
// reconnecting with backoff.
func (a *Agent) lead(ctx context.Context) error {
	events := a.cfg.Events
	if events == nil {
		events = a.kube
	}
	a.health.leading.Store(true)
	defer a.health.leading.Store(false)
	a.bcast.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: events.CoreV1().Events("")})
	defer a.bcast.Shutdown()
	for range writers {
		go a.runWriter(ctx)
	}
	go a.runNodePorts(ctx)
	backoff := 100 * time.Millisecond
	for ctx.Err() == nil {
		start := time.Now()
		a.metrics.sessions.Add(1)
		err := a.runSession(ctx)
		if ctx.Err() != nil {
			return nil
		}
		if time.Since(start) > 30*time.Second {
			backoff = 100 * time.Millisecond
		}
		a.log.Warn("stream to the LB cluster ended; reconnecting", "err", err, "in", backoff)
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, 5*time.Second)
	}
	return nil
}
