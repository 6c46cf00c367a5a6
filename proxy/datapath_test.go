package proxy

import (
	"bytes"
	"errors"
	"go/ast"
	"go/parser"
	"go/token"
	"net"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"

	"github.com/teapot-lb/teapot-lb/proxy/internal/uring"
)

// testDataPathEnv names the data path the proxies of this test binary
// take (newProxy): TestTCPSuiteOnEachPath runs the TCP suite again with
// it set to io_uring.
const testDataPathEnv = "TEAPOT_TEST_DATA_PATH"

var testDataPath = DataPath(os.Getenv(testDataPathEnv))

// l4SuiteFiles hold the tests of what TCP and TLS passthrough
// connections promise (half-close, PROXY protocol, limits, budgets,
// drain, handover, edge rules, hitless changes): every test in them runs
// on each data path.
var l4SuiteFiles = []string{
	"tcp_test.go", "passthrough_test.go", "handover_test.go", "hitless_test.go",
	"longconn_test.go", "isolation_test.go", "budget_test.go", "edge_test.go",
	"dualstack_test.go", "sniroutes_test.go", "memberbudget_test.go", "steered_test.go",
}

// l4SuiteTests returns the names of the tests in l4SuiteFiles.
func l4SuiteTests(t *testing.T) []string {
	t.Helper()
	var names []string
	fset := token.NewFileSet()
	for _, f := range l4SuiteFiles {
		af, err := parser.ParseFile(fset, f, nil, parser.SkipObjectResolution)
		if err != nil {
			t.Fatalf("parse %s: %v", f, err)
		}
		for _, d := range af.Decls {
			if fd, ok := d.(*ast.FuncDecl); ok && fd.Recv == nil && strings.HasPrefix(fd.Name.Name, "Test") {
				names = append(names, fd.Name.Name)
			}
		}
	}
	slices.Sort(names)
	return names
}

// TestTCPSuiteOnEachPath runs the L4 suite (l4SuiteFiles) again on the
// io_uring data path, in a child of this test binary: the rest of the
// package runs on epoll (or on the path the environment names), so both
// paths run the same tests.
func TestTCPSuiteOnEachPath(t *testing.T) {
	if testDataPath != "" {
		t.Skipf("this process runs the suite on %s", testDataPath)
	}
	if testing.Short() {
		t.Skip("the suite again: not in -short")
	}
	if err := uring.Available(); err != nil {
		t.Skipf("io_uring unavailable here: %v", err)
	}
	names := l4SuiteTests(t)
	if len(names) < 30 {
		t.Fatalf("found %d tests in the L4 suite files; the parse went wrong", len(names))
	}
	args := []string{"-test.run", "^(" + strings.Join(names, "|") + ")$", "-test.count=1", "-test.timeout=15m"}
	if testing.Verbose() {
		args = append(args, "-test.v")
	}
	cmd := exec.Command(os.Args[0], args...)
	cmd.Env = append(os.Environ(), testDataPathEnv+"="+string(DataPathIOURing))
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	if err != nil || testing.Verbose() {
		t.Logf("the L4 suite on io_uring (%d tests):\n%s", len(names), out.String())
	}
	if err != nil {
		t.Fatalf("the L4 suite failed on io_uring: %v", err)
	}
}

func TestParseDataPath(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		in   string
		want DataPath
		ok   bool
	}{{"", DataPathAuto, true}, {"auto", DataPathAuto, true}, {"epoll", DataPathEpoll, true}, {"io_uring", DataPathIOURing, true}, {"uring", "", false}, {"EPOLL", "", false}} {
		got, err := ParseDataPath(tt.in)
		if (err == nil) != tt.ok || got != tt.want {
			t.Errorf("ParseDataPath(%q) = %q, %v", tt.in, got, err)
		}
	}
}

// TestChooseDataPath: epoll is always honoured; auto takes io_uring
// exactly when it is available; io_uring where it is unavailable is an
// error naming the setting.
func TestChooseDataPath(t *testing.T) {
	t.Parallel()
	avail := uring.Available()
	if got, _, err := ChooseDataPath(DataPathEpoll); err != nil || got != DataPathEpoll {
		t.Fatalf("epoll: %s, %v", got, err)
	}
	got, why, err := ChooseDataPath(DataPathAuto)
	if err != nil {
		t.Fatal(err)
	}
	if want := map[bool]DataPath{true: DataPathIOURing, false: DataPathEpoll}[avail == nil]; got != want {
		t.Fatalf("auto chose %s (%s), io_uring available: %v", got, why, avail)
	}
	got, _, err = ChooseDataPath(DataPathIOURing)
	switch {
	case avail == nil && (err != nil || got != DataPathIOURing):
		t.Fatalf("io_uring where available: %s, %v", got, err)
	case avail != nil && (!errors.Is(err, ErrDataPath) || !strings.Contains(err.Error(), "data-path")):
		t.Fatalf("io_uring where unavailable: %s, %v", got, err)
	}
}

// TestIOURingRelaysTCP: on the io_uring path a TCP connection's bytes go
// through the ring (the relay counts it) with no splice pipe, and the
// relay holds no buffer once it ended.
func TestIOURingRelaysTCP(t *testing.T) {
	t.Parallel()
	if err := uring.Available(); err != nil {
		t.Skipf("io_uring unavailable: %v", err)
	}
	be := startBackend(t, "127.0.0.1", echo)
	p, _ := newProxy(t, Config{DataPath: DataPathIOURing})
	port := freePort(t)
	update(t, p, l4LB("echo", "127.0.0.2", port, "tcp", be.addr))
	c, err := net.Dial("tcp", vipAddr("127.0.0.2", port))
	if err != nil {
		t.Fatal(err)
	}
	if err := roundTrip(c, bytes.Repeat([]byte("ring"), 50000)); err != nil {
		t.Fatal(err)
	}
	if s := p.RingStats(); s.Conns != 1 || s.Live != 1 {
		t.Fatalf("ring stats %+v after one round trip, want the connection in the ring", s)
	}
	if n := p.pipes.Open(); n != 0 {
		t.Fatalf("%d splice pipes open on the io_uring path", n)
	}
	c.Close()
	eventually(t, "the ring lets go", func() bool { s := p.RingStats(); return s.Live == 0 && s.Held == 0 })
}

// TestAutoTakesIOURingWhereAvailable: a proxy configured auto relays
// through io_uring where it is available.
func TestAutoTakesIOURingWhereAvailable(t *testing.T) {
	t.Parallel()
	if err := uring.Available(); err != nil {
		t.Skipf("io_uring unavailable: %v", err)
	}
	p, _ := newProxy(t, Config{DataPath: DataPathAuto})
	if p.DataPath() != DataPathIOURing {
		t.Fatalf("auto runs %s where io_uring is available", p.DataPath())
	}
}
