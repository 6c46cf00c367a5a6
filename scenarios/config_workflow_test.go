package scenarios

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/teapot-lb/teapot-lb/api/manifest"
	pb "github.com/teapot-lb/teapot-lb/api/proto/teapotv1"
	"github.com/teapot-lb/teapot-lb/scenarios/netlab"
)

var updateGolden = flag.Bool("update", false, "rewrite the golden files under testdata")

// transcript runs CLI commands against one node of a real cluster and
// records each command, its exit status and its output.
type transcript struct {
	t   *testing.T
	c   *cluster
	n   *node
	buf bytes.Buffer
}

// cliRun is one finished CLI command.
type cliRun struct {
	stdout, stderr string
	code           int
}

// editFile matches the temporary file edit names in its messages.
var editFile = regexp.MustCompile(`/[^ ]*teapot-lb-edit-[0-9]+\.yaml`)

// run runs the CLI with env added to its environment, records it and
// returns it.
func (tr *transcript) run(env []string, args ...string) cliRun {
	tr.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), cliTimeout)
	defer cancel()
	full := append(append([]string{}, args...), "--config", tr.c.adminConf(), "--server", tr.n.apiAddr)
	cmd := tr.c.command(ctx, full...)
	cmd.Env = append(childEnv(), env...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	r := cliRun{stdout: stdout.String(), stderr: stderr.String()}
	var ee *exec.ExitError
	switch {
	case errors.As(err, &ee):
		r.code = ee.ExitCode()
	case err != nil:
		tr.t.Fatalf("teapot-lb %s: %v", strings.Join(args, " "), err)
	}
	clean := func(s string) string {
		s = strings.ReplaceAll(s, tr.n.apiAddr, "SERVER")
		return editFile.ReplaceAllString(s, "EDITFILE")
	}
	fmt.Fprintf(&tr.buf, "$ %steapot-lb %s\n--- exit %d\n--- stdout\n%s--- stderr\n%s\n",
		strings.Join(append(env, ""), " "), strings.Join(args, " "), r.code, clean(r.stdout), clean(r.stderr))
	return r
}

// expect runs a command and fails the test unless it exits with code.
func (tr *transcript) expect(code int, env []string, args ...string) cliRun {
	tr.t.Helper()
	r := tr.run(env, args...)
	if r.code != code {
		tr.t.Errorf("teapot-lb %s: exit %d, want %d\nstdout: %s\nstderr: %s", strings.Join(args, " "), r.code, code, r.stdout, r.stderr)
	}
	return r
}

// golden compares the transcript with testdata/NAME.golden (go test
// -update rewrites it).
func (tr *transcript) golden(name string) {
	tr.t.Helper()
	path := filepath.Join("testdata", name+".golden")
	if *updateGolden {
		if err := os.WriteFile(path, tr.buf.Bytes(), 0o644); err != nil {
			tr.t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		tr.t.Fatalf("%v (go test -run %s -update creates it)", err, tr.t.Name())
	}
	if got := tr.buf.Bytes(); !bytes.Equal(got, want) {
		tr.t.Errorf("%s differs (go test -update rewrites it)\n--- got\n%s\n--- want\n%s", path, got, want)
	}
}

// objects is what the admin API holds of every kind an operator writes,
// without what the hosts observe (which moves on its own), encoded
// deterministically. The state revision is no measure: the certificate
// store writes on its own while ACME names are managed.
func (tr *transcript) objects() []byte {
	tr.t.Helper()
	var out []byte
	for _, kind := range []string{"pools", "tenants", "lbs"} {
		text, err := tr.c.cli(tr.n, "get", kind, "-o", "json")
		if err != nil {
			tr.t.Fatal(err)
		}
		objs, err := manifest.Decode(strings.NewReader(text), "get "+kind)
		if err != nil {
			tr.t.Fatalf("get %s: %v", kind, err)
		}
		for _, o := range objs {
			if lb := o.GetLoadBalancer(); lb != nil && lb.GetStatus() != nil {
				lb.Status.Observed = nil
			}
			b, err := proto.MarshalOptions{Deterministic: true}.Marshal(o)
			if err != nil {
				tr.t.Fatal(err)
			}
			out = append(out, b...)
		}
	}
	return out
}

// unchangedState fails the test if fn changes any object.
func (tr *transcript) unchangedState(what string, fn func()) {
	tr.t.Helper()
	before := tr.objects()
	fn()
	if after := tr.objects(); !bytes.Equal(before, after) {
		tr.t.Errorf("%s changed the stored objects", what)
	}
}

func (tr *transcript) getJSON(args ...string) *pb.Object {
	tr.t.Helper()
	out, err := tr.c.cli(tr.n, append(append([]string{"get"}, args...), "-o", "json")...)
	if err != nil {
		tr.t.Fatal(err)
	}
	objs, err := manifest.Decode(strings.NewReader(out), "get "+strings.Join(args, " "))
	if err != nil || len(objs) != 1 {
		tr.t.Fatalf("get %s: %v %v: %s", strings.Join(args, " "), objs, err, out)
	}
	return objs[0]
}

// TestConfigWorkflow drives the operator's config workflow against a real
// single-host cluster: every file of examples/ is applied, and apply
// --dry-run, diff, delete -f, edit, tenant update and unknown subcommands
// are checked against golden transcripts, with the state revision showing
// that checks write nothing.
//
// The host runs in a network namespace with only a loopback interface, so
// the health checks of the examples' members never leave it.
func TestConfigWorkflow(t *testing.T) {
	parallelScenario(t)
	if err := netlab.Check(); err != nil {
		unavailable(t, "config workflow: %v", err)
	}
	lab, err := netlab.New()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := lab.Close(); err != nil {
			t.Errorf("clean up the lab: %v", err)
		}
	})
	host, err := lab.AddBareHost("cfg")
	if err != nil {
		t.Fatal(err)
	}
	c := newCluster(t)
	c.netns = host.NS
	n := c.bootstrap()
	newTr := func(t *testing.T) *transcript { return &transcript{t: t, c: c, n: n} }
	const wf = "testdata/workflow/"

	t.Run("examples", func(t *testing.T) {
		tr := newTr(t)
		files, err := filepath.Glob("../examples/*.yaml")
		if err != nil || len(files) < 7 {
			t.Fatalf("examples: %v %v", files, err)
		}
		sort.Strings(files)
		for _, f := range files {
			tr.unchangedState("apply --dry-run "+f, func() {
				r := tr.expect(0, nil, "apply", "-f", f, "--dry-run")
				if strings.Count(r.stdout, " created (dry run)\n") != strings.Count(r.stdout, "\n") {
					t.Errorf("%s: dry run of a new file: %s", f, r.stdout)
				}
			})
			r := tr.expect(0, nil, "apply", "-f", f)
			if lines := strings.Count(r.stdout, "\n"); lines < 2 || strings.Count(r.stdout, " created\n") != lines {
				t.Errorf("%s: not every object created:\n%s", f, r.stdout)
			}
		}
		tr.unchangedState("applying the examples again", func() {
			r := tr.expect(0, nil, "apply", "-f", "../examples")
			if strings.Count(r.stdout, " unchanged\n") != strings.Count(r.stdout, "\n") {
				t.Errorf("examples applied twice are not unchanged:\n%s", r.stdout)
			}
		})
		web := tr.getJSON("lb", "media/web").GetLoadBalancer().GetStatus().GetAddress()
		rtmp := tr.getJSON("lb", "media/rtmp").GetLoadBalancer().GetStatus().GetAddress()
		if web == "" || web != rtmp {
			t.Errorf("shared-vip.yaml: media/web has %q and media/rtmp %q, want one shared address", web, rtmp)
		}
		if got := tr.getJSON("lb", "edge/api-v6").GetLoadBalancer().GetStatus().GetAddress(); !strings.HasPrefix(got, "2001:db8:20::") {
			t.Errorf("bgp-pool.yaml: edge/api-v6 got %q, want an IPv6 address of the pool", got)
		}
	})

	t.Run("dry-run", func(t *testing.T) {
		tr := newTr(t)
		tr.unchangedState("apply --dry-run", func() {
			tr.expect(0, nil, "apply", "-f", wf+"base.yaml", "--dry-run")
			tr.expect(1, nil, "get", "tenant", "wf")
		})
		tr.expect(0, nil, "apply", "-f", wf+"base.yaml")
		tr.unchangedState("apply --dry-run of changes", func() {
			tr.expect(0, nil, "apply", "-f", wf+"changed.yaml", "--dry-run")
			tr.expect(1, nil, "apply", "-f", wf+"refused.yaml", "--dry-run")
			tr.expect(1, nil, "apply", "-f", wf+"overlap.yaml", "--dry-run")
			tr.expect(0, nil, "tenant", "update", "wf", "--add-domain", "wf.example.org", "--dry-run")
			tr.expect(0, nil, "delete", "lb", "wf/site", "--dry-run")
			tr.expect(1, nil, "delete", "tenant", "wf", "--dry-run")
		})
		if got := tr.getJSON("lb", "wf/site").GetLoadBalancer().GetListeners()[0].GetPort(); got != 80 {
			t.Errorf("after dry runs wf/site listens on %d, want 80", got)
		}
		tr.golden("dry-run")
	})

	t.Run("diff", func(t *testing.T) {
		tr := newTr(t)
		tr.unchangedState("diff", func() {
			tr.expect(0, nil, "diff", "-f", wf+"base.yaml")
			tr.expect(1, nil, "diff", "-f", wf+"changed.yaml")
			tr.expect(1, nil, "diff", "-f", wf+"new.yaml")
			tr.expect(2, nil, "diff", "-f", wf+"refused.yaml")
			tr.expect(2, nil, "diff", "-f", wf+"overlap.yaml")
			tr.expect(2, nil, "diff", "-f", wf+"missing.yaml")
		})
		tr.expect(0, nil, "apply", "-f", wf+"changed.yaml")
		tr.expect(0, nil, "diff", "-f", wf+"changed.yaml")
		tr.expect(1, nil, "diff", "-f", wf+"base.yaml")
		tr.expect(0, nil, "apply", "-f", wf+"base.yaml")
		tr.golden("diff")
	})

	t.Run("edit", func(t *testing.T) {
		tr := newTr(t)
		tr.expect(0, []string{"EDITOR=sed -i s/10.90.0.12:8080/10.90.0.14:8080/"}, "edit", "lb", "wf/site")
		members := tr.getJSON("lb", "wf/site").GetLoadBalancer().GetPools()["web"].GetMembers()
		if len(members) != 2 || members[1].GetAddress() != "10.90.0.14:8080" {
			t.Errorf("edited members: %v", members)
		}
		tr.unchangedState("edits that change nothing or are refused", func() {
			tr.expect(0, []string{"EDITOR=true"}, "edit", "lb", "wf/site")
			r := tr.expect(1, []string{"EDITOR=sed -i s/10.90.0.14:8080/192.168.1.1:80/"}, "edit", "lb", "wf/site")
			kept := editFile.FindString(r.stderr)
			if data, err := os.ReadFile(kept); err != nil || !strings.Contains(string(data), "192.168.1.1:80") {
				t.Errorf("refused edit: the kept file %q: %v %q", kept, err, data)
			} else {
				os.Remove(kept)
			}
			r = tr.expect(1, []string{"EDITOR=sed -i s/protocol:/protocl:/"}, "edit", "lb", "wf/site")
			os.Remove(editFile.FindString(r.stderr))
			tr.expect(1, []string{"EDITOR=false"}, "edit", "lb", "wf/site")
			tr.expect(1, nil, "edit", "node", n.id)
		})
		tr.golden("edit")
	})

	t.Run("tenant-update", func(t *testing.T) {
		tr := newTr(t)
		tr.expect(0, nil, "tenant", "update", "wf", "--add-domain", "wf.example.org", "--add-network", "10.91.0.0/16", "--max-lbs", "7")
		ten := tr.getJSON("tenant", "wf").GetTenant()
		if fmt.Sprint(ten.GetDomains(), ten.GetNetworks(), ten.GetQuotas().GetLoadBalancers()) != "[wf.example wf.example.org] [10.90.0.0/16 10.91.0.0/16] 7" {
			t.Errorf("updated tenant: %v", ten)
		}
		tr.unchangedState("refused tenant updates", func() {
			tr.expect(1, nil, "tenant", "update", "wf", "--networks", "10.91.0.0/16")
			tr.expect(1, nil, "tenant", "update", "wf", "--remove-domain", "nope.example")
			tr.expect(1, nil, "tenant", "update", "wf", "--pools", "nope")
			tr.expect(1, nil, "tenant", "create", "wf2", "--networks", "10.90.128.0/17")
			tr.expect(1, nil, "tenant", "update", "wf")
			tr.expect(1, nil, "tenant", "update", "nobody", "--max-lbs", "3")
		})
		tr.expect(0, nil, "tenant", "update", "wf", "--remove-domain", "wf.example.org", "--networks", "10.90.0.0/16", "--max-lbs", "0")
		tr.golden("tenant-update")
	})

	t.Run("edit-concurrent-change", func(t *testing.T) {
		// Not a golden transcript: the editor's command names temporary
		// paths. While the editor is open, another operator changes the
		// tenant; the edit, made from what it read before, is refused and
		// the other change stays.
		tr := newTr(t)
		const addDomain = `sed -i 's/^- wf.example$/&\n- wf.example.net/'`
		other := fmt.Sprintf("'%s' tenant update wf --max-lbs 9 --config '%s' --server %s >/dev/null && %s",
			c.bin, c.adminConf(), n.apiAddr, addDomain)
		r := tr.expect(1, []string{"EDITOR=" + other}, "edit", "tenant", "wf")
		if !strings.Contains(r.stderr, "changed since you read it: nothing was written, and your edits are kept in") ||
			!strings.Contains(r.stderr, "run teapot-lb edit again") {
			t.Errorf("edit over a concurrent change: stderr %q", r.stderr)
		}
		kept := editFile.FindString(r.stderr)
		if data, err := os.ReadFile(kept); err != nil || !strings.Contains(string(data), "wf.example.net") {
			t.Errorf("the kept file %q: %v %q", kept, err, data)
		} else {
			os.Remove(kept)
		}
		ten := tr.getJSON("tenant", "wf").GetTenant()
		if fmt.Sprint(ten.GetDomains(), ten.GetQuotas().GetLoadBalancers()) != "[wf.example] 9" {
			t.Errorf("after the refused edit the tenant is %v, want the other change (max-lbs 9) alone", ten)
		}
		// Without a change in between, the same edit goes through.
		tr.expect(0, []string{"EDITOR=" + addDomain}, "edit", "tenant", "wf")
		ten = tr.getJSON("tenant", "wf").GetTenant()
		if fmt.Sprint(ten.GetDomains(), ten.GetQuotas().GetLoadBalancers()) != "[wf.example wf.example.net] 9" {
			t.Errorf("after the edit the tenant is %v", ten)
		}
		tr.expect(0, nil, "tenant", "update", "wf", "--remove-domain", "wf.example.net", "--max-lbs", "0")
	})

	t.Run("delete-f", func(t *testing.T) {
		tr := newTr(t)
		tr.expect(1, nil, "delete", "-f", wf+"new.yaml")
		tr.expect(0, nil, "delete", "-f", wf+"new.yaml", "--ignore-not-found")
		tr.expect(1, nil, "delete", "-f", wf+"new.yaml", "lb", "wf/mail")
		tr.expect(0, nil, "delete", "-f", wf+"base.yaml")
		tr.expect(1, nil, "get", "pool", "wf")
		tr.golden("delete")
	})

	t.Run("unknown-subcommands", func(t *testing.T) {
		tr := newTr(t)
		// The lists of commands in these errors grow with the CLI: the
		// test checks the start of each message.
		for _, tt := range []struct{ args, want string }{
			{"tenant frobnicate", `error: unknown command "frobnicate" for "teapot-lb tenant"; its commands are `},
			{"pool frobnicate", `error: unknown command "frobnicate" for "teapot-lb pool"; its commands are `},
			{"cluster stauts", `error: unknown command "stauts" for "teapot-lb cluster" (did you mean "status"?); its commands are `},
			{"frobnicate", `error: unknown command "frobnicate" for "teapot-lb"`},
		} {
			if r := tr.expect(1, nil, strings.Fields(tt.args)...); !strings.HasPrefix(r.stderr, tt.want) {
				t.Errorf("teapot-lb %s: stderr %q, want it to start with %q", tt.args, r.stderr, tt.want)
			}
		}
		if r := tr.run(nil, "tenant"); r.code != 0 || !strings.Contains(r.stdout, "Available Commands") {
			t.Errorf("tenant alone: exit %d, stdout %q", r.code, r.stdout)
		}
	})
}
