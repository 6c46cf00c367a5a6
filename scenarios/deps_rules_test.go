package scenarios

import (
	"fmt"
	"slices"
	"strings"
	"testing"
)

// Forbidden dependencies per side, in the manner of Tailscale's deptest:
// allowedImports bounds which of our folders a folder may import;
// these rules bound what a side links at all (transitively, as
// `go list -deps` gives it), our packages and other modules alike, and say
// why. A pattern ending in "/..." takes the package and everything under
// it; any other pattern is one package.
const (
	raft       = "github.com/hashicorp/raft"
	raftBolt   = "github.com/hashicorp/raft-boltdb/..."
	bbolt      = "go.etcd.io/bbolt/..."
	clientGo   = "k8s.io/client-go/..."
	certmagic  = "github.com/caddyserver/certmagic/..."
	gobgp      = "github.com/osrg/gobgp/..."
	netlinkMod = "github.com/vishvananda/netlink/..."
)

// depRule is one side: the packages it covers and what they may not link.
type depRule struct {
	side string
	// pkgs are patterns relative to the module.
	pkgs []string
	// bad maps a pattern (a full import path, or one relative to the
	// module when it starts with "./") to why the side may not link it.
	bad map[string]string
}

var depRules = []depRule{
	{
		side: "agent",
		pkgs: []string{"tenantsync/agent/...", "tenantsync/translate/...", "tenantsync/syncspec/..."},
		bad: map[string]string{
			raft:                "the agent runs in tenant clusters and reaches the LB cluster over the stream only: it links no Raft node (what it shares with the server is in tenantsync/syncspec)",
			raftBolt:            "the agent keeps no Raft log",
			bbolt:               "the agent keeps no state on disk",
			"./consensus/...":   "the agent reaches the replicated state over the stream only",
			"./tenantsync":      "the stream server links the Raft node; what the agent shares with it is in tenantsync/syncspec",
			"./proxy/...":       "the data plane runs on LB hosts only",
			"./vip/...":         "VIPs are announced by LB hosts only",
			"./web/...":         "the dashboard runs on LB hosts only",
			certmagic:           "certificates are obtained by the LB hosts, the agent only uploads Secrets",
			gobgp:               "the agent announces nothing",
			"./api/adminserver": "the admin API is served by LB hosts only",
		},
	},
	{
		side: "syncspec (the leaf both ends of the stream share)",
		pkgs: []string{"tenantsync/syncspec/..."},
		bad: map[string]string{
			clientGo:                  "the stream server imports syncspec and must not link Kubernetes' client",
			"k8s.io/apimachinery/...": "the stream server imports syncspec and must not link Kubernetes' types",
		},
	},
	{
		side: "stream server",
		pkgs: []string{"tenantsync"},
		bad: map[string]string{
			clientGo:                     "the stream server runs on LB hosts, which have no Kubernetes",
			"./tenantsync/agent/...":     "the server and the agent share only tenantsync/syncspec",
			"./tenantsync/translate/...": "the server takes load balancers, never Kubernetes objects",
		},
	},
	{
		side: "data plane",
		pkgs: []string{"proxy/..."},
		bad: map[string]string{
			raft:               "the data plane gets an immutable snapshot and never reads the store",
			bbolt:              "the data plane never reads the store",
			"./consensus/...":  "the data plane gets an immutable snapshot and never reads the store",
			"./tenantsync/...": "the data plane never meets the tenant stream",
			"./vip/...":        "VIPs reach the data plane through main only",
			clientGo:           "LB hosts have no Kubernetes",
			gobgp:              "announcing is vip's",
		},
	},
	{
		side: "L7 engine",
		pkgs: []string{"proxy/l7"},
		bad: map[string]string{
			"./api/...":        "the engine knows requests and members, not the model: the compiled snapshot adapts to it",
			"./proxy":          "the engine is the proxy's part, not its user",
			"./proxy/snapshot": "the engine reads its own routes, the compile adapts to them",
			certmagic:          "certificates are the certs package's",
		},
	},
	{
		side: "VIP manager",
		pkgs: []string{"vip/..."},
		bad: map[string]string{
			raft:               "vip is given the state by main and never reads the store",
			bbolt:              "vip never reads the store",
			"./consensus/...":  "vip is given the state by main",
			"./proxy/...":      "readiness reaches vip through main",
			"./tenantsync/...": "vip never meets the tenant stream",
			certmagic:          "certificates are the data plane's",
			clientGo:           "LB hosts have no Kubernetes",
		},
	},
	{
		side: "dashboard",
		pkgs: []string{"web/..."},
		bad: map[string]string{
			raft:               "the dashboard reads through the admin API only",
			bbolt:              "the dashboard reads through the admin API only",
			"./consensus/...":  "the dashboard reads through the admin API only",
			"./proxy/...":      "the dashboard reads observed state through the admin API only",
			"./vip/...":        "the dashboard reads observed state through the admin API only",
			"./tenantsync/...": "the dashboard reads through the admin API only",
			clientGo:           "LB hosts have no Kubernetes",
		},
	},
	{
		side: "replicated state",
		pkgs: []string{"consensus/..."},
		bad: map[string]string{
			netlinkMod: "the store never knows a socket exists",
			gobgp:      "the store never knows a socket exists",
			certmagic:  "certmagic's data is stored through a Storage the data plane is given",
			clientGo:   "LB hosts have no Kubernetes",
		},
	},
	{
		side: "model",
		pkgs: []string{"api/..."},
		bad: map[string]string{
			raft:     "api is imported by every side, the agent too",
			bbolt:    "api is imported by every side, the agent too",
			clientGo: "api is imported by every side, the LB hosts too",
		},
	},
}

// matches reports whether import path p is matched by pattern.
func matches(pattern, p string) bool {
	if rel, ok := strings.CutPrefix(pattern, "./"); ok {
		pattern = module + "/" + rel
	}
	if pattern == "." {
		pattern = module
	}
	if tree, ok := strings.CutSuffix(pattern, "/..."); ok {
		return p == tree || strings.HasPrefix(p, tree+"/")
	}
	return p == pattern
}

// depProblems returns what the rules find wrong with pkg linking deps.
func depProblems(rules []depRule, pkg string, deps []string) []string {
	var problems []string
	for _, r := range rules {
		covered := slices.ContainsFunc(r.pkgs, func(pat string) bool { return matches("./"+pat, pkg) })
		if !covered {
			continue
		}
		bad := make([]string, 0, len(r.bad))
		for pat := range r.bad {
			bad = append(bad, pat)
		}
		slices.Sort(bad)
		for _, pat := range bad {
			for _, d := range deps {
				if matches(pat, d) {
					problems = append(problems, fmt.Sprintf("%s (%s) links %s: %s", pkg, r.side, d, r.bad[pat]))
					break
				}
			}
		}
	}
	return problems
}

// TestForbiddenDependencies checks every package against the rules of its
// side, and that every rule still covers a package (a rule whose packages
// moved would hold nothing).
func TestForbiddenDependencies(t *testing.T) {
	_, pkgs := modulePackages(t)
	covered := map[string]bool{}
	for _, p := range pkgs {
		if p.Error != nil {
			t.Errorf("go list %s: %s", p.ImportPath, p.Error.Err)
			continue
		}
		for _, problem := range depProblems(depRules, p.ImportPath, p.Deps) {
			t.Error(problem)
		}
		for _, r := range depRules {
			for _, pat := range r.pkgs {
				if matches("./"+pat, p.ImportPath) {
					covered[r.side+" "+pat] = true
				}
			}
		}
	}
	for _, r := range depRules {
		for _, pat := range r.pkgs {
			if !covered[r.side+" "+pat] {
				t.Errorf("the %s rule covers %s, which holds no package: follow the move", r.side, pat)
			}
		}
	}
}

// TestDepProblems shows the rules fail on a forbidden dependency.
func TestDepProblems(t *testing.T) {
	tests := []struct {
		name string
		pkg  string
		deps []string
		want int
	}{
		{"agent links raft", module + "/tenantsync/agent", []string{"github.com/hashicorp/raft", "fmt"}, 1},
		{"agent links bbolt through a subpackage", module + "/tenantsync/agent", []string{"go.etcd.io/bbolt/internal/common"}, 1},
		{"agent links consensus, raft and the server", module + "/tenantsync/agent", []string{module + "/consensus", "github.com/hashicorp/raft", module + "/tenantsync"}, 3},
		{"agent links syncspec and api", module + "/tenantsync/agent", []string{module + "/tenantsync/syncspec", module + "/api", "k8s.io/client-go/kubernetes"}, 0},
		{"translate links consensus", module + "/tenantsync/translate", []string{module + "/consensus"}, 1},
		{"syncspec links client-go", module + "/tenantsync/syncspec", []string{"k8s.io/client-go/rest"}, 1},
		{"server links raft", module + "/tenantsync", []string{"github.com/hashicorp/raft", module + "/consensus"}, 0},
		{"server links the agent", module + "/tenantsync", []string{module + "/tenantsync/agent"}, 1},
		{"proxy links consensus", module + "/proxy/certs", []string{module + "/consensus"}, 1},
		{"l7 links api", module + "/proxy/l7", []string{module + "/api/proto/teapotv1"}, 1},
		{"l7 links its internals", module + "/proxy/l7", []string{module + "/proxy/internal/splice"}, 0},
		{"raftboltdb is not raft", module + "/vip", []string{"github.com/hashicorp/raft-boltdb/v2"}, 0},
		{"web links vip", module + "/web", []string{module + "/vip"}, 1},
		{"main links everything", module, []string{"github.com/hashicorp/raft", module + "/consensus"}, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got := depProblems(depRules, tt.pkg, tt.deps)
			if len(got) != tt.want {
				t.Errorf("depProblems(%s, %v) = %q, want %d problems", tt.pkg, tt.deps, got, tt.want)
			}
		})
	}
}
