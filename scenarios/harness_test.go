package scenarios

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"google.golang.org/protobuf/encoding/protojson"

	pb "github.com/teapot-lb/teapot-lb/api/proto/teapotv1"
)

// Time limits of the harness. They are generous because the binary may run
// under the race detector on a small machine.
const (
	cliTimeout   = 15 * time.Second // one CLI command
	startTimeout = 60 * time.Second // a node becomes a working member
	pollInterval = 100 * time.Millisecond
	logTailLines = 200 // lines of each node's log shown on failure
)

// node is one teapot-lb serve process and the state that outlives it.
type node struct {
	id       string
	dir      string // --data-dir
	raftAddr string
	apiAddr  string
	// metricsAddr serves /metrics.
	metricsAddr string
	logPath     string
	// bin, when set, is the binary this node runs instead of the
	// cluster's (another release).
	bin string

	mu     sync.Mutex
	cmd    *exec.Cmd
	exited chan struct{} // closed when the current process has exited
	runs   int
}

// adminConf is where the node writes admin credentials once it is a member.
func (n *node) adminConf() string { return filepath.Join(n.dir, "admin.conf") }

// running reports whether the node's process is alive.
func (n *node) running() bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.exited == nil {
		return false
	}
	select {
	case <-n.exited:
		return false
	default:
		return true
	}
}

// cluster is a set of nodes on loopback, all killed when the test ends.
type cluster struct {
	tb    testing.TB
	bin   string
	dir   string
	nodes []*node
	// nofile, when set, is the descriptor limit (soft and hard) every
	// node is started with.
	nofile int
	// netns, when set, is the network namespace (`ip netns`) every node
	// and every CLI command runs in.
	netns string
	// hostIP, when set, is the loopback address new nodes' raft, API and
	// metrics listeners are on (ports picked free there), else 127.0.0.1.
	hostIP string
}

// command runs the teapot-lb binary with args, in the cluster's network
// namespace when it has one.
func (c *cluster) command(ctx context.Context, args ...string) *exec.Cmd {
	return c.commandOf(ctx, c.bin, args...)
}

// commandOf is command with another binary (another release).
func (c *cluster) commandOf(ctx context.Context, bin string, args ...string) *exec.Cmd {
	if c.netns != "" {
		return exec.CommandContext(ctx, "ip", append([]string{"netns", "exec", c.netns, bin}, args...)...)
	}
	return exec.CommandContext(ctx, bin, args...)
}

// newCluster prepares an empty cluster. When the test fails, the end of
// every node's log is printed.
func newCluster(tb testing.TB) *cluster {
	tb.Helper()
	c := &cluster{tb: tb, bin: teapotBinary(tb), dir: tb.TempDir()}
	// Registered after TempDir, so it runs before the directory is removed.
	tb.Cleanup(func() {
		for _, n := range c.nodes {
			c.stop(n)
		}
		for _, n := range c.nodes {
			if bad := alarming(n.logPath); bad != "" {
				tb.Errorf("%s logged %q", n.id, bad)
			}
		}
		if tb.Failed() {
			for _, n := range c.nodes {
				tb.Logf("---- log of %s (%s), last %d lines ----\n%s", n.id, n.logPath, logTailLines, tail(n.logPath, logTailLines))
			}
		}
	})
	return c
}

// freeAddrs returns n distinct free TCP addresses on 127.0.0.1.
func freeAddrs(tb testing.TB, n int) []string {
	tb.Helper()
	return freeAddrsOn(tb, "127.0.0.1", n)
}

// bootstrap starts the first node of a new cluster and waits until it is a
// working member.
func (c *cluster) bootstrap() *node {
	c.tb.Helper()
	n := c.newNode()
	c.start(n)
	c.waitMember(n)
	return n
}

// join asks via for a join token and starts a new node that joins through it.
func (c *cluster) join(via *node) *node {
	c.tb.Helper()
	token, err := c.cli(via, "cluster", "join-token")
	if err != nil {
		c.tb.Fatalf("get a join token from %s: %v", via.id, err)
	}
	token = strings.TrimSpace(token)
	if token == "" || strings.ContainsAny(token, " \n") {
		c.tb.Fatalf("cluster join-token printed %q, want the token alone", token)
	}
	n := c.newNode()
	c.start(n, "--join", via.apiAddr, "--token", token)
	c.waitMember(n)
	return n
}

// start3 forms a three-node cluster and waits until all three are healthy voters.
func (c *cluster) start3() {
	c.tb.Helper()
	first := c.bootstrap()
	c.join(first)
	c.join(first)
	c.waitHealthy(first, 3)
}

// newNode adds a node whose raft, API and metrics listeners are on ports
// picked free on the cluster's hostIP (127.0.0.1 when unset).
func (c *cluster) newNode() *node {
	return c.nodeAt(freeAddrsOn(c.tb, cmp.Or(c.hostIP, "127.0.0.1"), 3))
}

// nodeAt adds a node whose raft, API and metrics listeners are addrs.
func (c *cluster) nodeAt(addrs []string) *node {
	id := fmt.Sprintf("n%d", len(c.nodes)+1)
	n := &node{
		id:          id,
		dir:         filepath.Join(c.dir, id),
		raftAddr:    addrs[0],
		apiAddr:     addrs[1],
		metricsAddr: addrs[2],
		logPath:     filepath.Join(c.dir, id+".log"),
	}
	c.nodes = append(c.nodes, n)
	return n
}

// start runs the node's serve process with its fixed flags plus extra.
// noACME is an ACME directory on a closed loopback port.
const noACME = "https://127.0.0.1:9/directory"

func (c *cluster) start(n *node, extra ...string) {
	c.tb.Helper()
	n.mu.Lock()
	defer n.mu.Unlock()
	logFile, err := os.OpenFile(n.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		c.tb.Fatal(err)
	}
	n.runs++
	fmt.Fprintf(logFile, "==== start %d of %s at %s ====\n", n.runs, n.id, time.Now().Format(time.RFC3339Nano))
	args := append([]string{"serve",
		"--data-dir", n.dir,
		"--node-id", n.id,
		"--raft-addr", n.raftAddr,
		"--api-addr", n.apiAddr,
		"--metrics-addr", n.metricsAddr,
		// Tests never reach a public ACME CA: a closed local port unless
		// the test brings its own CA in extra.
		"--acme-ca", noACME,
	}, extra...)
	bin := cmp.Or(n.bin, c.bin)
	cmd := c.commandOf(context.Background(), bin, args...)
	if c.nofile > 0 {
		// The shell lowers its limit and becomes the node (same pid).
		cmd = exec.Command("/bin/sh", append([]string{"-c", fmt.Sprintf(`ulimit -n %d && exec "$0" "$@"`, c.nofile), bin}, args...)...)
	}
	cmd.Env = childEnv()
	cmd.Stdout = logFile
	cmd.Stderr = logFile
	// The node dies with the test binary even if the test is killed.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		logFile.Close()
		c.tb.Fatalf("start %s: %v", n.id, err)
	}
	exited := make(chan struct{})
	go func() {
		err := cmd.Wait()
		fmt.Fprintf(logFile, "==== %s exited at %s: %v ====\n", n.id, time.Now().Format(time.RFC3339Nano), cmp.Or(err, errors.New("exit status 0")))
		logFile.Close()
		close(exited)
	}()
	n.cmd, n.exited = cmd, exited
}

// restart starts a stopped node again with its data directory and no --join.
func (c *cluster) restart(n *node) {
	c.tb.Helper()
	c.start(n)
}

// kill sends SIGKILL to the node and waits until the process is gone.
func (c *cluster) kill(n *node) {
	c.tb.Helper()
	exited := c.signalKill(n)
	if exited == nil {
		c.tb.Fatalf("kill %s: it was not running", n.id)
	}
	<-exited
}

// stop kills the node if it runs, waits for it, and reports whether it ran.
func (c *cluster) stop(n *node) bool {
	exited := c.signalKill(n)
	if exited == nil {
		return false
	}
	<-exited
	return true
}

// signalKill sends SIGKILL to the node's running process and returns a
// channel closed once it has exited, or nil if it was not running.
func (c *cluster) signalKill(n *node) <-chan struct{} {
	n.mu.Lock()
	cmd, exited := n.cmd, n.exited
	n.mu.Unlock()
	if cmd == nil {
		return nil
	}
	select {
	case <-exited:
		return nil
	default:
	}
	cmd.Process.Kill()
	return exited
}

// live returns the running nodes.
func (c *cluster) live() []*node {
	var out []*node
	for _, n := range c.nodes {
		if n.running() {
			out = append(out, n)
		}
	}
	return out
}

// byID returns the node with the given id, or nil.
func (c *cluster) byID(id string) *node {
	for _, n := range c.nodes {
		if n.id == id {
			return n
		}
	}
	return nil
}

// adminConf is the admin config every CLI command uses: any node's would
// do, all are signed by the same cluster CA.
func (c *cluster) adminConf() string { return c.nodes[0].adminConf() }

// cli runs a client command against one node and returns its stdout.
func (c *cluster) cli(n *node, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), cliTimeout)
	defer cancel()
	args = append(args, "--config", c.adminConf(), "--server", n.apiAddr)
	cmd := c.command(ctx, args...)
	cmd.Env = childEnv()
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return stdout.String(), fmt.Errorf("teapot-lb %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}
	return stdout.String(), nil
}

// status returns the cluster status as seen by n.
func (c *cluster) status(n *node) (*pb.ClusterStatusResponse, error) {
	out, err := c.cli(n, "cluster", "status", "-o", "json")
	if err != nil {
		return nil, err
	}
	var st pb.ClusterStatusResponse
	if err := (protojson.UnmarshalOptions{DiscardUnknown: true}).Unmarshal([]byte(out), &st); err != nil {
		return nil, fmt.Errorf("cluster status -o json: %w: %q", err, out)
	}
	return &st, nil
}

// waitMember waits until the node has written its admin config.
func (c *cluster) waitMember(n *node) {
	c.tb.Helper()
	waitFor(c.tb, startTimeout, n.id+" becomes a member", func() error {
		if !n.running() {
			return errStop(fmt.Errorf("%s exited", n.id))
		}
		if _, err := os.Stat(n.adminConf()); err != nil {
			return err
		}
		return nil
	})
}

// waitHealthy waits until via reports a leader and want healthy voters.
func (c *cluster) waitHealthy(via *node, want int) *pb.ClusterStatusResponse {
	c.tb.Helper()
	var last *pb.ClusterStatusResponse
	waitFor(c.tb, startTimeout, fmt.Sprintf("%d healthy voters", want), func() error {
		st, err := c.status(via)
		if err != nil {
			return err
		}
		if err := healthyVoters(st, want); err != nil {
			return err
		}
		last = st
		return nil
	})
	return last
}

// healthyVoters checks that st has a leader and exactly want nodes, all
// healthy voters.
func healthyVoters(st *pb.ClusterStatusResponse, want int) error {
	if st.GetLeaderId() == "" {
		return errors.New("no leader")
	}
	if len(st.GetNodes()) != want {
		return fmt.Errorf("%d nodes, want %d: %s", len(st.GetNodes()), want, describeNodes(st))
	}
	for _, ns := range st.GetNodes() {
		if ns.GetSuffrage() != "voter" || !ns.GetHealthy() {
			return fmt.Errorf("not all healthy voters: %s", describeNodes(st))
		}
	}
	return nil
}

func describeNodes(st *pb.ClusterStatusResponse) string {
	var parts []string
	for _, ns := range st.GetNodes() {
		parts = append(parts, fmt.Sprintf("%s(%s %s healthy=%t applied=%d)", ns.GetId(), ns.GetSuffrage(), ns.GetState(), ns.GetHealthy(), ns.GetAppliedIndex()))
	}
	return fmt.Sprintf("leader=%q term=%d commit=%d [%s]", st.GetLeaderId(), st.GetTerm(), st.GetCommitIndex(), strings.Join(parts, " "))
}

// leader asks the live nodes in turn who leads and returns that node when
// it is live.
func (c *cluster) leader() (*node, error) {
	var errs []error
	for _, n := range c.live() {
		st, err := c.status(n)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		l := c.byID(st.GetLeaderId())
		if l == nil || !l.running() {
			errs = append(errs, fmt.Errorf("%s sees leader %q, not a live node", n.id, st.GetLeaderId()))
			continue
		}
		return l, nil
	}
	return nil, fmt.Errorf("no live leader: %w", errors.Join(errs...))
}

// waitLeader waits until a live node leads.
func (c *cluster) waitLeader() *node {
	c.tb.Helper()
	var l *node
	waitFor(c.tb, startTimeout, "a live leader", func() error {
		var err error
		l, err = c.leader()
		return err
	})
	return l
}

// waitCaughtUp waits until n runs, sees every voter healthy, and has
// applied the leader's commit index as it was when the wait began.
func (c *cluster) waitCaughtUp(n *node, voters int) {
	c.tb.Helper()
	l := c.waitLeader()
	var target uint64
	waitFor(c.tb, startTimeout, "leader's commit index", func() error {
		st, err := c.status(l)
		if err != nil {
			return err
		}
		target = st.GetCommitIndex()
		return nil
	})
	waitFor(c.tb, startTimeout, fmt.Sprintf("%s catches up to index %d", n.id, target), func() error {
		if !n.running() {
			return errStop(fmt.Errorf("%s exited", n.id))
		}
		st, err := c.status(n)
		if err != nil {
			return err
		}
		if err := healthyVoters(st, voters); err != nil {
			return err
		}
		for _, ns := range st.GetNodes() {
			if ns.GetId() == n.id && ns.GetAppliedIndex() >= target {
				return nil
			}
		}
		return fmt.Errorf("not caught up: %s", describeNodes(st))
	})
}

// tenantNames returns the names of the tenants n serves.
func (c *cluster) tenantNames(n *node) (map[string]bool, error) {
	out, err := c.cli(n, "get", "tenant", "-o", "json")
	if err != nil {
		return nil, err
	}
	var doc any
	if err := json.Unmarshal([]byte(out), &doc); err != nil {
		return nil, fmt.Errorf("get tenant -o json: %w: %q", err, out)
	}
	names := map[string]bool{}
	collectNames(doc, names)
	return names, nil
}

// collectNames adds every "name" string found in a decoded JSON document.
func collectNames(v any, into map[string]bool) {
	switch v := v.(type) {
	case map[string]any:
		for k, x := range v {
			if s, ok := x.(string); ok && k == "name" {
				into[s] = true
			} else {
				collectNames(x, into)
			}
		}
	case []any:
		for _, x := range v {
			collectNames(x, into)
		}
	}
}

// missing returns the names in want that have is lacks, sorted.
func missing(want []string, have map[string]bool) []string {
	var out []string
	for _, w := range want {
		if !have[w] {
			out = append(out, w)
		}
	}
	slices.Sort(out)
	return out
}

// stopError ends a wait early: the condition can no longer become true.
type stopError struct{ err error }

func (e stopError) Error() string { return e.err.Error() }

func errStop(err error) error { return stopError{err} }

// waitFor polls cond until it returns nil, fails with a stop error, or the
// timeout passes.
func waitFor(tb testing.TB, timeout time.Duration, what string, cond func() error) {
	tb.Helper()
	deadline := time.Now().Add(timeout)
	for {
		err := cond()
		if err == nil {
			return
		}
		var stop stopError
		if errors.As(err, &stop) {
			tb.Fatalf("waiting for %s: %v", what, err)
		}
		if time.Now().After(deadline) {
			tb.Fatalf("waiting for %s: gave up after %s: %v", what, timeout, err)
		}
		time.Sleep(pollInterval)
	}
}

// childEnv is the environment of every process the harness starts. A
// binary built with the race detector otherwise sleeps a second on exit.
func childEnv() []string {
	return append(os.Environ(), "GORACE="+strings.TrimSpace(os.Getenv("GORACE")+" atexit_sleep_ms=0"))
}

// alarms are log lines that fail a scenario even when it otherwise passed.
var alarms = []string{"WARNING: DATA RACE", "panic: ", "fatal error: "}

// alarming returns the first alarming line of a node's log, or "".
func alarming(path string) string {
	data, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	for line := range strings.Lines(string(data)) {
		for _, a := range alarms {
			if strings.HasPrefix(line, a) {
				return strings.TrimSpace(line)
			}
		}
	}
	return ""
}

// tail returns the last n lines of a file, leaving out access-log lines
// (JSON objects), which would push a host's own messages out of view.
func tail(path string, n int) string {
	data, err := os.ReadFile(path)
	if err != nil {
		return err.Error()
	}
	var lines []string
	skipped := 0
	for line := range strings.Lines(string(data)) {
		if strings.HasPrefix(line, "{") {
			skipped++
			continue
		}
		lines = append(lines, strings.TrimRight(line, "\n"))
	}
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	if skipped > 0 {
		lines = append(lines, fmt.Sprintf("(%d access-log lines left out)", skipped))
	}
	return strings.Join(lines, "\n")
}

// unavailable skips a test whose environment lacks something it needs
// (root, a Debian package, a tool build) — unless it runs in CI, where
// .ci/run installs all of it, so a missing piece is a failure there.
func unavailable(tb testing.TB, format string, args ...any) {
	tb.Helper()
	if os.Getenv("CI") != "" {
		tb.Fatalf("CI: "+format, args...)
	}
	tb.Skipf(format, args...)
}
