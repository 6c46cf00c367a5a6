package scenarios

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"
	gwclient "sigs.k8s.io/gateway-api/pkg/client/clientset/versioned"
	"sigs.k8s.io/yaml"
)

// gatewayVIP is the address the scenario's Gateway asks for.
const gatewayVIP = "192.0.2.197"

// restConfig is the tenant cluster's administrator configuration, dialling
// through the control plane's namespace.
func (l *kubeLab) restConfig() *rest.Config { return l.k.RestConfig() }

// installGatewayCRDs creates the Gateway API CRDs of channel ("":
// standard) of the module version go.mod pins (v1.6 holds all five route
// kinds in the standard channel), read from the module itself, and waits
// until they are served.
func (l *kubeLab) installGatewayCRDs(channel string) {
	if channel == "" {
		channel = "standard"
	}
	t := l.tb
	t.Helper()
	root, err := moduleRoot()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("go", "list", "-m", "-f", "{{.Dir}}", "sigs.k8s.io/gateway-api")
	cmd.Dir = root
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("find the gateway-api module: %v", err)
	}
	files, err := filepath.Glob(filepath.Join(strings.TrimSpace(string(out)), "config", "crd", channel, "gateway.networking.k8s.io_*.yaml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("the gateway-api module holds no %s CRDs (%v)", channel, err)
	}
	dc, err := dynamic.NewForConfig(l.restConfig())
	if err != nil {
		t.Fatal(err)
	}
	crds := schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}
	n := 0
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, doc := range strings.Split(string(data), "\n---\n") {
			var u unstructured.Unstructured
			if err := yaml.Unmarshal([]byte(doc), &u.Object); err != nil {
				t.Fatalf("%s: %v", f, err)
			}
			if u.GetKind() != "CustomResourceDefinition" {
				continue // the safe-upgrade admission policy is not needed here
			}
			// Each create has a call's time: the apiserver installs each
			// CRD's schema before it answers, seconds apiece on a loaded
			// machine, and one deadline for them all ran out in a loaded
			// make test.
			ctx, cancel := l.ctx()
			_, err := dc.Resource(crds).Create(ctx, &u, metav1.CreateOptions{})
			cancel()
			if err != nil {
				t.Fatalf("create CRD %s: %v", u.GetName(), err)
			}
			n++
		}
	}
	waitFor(t, kubeLabTimeout, "the Gateway API resources served", func() error {
		l, err := l.k.Client.Discovery().ServerResourcesForGroupVersion(gwv1.GroupVersion.String())
		if err != nil {
			return err
		}
		have := map[string]bool{}
		for _, r := range l.APIResources {
			have[r.Name] = true
		}
		for _, r := range []string{"gatewayclasses", "gateways", "httproutes", "grpcroutes", "tlsroutes", "tcproutes", "udproutes", "referencegrants", "backendtlspolicies", "listenersets"} {
			if !have[r] {
				return fmt.Errorf("%s not served yet", r)
			}
		}
		return nil
	})
	t.Logf("Gateway API: %d CRDs of the %s channel installed", n, channel)
}

func conditionIs(conds []metav1.Condition, typ string, status metav1.ConditionStatus, reason string) error {
	for _, c := range conds {
		if c.Type == typ {
			if c.Status != status || (reason != "" && c.Reason != reason) {
				return fmt.Errorf("%s is %s %s (%q), want %s %s", typ, c.Status, c.Reason, c.Message, status, reason)
			}
			return nil
		}
	}
	return fmt.Errorf("no %s condition", typ)
}

// testGateway: a GatewayClass of the agent's controller is accepted; a
// Gateway with an HTTP and a TCP listener gets the VIP it asks for,
// serves an HTTPRoute (by hostname) and a TCPRoute to the echo pods, and
// reports Programmed, its address and each listener's attached routes;
// an HTTPS listener serves the certificate of a TLS Secret it names; a
// route with a missing backend says BackendNotFound and answers 500; a
// Gateway whose hostname the tenant may not route is refused by the LB
// cluster, and its status says so. Deleting the Gateways frees the VIP.
func (l *kubeLab) testGateway(t *testing.T) {
	gc, err := gwclient.NewForConfig(l.restConfig())
	if err != nil {
		t.Fatal(err)
	}
	g := gc.GatewayV1()
	ctx, cancel := l.ctx()
	defer cancel()
	create := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	_, err = g.GatewayClasses().Create(ctx, &gwv1.GatewayClass{ObjectMeta: metav1.ObjectMeta{Name: "teapot-lb"},
		Spec: gwv1.GatewayClassSpec{ControllerName: "teapot-lb.io/gateway-controller"}}, metav1.CreateOptions{})
	create(err)
	ipType := gwv1.IPAddressType
	host := gwv1.Hostname("gw.shop.example")
	gw := &gwv1.Gateway{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "gw"}, Spec: gwv1.GatewaySpec{
		GatewayClassName: "teapot-lb",
		Addresses:        []gwv1.GatewaySpecAddress{{Type: &ipType, Value: gatewayVIP}},
		Listeners: []gwv1.Listener{
			{Name: "http", Protocol: gwv1.HTTPProtocolType, Port: 80, Hostname: &host},
			{Name: "tcp", Protocol: gwv1.TCPProtocolType, Port: 9000},
		},
	}}
	// An HTTPS listener serves the certificate of a kubernetes.io/tls
	// Secret, which the agent uploads as the tenant's certificate.
	roots, secret := selfSignedSecret(t, "shop", "gw-tls", "gw.shop.example")
	_, err = l.k.Client.CoreV1().Secrets("shop").Create(ctx, secret, metav1.CreateOptions{})
	create(err)
	gw.Spec.Listeners = append(gw.Spec.Listeners, gwv1.Listener{Name: "https", Protocol: gwv1.HTTPSProtocolType, Port: 443, Hostname: &host,
		TLS: &gwv1.ListenerTLSConfig{CertificateRefs: []gwv1.SecretObjectReference{{Name: "gw-tls"}}}})
	began := time.Now()
	_, err = g.Gateways("shop").Create(ctx, gw, metav1.CreateOptions{})
	create(err)
	section := func(s string) []gwv1.ParentReference {
		name := gwv1.SectionName(s)
		return []gwv1.ParentReference{{Name: "gw", SectionName: &name}}
	}
	port := gwv1.PortNumber(80)
	prefix := gwv1.PathMatchPathPrefix
	path := func(p string) []gwv1.HTTPRouteMatch {
		return []gwv1.HTTPRouteMatch{{Path: &gwv1.HTTPPathMatch{Type: &prefix, Value: &p}}}
	}
	web := &gwv1.HTTPRoute{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "web"}}
	web.Spec.ParentRefs = append(section("http"), section("https")...)
	web.Spec.Rules = []gwv1.HTTPRouteRule{{Matches: path("/"), BackendRefs: []gwv1.HTTPBackendRef{{BackendRef: gwv1.BackendRef{
		BackendObjectReference: gwv1.BackendObjectReference{Name: "web", Port: &port}}}}}}
	_, err = g.HTTPRoutes("shop").Create(ctx, web, metav1.CreateOptions{})
	create(err)
	broken := &gwv1.HTTPRoute{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "broken"}}
	broken.Spec.ParentRefs = section("http")
	broken.Spec.Rules = []gwv1.HTTPRouteRule{{Matches: path("/broken"), BackendRefs: []gwv1.HTTPBackendRef{{BackendRef: gwv1.BackendRef{
		BackendObjectReference: gwv1.BackendObjectReference{Name: "nope", Port: &port}}}}}}
	_, err = g.HTTPRoutes("shop").Create(ctx, broken, metav1.CreateOptions{})
	create(err)
	tcp := &gwv1.TCPRoute{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "tcp"}}
	tcp.Spec.ParentRefs = section("tcp")
	tcp.Spec.Rules = []gwv1.TCPRouteRule{{BackendRefs: []gwv1.BackendRef{{BackendObjectReference: gwv1.BackendObjectReference{Name: "web", Port: &port}}}}}
	_, err = g.TCPRoutes("shop").Create(ctx, tcp, metav1.CreateOptions{})
	create(err)

	waitFor(t, kubeLabTimeout, "the GatewayClass accepted", func() error {
		ctx, cancel := l.ctx()
		defer cancel()
		c, err := g.GatewayClasses().Get(ctx, "teapot-lb", metav1.GetOptions{})
		if err != nil {
			return err
		}
		return conditionIs(c.Status.Conditions, "Accepted", metav1.ConditionTrue, "Accepted")
	})
	waitFor(t, kubeLabTimeout, "the Gateway programmed on "+gatewayVIP, func() error {
		ctx, cancel := l.ctx()
		defer cancel()
		got, err := g.Gateways("shop").Get(ctx, "gw", metav1.GetOptions{})
		if err != nil {
			return err
		}
		if err := conditionIs(got.Status.Conditions, "Accepted", metav1.ConditionTrue, "Accepted"); err != nil {
			return err
		}
		if err := conditionIs(got.Status.Conditions, "Programmed", metav1.ConditionTrue, "Programmed"); err != nil {
			return err
		}
		if len(got.Status.Addresses) != 1 || got.Status.Addresses[0].Value != gatewayVIP {
			return fmt.Errorf("addresses %+v", got.Status.Addresses)
		}
		want := map[gwv1.SectionName]int32{"http": 2, "tcp": 1, "https": 1}
		if len(got.Status.Listeners) != 3 {
			return fmt.Errorf("%d listener statuses", len(got.Status.Listeners))
		}
		for _, ls := range got.Status.Listeners {
			if ls.AttachedRoutes != want[ls.Name] {
				return fmt.Errorf("listener %s: attachedRoutes %d, want %d", ls.Name, ls.AttachedRoutes, want[ls.Name])
			}
			if err := conditionIs(ls.Conditions, "Programmed", metav1.ConditionTrue, ""); err != nil {
				return fmt.Errorf("listener %s: %w", ls.Name, err)
			}
			for _, c := range ls.Conditions {
				if c.ObservedGeneration != got.Generation {
					return fmt.Errorf("listener %s %s: observedGeneration %d, generation %d", ls.Name, c.Type, c.ObservedGeneration, got.Generation)
				}
			}
		}
		return nil
	})
	vip := netip.MustParseAddr(gatewayVIP)
	a := l.waitEcho("an HTTP answer for gw.shop.example through the Gateway", func() (echoAnswer, error) {
		return echoHTTPHost(l.client, netip.AddrPortFrom(vip, 80), "gw.shop.example", 2*time.Second)
	})
	t.Logf("Gateway: HTTPRoute answered by %s %s after the Gateway was created", a.pod, time.Since(began).Round(time.Millisecond))
	a = l.waitEcho("an answer through the Gateway's TCP listener", func() (echoAnswer, error) {
		return echoHTTP(l.client, netip.AddrPortFrom(vip, 9000), 2*time.Second)
	})
	t.Logf("Gateway: TCPRoute answered by %s", a.pod)
	var leaf *x509.Certificate
	a = l.waitEcho("an HTTPS answer for gw.shop.example with the Secret's certificate", func() (a echoAnswer, err error) {
		a, leaf, err = echoHTTPS(l.client, netip.AddrPortFrom(vip, 443), "gw.shop.example", roots, 2*time.Second)
		return a, err
	})
	t.Logf("Gateway: HTTPS answered by %s with the certificate of Secret shop/gw-tls (%v)", a.pod, leaf.DNSNames)
	if _, err := echoHTTPPath(l.client, netip.AddrPortFrom(vip, 80), "gw.shop.example", "/broken", 2*time.Second); err == nil || !strings.Contains(err.Error(), "500") {
		t.Errorf("a route whose only backend is missing: %v, want a 500", err)
	}

	routeParents := func(name string) ([]gwv1.RouteParentStatus, error) {
		ctx, cancel := l.ctx()
		defer cancel()
		r, err := g.HTTPRoutes("shop").Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return nil, err
		}
		return r.Status.Parents, nil
	}
	waitFor(t, kubeLabTimeout, "the routes' parent statuses", func() error {
		for name, resolved := range map[string]string{"web": "ResolvedRefs", "broken": "BackendNotFound"} {
			ps, err := routeParents(name)
			if err != nil {
				return err
			}
			want := map[string]int{"web": 2, "broken": 1}[name]
			if len(ps) != want {
				return fmt.Errorf("HTTPRoute %s: %d parents, want %d: %+v", name, len(ps), want, ps)
			}
			for _, p := range ps {
				if p.ControllerName != "teapot-lb.io/gateway-controller" {
					return fmt.Errorf("HTTPRoute %s: parent of %s", name, p.ControllerName)
				}
				if err := conditionIs(p.Conditions, "Accepted", metav1.ConditionTrue, "Accepted"); err != nil {
					return fmt.Errorf("HTTPRoute %s: %w", name, err)
				}
				st := metav1.ConditionFalse
				if resolved == "ResolvedRefs" {
					st = metav1.ConditionTrue
				}
				if err := conditionIs(p.Conditions, "ResolvedRefs", st, resolved); err != nil {
					return fmt.Errorf("HTTPRoute %s: %w", name, err)
				}
			}
		}
		ctx, cancel := l.ctx()
		defer cancel()
		r, err := g.TCPRoutes("shop").Get(ctx, "tcp", metav1.GetOptions{})
		if err != nil {
			return err
		}
		if len(r.Status.Parents) != 1 {
			return fmt.Errorf("TCPRoute parents %+v", r.Status.Parents)
		}
		return conditionIs(r.Status.Parents[0].Conditions, "Accepted", metav1.ConditionTrue, "Accepted")
	})

	// A hostname outside the tenant's domains: the LB cluster refuses the
	// load balancer, and the Gateway's Programmed condition carries why.
	outside := gwv1.Hostname("www.other.example")
	_, err = g.Gateways("shop").Create(ctx, &gwv1.Gateway{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "outside"}, Spec: gwv1.GatewaySpec{
		GatewayClassName: "teapot-lb",
		Listeners:        []gwv1.Listener{{Name: "http", Protocol: gwv1.HTTPProtocolType, Port: 80, Hostname: &outside}},
	}}, metav1.CreateOptions{})
	create(err)
	out := &gwv1.HTTPRoute{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "outside"}}
	out.Spec.ParentRefs = []gwv1.ParentReference{{Name: "outside"}}
	out.Spec.Rules = web.Spec.Rules
	_, err = g.HTTPRoutes("shop").Create(ctx, out, metav1.CreateOptions{})
	create(err)
	waitFor(t, kubeLabTimeout, "the LB cluster's refusal in the Gateway's status", func() error {
		ctx, cancel := l.ctx()
		defer cancel()
		got, err := g.Gateways("shop").Get(ctx, "outside", metav1.GetOptions{})
		if err != nil {
			return err
		}
		if err := conditionIs(got.Status.Conditions, "Programmed", metav1.ConditionFalse, "RefusedByLoadBalancerCluster"); err != nil {
			return err
		}
		for _, c := range got.Status.Conditions {
			if c.Type == "Programmed" && !strings.Contains(c.Message, "www.other.example") {
				return fmt.Errorf("the refusal does not name the host: %q", c.Message)
			}
		}
		return nil
	})

	for _, name := range []string{"gw", "outside"} {
		if err := g.Gateways("shop").Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, kubeLabTimeout, "the Gateway's VIP released", func() error {
		hs, err := l.holders(vip)
		if err != nil {
			return err
		}
		if len(hs) > 0 {
			return errors.New(gatewayVIP + " still held by " + hs[0].id)
		}
		return nil
	})
	ctx2, cancel2 := context.WithTimeout(context.Background(), cliTimeout)
	defer cancel2()
	for _, name := range []string{"web", "broken", "outside"} {
		_ = g.HTTPRoutes("shop").Delete(ctx2, name, metav1.DeleteOptions{})
	}
	_ = g.TCPRoutes("shop").Delete(ctx2, "tcp", metav1.DeleteOptions{})
	_ = l.k.Client.CoreV1().Secrets("shop").Delete(ctx2, "gw-tls", metav1.DeleteOptions{})
}

// selfSignedSecret is a kubernetes.io/tls Secret with a fresh self-signed
// certificate for host, and the pool that trusts it.
func selfSignedSecret(t *testing.T, ns, name, host string) (*x509.CertPool, *corev1.Secret) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(time.Now().UnixNano()), Subject: pkix.Name{CommonName: host}, DNSNames: []string{host},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	leaf, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	kder, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	roots.AddCert(leaf)
	return roots, &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Type:       corev1.SecretTypeTLS,
		Data: map[string][]byte{
			corev1.TLSCertKey:       pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
			corev1.TLSPrivateKeyKey: pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: kder}),
		},
	}
}
