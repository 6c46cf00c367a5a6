package cli_test

import (
	"bytes"
	"flag"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/teapot-lb/teapot-lb/api"
	"github.com/teapot-lb/teapot-lb/api/cli"
	"github.com/teapot-lb/teapot-lb/api/client/clienttest"
	"github.com/teapot-lb/teapot-lb/api/manifest"
	pb "github.com/teapot-lb/teapot-lb/api/proto/teapotv1"
)

var update = flag.Bool("update", false, "rewrite the golden files under testdata")

// seedAges are how long ago the objects of testdata/seed.yaml were
// created, in file order.
var seedAges = []time.Duration{
	40 * 24 * time.Hour, 3 * 24 * time.Hour, 30 * 24 * time.Hour, 2 * time.Hour,
	90 * time.Second, 5 * time.Hour, 17 * time.Minute, 45 * time.Second,
}

// seeded returns a fake holding testdata/seed.yaml, two nodes and a
// certificate.
func seeded(t *testing.T) *fakeAdmin {
	t.Helper()
	f := newFake()
	data, err := os.ReadFile("testdata/seed.yaml")
	if err != nil {
		t.Fatal(err)
	}
	objs, err := manifest.Decode(bytes.NewReader(data), "seed.yaml")
	if err != nil {
		t.Fatal(err)
	}
	for i, o := range objs {
		f.now = t0.Add(-seedAges[i])
		f.put(o)
	}
	f.now = t0.Add(-400 * 24 * time.Hour)
	f.put(api.Wrap(&pb.Node{Id: "lb1", RaftAddr: "10.0.0.1:7946", ApiAddr: "10.0.0.1:7443", Suffrage: "voter", VipInterface: "eth1"}))
	f.now = t0.Add(-26 * time.Hour)
	f.put(api.Wrap(&pb.Node{Id: "lb2", RaftAddr: "10.0.0.2:7946", ApiAddr: "10.0.0.2:7443", Suffrage: "nonvoter"}))
	f.put(api.Wrap(&pb.Certificate{Name: "shop", Tenant: "acme", Hosts: []string{"shop.acme.example"}, Source: "acme",
		Issuer: "Let's Encrypt", NotAfter: timestamppb.New(t0.Add(89 * 24 * time.Hour)), State: "valid"}))
	f.now = t0
	return f
}

type result struct {
	stdout, stderr string
	code           int
}

// run runs the CLI against fake over real mTLS on loopback.
func run(t *testing.T, fake *fakeAdmin, stdin string, args ...string) result {
	t.Helper()
	env := clienttest.Start(t, fake)
	return runEnv(t, env, stdin, append([]string{"--config", env.WriteConfig(t)}, args...)...)
}

func runEnv(t *testing.T, env *clienttest.Env, stdin string, args ...string) result {
	t.Helper()
	root := cli.NewRoot(cli.WithClock(func() time.Time { return t0 }))
	var stdout, stderr bytes.Buffer
	root.SetArgs(args)
	root.SetIn(strings.NewReader(stdin))
	root.SetOut(&stdout)
	root.SetErr(&stderr)
	code := cli.Main(root)
	r := result{stdout: stdout.String(), stderr: stderr.String(), code: code}
	for i, s := range env.Servers {
		r.stdout = strings.ReplaceAll(r.stdout, s.Addr, "SERVER"+string(rune('1'+i)))
		r.stderr = strings.ReplaceAll(r.stderr, s.Addr, "SERVER"+string(rune('1'+i)))
	}
	return r
}

func golden(t *testing.T, name string, got []byte) {
	t.Helper()
	path := filepath.Join("testdata", name+".golden")
	if *update {
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test -update to create it)", err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("%s differs (go test -update rewrites it)\n--- got\n%s\n--- want\n%s", path, got, want)
	}
}

func (r result) transcript(args []string) []byte {
	var b strings.Builder
	b.WriteString("$ teapot-lb " + strings.Join(args, " ") + "\n")
	b.WriteString("--- exit " + string(rune('0'+r.code)) + "\n")
	b.WriteString("--- stdout\n" + r.stdout)
	b.WriteString("--- stderr\n" + r.stderr)
	return []byte(b.String())
}

var goldenCases = []struct {
	name  string
	args  string
	empty bool // start with no objects instead of the seed
	stdin string
	code  int
	// hosts sets what the hosts see (default: every load balancer served).
	hosts func(f *fakeAdmin) []*pb.HostObservation
}{
	{name: "apply", args: "apply -f testdata/shop.yaml", empty: true},
	{name: "apply-unchanged", args: "apply -f testdata/shop.yaml"},
	{name: "apply-stdin", args: "apply -f -", stdin: "kind: pool\nname: public\ncidrs: [192.0.2.0/27]\nmode: arp\n"},
	{name: "apply-dir", args: "apply -f testdata/apply -f testdata/shop.yaml"},
	{name: "apply-yaml", args: "apply -f testdata/apply -o yaml"},
	{name: "apply-typo", args: "apply -f testdata/typo.yaml", code: 1},
	{name: "apply-invalid", args: "apply -f testdata/badport.yaml", code: 1},
	{name: "apply-missing-pool", args: "apply -f -", empty: true, stdin: "kind: Tenant\nname: acme\npools: [public]\n", code: 1},
	{name: "apply-no-file", args: "apply", code: 1},
	{name: "apply-missing-file", args: "apply -f testdata/nope.yaml", code: 1},
	{name: "apply-empty", args: "apply -f -", stdin: "# nothing\n---\n", code: 1},

	{name: "get-tenants", args: "get tenants"},
	{name: "get-pools", args: "get pools"},
	{name: "get-lbs", args: "get lbs"},
	{name: "get-lbs-tenant", args: "get lb --tenant acme"},
	{name: "get-lb", args: "get lb acme/shop"},
	{name: "get-lb-flag", args: "get loadbalancer shop --tenant acme"},
	{name: "get-nodes", args: "get nodes"},
	{name: "get-certs", args: "get certs"},
	{name: "get-empty", args: "get lbs --tenant initech"},
	{name: "get-pools-json", args: "get pools -o json"},
	{name: "get-tenant-json", args: "get tenant acme -o json"},
	{name: "get-lb-yaml", args: "get lb acme/shop -o yaml"},
	{name: "get-lbs-yaml", args: "get lbs --tenant acme -o yaml"},
	{name: "get-unknown-kind", args: "get gateways", code: 1},
	{name: "get-lb-no-tenant", args: "get lb shop", code: 1},
	{name: "get-lb-tenant-mismatch", args: "get lb acme/shop --tenant globex", code: 1},
	{name: "get-pool-tenant", args: "get pools --tenant acme", code: 1},
	{name: "get-not-found", args: "get pool nope", code: 1},
	{name: "get-no-kind", args: "get", code: 1},

	{name: "delete-lb", args: "delete lb acme/shop acme/api"},
	{name: "delete-tenant-in-use", args: "delete tenant acme", code: 1},
	{name: "delete-not-found", args: "delete pool nope", code: 1},

	{name: "tenant-create", args: "tenant create initech --domains initech.example,initech.test --networks 10.40.0.0/16 --pools public --max-lbs 5 --max-addresses 2"},
	{name: "tenant-create-exists", args: "tenant create acme --pools public", code: 1},
	{name: "tenant-create-negative", args: "tenant create initech --max-lbs -1", code: 1},
	{name: "tenant-create-quotas", args: "tenant create initech --pools public --max-routes-per-lb 3000 --max-routes 50000 --max-health-checks 9000 -o yaml"},
	{name: "tenant-list", args: "tenant list"},
	{name: "tenant-get-yaml", args: "tenant get globex -o yaml"},
	{name: "tenant-delete-not-found", args: "tenant delete globex", empty: true, code: 1},
	{name: "tenant-delete-in-use", args: "tenant delete globex", code: 1},
	{name: "tenant-delete", args: "tenant delete hooli"},

	{name: "pool-create", args: "pool create lab --cidr 203.0.113.0/29 --cidr 2001:db8:20::/124,203.0.113.64-203.0.113.70 --mode static --tenants acme --allow-shared"},
	{name: "pool-create-no-cidr", args: "pool create lab", code: 1},
	{name: "pool-create-interface-level", args: "pool create private --cidr 198.51.100.0/28 --interface eth1", code: 1},
	{name: "pool-list", args: "pool list"},
	{name: "pool-delete", args: "pool delete edge"},

	{name: "lb-list", args: "lb list"},
	{name: "lb-list-tenant", args: "lb list --tenant globex"},
	{name: "lb-get", args: "lb get globex/web"},
	{name: "lb-get-json", args: "lb get web --tenant globex -o json"},
	{name: "lb-delete", args: "lb delete acme/api"},

	{name: "cluster-status", args: "cluster status"},
	{name: "cluster-status-yaml", args: "cluster status -o yaml"},
	{name: "cluster-join-token", args: "cluster join-token --ttl 30m"},
	{name: "cluster-join-token-json", args: "cluster join-token -o json"},
	{name: "cluster-join-token-bad-ttl", args: "cluster join-token --ttl 0s", code: 1},
	{name: "cluster-remove", args: "cluster remove lb3"},
	{name: "cluster-remove-leader", args: "cluster remove lb1", code: 1},

	{name: "get-lbs-wide", args: "get lbs -o wide", hosts: membersDown},
	{name: "get-lbs-wide-traffic", args: "get lbs --tenant acme -o wide", hosts: withTraffic},
	{name: "get-lbs-unbound", args: "get lbs --tenant acme", hosts: unboundOnLB2},
	{name: "get-lb-observed-yaml", args: "get lb acme/shop -o yaml", hosts: membersDown},
	{name: "explain-lb-serving", args: "explain lb acme/shop"},
	{name: "explain-lb-members-down", args: "explain lb acme/shop", hosts: membersDown},
	{name: "explain-lb-unbound", args: "explain lb shop --tenant acme", hosts: unboundOnLB2},
	{name: "explain-lb-refused", args: "explain lb acme/svc-default-web", hosts: refusedByValidation},
	{name: "explain-lb-cert-events", args: "explain lb acme/shop", hosts: certEvents},
	{name: "explain-lb-not-found", args: "explain lb acme/nope", code: 1},
	{name: "get-lbs-dual-stack", args: "get lbs --tenant acme", hosts: dualStack},
	{name: "explain-lb-dual-stack", args: "explain lb acme/dual", hosts: dualStack},
	{name: "explain-lb-dual-stack-prefer", args: "explain lb acme/half", hosts: dualStack},
	{name: "explain-tenant", args: "explain tenant acme", hosts: membersDown},
	{name: "explain-tenant-bgp", args: "explain tenant acme", hosts: tenantBGP},
	{name: "explain-tenant-cpu", args: "explain tenant acme", hosts: tenantCPU},
	{name: "explain-tenant-attachment", args: "explain tenant acme", hosts: tenantAttached},
	{name: "explain-tenant-bgp-upstream-refused", args: "explain tenant acme", hosts: tenantBGPUpstreamRefused},
	{name: "explain-tenant-bgp-no-fabric", args: "explain tenant acme", hosts: tenantBGPNoFabric},
	{name: "explain-tenant-bgp-attached", args: "explain tenant acme", hosts: tenantBGPAttached},
	{name: "explain-tenant-bgp-bfd", args: "explain tenant acme", hosts: tenantBGPBFD},
	{name: "explain-lb-http3", args: "explain lb acme/shop", hosts: http3Listeners},
	{name: "explain-node", args: "explain node lb2", hosts: unboundOnLB2},
	{name: "explain-node-dns", args: "explain node lb2", hosts: dnsZonesOnLB2},
	{name: "explain-bad-kind", args: "explain pool public", code: 1},
	{name: "schema-kinds", args: "schema"},
	{name: "schema-field", args: "schema lb.listeners.tls"},
	{name: "schema-map-key", args: "schema lb.pools.web.members"},
	{name: "schema-typo", args: "schema lb.listners", code: 1},
	{name: "schema-json-with-path", args: "schema lb --json-schema", code: 1},
	{name: "schema-complete", args: "__complete schema lb.listeners.t"},
	{name: "events", args: "events", hosts: unboundOnLB2},
	{name: "events-lb", args: "events --lb acme/shop", hosts: membersDown},
	{name: "events-cert", args: "events", hosts: certEvents},
	{name: "events-lb-cert", args: "events --lb acme/shop", hosts: certEvents},
	{name: "events-bad-lb", args: "events --lb shop", code: 1},

	{name: "bad-output", args: "get pools -o xml", code: 1},
	{name: "unknown-flag", args: "get pools --colour", code: 1},
	{name: "extra-args", args: "cluster status now", code: 1},
}

func TestGolden(t *testing.T) {
	t.Parallel()
	for _, tc := range goldenCases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel() // each case has its own fake server and golden file
			fake := newFake()
			if !tc.empty {
				fake = seeded(t)
			}
			if tc.hosts != nil {
				fake.hosts = tc.hosts(fake)
			}
			args := strings.Fields(tc.args)
			r := run(t, fake, tc.stdin, args...)
			if r.code != tc.code {
				t.Errorf("exit code %d, want %d; stderr: %s", r.code, tc.code, r.stderr)
			}
			if tc.code != 0 {
				lines := strings.Split(strings.TrimSuffix(r.stderr, "\n"), "\n")
				if len(lines) != 1 || !strings.HasPrefix(lines[0], "error: ") || strings.Contains(r.stderr, "rpc error") {
					t.Errorf("stderr is not one error line: %q", r.stderr)
				}
			}
			golden(t, tc.name, r.transcript(args))
		})
	}
}

func TestApplyOrderAndMode(t *testing.T) {
	fake := newFake()
	if r := run(t, fake, "", "apply", "-f", "testdata/shop.yaml"); r.code != 0 {
		t.Fatalf("apply failed: %s", r.stderr)
	}
	if r := run(t, fake, "", "tenant", "create", "initech", "--pools", "public"); r.code != 0 {
		t.Fatalf("tenant create failed: %s", r.stderr)
	}
	if len(fake.applied) != 2 {
		t.Fatalf("%d Apply calls, want 2", len(fake.applied))
	}
	var kinds []string
	for _, o := range fake.applied[0].GetObjects() {
		kinds = append(kinds, api.RefOf(o).GetKind())
	}
	if got := strings.Join(kinds, ","); got != "VIPPool,Tenant,LoadBalancer" {
		t.Errorf("apply sent %s, want VIPPool,Tenant,LoadBalancer", got)
	}
	if m := fake.applied[0].GetMode(); m != pb.ApplyMode_APPLY_MODE_UPSERT {
		t.Errorf("apply mode %v, want UPSERT", m)
	}
	if m := fake.applied[1].GetMode(); m != pb.ApplyMode_APPLY_MODE_CREATE {
		t.Errorf("tenant create mode %v, want CREATE", m)
	}
}

// TestGetThenApply checks that what get -o yaml|json prints applies again
// and changes nothing.
func TestGetThenApply(t *testing.T) {
	fake := seeded(t)
	env := clienttest.Start(t, fake)
	cfg := env.WriteConfig(t)
	for _, args := range [][]string{
		{"get", "lb", "acme/shop", "-o", "yaml"},
		{"get", "lbs", "-o", "json"},
		{"get", "pools", "-o", "yaml"},
		{"get", "tenants", "-o", "json"},
	} {
		t.Run(strings.Join(args, " "), func(t *testing.T) {
			got := runEnv(t, env, "", append([]string{"--config", cfg}, args...)...)
			if got.code != 0 {
				t.Fatalf("get failed: %s", got.stderr)
			}
			again := runEnv(t, env, got.stdout, "--config", cfg, "apply", "-f", "-")
			if again.code != 0 {
				t.Fatalf("apply of get's output failed: %s", again.stderr)
			}
			for _, line := range strings.Split(strings.TrimSpace(again.stdout), "\n") {
				if !strings.HasSuffix(line, " unchanged") {
					t.Errorf("re-apply changed something: %s", line)
				}
			}
		})
	}
}

// TestFailover stops the server the CLI used and checks that the next
// command reaches the other one.
func TestFailover(t *testing.T) {
	fake := seeded(t)
	env := clienttest.Start(t, fake, fake)
	cfg := env.WriteConfig(t)
	if r := runEnv(t, env, "", "--config", cfg, "get", "pools"); r.code != 0 {
		t.Fatalf("get failed: %s", r.stderr)
	}
	env.Servers[0].Stop()
	if r := runEnv(t, env, "", "--config", cfg, "get", "pools"); r.code != 0 {
		t.Fatalf("get after stopping one server failed: %s", r.stderr)
	}
}

func TestUnreachable(t *testing.T) {
	env := clienttest.Start(t, newFake())
	cfg := env.WriteConfig(t)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := lis.Addr().String()
	lis.Close()
	env.Servers[0].Stop()

	tests := []struct {
		name string
		args []string
		want string
	}{
		{"config servers", []string{"--config", cfg, "get", "pools"}, "error: no teapot-lb server reachable at SERVER1: dial tcp SERVER1: connect: connection refused\n"},
		{"--server", []string{"--config", cfg, "--server", dead, "get", "pools"}, "error: no teapot-lb server reachable at " + dead + ": dial tcp " + dead + ": connect: connection refused\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := runEnv(t, env, "", tt.args...)
			if r.code != 1 || r.stderr != tt.want || r.stdout != "" {
				t.Errorf("got exit %d, stdout %q, stderr %q; want %q", r.code, r.stdout, r.stderr, tt.want)
			}
		})
	}
}

func TestNoConfig(t *testing.T) {
	dir := t.TempDir()
	t.Chdir(dir)
	t.Setenv("HOME", dir)
	t.Setenv("XDG_CONFIG_HOME", "")
	t.Setenv("TEAPOT_LB_CONFIG", "")
	r := runEnv(t, &clienttest.Env{}, "", "get", "pools")
	want := "error: no admin config found (looked in $TEAPOT_LB_CONFIG (unset), ./teapot-data/admin.conf, " +
		filepath.Join(dir, ".config/teapot-lb/admin.conf") + ", /var/lib/teapot-lb/admin.conf): start `teapot-lb serve` or pass --config\n"
	if r.code != 1 || r.stderr != want {
		t.Errorf("got exit %d, stderr %q\nwant %q", r.code, r.stderr, want)
	}
}

func TestVersion(t *testing.T) {
	for _, args := range [][]string{{"version"}, {"version", "-o", "json"}, {"--version"}} {
		r := runEnv(t, &clienttest.Env{}, "", args...)
		if r.code != 0 || !strings.Contains(r.stdout, "dev") || !strings.Contains(r.stdout, "unknown") || !strings.Contains(r.stdout, "go1.") {
			t.Errorf("%v: exit %d, stdout %q", args, r.code, r.stdout)
		}
	}
}

func TestCompletion(t *testing.T) {
	for _, shell := range []string{"bash", "zsh", "fish"} {
		r := runEnv(t, &clienttest.Env{}, "", "completion", shell)
		if r.code != 0 || !strings.Contains(r.stdout, "teapot-lb") {
			t.Errorf("completion %s: exit %d, stderr %q", shell, r.code, r.stderr)
		}
	}
	fake := seeded(t)
	env := clienttest.Start(t, fake)
	cfg := env.WriteConfig(t)
	tests := []struct {
		args []string
		want string
	}{
		{[]string{"__complete", "get", ""}, "tenants\npools\nlbs\nnodes\ncerts\n:4\n"},
		{[]string{"__complete", "--config", cfg, "get", "lb", ""}, "acme/api\nacme/shop\nglobex/web\n:4\n"},
		{[]string{"__complete", "--config", cfg, "pool", "delete", ""}, "edge\npublic\n:4\n"},
		{[]string{"__complete", "get", "pools", "-o", ""}, "table\nwide\njson\nyaml\n:4\n"},
	}
	for _, tt := range tests {
		r := runEnv(t, env, "", tt.args...)
		if r.code != 0 || r.stdout != tt.want {
			t.Errorf("%v: exit %d, stdout %q, want %q", tt.args, r.code, r.stdout, tt.want)
		}
	}
}

// A dry run is its own call, which a host of an older release (the fake
// does not serve it) refuses: nothing is applied, and the error says why.
func TestDryRunRefusedByOlderHosts(t *testing.T) {
	for _, args := range []string{
		"apply -f testdata/shop.yaml --dry-run",
		"diff -f testdata/shop.yaml",
		"delete lb acme/shop --dry-run",
		"tenant update acme --add-domain acme.example.org --dry-run",
	} {
		f := seeded(t)
		objects := len(f.objs)
		r := run(t, f, "", strings.Fields(args)...)
		if r.code == 0 || !strings.Contains(r.stderr, "the host answering runs a release without dry runs and refused the check; nothing was written: upgrade it first") {
			t.Errorf("%s: exit %d, stderr %q", args, r.code, r.stderr)
		}
		if len(f.applied) != 0 || len(f.objs) != objects {
			t.Errorf("%s: %d applies reached the cluster; %d objects, %d before", args, len(f.applied), len(f.objs), objects)
		}
	}
}

// tenant update writes only if the tenant is still at the revision it
// read: another writer's change in between is kept, and the command says
// to run it again.
func TestTenantUpdateRefusesAConcurrentChange(t *testing.T) {
	f := seeded(t)
	ref := &pb.ObjectRef{Kind: api.KindTenant, Name: "acme"}
	read := api.MetaOf(f.objs[key(ref)]).GetRevision()
	f.afterGet = func(f *fakeAdmin) {
		f.afterGet = nil
		o := proto.Clone(f.objs[key(ref)]).(*pb.Object)
		o.GetTenant().Quotas = &pb.Quotas{LoadBalancers: 9}
		f.put(o)
	}
	r := run(t, f, "", "tenant", "update", "acme", "--add-domain", "acme.example.org")
	want := fmt.Sprintf("tenant acme changed since you read it: nothing was written; run the command again to change the tenant as it is now (Tenant acme changed since it was read (revision %d when read, now %d)", read, f.rev)
	if r.code == 0 || !strings.Contains(r.stderr, want) {
		t.Fatalf("exit %d, stderr %q, want it to hold %q", r.code, r.stderr, want)
	}
	if len(f.applied) != 1 || len(f.applied[0].GetPreconditions()) != 1 || f.applied[0].GetPreconditions()[0].GetRevision() != read {
		t.Fatalf("applies %v, want one with the precondition revision %d", f.applied, read)
	}
	ten := f.objs[key(ref)].GetTenant()
	if slices.Contains(ten.GetDomains(), "acme.example.org") || ten.GetQuotas().GetLoadBalancers() != 9 {
		t.Fatalf("tenant after the refused update: %v", ten)
	}
	// Run again, it reads the tenant as it is now and keeps the other change.
	if r := run(t, f, "", "tenant", "update", "acme", "--add-domain", "acme.example.org"); r.code != 0 {
		t.Fatalf("again: exit %d, stderr %q", r.code, r.stderr)
	}
	ten = f.objs[key(ref)].GetTenant()
	if !slices.Contains(ten.GetDomains(), "acme.example.org") || ten.GetQuotas().GetLoadBalancers() != 9 {
		t.Fatalf("tenant after the second update: %v", ten)
	}
}
