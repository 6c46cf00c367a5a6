package scenarios

import (
	"crypto/x509"
	"errors"
	"fmt"
	"net/netip"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// testLocalTraffic: a Service with externalTrafficPolicy: Local and PROXY
// protocol, its pods on node1 only. The LB health-checks kube-proxy's
// healthCheckNodePort, so node2 (no local pod: kube-proxy drops the
// traffic) gets none and every request is answered, from node1's pods,
// which see the client's own address in the PROXY header. Moved to node2,
// the traffic follows. The pods are those of the Deployment shop/local
// (two, on node1), which the scenario made with its echo pods.
func (l *kubeLab) testLocalTraffic(t *testing.T) {
	l.waitDeployment("shop", "local", 2)
	svc := lbServiceFor("shop", "local", "local", corev1.ProtocolTCP, 80)
	svc.Spec.ExternalTrafficPolicy = corev1.ServiceExternalTrafficPolicyLocal
	svc.Annotations = map[string]string{"teapot-lb.io/proxy-protocol": "v1"}
	vip := l.createService(svc)
	ctx, cancel := l.ctx()
	got, err := l.k.Client.CoreV1().Services("shop").Get(ctx, "local", metav1.GetOptions{})
	cancel()
	if err != nil {
		t.Fatal(err)
	}
	if got.Spec.HealthCheckNodePort == 0 {
		t.Fatal("the Service has no healthCheckNodePort")
	}
	if in := got.Status.LoadBalancer.Ingress; len(in) != 1 || in[0].IPMode == nil || *in[0].IPMode != corev1.LoadBalancerIPModeProxy {
		t.Fatalf("status %+v, want one address with ipMode Proxy", in)
	}
	to := netip.AddrPortFrom(vip, 80)
	ask := func() (echoAnswer, error) { return echoHTTP(l.client, to, 2*time.Second) }
	l.waitEcho("an answer through "+vip.String(), ask)
	onNode := func(node string) {
		t.Helper()
		// Until the LB's health checks agree, a request may still go to
		// the other node; then every request must be answered on node.
		waitFor(t, kubeLabTimeout, "20 answers in a row from pods on "+node, func() error {
			pods := l.podNodes("shop", "local")
			for i := range 20 {
				a, err := ask()
				if err != nil {
					return fmt.Errorf("request %d: %v", i, err)
				}
				if pods[a.pod] != node {
					return fmt.Errorf("request %d answered by %s on %q", i, a.pod, pods[a.pod])
				}
				if want := "PROXY TCP4 192.0.2.100 " + vip.String() + " "; !strings.HasPrefix(a.proxy, want) {
					return errStop(fmt.Errorf("PROXY header %q, want the client's address (%q...)", a.proxy, want))
				}
			}
			return nil
		})
	}
	began := time.Now()
	onNode("node1")
	t.Logf("ETP=Local: every answer from node1 %s after the VIP, with the client's address in the PROXY header", time.Since(began).Round(time.Millisecond))

	// ipMode: Proxy keeps kube-proxy from short-circuiting the VIP inside
	// the cluster: a pod's own request to the VIP goes out through the LB
	// too, and so carries a PROXY header (from the pod's node, which
	// masquerades it) that the pod expects.
	in := l.waitEcho("an in-cluster client's answer through "+vip.String(), func() (echoAnswer, error) {
		return echoVia(l.client, to, to, 5*time.Second)
	})
	if !strings.HasPrefix(in.proxy, "PROXY TCP4 192.0.2.3") || !strings.Contains(in.proxy, " "+vip.String()+" ") {
		t.Fatalf("a pod's request to the VIP reached %s with PROXY header %q; want one from a node's address to %s (through the LB, not short-circuited by kube-proxy)",
			in.pod, in.proxy, vip)
	}
	t.Logf("ipMode Proxy: a pod's own request to %s went through the LB (PROXY header %q)", vip, in.proxy)

	ctx, cancel = l.ctx()
	defer cancel()
	patch := []byte(`{"spec":{"template":{"spec":{"nodeSelector":{"kubernetes.io/hostname":"node2"}}}}}`)
	if _, err := l.k.Client.AppsV1().Deployments("shop").Patch(ctx, "local", types.StrategicMergePatchType, patch, metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	began = time.Now()
	onNode("node2")
	t.Logf("ETP=Local: pods moved to node2; traffic followed within %s", time.Since(began).Round(time.Millisecond))
}

// ingressVIP is the address the shop Ingress asks for, so that the ACME
// server's DNS can name it before the Ingress exists (as a tenant's DNS
// record would).
const ingressVIP = "192.0.2.199"

// testIngressClusterIP: an Ingress with tls whose backend is an ordinary
// ClusterIP Service is served with no change by the tenant, over HTTP and
// over HTTPS with a certificate from the ACME server: the agent creates a
// NodePort Service for it (labelled as its own, owned by the ClusterIP
// Service), and deletes it with the Ingress.
func (l *kubeLab) testIngressClusterIP(t *testing.T) {
	c := l.k.Client
	ctx, cancel := l.ctx()
	defer cancel()
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "web-internal"},
		Spec: corev1.ServiceSpec{
			Selector: map[string]string{"app": "echo"},
			Ports:    []corev1.ServicePort{{Name: "http", Port: 80, TargetPort: intstr.FromString("http")}},
		},
	}
	svc, err := c.CoreV1().Services("shop").Create(ctx, svc, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	l.peb.AddA(t, "shop.example", ingressVIP)
	pathType := networkingv1.PathTypePrefix
	ing := &networkingv1.Ingress{
		ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "shop",
			Annotations: map[string]string{"teapot-lb.io/load-balancer-ips": ingressVIP}},
		Spec: networkingv1.IngressSpec{
			IngressClassName: ptrTo("teapot-lb"),
			TLS:              []networkingv1.IngressTLS{{Hosts: []string{"shop.example"}, SecretName: "shop-tls"}},
			Rules: []networkingv1.IngressRule{{Host: "shop.example", IngressRuleValue: networkingv1.IngressRuleValue{
				HTTP: &networkingv1.HTTPIngressRuleValue{Paths: []networkingv1.HTTPIngressPath{{
					Path: "/", PathType: &pathType,
					Backend: networkingv1.IngressBackend{Service: &networkingv1.IngressServiceBackend{
						Name: "web-internal", Port: networkingv1.ServiceBackendPort{Number: 80}}},
				}}},
			}}},
		},
	}
	began := time.Now()
	if _, err := c.NetworkingV1().Ingresses("shop").Create(ctx, ing, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	var vip netip.Addr
	waitFor(t, kubeLabTimeout, "a VIP in the Ingress's status", func() error {
		ctx, cancel := l.ctx()
		defer cancel()
		got, err := c.NetworkingV1().Ingresses("shop").Get(ctx, "shop", metav1.GetOptions{})
		if err != nil {
			return err
		}
		for _, in := range got.Status.LoadBalancer.Ingress {
			if a, err := netip.ParseAddr(in.IP); err == nil {
				vip = a
				return nil
			}
		}
		return errors.New("no VIP in status")
	})
	a := l.waitEcho("an answer for shop.example through "+vip.String(), func() (echoAnswer, error) {
		return echoHTTPHost(l.client, netip.AddrPortFrom(vip, 80), "shop.example", 2*time.Second)
	})
	t.Logf("Ingress to a ClusterIP Service: answered by %s %s after the Ingress was created", a.pod, time.Since(began).Round(time.Millisecond))
	if vip.String() != ingressVIP {
		t.Fatalf("the Ingress got %s, want the address it asked for, %s", vip, ingressVIP)
	}
	roots := l.peb.IssuerRoots(t)
	var leaf *x509.Certificate
	a = l.waitEcho("an HTTPS answer for shop.example through "+vip.String(), func() (a echoAnswer, err error) {
		a, leaf, err = echoHTTPS(l.client, netip.AddrPortFrom(vip, 443), "shop.example", roots, 2*time.Second)
		return a, err
	})
	t.Logf("Ingress with tls: HTTPS answered by %s %s after the Ingress was created, certificate issued by %q for %v",
		a.pod, time.Since(began).Round(time.Millisecond), leaf.Issuer.CommonName, leaf.DNSNames)
	np, err := c.CoreV1().Services("shop").Get(ctx, "web-internal-teapot-np", metav1.GetOptions{})
	if err != nil {
		t.Fatalf("the agent's NodePort Service: %v", err)
	}
	if np.Spec.Type != corev1.ServiceTypeNodePort || np.Labels["app.kubernetes.io/managed-by"] != "teapot-lb-agent" ||
		len(np.OwnerReferences) != 1 || np.OwnerReferences[0].UID != svc.UID {
		t.Fatalf("NodePort Service: type %s, labels %v, owners %+v; want NodePort, managed by teapot-lb-agent, owned by %s", np.Spec.Type, np.Labels, np.OwnerReferences, svc.UID)
	}
	if err := c.NetworkingV1().Ingresses("shop").Delete(ctx, "shop", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, kubeLabTimeout, "the agent's NodePort Service deleted with the Ingress", func() error {
		ctx, cancel := l.ctx()
		defer cancel()
		_, err := c.CoreV1().Services("shop").Get(ctx, "web-internal-teapot-np", metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return nil
		}
		return fmt.Errorf("still there (%v)", err)
	})
}

// testNoNodePorts: a LoadBalancer Service with allocateLoadBalancerNodePorts
// false has no nodePort for the LB to send to, and this tenant's pods are
// not routable from the LB hosts: the agent refuses it clearly (a Warning
// Event naming the field and what to do) and asks the LB cluster for
// nothing, so it gets no VIP.
func (l *kubeLab) testNoNodePorts(t *testing.T) {
	svc := lbServiceFor("shop", "no-nodeports", "echo", corev1.ProtocolTCP, 80)
	svc.Spec.AllocateLoadBalancerNodePorts = ptrTo(false)
	c := l.k.Client
	ctx, cancel := l.ctx()
	defer cancel()
	if _, err := c.CoreV1().Services("shop").Create(ctx, svc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	var msg string
	waitFor(t, kubeLabTimeout, "a Warning Event refusing shop/no-nodeports", func() error {
		ctx, cancel := l.ctx()
		defer cancel()
		evs, err := c.CoreV1().Events("shop").List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=no-nodeports"})
		if err != nil {
			return err
		}
		for _, e := range evs.Items {
			if e.Type == corev1.EventTypeWarning && e.Reason == "LoadBalancerRefused" {
				msg = e.Message
				return nil
			}
		}
		return fmt.Errorf("%d Events, none a refusal", len(evs.Items))
	})
	if !strings.Contains(msg, "allocateLoadBalancerNodePorts is false") || !strings.Contains(msg, "remove allocateLoadBalancerNodePorts: false") {
		t.Errorf("refusal %q; want it to name allocateLoadBalancerNodePorts and what to do", msg)
	}
	got, err := c.CoreV1().Services("shop").Get(ctx, "no-nodeports", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(got.Status.LoadBalancer.Ingress) != 0 {
		t.Errorf("the refused Service has the status %+v; want no address", got.Status.LoadBalancer.Ingress)
	}
	t.Logf("allocateLoadBalancerNodePorts false: refused with %q", msg)
	if err := c.CoreV1().Services("shop").Delete(ctx, "no-nodeports", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
}
