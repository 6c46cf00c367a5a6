package scenarios

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"
	gwclient "sigs.k8s.io/gateway-api/pkg/client/clientset/versioned"
	"sigs.k8s.io/yaml"

	"github.com/teapot-lb/teapot-lb/scenarios/kubecluster"
)

// The conformance lab's tenant: the kube lab's pool and networks, the
// top-level domains of every host name the suite's manifests use, and pod
// mode: the suite's headless Services and Services with manual
// EndpointSlices have no node port to send to. The LB hosts reach the pods
// through their nodes by the routes the nodes announce over the tenant's
// BGP sessions (BIRD on each node, as Calico runs it).
const conformanceManifest = `
kind: VIPPool
name: kube
cidrs: ["192.0.2.160-192.0.2.199"]
mode: arp
---
kind: Tenant
name: kube
networks: [192.0.2.31/32, 192.0.2.32/32, 198.51.100.0/25]
domains: [com, org, net, io, example]
pools: [kube]
podsRoutable: true
bgp: { asn: %d, peers: [192.0.2.31, 192.0.2.32] }
`

const (
	// conformanceDNSModule is the DNS server the suite's base manifests
	// run for the UDPRoute tests, built by conformance/coredns with only
	// the plugins their Corefile uses, at the release the image tag names.
	conformanceDNSModule = "github.com/coredns/coredns"
	conformanceDNSImage  = "registry.k8s.io/coredns/coredns"
	// conformanceEchoImage is the suite's backend, built from the
	// conformance module's echo-basic.
	conformanceEchoImage = "registry.k8s.io/gateway-api/echo-basic"
	// conformanceUsable is inside the tenant's pool and left free by the
	// suite's other Gateways; conformanceUnusable is outside every pool.
	conformanceUsable   = "192.0.2.199"
	conformanceUnusable = "192.0.2.150"
	// conformanceASN is the tenant cluster's AS: its nodes announce
	// their pod ranges (inside conformancePods) to the LB hosts.
	conformanceASN  = 64601
	conformancePods = "198.51.100.0/25"
	// conformanceReportName is the report's file under docs/conformance.
	conformanceReportName = "gateway-api-report.yaml"
)

// TestGatewayAPIConformance runs the official Gateway API conformance
// suite (the module conformance/ pins its version) against the agent's
// GatewayClass on a real tenant cluster, with three LB hosts serving the
// Gateways: the profiles GATEWAY-HTTP, -GRPC, -TLS, -TCP and -UDP with the
// extended features conformance/ claims. The suite's backends are built
// from its own sources and imported into the nodes; the suite runs in the
// lab's client namespace, which reaches the VIPs and the API server. The
// test fails when the suite does (any test of a claimed feature fails)
// and writes the suite's report to TEAPOT_CONFORMANCE_REPORT, or under
// docs/conformance when that is "docs".
func TestGatewayAPIConformance(t *testing.T) {
	if os.Getenv("TEAPOT_CONFORMANCE") == "" {
		t.Skip("runs with make conformance (TEAPOT_CONFORMANCE=1): the Gateway API conformance suite runs for longer than make test's 3-minute budget per scenario")
	}
	root, err := moduleRoot()
	if err != nil {
		t.Fatal(err)
	}
	modDir := filepath.Join(root, "conformance")
	build := filepath.Join(t.TempDir(), "conformance")
	if err := os.MkdirAll(build, 0o755); err != nil {
		t.Fatal(err)
	}
	began := time.Now()
	suiteBin := filepath.Join(build, "conformance.test")
	goTool(t, modDir, nil, "test", "-c", "-o", suiteBin, ".")
	suiteDir := strings.TrimSpace(goTool(t, modDir, nil, "list", "-m", "-f", "{{.Dir}}", "sigs.k8s.io/gateway-api/conformance"))
	suiteVersion := strings.TrimSpace(goTool(t, modDir, nil, "list", "-m", "-f", "{{.Version}}", "sigs.k8s.io/gateway-api/conformance"))
	refs := conformanceImages(t, suiteDir)
	static := []string{"CGO_ENABLED=0", "GOOS=linux"}
	echoBin := filepath.Join(build, "echo-basic")
	goTool(t, modDir, static, "build", "-trimpath", "-ldflags", "-s -w", "-o", echoBin, "sigs.k8s.io/gateway-api/conformance/echo-basic")
	var dnsBin string
	for _, ref := range refs {
		if repo, tag, _ := strings.Cut(ref, ":"); repo == conformanceDNSImage {
			dnsDir := filepath.Join(modDir, "coredns")
			if pinned := strings.TrimSpace(goTool(t, dnsDir, nil, "list", "-m", "-f", "{{.Version}}", conformanceDNSModule)); pinned != tag {
				t.Fatalf("the suite's manifests run %s, but conformance/coredns/go.mod pins %s %s: pin %s there (go get %s@%s && go mod tidy)",
					ref, conformanceDNSModule, pinned, tag, conformanceDNSModule, tag)
			}
			dnsBin = filepath.Join(build, "coredns")
			goTool(t, dnsDir, static, "build", "-trimpath", "-ldflags", "-s -w", "-o", dnsBin, ".")
		}
	}
	t.Logf("conformance suite %s, echo-basic and the DNS server built in %s", suiteVersion, time.Since(began).Round(time.Second))

	// The experimental channel: HTTPRoute's retry, which the suite's
	// HTTPRouteRetry tests, is in no other.
	l := newKubeLabWith(t, kubeLabOptions{manifest: fmt.Sprintf(conformanceManifest, conformanceASN), gatewayChannel: "experimental", bgp: true, images: func(dir string) []string {
		var tarballs []string
		for i, ref := range refs {
			img := kubecluster.Image{Ref: ref, Binary: echoBin, Entrypoint: []string{"/echo-basic"}, User: "65532:65532"}
			if strings.HasPrefix(ref, conformanceDNSImage+":") {
				// Root in the container, with only NET_BIND_SERVICE
				// (the manifest drops every other capability).
				img = kubecluster.Image{Ref: ref, Binary: dnsBin, Entrypoint: []string{"/coredns"}}
			}
			out := filepath.Join(dir, fmt.Sprintf("conformance-%d.tar", i))
			if err := kubecluster.WriteImage(img, out); err != nil {
				t.Fatal(err)
			}
			tarballs = append(tarballs, out)
		}
		return tarballs
	}})

	// Each node announces its PodCIDR with BIRD, as Calico does; every LB
	// host learns it over the tenant's BGP sessions and installs it with
	// the node as next hop. No route to the pods is written by hand.
	announced := time.Now()
	for _, n := range l.k.Nodes {
		dir := filepath.Join(l.dir, "bird-"+n.Name)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		startCalicoBird(t, dir, n.Host, podRouteTenant{name: n.Name, asn: conformanceASN, node: n.Addr, pods: n.PodCIDR,
			networks: netip.MustParsePrefix(conformancePods)}, l.lbs)
	}
	waitFor(t, kubeLabTimeout, "every LB host installs every node's pod range", func() error {
		var errs []error
		for _, lb := range l.lbs {
			for _, n := range l.k.Nodes {
				got, err := podRoutes(lb.host, n.PodCIDR)
				if err != nil {
					return err
				}
				if want := fmt.Sprintf("via %s proto %d", n.Addr, tenantRouteProto); got[n.PodCIDR.String()] != want {
					errs = append(errs, fmt.Errorf("%s has %v, want %s %s", lb.id, got, n.PodCIDR, want))
				}
			}
		}
		return errors.Join(errs...)
	})
	t.Logf("every LB host installed the pod ranges the nodes announce %s after their BIRDs started", time.Since(announced).Round(time.Millisecond))
	gc, err := gwclient.NewForConfig(l.restConfig())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := l.ctx()
	defer cancel()
	if _, err := gc.GatewayV1().GatewayClasses().Create(ctx, &gwv1.GatewayClass{ObjectMeta: metav1.ObjectMeta{Name: "teapot-lb"},
		Spec: gwv1.GatewayClassSpec{ControllerName: "teapot-lb.io/gateway-controller"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	kubeconfig, err := l.k.WriteKubeconfig("conformance", l.k.Token)
	if err != nil {
		t.Fatal(err)
	}
	report := filepath.Join(l.dir, conformanceReportName)
	args := []string{"netns", "exec", l.client.NS, suiteBin, "-test.v", "-test.count=1", "-test.timeout=100m",
		"-gateway-class=teapot-lb", "-report-output=" + report, "-version=" + conformanceVersion(root),
		"-usable-address=" + conformanceUsable, "-unusable-address=" + conformanceUnusable,
		"-cleanup-base-resources=false"}
	args = append(args, strings.Fields(os.Getenv("TEAPOT_CONFORMANCE_ARGS"))...)
	// TEAPOT_CONFORMANCE_LOG keeps the suite's log (else it goes with the
	// lab's directory).
	logPath := filepath.Join(l.dir, "conformance.log")
	if p := os.Getenv("TEAPOT_CONFORMANCE_LOG"); p != "" {
		logPath = p
	}
	logFile, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	defer logFile.Close()
	runCtx, stop := context.WithTimeout(context.Background(), 105*time.Minute)
	defer stop()
	cmd := exec.CommandContext(runCtx, "ip", args...)
	cmd.Env = append(os.Environ(), "KUBECONFIG="+kubeconfig)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	began = time.Now()
	runErr := cmd.Run()
	took := time.Since(began).Round(time.Second)
	results := conformanceResults(t, logPath)
	t.Logf("conformance suite ran for %s (log %s):\n%s", took, logPath, results)
	if runErr != nil {
		t.Errorf("the conformance suite failed: %v; the failed tests are above, the whole log in %s", runErr, logPath)
	}
	data, err := os.ReadFile(report)
	if err != nil {
		t.Fatalf("the suite wrote no report: %v", err)
	}
	summary, err := conformanceSummary(data)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("report:\n%s", summary)
	switch dst := os.Getenv("TEAPOT_CONFORMANCE_REPORT"); dst {
	case "":
	case "docs":
		dst = filepath.Join(root, "docs", "conformance", conformanceReportName)
		fallthrough
	default:
		if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(dst, data, 0o644); err != nil {
			t.Fatal(err)
		}
		t.Logf("report written to %s", dst)
	}
}

// goTool runs the go command in dir and returns its standard output.
func goTool(t *testing.T, dir string, env []string, args ...string) string {
	t.Helper()
	cmd := exec.Command("go", args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), env...)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go %s in %s: %v\n%s", strings.Join(args, " "), dir, err, stderr.String())
	}
	return string(out)
}

var imageLine = regexp.MustCompile(`(?m)^\s*image:\s*"?([^"\s]+)"?\s*$`)

// conformanceImages lists the images the suite's base and test manifests
// run; each is built here, so one the scenario cannot build fails it.
func conformanceImages(t *testing.T, suiteDir string) []string {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(suiteDir, "tests", "*.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var refs []string
	for _, f := range append(files, filepath.Join(suiteDir, "base", "manifests.yaml")) {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range imageLine.FindAllSubmatch(data, -1) {
			ref := string(m[1])
			repo, _, _ := strings.Cut(ref, ":")
			if repo != conformanceEchoImage && repo != conformanceDNSImage {
				t.Fatalf("%s runs image %s, which this scenario does not build", f, ref)
			}
			if !slices.Contains(refs, ref) {
				refs = append(refs, ref)
			}
		}
	}
	slices.Sort(refs)
	return refs
}

// conformanceVersion is the version the report gives teapot-lb: the tree's
// git description.
func conformanceVersion(root string) string {
	cmd := exec.Command("git", "describe", "--tags", "--always", "--dirty")
	cmd.Dir = root
	out, err := cmd.Output()
	if v := strings.TrimSpace(string(out)); err == nil && v != "" {
		return v
	}
	return "dev"
}

// conformanceResults lists the suite's top-level results and every failed
// test from its log.
func conformanceResults(t *testing.T, logPath string) string {
	t.Helper()
	f, err := os.Open(logPath)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var pass, skip int
	var b strings.Builder
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		switch {
		case strings.HasPrefix(line, "--- PASS: TestGatewayAPIConformance/"):
			pass++
		case strings.HasPrefix(line, "--- SKIP: TestGatewayAPIConformance/"):
			skip++
		case strings.HasPrefix(line, "--- FAIL:"):
			b.WriteString(line + "\n")
		}
	}
	fmt.Fprintf(&b, "%d passed, %d skipped (subtests included)", pass, skip)
	return b.String()
}

// conformanceReport is the part of the suite's report the scenario reads.
type conformanceReport struct {
	GatewayAPIVersion string `json:"gatewayAPIVersion"`
	GatewayAPIChannel string `json:"gatewayAPIChannel"`
	Profiles          []struct {
		Name     string                   `json:"name"`
		Core     conformanceProfileStatus `json:"core"`
		Extended *struct {
			conformanceProfileStatus `json:",inline"`
			SupportedFeatures        []string `json:"supportedFeatures"`
		} `json:"extended"`
	} `json:"profiles"`
}

type conformanceProfileStatus struct {
	Result     string `json:"result"`
	Statistics struct {
		Passed, Skipped, Failed int
	} `json:"statistics"`
	FailedTests []string `json:"failedTests"`
}

// conformanceSummary is one line per profile of a report.
func conformanceSummary(data []byte) (string, error) {
	var r conformanceReport
	if err := yaml.Unmarshal(data, &r); err != nil {
		return "", fmt.Errorf("the suite's report: %w", err)
	}
	if len(r.Profiles) == 0 {
		return "", fmt.Errorf("the suite's report holds no profile")
	}
	var b strings.Builder
	fmt.Fprintf(&b, "Gateway API %s (%s channel)\n", r.GatewayAPIVersion, r.GatewayAPIChannel)
	for _, p := range r.Profiles {
		s := p.Core.Statistics
		fmt.Fprintf(&b, "%s core: %s (%d passed, %d skipped, %d failed)", p.Name, p.Core.Result, s.Passed, s.Skipped, s.Failed)
		if e := p.Extended; e != nil {
			s := e.Statistics
			fmt.Fprintf(&b, "; extended: %s (%d passed, %d skipped, %d failed; %s)", e.Result, s.Passed, s.Skipped, s.Failed, strings.Join(e.SupportedFeatures, ", "))
		}
		b.WriteString("\n")
	}
	return b.String(), nil
}
