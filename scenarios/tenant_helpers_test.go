package scenarios

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"

	"github.com/teapot-lb/teapot-lb/api"
	"github.com/teapot-lb/teapot-lb/api/client"
	pb "github.com/teapot-lb/teapot-lb/api/proto/teapotv1"
)

// syncTimeout bounds one change reaching the LB cluster and back.
const syncTimeout = 60 * time.Second

// tenantLabAddrs are a tenant lab's addresses on loopback, which every
// LB process on this machine can bind: its VIP pool, and the address its
// LB hosts' raft, API and metrics listeners are on (ports picked free
// there). Each lab has a /28 of 127.0.110.0/24 and an address of
// 127.0.111.0/24, ranges no other test uses, so that labs running at
// once never bind the same VIP and port, and a host that restarts binds
// its ports again where no other scenario picks one.
type tenantLabAddrs struct {
	vips  netip.Prefix
	hosts string
}

var (
	agentLab      = tenantLabAddrs{netip.MustParsePrefix("127.0.110.0/28"), "127.0.111.1"}  // TestTenantAgentAgainstKubeAPIServer
	isolationLab  = tenantLabAddrs{netip.MustParsePrefix("127.0.110.16/28"), "127.0.111.2"} // TestTenantIsolation
	resilienceLab = tenantLabAddrs{netip.MustParsePrefix("127.0.110.32/28"), "127.0.111.3"} // TestTenantSyncResilience
	edgePolicyLab = tenantLabAddrs{netip.MustParsePrefix("127.0.110.48/28"), "127.0.111.4"} // TestTenantEdgePolicy
	benchLab      = tenantLabAddrs{netip.MustParsePrefix("127.0.110.64/28"), "127.0.111.5"} // BenchmarkTenantEndpointChange
)

// tenantLab is a 3-node LB cluster and a real Kubernetes API with the agent's
// manifests applied.
type tenantLab struct {
	t    testing.TB
	c    *cluster
	k    *kube
	conn *client.Conn
	// agentToken is the token of the agent's service account (least
	// privilege, from packaging/k8s/10-rbac.yaml).
	agentToken string
	// vips is the range of the lab's VIP pool (seedTenant).
	vips netip.Prefix
}

// newTenantLab starts a lab on addresses of its own: its LB hosts listen
// on a.hosts, and its VIP pool will be a.vips.
func newTenantLab(t testing.TB, a tenantLabAddrs) *tenantLab {
	t.Helper()
	k := startKube(t)
	c := newCluster(t)
	c.hostIP = a.hosts
	c.start3()
	l := &tenantLab{t: t, c: c, k: k, conn: dialAll(t, c), vips: a.vips}
	k.applyManifest("00-namespace.yaml")
	k.applyManifest("10-rbac.yaml")
	l.agentToken = k.serviceAccountToken("teapot-lb-system", "teapot-lb-agent")
	return l
}

// dialAll opens an admin connection that fails over between all nodes.
func dialAll(t testing.TB, c *cluster) *client.Conn {
	t.Helper()
	cfg, err := client.LoadConfig(c.adminConf())
	if err != nil {
		t.Fatal(err)
	}
	var addrs []string
	for _, n := range c.nodes {
		addrs = append(addrs, n.apiAddr)
	}
	conn, err := client.Dial(context.Background(), cfg, strings.Join(addrs, ","))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

// cliOK runs a CLI command through any live node and fails the test on error.
func (l *tenantLab) cliOK(args ...string) string {
	l.t.Helper()
	out, err := l.c.cli(l.c.live()[0], args...)
	if err != nil {
		l.t.Fatal(err)
	}
	return out
}

// credentials issues agent credentials for tenant with the CLI and writes
// the Secret's keys as files, as the Secret volume would.
func (l *tenantLab) credentials(tenant string) string {
	l.t.Helper()
	out := l.cliOK("tenant", "credentials", tenant, "-o", "json")
	var secret struct {
		Metadata struct {
			Annotations map[string]string `json:"annotations"`
		} `json:"metadata"`
		StringData map[string]string `json:"stringData"`
	}
	if err := json.Unmarshal([]byte(out), &secret); err != nil {
		l.t.Fatalf("tenant credentials -o json: %v: %q", err, out)
	}
	dir := filepath.Join(l.c.dir, "creds-"+tenant)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		l.t.Fatal(err)
	}
	for _, key := range []string{"tenant", "servers", "ca.crt", "tls.crt", "tls.key"} {
		v, ok := secret.StringData[key]
		if !ok {
			l.t.Fatalf("the credentials Secret has no %s", key)
		}
		if err := os.WriteFile(filepath.Join(dir, key), []byte(v), 0o600); err != nil {
			l.t.Fatal(err)
		}
	}
	if secret.Metadata.Annotations["teapot-lb.io/credential-serial"] == "" {
		l.t.Fatal("the credentials Secret names no serial")
	}
	return dir
}

// agent starts teapot-lb agent with the service account's kubeconfig and
// the agent's own leader election (a 15 s Lease, renewed within 10 s):
// the lab's API server shares a loaded machine with other Kubernetes labs
// and may answer a renew late, and a holder that cannot renew within its
// deadline steps down and exits. A test that kills the holder waits a
// Lease's duration for the other replica's takeover; one that stops the
// API server, a renew deadline for the holder's exit.
func (l *tenantLab) agent(name, creds string, extra ...string) *proc {
	l.t.Helper()
	args := append([]string{"agent",
		"--kubeconfig", l.k.kubeconfig(name, l.agentToken),
		"--credentials", creds,
		"--namespace", "teapot-lb-system",
		"--id", name,
	}, extra...)
	return startProc(l.t, l.c.dir, name, l.c.bin, args...)
}

// lb returns a load balancer from the cluster, or nil if it is not there.
func (l *tenantLab) lb(tenant, name string) (*pb.LoadBalancer, error) {
	ctx, cancel := context.WithTimeout(context.Background(), cliTimeout)
	defer cancel()
	o, err := l.conn.Admin.Get(ctx, &pb.GetRequest{Ref: &pb.ObjectRef{Kind: api.KindLoadBalancer, Tenant: tenant, Name: name}})
	if err != nil {
		if strings.Contains(err.Error(), "not found") {
			return nil, nil
		}
		return nil, err
	}
	return o.GetLoadBalancer(), nil
}

// waitLB waits until the load balancer satisfies cond.
func (l *tenantLab) waitLB(tenant, name, what string, cond func(*pb.LoadBalancer) error) *pb.LoadBalancer {
	l.t.Helper()
	var got *pb.LoadBalancer
	waitFor(l.t, syncTimeout, fmt.Sprintf("%s/%s: %s", tenant, name, what), func() error {
		lb, err := l.lb(tenant, name)
		if err != nil {
			return err
		}
		if err := cond(lb); err != nil {
			return err
		}
		got = lb
		return nil
	})
	return got
}

// memberSet returns the sorted member addresses of one backend pool.
func memberSet(lb *pb.LoadBalancer, pool string) []string {
	var out []string
	for _, m := range lb.GetPools()[pool].GetMembers() {
		out = append(out, m.GetAddress())
	}
	slices.Sort(out)
	return out
}

func hasMembers(pool string, want ...string) func(*pb.LoadBalancer) error {
	want = slices.Sorted(slices.Values(want))
	return func(lb *pb.LoadBalancer) error {
		if lb == nil {
			return errors.New("not stored")
		}
		if got := memberSet(lb, pool); !slices.Equal(got, want) {
			return fmt.Errorf("members %v, want %v", got, want)
		}
		return nil
	}
}

func lbGone(lb *pb.LoadBalancer) error {
	if lb != nil {
		return fmt.Errorf("still stored with VIP %s", lb.GetStatus().GetAddress())
	}
	return nil
}

// Kubernetes objects.

func (l *tenantLab) ctx() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), cliTimeout)
}

func ptrTo[T any](v T) *T { return &v }

// lbService is a LoadBalancer Service of class with one TCP port.
func lbService(ns, name, class string, port int32, ann map[string]string) *corev1.Service {
	return &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Annotations: ann},
		Spec: corev1.ServiceSpec{
			Type:              corev1.ServiceTypeLoadBalancer,
			LoadBalancerClass: ptrTo(class),
			Ports:             []corev1.ServicePort{{Name: "web", Port: port, Protocol: corev1.ProtocolTCP}},
		},
	}
}

func (l *tenantLab) createNamespace(ns string) {
	l.t.Helper()
	ctx, cancel := l.ctx()
	defer cancel()
	_, err := l.k.client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		l.t.Fatal(err)
	}
}

func (l *tenantLab) createService(svc *corev1.Service) *corev1.Service {
	l.t.Helper()
	l.createNamespace(svc.Namespace)
	ctx, cancel := l.ctx()
	defer cancel()
	out, err := l.k.client.CoreV1().Services(svc.Namespace).Create(ctx, svc, metav1.CreateOptions{})
	if err != nil {
		l.t.Fatalf("create Service %s/%s: %v", svc.Namespace, svc.Name, err)
	}
	return out
}

// endpointSlice is the slice of a Service's "web" port with addrs ready.
func endpointSlice(ns, name, svc string, port int32, addrs ...string) *discoveryv1.EndpointSlice {
	es := &discoveryv1.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Namespace: ns, Name: name, Labels: map[string]string{discoveryv1.LabelServiceName: svc}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Ports:       []discoveryv1.EndpointPort{{Name: ptrTo("web"), Port: ptrTo(port), Protocol: ptrTo(corev1.ProtocolTCP)}},
	}
	for _, a := range addrs {
		es.Endpoints = append(es.Endpoints, discoveryv1.Endpoint{Addresses: []string{a}, Conditions: discoveryv1.EndpointConditions{Ready: ptrTo(true)}})
	}
	return es
}

// putSlice creates or replaces an EndpointSlice.
func (l *tenantLab) putSlice(es *discoveryv1.EndpointSlice) {
	l.t.Helper()
	ctx, cancel := l.ctx()
	defer cancel()
	c := l.k.client.DiscoveryV1().EndpointSlices(es.Namespace)
	cur, err := c.Get(ctx, es.Name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		_, err = c.Create(ctx, es, metav1.CreateOptions{})
	case err == nil:
		es.ResourceVersion = cur.ResourceVersion
		_, err = c.Update(ctx, es, metav1.UpdateOptions{})
	}
	if err != nil {
		l.t.Fatalf("put EndpointSlice %s/%s: %v", es.Namespace, es.Name, err)
	}
}

// serviceVIP returns the first status address of a Service ("" if none).
func (l *tenantLab) serviceVIP(ns, name string) (string, *corev1.Service, error) {
	ctx, cancel := l.ctx()
	defer cancel()
	svc, err := l.k.client.CoreV1().Services(ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return "", nil, err
	}
	if ing := svc.Status.LoadBalancer.Ingress; len(ing) > 0 {
		return ing[0].IP, svc, nil
	}
	return "", svc, nil
}

// waitServiceVIP waits until the Service's status carries a VIP and
// checks that it is from the lab's pool.
func (l *tenantLab) waitServiceVIP(ns, name string) (string, *corev1.Service) {
	l.t.Helper()
	var vip string
	var svc *corev1.Service
	waitFor(l.t, syncTimeout, "VIP in the status of Service "+ns+"/"+name, func() error {
		var err error
		vip, svc, err = l.serviceVIP(ns, name)
		if err != nil {
			return err
		}
		if vip == "" {
			return errors.New("no VIP in status.loadBalancer.ingress")
		}
		return nil
	})
	if a, err := netip.ParseAddr(vip); err != nil || !l.vips.Contains(a) {
		l.t.Fatalf("Service %s/%s has VIP %q, not one of the lab's pool %s", ns, name, vip, l.vips)
	}
	return vip, svc
}

// waitEvent waits for an Event on an object whose reason and message match.
func (l *tenantLab) waitEvent(ns, kind, name, reason, contains string) string {
	l.t.Helper()
	var msg string
	waitFor(l.t, syncTimeout, fmt.Sprintf("%s Event on %s %s/%s mentioning %q", reason, kind, ns, name, contains), func() error {
		ctx, cancel := l.ctx()
		defer cancel()
		sel := fields.Set{"involvedObject.kind": kind, "involvedObject.name": name}.AsSelector().String()
		evs, err := l.k.client.CoreV1().Events(ns).List(ctx, metav1.ListOptions{FieldSelector: sel})
		if err != nil {
			return err
		}
		var seen []string
		for _, ev := range evs.Items {
			if ev.Reason == reason && strings.Contains(ev.Message, contains) {
				msg = ev.Message
				return nil
			}
			seen = append(seen, ev.Reason+": "+ev.Message)
		}
		return fmt.Errorf("events so far: %q", seen)
	})
	return msg
}

// podBackend is an HTTP server on loopback that names itself in each answer.
type podBackend struct {
	name string
	addr string
	hits atomic.Int64
	srv  *http.Server
}

func startPodBackend(t testing.TB, pods *podNet, name, ip string, port int) *podBackend {
	t.Helper()
	ln, err := pods.listen(fmt.Sprintf("%s:%d", ip, port))
	if err != nil {
		t.Fatalf("backend %s: %v", name, err)
	}
	b := &podBackend{name: name, addr: ln.Addr().String()}
	b.srv = &http.Server{ReadHeaderTimeout: 5 * time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		b.hits.Add(1)
		fmt.Fprintln(w, b.name)
	})}
	go b.srv.Serve(ln)
	t.Cleanup(func() { b.srv.Close() })
	return b
}

// httpName asks http://addr/ and returns the answering backend's name.
func httpName(addr string) (string, error) { return httpNameFor(addr, "") }

// httpNameFor asks http://addr/ for host (when not empty) and returns the
// answering backend's name.
func httpNameFor(addr, host string) (string, error) { return httpNameWithin(addr, host, 2*time.Second) }

// httpNameWithin is httpNameFor with the time the answer may take.
func httpNameWithin(addr, host string, timeout time.Duration) (string, error) {
	hc := &http.Client{Timeout: timeout, Transport: &http.Transport{DisableKeepAlives: true}}
	req, err := http.NewRequest(http.MethodGet, "http://"+addr+"/", nil)
	if err != nil {
		return "", err
	}
	if host != "" {
		req.Host = host
	}
	resp, err := hc.Do(req)
	if err != nil {
		return "", err
	}
	if resp.StatusCode != http.StatusOK {
		resp.Body.Close()
		return "", fmt.Errorf("%s answered %s", addr, resp.Status)
	}
	defer resp.Body.Close()
	line, err := bufio.NewReader(io.LimitReader(resp.Body, 256)).ReadString('\n')
	if err != nil {
		return "", fmt.Errorf("read answer: %w", err)
	}
	return strings.TrimSpace(line), nil
}

// waitReaches waits until requests to addr have reached every backend named.
func waitReaches(t testing.TB, addr string, names ...string) {
	t.Helper()
	seen := map[string]bool{}
	waitFor(t, syncTimeout, fmt.Sprintf("requests to %s reach %v", addr, names), func() error {
		for range 2 * len(names) {
			name, err := httpName(addr)
			if err != nil {
				return err
			}
			seen[name] = true
		}
		for _, n := range names {
			if !seen[n] {
				return fmt.Errorf("answered by %v so far", seen)
			}
		}
		return nil
	})
}

// createIngress creates an Ingress of class routing host to svc's web port.
func (l *tenantLab) createIngress(ns, name, class, host, svc string) {
	l.t.Helper()
	ctx, cancel := l.ctx()
	defer cancel()
	pt := networkingv1.PathTypePrefix
	ing := &networkingv1.Ingress{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: networkingv1.IngressSpec{
			IngressClassName: ptrTo(class),
			Rules: []networkingv1.IngressRule{{Host: host, IngressRuleValue: networkingv1.IngressRuleValue{HTTP: &networkingv1.HTTPIngressRuleValue{
				Paths: []networkingv1.HTTPIngressPath{{Path: "/", PathType: &pt, Backend: networkingv1.IngressBackend{
					Service: &networkingv1.IngressServiceBackend{Name: svc, Port: networkingv1.ServiceBackendPort{Name: "web"}},
				}}},
			}}}},
		},
	}
	if _, err := l.k.client.NetworkingV1().Ingresses(ns).Create(ctx, ing, metav1.CreateOptions{}); err != nil {
		l.t.Fatalf("create Ingress %s/%s: %v", ns, name, err)
	}
}

// createIngressClass creates a class for controller.
func (l *tenantLab) createIngressClass(name, controller string) {
	l.t.Helper()
	ctx, cancel := l.ctx()
	defer cancel()
	ic := &networkingv1.IngressClass{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: networkingv1.IngressClassSpec{Controller: controller}}
	if _, err := l.k.client.NetworkingV1().IngressClasses().Create(ctx, ic, metav1.CreateOptions{}); err != nil {
		l.t.Fatal(err)
	}
}
