package scenarios

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	mdns "github.com/miekg/dns"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"
	gwclient "sigs.k8s.io/gateway-api/pkg/client/clientset/versioned"

	"github.com/teapot-lb/teapot-lb/scenarios/netlab"
)

// kubeDNSPort is where the kube lab's LB hosts answer DNS: not 53, which
// a tenant's UDP Service of the lab serves on its VIP (a DNS server bound
// to 0.0.0.0:53 would take that port on every address of the host).
const kubeDNSPort = 5300

// kubeDNSArgs have the kube lab's LB hosts answer DNS for the tenant's
// domain (the zone the operator delegates to them).
var kubeDNSArgs = []string{
	"--dns-addr", fmt.Sprintf("0.0.0.0:%d", kubeDNSPort), "--dns-zones", "shop.example",
	"--dns-ns", "ns1.shop.example=192.0.2.11", "--dns-ttl", "5s",
}

const (
	// kubeDNSAnswerBound is how long after the VIP appears in the object's
	// status every LB host must answer its name with it (the issue's
	// bound: "within a second of the VIP").
	kubeDNSAnswerBound = time.Second
	// kubeDNSGoneBound is how long after an Ingress is deleted every LB
	// host must answer its name NXDOMAIN: the agent's delete, one Raft
	// commit and the table's compile, with room for a loaded machine.
	kubeDNSGoneBound = 5 * time.Second
	// kubeDNSPoll is how often each host is asked each name.
	kubeDNSPoll = 20 * time.Millisecond
)

// dnsState is what one host answered for one name: the rcode and the A
// records, sorted.
type dnsState struct {
	rcode int
	addrs string
}

func (s dnsState) String() string {
	return mdns.RcodeToString[s.rcode] + " [" + s.addrs + "]"
}

// dnsChange is a state and the moment it was first seen.
type dnsChange struct {
	at time.Time
	st dnsState
}

// dnsWatch asks every LB host for each name every kubeDNSPoll, over TCP
// (response-rate limiting, which the hosts apply to UDP, would drop this
// rate of queries), and keeps each (host, name)'s changes of answer.
type dnsWatch struct {
	mu      sync.Mutex
	changes map[[2]string][]dnsChange // {host id, name}
	stop    chan struct{}
	wg      sync.WaitGroup
}

func (l *kubeLab) watchDNS(names ...string) *dnsWatch {
	w := &dnsWatch{changes: map[[2]string][]dnsChange{}, stop: make(chan struct{})}
	for _, n := range l.lbs {
		w.wg.Go(func() { w.poll(l.client, n, names) })
	}
	return w
}

func (w *dnsWatch) poll(from *netlab.Host, n *lbHost, names []string) {
	var co *mdns.Conn
	defer func() {
		if co != nil {
			co.Close()
		}
	}()
	tick := time.NewTicker(kubeDNSPoll)
	defer tick.Stop()
	for {
		for _, name := range names {
			if co == nil {
				ctx, cancel := context.WithTimeout(context.Background(), time.Second)
				c, err := from.DialContext(ctx, "tcp", netip.AddrPortFrom(n.ip4, kubeDNSPort).String())
				cancel()
				if err != nil {
					continue
				}
				co = &mdns.Conn{Conn: c}
			}
			st, err := askTCP(co, name)
			if err != nil {
				co.Close()
				co = nil
				continue
			}
			k := [2]string{n.id, name}
			w.mu.Lock()
			if ch := w.changes[k]; len(ch) == 0 || ch[len(ch)-1].st != st {
				w.changes[k] = append(ch, dnsChange{time.Now(), st})
			}
			w.mu.Unlock()
		}
		select {
		case <-w.stop:
			return
		case <-tick.C:
		}
	}
}

func askTCP(co *mdns.Conn, name string) (dnsState, error) {
	_ = co.SetDeadline(time.Now().Add(time.Second))
	q := new(mdns.Msg)
	q.SetQuestion(name, mdns.TypeA)
	if err := co.WriteMsg(q); err != nil {
		return dnsState{}, err
	}
	m, err := co.ReadMsg()
	if err != nil {
		return dnsState{}, err
	}
	if m.Id != q.Id {
		return dnsState{}, errors.New("answer to another query")
	}
	return dnsState{rcode: m.Rcode, addrs: strings.Join(dnsAddrs(m), ",")}, nil
}

func (w *dnsWatch) close() {
	close(w.stop)
	w.wg.Wait()
}

// now is what host last answered for name.
func (w *dnsWatch) now(host, name string) (dnsState, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	ch := w.changes[[2]string{host, name}]
	if len(ch) == 0 {
		return dnsState{}, false
	}
	return ch[len(ch)-1].st, true
}

// since is when host began answering name st without a change since, or
// false when its last answer is another.
func (w *dnsWatch) since(host, name string, st dnsState) (time.Time, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	ch := w.changes[[2]string{host, name}]
	if len(ch) == 0 || ch[len(ch)-1].st != st {
		return time.Time{}, false
	}
	return ch[len(ch)-1].at, true
}

// history is host's answers for name, for a failure's message.
func (w *dnsWatch) history(host, name string, from time.Time) string {
	w.mu.Lock()
	defer w.mu.Unlock()
	var b strings.Builder
	for _, c := range w.changes[[2]string{host, name}] {
		fmt.Fprintf(&b, " %+.3fs %s;", c.at.Sub(from).Seconds(), c.st)
	}
	return b.String()
}

// testDNS is the first proof of the LB hosts' DNS with a real
// tenant cluster: an Ingress's host and a Gateway listener's hostname,
// both routed to the echo pods, are answered by every LB host with the VIP
// the LB cluster assigned, within kubeDNSAnswerBound of that VIP reaching
// the object's status (the moment the tenant sees it); the address
// answered serves the name; and once the Ingress is deleted its name gets
// NXDOMAIN from every host within kubeDNSGoneBound while the Gateway's
// name is still answered.
func (l *kubeLab) testDNS(t *testing.T) {
	c := l.k.Client
	ctx, cancel := l.ctx()
	defer cancel()
	const ingName, gwName = "ing.shop.example.", "gw-dns.shop.example."
	_, err := c.CoreV1().Services("shop").Create(ctx, &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "dns-web"},
		Spec: corev1.ServiceSpec{
			Selector: map[string]string{"app": "echo"},
			Ports:    []corev1.ServicePort{{Name: "http", Port: 80, TargetPort: intstr.FromString("http")}},
		},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	gc, err := gwclient.NewForConfig(l.restConfig())
	if err != nil {
		t.Fatal(err)
	}
	g := gc.GatewayV1()
	_, err = g.GatewayClasses().Create(ctx, &gwv1.GatewayClass{ObjectMeta: metav1.ObjectMeta{Name: "teapot-lb"},
		Spec: gwv1.GatewayClassSpec{ControllerName: "teapot-lb.io/gateway-controller"}}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}

	// Every host is asked both names from before the objects exist.
	w := l.watchDNS(ingName, gwName)
	defer w.close()
	waitFor(t, kubeLabTimeout, "every LB host answers NXDOMAIN for both names", func() error {
		for _, n := range l.lbs {
			for _, name := range []string{ingName, gwName} {
				if st, ok := w.now(n.id, name); !ok || st.rcode != mdns.RcodeNameError {
					return fmt.Errorf("%s answers %s: %v", n.id, name, st)
				}
			}
		}
		return nil
	})

	pathType := networkingv1.PathTypePrefix
	ing := &networkingv1.Ingress{
		ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "dns"},
		Spec: networkingv1.IngressSpec{
			IngressClassName: ptrTo("teapot-lb"),
			Rules: []networkingv1.IngressRule{{Host: strings.TrimSuffix(ingName, "."), IngressRuleValue: networkingv1.IngressRuleValue{
				HTTP: &networkingv1.HTTPIngressRuleValue{Paths: []networkingv1.HTTPIngressPath{{
					Path: "/", PathType: &pathType,
					Backend: networkingv1.IngressBackend{Service: &networkingv1.IngressServiceBackend{
						Name: "dns-web", Port: networkingv1.ServiceBackendPort{Number: 80}}},
				}}},
			}}},
		},
	}
	host := gwv1.Hostname(strings.TrimSuffix(gwName, "."))
	gw := &gwv1.Gateway{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "dns"}, Spec: gwv1.GatewaySpec{
		GatewayClassName: "teapot-lb",
		Listeners:        []gwv1.Listener{{Name: "http", Protocol: gwv1.HTTPProtocolType, Port: 80, Hostname: &host}},
	}}
	port := gwv1.PortNumber(80)
	route := &gwv1.HTTPRoute{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "dns"}}
	route.Spec.ParentRefs = []gwv1.ParentReference{{Name: "dns"}}
	route.Spec.Rules = []gwv1.HTTPRouteRule{{BackendRefs: []gwv1.HTTPBackendRef{{BackendRef: gwv1.BackendRef{
		BackendObjectReference: gwv1.BackendObjectReference{Name: "dns-web", Port: &port}}}}}}

	// The VIP in each object's status, and when it was first seen there.
	type seen struct {
		vip netip.Addr
		at  time.Time
	}
	var mu sync.Mutex
	status := map[string]seen{}
	stopStatus := make(chan struct{})
	var sw sync.WaitGroup
	watchStatus := func(name string, get func(ctx context.Context) ([]string, error)) {
		sw.Go(func() {
			for {
				ctx, cancel := l.ctx()
				addrs, err := get(ctx)
				cancel()
				if err == nil {
					for _, a := range addrs {
						if ip, err := netip.ParseAddr(a); err == nil {
							mu.Lock()
							status[name] = seen{ip, time.Now()}
							mu.Unlock()
							return
						}
					}
				}
				select {
				case <-stopStatus:
					return
				case <-time.After(kubeDNSPoll):
				}
			}
		})
	}
	defer func() { close(stopStatus); sw.Wait() }()
	began := time.Now()
	if _, err := c.NetworkingV1().Ingresses("shop").Create(ctx, ing, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	watchStatus(ingName, func(ctx context.Context) ([]string, error) {
		got, err := c.NetworkingV1().Ingresses("shop").Get(ctx, "dns", metav1.GetOptions{})
		if err != nil {
			return nil, err
		}
		var out []string
		for _, in := range got.Status.LoadBalancer.Ingress {
			out = append(out, in.IP)
		}
		return out, nil
	})
	if _, err := g.Gateways("shop").Create(ctx, gw, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := g.HTTPRoutes("shop").Create(ctx, route, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	watchStatus(gwName, func(ctx context.Context) ([]string, error) {
		got, err := g.Gateways("shop").Get(ctx, "dns", metav1.GetOptions{})
		if err != nil {
			return nil, err
		}
		var out []string
		for _, a := range got.Status.Addresses {
			out = append(out, a.Value)
		}
		return out, nil
	})

	vips := map[string]netip.Addr{}
	waitFor(t, kubeLabTimeout, "a VIP in the Ingress's and the Gateway's status", func() error {
		mu.Lock()
		defer mu.Unlock()
		for _, name := range []string{ingName, gwName} {
			s, ok := status[name]
			if !ok {
				return fmt.Errorf("no VIP in the status of the object named %s", name)
			}
			vips[name] = s.vip
		}
		return nil
	})
	if vips[ingName] == vips[gwName] {
		t.Fatalf("the Ingress and the Gateway both got %s", vips[ingName])
	}
	waitFor(t, kubeLabTimeout, "every LB host answers both names with their VIPs", func() error {
		for _, n := range l.lbs {
			for _, name := range []string{ingName, gwName} {
				want := dnsState{rcode: mdns.RcodeSuccess, addrs: vips[name].String()}
				if _, ok := w.since(n.id, name, want); !ok {
					st, _ := w.now(n.id, name)
					return fmt.Errorf("%s answers %s: %v, want %v", n.id, name, st, want)
				}
			}
		}
		return nil
	})
	for _, name := range []string{ingName, gwName} {
		mu.Lock()
		s := status[name]
		mu.Unlock()
		var lags []string
		for _, n := range l.lbs {
			at, _ := w.since(n.id, name, dnsState{rcode: mdns.RcodeSuccess, addrs: s.vip.String()})
			lag := at.Sub(s.at)
			lags = append(lags, fmt.Sprintf("%s %+dms", n.id, lag.Milliseconds()))
			if lag > kubeDNSAnswerBound {
				t.Errorf("%s answered %s with %s %s after the VIP reached the status, want within %s; its answers:%s",
					n.id, name, s.vip, lag.Round(time.Millisecond), kubeDNSAnswerBound, w.history(n.id, name, s.at))
			}
		}
		t.Logf("DNS: %s -> %s; VIP in the status %s after the create; answered by each host, from the status: %s",
			name, s.vip, s.at.Sub(began).Round(time.Millisecond), strings.Join(lags, ", "))
	}
	// The address answered serves the name.
	for _, name := range []string{ingName, gwName} {
		a := l.waitEcho("an answer for "+name+" through the address DNS gave", func() (echoAnswer, error) {
			return echoHTTPHost(l.client, netip.AddrPortFrom(vips[name], 80), strings.TrimSuffix(name, "."), 2*time.Second)
		})
		if !strings.HasPrefix(a.pod, "echo-") {
			t.Errorf("%s through %s answered by %q, want an echo pod", name, vips[name], a.pod)
		}
	}
	// A resolver's view: BIND's dig, from the client, over UDP.
	for _, n := range l.lbs {
		l.digAnswers(t, n, ingName, vips[ingName])
	}

	// The Ingress is deleted: every host answers NXDOMAIN for its name.
	deleted := time.Now()
	if err := c.NetworkingV1().Ingresses("shop").Delete(ctx, "dns", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	nx := dnsState{rcode: mdns.RcodeNameError}
	waitFor(t, kubeLabTimeout, "every LB host answers NXDOMAIN for "+ingName, func() error {
		for _, n := range l.lbs {
			if _, ok := w.since(n.id, ingName, nx); !ok {
				st, _ := w.now(n.id, ingName)
				return fmt.Errorf("%s answers %v", n.id, st)
			}
		}
		return nil
	})
	var gone []string
	for _, n := range l.lbs {
		at, _ := w.since(n.id, ingName, nx)
		lag := at.Sub(deleted)
		gone = append(gone, fmt.Sprintf("%s %dms", n.id, lag.Milliseconds()))
		if lag > kubeDNSGoneBound {
			t.Errorf("%s answered NXDOMAIN for %s %s after the Ingress was deleted, want within %s; its answers:%s",
				n.id, ingName, lag.Round(time.Millisecond), kubeDNSGoneBound, w.history(n.id, ingName, deleted))
		}
		want := dnsState{rcode: mdns.RcodeSuccess, addrs: vips[gwName].String()}
		if st, _ := w.now(n.id, gwName); st != want {
			t.Errorf("%s answers %s %v after the Ingress's deletion, want %v", n.id, gwName, st, want)
		}
	}
	t.Logf("DNS: Ingress deleted; %s NXDOMAIN on each host after %s", ingName, strings.Join(gone, ", "))

	ctx2, cancel2 := context.WithTimeout(context.Background(), cliTimeout)
	defer cancel2()
	_ = g.HTTPRoutes("shop").Delete(ctx2, "dns", metav1.DeleteOptions{})
	_ = g.Gateways("shop").Delete(ctx2, "dns", metav1.DeleteOptions{})
	_ = c.CoreV1().Services("shop").Delete(ctx2, "dns-web", metav1.DeleteOptions{})
}

// digAnswers has BIND's dig ask n for name over UDP from the client and
// checks that the answer is vip alone.
func (l *kubeLab) digAnswers(t *testing.T, n *lbHost, name string, vip netip.Addr) {
	t.Helper()
	if _, err := exec.LookPath("dig"); err != nil {
		unavailable(t, "dig is not installed (Debian package bind9-dnsutils)")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	out, err := l.client.Exec(ctx, "dig", "+norecurse", "+short", "+tries=3", "-p", fmt.Sprint(kubeDNSPort), "@"+n.ip4.String(), name, "A")
	if err != nil {
		t.Fatalf("dig @%s %s: %v", n.ip4, name, err)
	}
	if got := strings.Fields(string(out)); !slices.Equal(got, []string{vip.String()}) {
		t.Errorf("dig @%s %s A: %q, want %s", n.ip4, name, out, vip)
	}
}
