package scenarios

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/teapot-lb/teapot-lb/packaging/image"
)

// madeDist is the output folder (DIST) of a make target run once for the
// package's run: by startPrebuilds in the background, or by the scenario
// that needs it first.
type madeDist struct {
	once sync.Once
	dir  string
	took time.Duration
	err  error
}

// madePackages is make package's (TestHostPackages), madeImages make
// image's, twice (TestAgentImageInContainerd: the two must be equal).
var (
	madePackages madeDist
	madeImages   [2]madeDist
)

// make runs, on its first call, make target with vars and DIST set to a
// new folder under the package's binary folder, and returns that folder
// and how long make took. Later calls wait for the first one's end.
func (d *madeDist) make(target string, vars ...string) (string, time.Duration, error) {
	d.once.Do(func() {
		d.dir, d.err = os.MkdirTemp(binary.dir, "dist-"+target+"-")
		if d.err != nil {
			return
		}
		began := time.Now()
		d.err = runMake(15*time.Minute, target, append([]string{"DIST=" + d.dir}, vars...)...)
		d.took = time.Since(began)
	})
	return d.dir, d.took, d.err
}

// needMadeDist gets d's folder for t, and fails t when make did.
func needMadeDist(t *testing.T, d *madeDist, target string, vars ...string) string {
	t.Helper()
	if _, err := exec.LookPath("make"); err != nil {
		unavailable(t, "make is not installed (Debian package make)")
	}
	began := time.Now()
	dir, took, err := d.make(target, vars...)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("make %s %v ready after %s (it took %s)", target, vars, time.Since(began).Round(100*time.Millisecond), took.Round(100*time.Millisecond))
	return dir
}

// runMake runs one make target of the module with extra variables. It runs
// under nice: these builds may run beside scenarios that wait on timers
// (parallelScenario), and give way to them.
func runMake(timeout time.Duration, target string, vars ...string) error {
	root, err := moduleRoot()
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, "nice", append([]string{"-n", "10", "make", "--no-print-directory", target}, vars...)...)
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("make %s %v: %w\n%s", target, vars, err, out)
	}
	return nil
}

// imageTestVersion is the version of TestAgentImageInContainerd's image.
const imageTestVersion = "0.0.0-imagetest"

// TestAgentImageInContainerd builds the agent's image twice with make
// image (equal bytes), imports it into a containerd of its own with ctr and
// runs the agent's --help and --version in containers.
func TestAgentImageInContainerd(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: cross-builds two binaries and starts containerd")
	}
	for _, tool := range []string{"containerd", "ctr", "runc"} {
		if _, err := exec.LookPath(tool); err != nil {
			unavailable(t, "%s is not installed (Debian packages containerd and runc)", tool)
		}
	}
	if os.Geteuid() != 0 {
		unavailable(t, "containerd needs root")
	}
	parallelScenarioTaking(t, 45*time.Second)
	version := imageTestVersion
	dist1 := needMadeDist(t, &madeImages[0], "image", "VERSION="+version)
	dist2 := needMadeDist(t, &madeImages[1], "image", "VERSION="+version)
	name := "teapot-lb-agent_" + version + ".oci.tar"
	a, err := os.ReadFile(filepath.Join(dist1, name))
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(dist2, name))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(a, b) {
		for _, arch := range []string{"amd64", "arm64"} {
			b1, _ := os.ReadFile(filepath.Join(dist1, "bin", arch, "teapot-lb"))
			b2, _ := os.ReadFile(filepath.Join(dist2, "bin", arch, "teapot-lb"))
			if !bytes.Equal(b1, b2) {
				t.Errorf("the %s binaries of the two builds differ (was the source edited meanwhile?)", arch)
			}
		}
		t.Fatalf("two builds of %s differ (%d and %d bytes)", name, len(a), len(b))
	}

	// A containerd of our own, with the native snapshotter (works on any
	// file system, overlay included).
	dir := t.TempDir()
	sock := filepath.Join(dir, "containerd.sock")
	conf := filepath.Join(dir, "config.toml")
	if err := os.WriteFile(conf, fmt.Appendf(nil, "version = 2\nroot = %q\nstate = %q\ndisabled_plugins = [\"io.containerd.grpc.v1.cri\"]\n[grpc]\n  address = %q\n",
		filepath.Join(dir, "root"), filepath.Join(dir, "state"), sock), 0o600); err != nil {
		t.Fatal(err)
	}
	logf, err := os.Create(filepath.Join(dir, "containerd.log"))
	if err != nil {
		t.Fatal(err)
	}
	defer logf.Close()
	cd := exec.Command("containerd", "--config", conf)
	cd.Stdout, cd.Stderr = logf, logf
	if err := cd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cd.Process.Kill()
		_ = cd.Wait()
		if t.Failed() {
			t.Logf("containerd log:\n%s", tail(logf.Name(), 30))
		}
	})
	ctr := func(args ...string) (string, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		out, err := exec.CommandContext(ctx, "ctr", append([]string{"--address", sock, "--namespace", "teapot-test"}, args...)...).CombinedOutput()
		return string(out), err
	}
	waitFor(t, time.Minute, "containerd answers", func() error {
		_, err := ctr("version")
		return err
	})
	if out, err := ctr("images", "import", "--snapshotter", "native", filepath.Join(dist1, name)); err != nil {
		t.Fatalf("ctr images import: %v\n%s", err, out)
	}
	out, err := ctr("images", "ls", "-q")
	if err != nil {
		t.Fatal(err)
	}
	ref := image.Repository + ":" + version
	for _, want := range image.Names(version) {
		if !strings.Contains(out, want) {
			t.Fatalf("ctr images ls: %q, want %s", out, want)
		}
	}
	// ctr run replaces the image's process with the arguments it gets, so
	// the agent's commands are named in full; with none, the entrypoint
	// runs: the agent, which outside a cluster says what it misses.
	run := func(id string, args ...string) (string, error) {
		return ctr(append([]string{"run", "--rm", "--snapshotter", "native", ref, id}, args...)...)
	}
	if out, err := run("help", image.Binary, "agent", "--help"); err != nil || !strings.Contains(out, "--credentials") || !strings.Contains(out, "--health-addr") {
		t.Errorf("agent --help in the container: %v\n%s", err, out)
	}
	if out, err := run("version", image.Binary, "version"); err != nil || !strings.Contains(out, version) {
		t.Errorf("version in the container: %v %q, want %s", err, out, version)
	}
	if out, err := run("agent", image.Binary, "agent", "--version"); err != nil || !strings.Contains(out, version) {
		t.Errorf("agent --version in the container: %v %q", err, out)
	}
	if out, err := run("entrypoint"); err == nil || !strings.Contains(out, "in-cluster configuration") {
		t.Errorf("the entrypoint outside a cluster: %v %q, want the agent's in-cluster configuration error", err, out)
	}
	t.Logf("%s: %d bytes, equal over two builds; imported into containerd; --help and --version ran", name, len(a))
}
