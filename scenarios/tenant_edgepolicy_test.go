package scenarios

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"
	gwclient "sigs.k8s.io/gateway-api/pkg/client/clientset/versioned"
	"sigs.k8s.io/yaml"

	pb "github.com/teapot-lb/teapot-lb/api/proto/teapotv1"
	"github.com/teapot-lb/teapot-lb/tenantsync/syncspec"
	"github.com/teapot-lb/teapot-lb/tenantsync/translate"
)

var edgePolicies = schema.GroupVersionResource{Group: "teapot-lb.io", Version: "v1alpha1", Resource: "edgepolicies"}

// createCRDs creates the CustomResourceDefinitions of files (other
// documents are skipped) and waits until groupVersion serves resources.
func (l *tenantLab) createCRDs(dc dynamic.Interface, groupVersion string, resources []string, files ...string) {
	t := l.t
	t.Helper()
	crds := schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}
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
				continue
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
		}
	}
	waitFor(t, syncTimeout, groupVersion+" served", func() error {
		list, err := l.k.client.Discovery().ServerResourcesForGroupVersion(groupVersion)
		if err != nil {
			return err
		}
		for _, r := range resources {
			if !slices.ContainsFunc(list.APIResources, func(a metav1.APIResource) bool { return a.Name == r }) {
				return fmt.Errorf("%s not served yet", r)
			}
		}
		return nil
	})
}

// policyCondition returns the Accepted condition of an EdgePolicy's first
// ancestor (the test's one Gateway).
func policyCondition(u *unstructured.Unstructured) (reason, status, message string) {
	anc, _, _ := unstructured.NestedSlice(u.Object, "status", "ancestors")
	if len(anc) == 0 {
		return "", "", ""
	}
	conds, _, _ := unstructured.NestedSlice(anc[0].(map[string]any), "conditions")
	for _, c := range conds {
		m := c.(map[string]any)
		if m["type"] == "Accepted" {
			return fmt.Sprint(m["reason"]), fmt.Sprint(m["status"]), fmt.Sprint(m["message"])
		}
	}
	return "", "", ""
}

// TestTenantEdgePolicy: with the EdgePolicy CRD of packaging/k8s
// installed in a real API server, a tenant declares the source ranges and
// connection rate of a Gateway and the WAF and request rate of one
// HTTPRoute (limited per X-API-Key) as policies; the agent (with the
// least-privilege role) carries them to the LB cluster's load balancer
// and writes each policy's Accepted condition (TargetNotFound for one
// whose sectionName names no listener). A second policy on the same route is
// refused (Conflicted, with a Warning Event) until the first is deleted,
// when it applies.
func TestTenantEdgePolicy(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: starts etcd, kube-apiserver and a three-node cluster")
	}
	parallelScenarioTaking(t, 10*time.Second)
	l := newTenantLab(t, edgePolicyLab)
	creds := l.seedTenant("acme", "acme.example", "198.51.100.0/24")
	rc := l.k.restConfig(l.k.token)
	dc, err := dynamic.NewForConfig(rc)
	if err != nil {
		t.Fatal(err)
	}
	gc, err := gwclient.NewForConfig(rc)
	if err != nil {
		t.Fatal(err)
	}
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
	std, _ := filepath.Glob(filepath.Join(strings.TrimSpace(string(out)), "config", "crd", "standard", "gateway.networking.k8s.io_*.yaml"))
	l.createCRDs(dc, gwv1.GroupVersion.String(), []string{"gatewayclasses", "gateways", "httproutes"}, std...)
	l.createCRDs(dc, "teapot-lb.io/v1alpha1", []string{"edgepolicies"}, filepath.Join(root, "packaging", "k8s", "15-edgepolicy-crd.yaml"))
	l.agent("agent-1", creds)

	l.createNamespace("shop")
	ctx, cancel := l.ctx()
	defer cancel()
	if _, err := gc.GatewayV1().GatewayClasses().Create(ctx, &gwv1.GatewayClass{ObjectMeta: metav1.ObjectMeta{Name: "teapot"},
		Spec: gwv1.GatewayClassSpec{ControllerName: translate.GatewayController}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := gc.GatewayV1().Gateways("shop").Create(ctx, &gwv1.Gateway{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "gw"},
		Spec: gwv1.GatewaySpec{GatewayClassName: "teapot", Listeners: []gwv1.Listener{{Name: "http", Protocol: gwv1.HTTPProtocolType, Port: 8080}}}},
		metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	web := lbService("shop", "web", "", 8080, nil)
	web.Spec.Type, web.Spec.LoadBalancerClass = corev1.ServiceTypeClusterIP, nil
	l.createService(web)
	l.putSlice(endpointSlice("shop", "web-1", "web", 8080, "198.51.100.5"))
	port := gwv1.PortNumber(8080)
	if _, err := gc.GatewayV1().HTTPRoutes("shop").Create(ctx, &gwv1.HTTPRoute{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "api"},
		Spec: gwv1.HTTPRouteSpec{
			CommonRouteSpec: gwv1.CommonRouteSpec{ParentRefs: []gwv1.ParentReference{{Name: "gw"}}},
			Hostnames:       []gwv1.Hostname{"api.acme.example"},
			Rules:           []gwv1.HTTPRouteRule{{BackendRefs: []gwv1.HTTPBackendRef{{BackendRef: gwv1.BackendRef{BackendObjectReference: gwv1.BackendObjectReference{Name: "web", Port: &port}}}}}},
		}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	policy := func(name, kind, target string, spec map[string]any) {
		t.Helper()
		ref := map[string]any{"group": gwv1.GroupName, "kind": kind, "name": target}
		if k, section, ok := strings.Cut(kind, "/"); ok {
			ref["kind"], ref["sectionName"] = k, section
		}
		spec["targetRefs"] = []any{ref}
		u := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "teapot-lb.io/v1alpha1", "kind": "EdgePolicy",
			"metadata": map[string]any{"namespace": "shop", "name": name}, "spec": spec}}
		ctx, cancel := l.ctx()
		defer cancel()
		if _, err := dc.Resource(edgePolicies).Namespace("shop").Create(ctx, u, metav1.CreateOptions{}); err != nil {
			t.Fatalf("create EdgePolicy %s: %v", name, err)
		}
	}
	policy("gw-edge", "Gateway", "gw", map[string]any{"allowedSources": []any{"192.0.2.0/24"}, "rateLimit": map[string]any{"connectionsPerSecond": int64(50)}})
	policy("api-waf", "HTTPRoute", "api", map[string]any{"waf": map[string]any{"mode": "block", "paranoiaLevel": int64(2)},
		"rateLimit": map[string]any{"requestsPerSecond": int64(5), "key": "header", "header": "X-API-Key"}})
	// A listener the Gateway does not have.
	policy("nowhere", "Gateway/admin", "gw", map[string]any{"allowedSources": []any{"203.0.113.0/24"}})

	lbName := syncspec.GatewayName("shop", "gw")
	routeWAF := func(mode string, level uint32) func(*pb.LoadBalancer) error {
		return func(lb *pb.LoadBalancer) error {
			if lb == nil {
				return fmt.Errorf("no load balancer yet")
			}
			for _, ls := range lb.GetListeners() {
				if !slices.Equal(ls.GetAllowedSources(), []string{"192.0.2.0/24"}) || ls.GetRateLimit().GetConnectionsPerSecond() != 50 {
					return fmt.Errorf("listener %d: sources %q, rate limit %v", ls.GetPort(), ls.GetAllowedSources(), ls.GetRateLimit())
				}
			}
			for _, r := range lb.GetRoutes() {
				if r.GetHost() == "api.acme.example" && r.GetWaf().GetMode() == mode && r.GetWaf().GetParanoiaLevel() == level {
					return nil
				}
			}
			return fmt.Errorf("routes %v: none of api.acme.example with waf %s/%d", lb.GetRoutes(), mode, level)
		}
	}
	lb := l.waitLB("acme", lbName, "the policies applied", routeWAF("block", 2))
	for _, r := range lb.GetRoutes() {
		if r.GetHost() == "api.acme.example" && (r.GetRateLimit().GetRequestsPerSecond() != 5 || r.GetRateLimit().GetHeader() != "X-API-Key") {
			t.Errorf("route rate limit %v, want 5 requests per second per X-API-Key", r.GetRateLimit())
		}
	}
	waitAccepted := func(name, wantStatus, wantReason string) string {
		t.Helper()
		var msg string
		waitFor(t, syncTimeout, fmt.Sprintf("EdgePolicy %s Accepted %s (%s)", name, wantStatus, wantReason), func() error {
			ctx, cancel := l.ctx()
			defer cancel()
			u, err := dc.Resource(edgePolicies).Namespace("shop").Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				return err
			}
			reason, status, m := policyCondition(u)
			if status != wantStatus || reason != wantReason {
				return fmt.Errorf("Accepted %s (%s): %s", status, reason, m)
			}
			msg = m
			return nil
		})
		return msg
	}
	waitAccepted("gw-edge", "True", "Accepted")
	waitAccepted("api-waf", "True", "Accepted")
	if msg := waitAccepted("nowhere", "False", "TargetNotFound"); !strings.Contains(msg, "no listener named admin") {
		t.Errorf("the refusal does not name the missing listener: %q", msg)
	}

	// A second policy on the route is refused while the first stands.
	policy("late", "HTTPRoute", "api", map[string]any{"waf": map[string]any{"mode": "detect"}})
	if msg := waitAccepted("late", "False", "Conflicted"); !strings.Contains(msg, "api-waf") {
		t.Errorf("the refusal does not name the policy that holds the route: %q", msg)
	}
	l.waitEvent("shop", "EdgePolicy", "late", "PolicyNotAccepted", "Conflicted")
	ctx2, cancel2 := l.ctx()
	defer cancel2()
	if err := dc.Resource(edgePolicies).Namespace("shop").Delete(ctx2, "api-waf", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitAccepted("late", "True", "Accepted")
	l.waitLB("acme", lbName, "the later policy applied", routeWAF("detect", 0))
}
