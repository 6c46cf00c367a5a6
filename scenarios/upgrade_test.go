package scenarios

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/teapot-lb/teapot-lb/api"
)

// release is a commit the rolling-upgrade scenarios upgrade from (and
// downgrade to): there are no tags. subject is that commit's subject: a
// history landed again with rewritten hashes still holds a commit with
// it. level is its feature level.
type release struct {
	hash, subject string
	level         uint32
}

// version is the release's version as its binary is built here.
func (r release) version() string { return r.hash[:7] }

var (
	// previousRelease is the release operators run now: a drain or a
	// stop hands its clients over before its VIPs move.
	// TestRollingUpgradeInARPLab upgrades from it and downgrades to it.
	previousRelease = release{
		hash:    "afe62e14ae97f3cf7bcebabcfa30bd786df932b1",
		subject: "scenarios: the routing example's mirror check accepts copies of earlier subtests' requests to the split route",
		level:   2,
	}
	// levelOneRelease is the last release before feature levels, whose
	// state machine still validated in Apply.
	// TestRollingUpgradeFromLevelOneRelease upgrades from it: hosts of
	// level 1 hold back every field of level 2, and a host goes back to a
	// release that validates in Apply, which previousRelease (level 2,
	// with a thin Apply) cannot show.
	levelOneRelease = release{
		hash:    "2fc1f46ddc294730a6dd3e6cadb56d5235f667af",
		subject: "web: one serve-until-done for the local and the host dashboard",
		level:   1,
	}
)

// findRelease returns the commit of rel in this clone: by its hash, else
// by its exact subject, else after fetching the hash from origin. When
// none of these finds it (a shallow clone without a reachable origin, or
// a history without that commit) the test skips: a clone that lacks the
// old source is no defect of the code under test. Under CI with the
// upgrade scenarios asked for (make upgrade-test, run by .ci/run) it
// fails instead, so that CI never passes without having run them.
func findRelease(t *testing.T, root string, rel release) string {
	t.Helper()
	have := func(ref string) bool {
		return exec.Command("git", "-C", root, "cat-file", "-e", ref+"^{commit}").Run() == nil
	}
	bySubject := func() string {
		out, err := exec.Command("git", "-C", root, "log", "--all", "-F", "--grep", rel.subject, "--format=%H %s").Output()
		if err != nil {
			return ""
		}
		for _, line := range strings.Split(string(out), "\n") {
			if hash, subject, ok := strings.Cut(line, " "); ok && subject == rel.subject {
				return hash
			}
		}
		return ""
	}
	if have(rel.hash) {
		return rel.hash
	}
	if h := bySubject(); h != "" {
		return h
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, "git", "-C", root, "fetch", "--quiet", "origin", rel.hash).CombinedOutput()
	if err == nil && have(rel.hash) {
		return rel.hash
	}
	msg := fmt.Sprintf("the release %s is not in this clone (no commit with the subject %q) and fetching it from origin failed (%v: %s); "+
		"run in a full clone (git fetch --unshallow) to test the rolling upgrade",
		rel.hash, rel.subject, err, strings.TrimSpace(string(out)))
	if os.Getenv("CI") != "" && os.Getenv("TEAPOT_SCENARIO_UPGRADE") != "" {
		t.Fatal("CI asked for the upgrade scenarios (make upgrade-test), but " + msg)
	}
	t.Skip(msg)
	return ""
}

// buildRelease builds teapot-lb at rel into a temporary directory, with
// Version set to rel.version(). The source is extracted once per commit
// into the user's cache (releaseSource), not into the test's directory:
// go's build cache keys a package compiled without -trimpath by its
// directory, so a source that moved each run was compiled anew each run
// (two releases, about 220 s of make upgrade-test with a warm cache), and
// scenarios/prebuild.sh could not compile it ahead.
func buildRelease(t *testing.T, rel release) string {
	t.Helper()
	version := rel.version()
	root, err := moduleRoot()
	if err != nil {
		t.Fatal(err)
	}
	ref := findRelease(t, root, rel)
	src, err := releaseSource(root, ref)
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(t.TempDir(), "teapot-lb-"+version)
	// Built as the scenarios' binary is, so that both share the build
	// cache, and as scenarios/prebuild.sh builds it ahead.
	args := []string{"build", "-o", bin, "-ldflags", "-X github.com/teapot-lb/teapot-lb/api/cli.Version=" + version}
	cgo := "CGO_ENABLED=0"
	if hostRace(t) {
		args, cgo = append(args, "-race"), "CGO_ENABLED=1"
	}
	build := exec.Command("go", append(args, ".")...)
	build.Dir = src
	build.Env = append(os.Environ(), cgo)
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build %s: %v: %s", ref, err, out)
	}
	return bin
}

// releaseSource returns the directory holding the source of commit ref,
// $XDG_CACHE_HOME/teapot-lb/releases/REF (scenarios/prebuild.sh extracts
// there too), extracting it with git archive when it is not there yet.
// A source appears whole or not at all (extracted beside it, then
// renamed), so a run that finds it may use it while another extracts.
func releaseSource(root, ref string) (string, error) {
	cache, err := os.UserCacheDir()
	if err != nil {
		return "", err
	}
	parent := filepath.Join(cache, "teapot-lb", "releases")
	dir := filepath.Join(parent, ref)
	if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
		return dir, nil
	}
	if err := os.MkdirAll(parent, 0o755); err != nil {
		return "", err
	}
	tmp, err := os.MkdirTemp(parent, ".extract-")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(tmp)
	archive := exec.Command("sh", "-c", fmt.Sprintf(`git -C "%s" archive "%s" | tar -x -C "%s"`, root, ref, tmp))
	if out, err := archive.CombinedOutput(); err != nil {
		return "", fmt.Errorf("extract %s: %v: %s", ref, err, out)
	}
	if _, err := os.Stat(filepath.Join(tmp, "go.mod")); err != nil {
		return "", fmt.Errorf("extract %s: no go.mod in what git archive gave: %v", ref, err)
	}
	if err := os.Rename(tmp, dir); err != nil {
		// Another run extracted it meanwhile.
		if _, statErr := os.Stat(filepath.Join(dir, "go.mod")); statErr == nil {
			return dir, nil
		}
		return "", err
	}
	return dir, nil
}

// joinAs joins a new node running bin through via.
func (c *cluster) joinAs(via *node, bin string) *node {
	c.tb.Helper()
	token, err := c.cli(via, "cluster", "join-token")
	if err != nil {
		c.tb.Fatal(err)
	}
	n := c.newNode()
	n.bin = bin
	c.start(n, "--join", via.apiAddr, "--token", strings.TrimSpace(token))
	c.waitMember(n)
	return n
}

// waitFeatureLevel waits until cluster status through via reports the
// cluster's feature level as want: each host records its level in the
// state once it runs, a moment after it first answers.
func (c *cluster) waitFeatureLevel(t *testing.T, via *node, want uint32) {
	t.Helper()
	waitFor(t, startTimeout, fmt.Sprintf("feature level %d", want), func() error {
		st, err := c.status(via)
		if err != nil {
			return err
		}
		if st.GetFeatureLevel() != want {
			return fmt.Errorf("feature level %d", st.GetFeatureLevel())
		}
		return nil
	})
}

// versions returns each host's version as cluster status reports it.
func (c *cluster) versions(t *testing.T, via *node) map[string]string {
	t.Helper()
	st, err := c.status(via)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, n := range st.GetNodes() {
		out[n.GetId()] = n.GetVersion()
	}
	return out
}

// A cluster of the last release of feature level 1 is upgraded host by
// host (drain, stop, start the new binary, undrain) under steady writes
// and traffic through a VIP (new TCP connections, UDP datagrams, requests
// on a kept-alive HTTPS connection), then one host is downgraded again.
// Mixed versions keep taking writes, writes of level-2 fields are refused
// while a host of level 1 runs, and every host ends with every
// acknowledged write. On one machine a static loopback VIP is served by
// the host that bound its port first, so traffic can only stop while
// that host restarts; the others' restarts must not fail a single
// connection. (The upgrade from the release operators run now is
// TestRollingUpgradeInARPLab.)
func TestRollingUpgradeFromLevelOneRelease(t *testing.T) {
	if os.Getenv("TEAPOT_SCENARIO_UPGRADE") == "" {
		t.Skip("runs with make upgrade-test (TEAPOT_SCENARIO_UPGRADE=1): building the previous release takes longer than make test's 3-minute budget per scenario")
	}
	raceHosts(t) // mixed releases
	oldVersion := levelOneRelease.version()
	old := buildRelease(t, levelOneRelease)
	c := newCluster(t)
	n1 := c.newNode()
	n1.bin = old
	c.start(n1)
	c.waitMember(n1)
	lb := newLifeLB(t, "127.0.0.96/32")
	lb.setup(t, c, n1) // n1 binds the VIP's ports
	vip := lb.vip(t, c, n1)
	waitFor(t, startTimeout, "traffic through the VIP", func() error { return lb.echoOnce(vip) })
	n2, n3 := c.joinAs(n1, old), c.joinAs(n1, old)
	c.waitHealthy(n1, 3)
	for id, v := range c.versions(t, n1) {
		if v != oldVersion {
			t.Fatalf("%s runs %q before the upgrade, want %s", id, v, oldVersion)
		}
	}

	p := startVIPProber(t, lb, vip, 20*time.Millisecond)
	w := startWriter(c, 1, []*node{n1, n2, n3})
	w.waitAcks(t, 3, time.Now())
	phase := func(name string, n *node, bin string) (int, time.Duration) {
		t.Helper()
		from := time.Now()
		if _, err := c.cli(n1, "cluster", "drain", n.id); err != nil && n != n1 {
			t.Fatalf("drain %s: %v", n.id, err)
		}
		<-c.terminate(t, n)
		n.bin = bin
		c.start(n)
		c.waitMember(n)
		c.waitCaughtUp(n, 3)
		if _, err := c.cli(n, "cluster", "drain", n.id, "--undo"); err != nil {
			t.Fatalf("undrain %s: %v", n.id, err)
		}
		w.waitAcks(t, 2, time.Now())
		failed, _, _ := p.failures(from, time.Now())
		took := time.Since(from)
		t.Logf("%s %s: %s, %d of the probes through the VIP (TCP, UDP, HTTPS keep-alive) failed", name, n.id, took.Round(time.Millisecond), failed)
		return failed, took
	}
	gated := gatedLB(t, "127.0.0.97/32", netip.MustParseAddr("127.0.0.61")) // a member of its own: tenants may not share networks
	apply := func(via *node) func(string) (string, error) {
		return func(path string) (string, error) { return c.cli(via, "apply", "-f", path) }
	}
	// The hosts that do not hold the VIP's ports first, then the holder.
	for _, n := range []*node{n3, n2} {
		if failed, _ := phase("upgrade", n, c.bin); failed > 0 {
			t.Errorf("%d connections through the VIP failed while %s (not serving it) was upgraded", failed, n.id)
		}
		mixed := c.versions(t, n1)
		t.Logf("mixed cluster: %v", mixed)
		if mixed[n.id] == oldVersion || mixed[n1.id] != oldVersion {
			t.Fatalf("cluster status versions during the upgrade: %v", mixed)
		}
		// Through an upgraded host and through n1 (an old host, which
		// forwards to whichever leader without checking).
		gated.refused(t, apply(n), n1.id+" (version "+oldVersion+") is at level 1")
		gated.refused(t, apply(n1), n1.id+" (version "+oldVersion+") is at level 1")
	}
	holderFailed, _ := phase("upgrade", n1, c.bin)
	for id, v := range c.versions(t, n2) {
		if v == oldVersion {
			t.Fatalf("%s still runs %s after the upgrade", id, v)
		}
	}
	c.waitFeatureLevel(t, n2, api.FeatureLevel)
	gated.accepted(t, apply(n3), func(args ...string) (string, error) { return c.cli(n2, args...) }, false)
	// A host that was just upgraded, and does not serve the VIP's ports,
	// goes back to the previous release. While n1 restarted, another
	// host may have bound the ports (its listeners retry with backoff):
	// then that one serves them now.
	down, other := n3, n1
	holders := portHolders(t, c, n1, n1, n2, n3)
	if holders[n3] {
		down = n2
	}
	serving := holders[down]
	downFailed, _ := phase("downgrade", down, old)
	gated.refused(t, apply(other), down.id+" (version "+oldVersion+") is at level 1")
	c.waitFeatureLevel(t, other, 1)
	switch {
	case serving:
		t.Logf("n2 and n3 both serve ports of the VIP since n1 restarted: %d connections through the VIP failed while %s was downgraded", downFailed, down.id)
	case downFailed > 0:
		t.Errorf("%d connections through the VIP failed while %s (not serving it) was downgraded", downFailed, down.id)
	}
	if v := c.versions(t, other)[down.id]; v != oldVersion {
		t.Fatalf("%s runs %q after the downgrade", down.id, v)
	}
	acked := w.stop()
	p.stop()
	w.mu.Lock()
	failedWrites := w.failed
	w.mu.Unlock()
	c.requireEveryNodeHas(acked)
	_, ok, _ := p.failures(time.Time{}, time.Now())
	all, _, _ := p.failures(time.Time{}, time.Now())
	t.Logf("rolling upgrade and downgrade: %d writes acknowledged, %d failed and retried; %d probes through the VIP (TCP, UDP, HTTPS keep-alive), %d failed (while the VIP's host restarted: %d)",
		len(acked), failedWrites, ok+all, all, holderFailed)
}

// The previous release is found by its hash, else by its exact subject (a
// history landed with rewritten hashes); a clone with neither skips.
func TestFindReleaseByHashOrSubject(t *testing.T) {
	t.Setenv("TEAPOT_SCENARIO_UPGRADE", "") // the clone without the release skips, even under CI
	git := func(dir string, args ...string) string {
		t.Helper()
		out, err := exec.Command("git", append([]string{"-C", dir, "-c", "user.name=t", "-c", "user.email=t@example.com"}, args...)...).CombinedOutput()
		if err != nil {
			t.Fatalf("git %v: %v: %s", args, err, out)
		}
		return strings.TrimSpace(string(out))
	}
	rewritten := t.TempDir()
	git(rewritten, "init", "--quiet")
	git(rewritten, "commit", "--quiet", "--allow-empty", "-m", previousRelease.subject+" (earlier, not it)")
	git(rewritten, "commit", "--quiet", "--allow-empty", "-m", previousRelease.subject, "-m", "body")
	want := git(rewritten, "rev-parse", "HEAD")
	git(rewritten, "commit", "--quiet", "--allow-empty", "-m", "later")
	if got := findRelease(t, rewritten, previousRelease); got != want {
		t.Fatalf("found %q by subject, want %s", got, want)
	}

	without := t.TempDir()
	git(without, "init", "--quiet")
	git(without, "commit", "--quiet", "--allow-empty", "-m", "unrelated")
	found := "not run"
	t.Run("without the release", func(t *testing.T) { found = findRelease(t, without, previousRelease) })
	if found != "not run" {
		t.Fatalf("a clone without the release returned %q instead of skipping", found)
	}
}

// portHolders returns the ones of nodes that have a listener of
// life/web bound, as explain lb asked through via shows them: on one
// machine the host that bound a port first serves it.
func portHolders(t *testing.T, c *cluster, via *node, nodes ...*node) map[*node]bool {
	t.Helper()
	holders := map[*node]bool{}
	waitFor(t, startTimeout, "the hosts that serve the VIP's ports", func() error {
		out, err := c.cli(via, "explain", "lb", "life/web")
		if err != nil {
			return err
		}
		for _, line := range strings.Split(out, "\n") {
			f := strings.Fields(line)
			if len(f) < 5 || f[4] != "yes" {
				continue
			}
			for _, n := range nodes {
				if f[0] == n.id {
					holders[n] = true
				}
			}
		}
		if len(holders) == 0 {
			return fmt.Errorf("no host has the listeners bound:\n%s", out)
		}
		return nil
	})
	return holders
}

// gatedLBFile is a static pool, a tenant and a load balancer of it that
// uses fields of feature level level, in one file: the cluster writes all
// or none. fields are how a refusal names them.
type gatedLBFile struct {
	path   string
	level  uint32
	fields []string
}

// gatedLB writes one with the pool's range and the tenant's one member,
// using the fields of level 2 (an HTTPS check and closeOnDown).
func gatedLB(t *testing.T, cidr string, member netip.Addr) gatedLBFile {
	t.Helper()
	return writeGated(t, 2, []string{"healthCheck.https (https-health-check)", "healthCheck.closeOnDown (close-on-down)"}, fmt.Sprintf(`kind: VIPPool
name: gated
cidrs: [%s]
mode: static
---
kind: Tenant
name: gated
networks: [%s/32]
pools: [gated]
---
kind: LoadBalancer
name: api
tenant: gated
vip: { pool: gated }
listeners: [{ port: 6443, protocol: tcp, pool: api }]
pools:
  api:
    members: ["%s"]
    healthCheck: { https: { path: /readyz, insecureSkipVerify: true }, closeOnDown: true }
`, cidr, member, netip.AddrPortFrom(member, 6443)))
}

// sniGatedLB writes one with the pool's range and the tenant's one member,
// using a field of level 3 (a tls-passthrough listener's sniRoutes).
func sniGatedLB(t *testing.T, cidr string, member netip.Addr) gatedLBFile {
	t.Helper()
	return writeGated(t, 3, []string{"listeners[0].sniRoutes (sni-routes)"}, fmt.Sprintf(`kind: VIPPool
name: gated
cidrs: [%s]
mode: static
---
kind: Tenant
name: gated
domains: [gated.example]
networks: [%s/32]
pools: [gated]
---
kind: LoadBalancer
name: api
tenant: gated
vip: { pool: gated }
listeners:
  - { port: 6443, protocol: tls-passthrough, pool: api, sniRoutes: [{ host: db.gated.example, pool: db }] }
pools:
  api: { members: ["%s"] }
  db: { members: ["%s"] }
`, cidr, member, netip.AddrPortFrom(member, 6443), netip.AddrPortFrom(member, 6444)))
}

func writeGated(t *testing.T, level uint32, fields []string, doc string) gatedLBFile {
	t.Helper()
	path := filepath.Join(t.TempDir(), "gated.yaml")
	if err := os.WriteFile(path, []byte(doc), 0o644); err != nil {
		t.Fatal(err)
	}
	return gatedLBFile{path: path, level: level, fields: fields}
}

// refused applies the file and requires the cluster's refusal naming the
// fields, the level and want (a host below it).
func (g gatedLBFile) refused(t *testing.T, apply func(string) (string, error), want string) {
	t.Helper()
	out, err := apply(g.path)
	for _, s := range append(slices.Clone(g.fields), fmt.Sprintf("needs feature level %d", g.level), want) {
		if err == nil || !strings.Contains(err.Error(), s) {
			t.Fatalf("a write of level-%d fields in a mixed cluster: %v (%s); want a refusal with %q", g.level, err, out, s)
		}
	}
	t.Logf("refused as it should: %v", err)
}

// accepted applies the file once every host is at its level, then
// deletes the load balancer again unless keep (a downgrade follows).
func (g gatedLBFile) accepted(t *testing.T, apply func(string) (string, error), cli func(...string) (string, error), keep bool) {
	t.Helper()
	if out, err := apply(g.path); err != nil {
		t.Fatalf("a write of level-%d fields with every host upgraded: %v (%s)", g.level, err, out)
	}
	if keep {
		return
	}
	if out, err := cli("delete", "lb", "gated/api"); err != nil {
		t.Fatalf("delete the level-%d load balancer: %v (%s)", g.level, err, out)
	}
}
