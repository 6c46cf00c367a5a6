package scenarios

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	"sigs.k8s.io/yaml"

	"github.com/teapot-lb/teapot-lb/packaging/image"
)

// helmVersion is the helm the chart is checked with, built from the Go
// module proxy into ~/.cache/teapot-lb/helm.
const helmVersion = "v3.22.0"

// helmBinary builds helm once and returns its path.
func helmBinary(t *testing.T) string {
	t.Helper()
	cache, err := os.UserCacheDir()
	if err != nil {
		unavailable(t, "no cache directory for helm: %v", err)
	}
	dir := filepath.Join(cache, "teapot-lb", "helm", helmVersion)
	bin := filepath.Join(dir, "helm")
	if _, err := os.Stat(bin); err == nil {
		return bin
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "go", "install", "helm.sh/helm/v3/cmd/helm@"+helmVersion)
	cmd.Dir = os.TempDir()
	cmd.Env = append(os.Environ(), "GOBIN="+dir, "CGO_ENABLED=0", "GOFLAGS=")
	if out, err := cmd.CombinedOutput(); err != nil {
		unavailable(t, "build helm %s from the module proxy: %v\n%s", helmVersion, err, out)
	}
	return bin
}

// k8sDocs splits a multi-document YAML stream into kind/name -> document.
func k8sDocs(t *testing.T, data []byte) map[string][]byte {
	t.Helper()
	out := map[string][]byte{}
	for _, doc := range bytes.Split(data, []byte("\n---")) {
		var meta struct {
			Kind     string `json:"kind"`
			Metadata struct {
				Name string `json:"name"`
			} `json:"metadata"`
		}
		if err := yaml.Unmarshal(doc, &meta); err != nil {
			t.Fatalf("manifest document: %v\n%s", err, doc)
		}
		if meta.Kind == "" {
			continue
		}
		out[meta.Kind+"/"+meta.Metadata.Name] = doc
	}
	return out
}

func TestAgentHelmChartMatchesManifests(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: builds helm")
	}
	root, err := moduleRoot()
	if err != nil {
		t.Fatal(err)
	}
	helm := helmBinary(t)
	chart := filepath.Join(root, "packaging/helm/teapot-lb-agent")
	run := func(args ...string) []byte {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, helm, args...)
		cmd.Env = append(os.Environ(), "HELM_CACHE_HOME="+t.TempDir(), "HELM_CONFIG_HOME="+t.TempDir(), "HELM_DATA_HOME="+t.TempDir())
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("helm %v: %v\n%s", args, err, out)
		}
		return out
	}
	if out := run("lint", "--strict", chart); !strings.Contains(string(out), "0 chart(s) failed") {
		t.Fatalf("helm lint:\n%s", out)
	}

	// The plain manifests.
	var plain []byte
	for _, f := range []string{"10-rbac.yaml", "30-deployment.yaml", "40-ingressclass.yaml"} {
		data, err := os.ReadFile(filepath.Join(root, "packaging/k8s", f))
		if err != nil {
			t.Fatal(err)
		}
		plain = append(append(plain, data...), []byte("\n---\n")...)
	}
	want := k8sDocs(t, plain)
	got := k8sDocs(t, run("template", "teapot", chart, "--namespace", "teapot-lb-system"))
	if !slices.Equal(sortedKeys(want), sortedKeys(got)) {
		t.Fatalf("the chart renders %v, the manifests hold %v", sortedKeys(got), sortedKeys(want))
	}

	var pd, cd appsv1.Deployment
	if err := yaml.UnmarshalStrict(want["Deployment/teapot-lb-agent"], &pd); err != nil {
		t.Fatal(err)
	}
	if err := yaml.UnmarshalStrict(got["Deployment/teapot-lb-agent"], &cd); err != nil {
		t.Fatal(err)
	}
	for name, d := range map[string]*appsv1.Deployment{"manifests": &pd, "chart": &cd} {
		checkAgentDeployment(t, name, d)
	}
	// Same args where both set them (the chart spells out the defaults).
	for _, a := range pd.Spec.Template.Spec.Containers[0].Args {
		if !strings.HasPrefix(a, "#") && !slices.Contains(cd.Spec.Template.Spec.Containers[0].Args, a) {
			t.Errorf("the chart's agent lacks the manifests' argument %s", a)
		}
	}
	var pp, cp policyv1.PodDisruptionBudget
	if err := yaml.UnmarshalStrict(want["PodDisruptionBudget/teapot-lb-agent"], &pp); err != nil {
		t.Fatal(err)
	}
	if err := yaml.UnmarshalStrict(got["PodDisruptionBudget/teapot-lb-agent"], &cp); err != nil {
		t.Fatal(err)
	}
	for name, p := range map[string]*policyv1.PodDisruptionBudget{"manifests": &pp, "chart": &cp} {
		if p.Spec.MinAvailable == nil || p.Spec.MinAvailable.IntValue() != 1 {
			t.Errorf("%s: PodDisruptionBudget minAvailable %v, want 1", name, p.Spec.MinAvailable)
		}
	}

	// The values change what they name.
	got = k8sDocs(t, run("template", "teapot", chart, "--namespace", "lb",
		"--set", "replicas=3", "--set", "image.tag=1.2.3", "--set", "credentialsSecret=creds",
		"--set", "loadBalancerClass=example.com/lb", "--set", "ingressClass.name=edge", "--set", "defaultClass=true"))
	var vd appsv1.Deployment
	if err := yaml.UnmarshalStrict(got["Deployment/teapot-lb-agent"], &vd); err != nil {
		t.Fatal(err)
	}
	c := vd.Spec.Template.Spec.Containers[0]
	if *vd.Spec.Replicas != 3 || c.Image != image.Repository+":1.2.3" || vd.Spec.Template.Spec.Volumes[0].Secret.SecretName != "creds" ||
		!slices.Contains(c.Args, "--lb-class=example.com/lb") || !slices.Contains(c.Args, "--default-class") || vd.Namespace != "lb" {
		t.Errorf("values not applied: replicas %d image %s secret %s args %v ns %s", *vd.Spec.Replicas, c.Image, vd.Spec.Template.Spec.Volumes[0].Secret.SecretName, c.Args, vd.Namespace)
	}
	if _, ok := got["IngressClass/edge"]; !ok {
		t.Errorf("no IngressClass edge in %v", sortedKeys(got))
	}
}

// checkAgentDeployment checks what makes the agent run: the image make
// image builds, a Secret its uid can read, probes on its health port.
func checkAgentDeployment(t *testing.T, name string, d *appsv1.Deployment) {
	t.Helper()
	spec := d.Spec.Template.Spec
	c := spec.Containers[0]
	if c.Image != image.Repository+":"+image.FloatingTag {
		t.Errorf("%s: image %s, want %s:%s (what make image names)", name, c.Image, image.Repository, image.FloatingTag)
	}
	if d.Spec.Replicas == nil || *d.Spec.Replicas != 2 {
		t.Errorf("%s: replicas %v, want 2", name, d.Spec.Replicas)
	}
	sc := spec.SecurityContext
	if sc == nil || sc.RunAsUser == nil || *sc.RunAsUser != image.UID || sc.FSGroup == nil || *sc.FSGroup != image.UID {
		t.Errorf("%s: pod securityContext %+v, want runAsUser and fsGroup %d", name, sc, image.UID)
	}
	if v := spec.Volumes[0].Secret; v == nil || v.DefaultMode == nil || *v.DefaultMode != 0o440 {
		t.Errorf("%s: credentials volume %+v, want mode 0440", name, spec.Volumes[0])
	}
	var port int32
	for _, p := range c.Ports {
		if p.Name == "health" {
			port = p.ContainerPort
		}
	}
	if port == 0 || !slices.Contains(c.Args, fmt.Sprintf("--health-addr=:%d", port)) {
		t.Errorf("%s: health port %d, args %v", name, port, c.Args)
	}
	for probe, path := range map[*corev1.Probe]string{c.LivenessProbe: "/healthz", c.ReadinessProbe: "/readyz"} {
		if probe == nil || probe.HTTPGet == nil || probe.HTTPGet.Path != path || probe.HTTPGet.Port.String() != "health" {
			t.Errorf("%s: probe for %s: %+v", name, path, probe)
		}
	}
	if c.Resources.Requests.Cpu().IsZero() || c.Resources.Limits.Memory().IsZero() {
		t.Errorf("%s: resources %+v", name, c.Resources)
	}
}

func sortedKeys[V any](m map[string]V) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}
