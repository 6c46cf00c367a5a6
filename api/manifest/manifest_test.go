package manifest_test

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/teapot-lb/teapot-lb/api/manifest"
	pb "github.com/teapot-lb/teapot-lb/api/proto/teapotv1"
)

var update = flag.Bool("update", false, "rewrite the golden files under testdata")

// golden compares got with testdata/name, or rewrites it with -update.
func golden(t *testing.T, name string, got []byte) {
	t.Helper()
	path := filepath.Join("testdata", name)
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

func decodeFile(t *testing.T, name string) []*pb.Object {
	t.Helper()
	f, err := os.Open(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	objs, err := manifest.Decode(f, name)
	if err != nil {
		t.Fatal(err)
	}
	return objs
}

func encode(t *testing.T, objs []*pb.Object, format string) []byte {
	t.Helper()
	var buf bytes.Buffer
	if err := manifest.Encode(&buf, objs, format); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func assertEqual(t *testing.T, got, want []*pb.Object) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("got %d objects, want %d", len(got), len(want))
	}
	for i := range want {
		if !proto.Equal(got[i], want[i]) {
			t.Errorf("object %d:\ngot  %v\nwant %v", i, got[i], want[i])
		}
	}
}

func TestDecodeGolden(t *testing.T) {
	for _, name := range []string{"shop.yaml", "spellings.yaml", "list.json"} {
		t.Run(name, func(t *testing.T) {
			objs := decodeFile(t, name)
			out := encode(t, objs, manifest.FormatYAML)
			golden(t, strings.TrimSuffix(name, filepath.Ext(name))+".golden", out)

			// What Encode writes, in either format, reads back the same.
			for _, format := range []string{manifest.FormatYAML, manifest.FormatJSON} {
				again, err := manifest.Decode(bytes.NewReader(encode(t, objs, format)), "out")
				if err != nil {
					t.Fatalf("%s output does not decode: %v", format, err)
				}
				assertEqual(t, again, objs)
			}
		})
	}
}

func TestShopObjects(t *testing.T) {
	objs := decodeFile(t, "shop.yaml")
	if len(objs) != 3 {
		t.Fatalf("got %d objects", len(objs))
	}
	lb := objs[2].GetLoadBalancer()
	web := lb.GetPools()["web"]
	checks := []struct {
		name      string
		got, want any
	}{
		{"pool mode", objs[0].GetVipPool().GetMode(), "arp"},
		{"tenant quota", objs[1].GetTenant().GetQuotas().GetLoadBalancers(), uint32(20)},
		{"redirect", lb.GetListeners()[1].GetRedirectToHttps(), true},
		{"member", web.GetMembers()[1].GetAddress(), "10.20.0.12:30080"},
		{"member weight unset", web.GetMembers()[1].Weight == nil, true},
		{"interval", web.GetHealthCheck().GetInterval().AsDuration(), 2 * time.Second},
		{"health path", web.GetHealthCheck().GetHttp().GetPath(), "/healthz"},
	}
	for _, c := range checks {
		t.Run(c.name, func(t *testing.T) {
			if c.got != c.want {
				t.Errorf("got %v, want %v", c.got, c.want)
			}
		})
	}
}

func TestEncodeJSON(t *testing.T) {
	objs := decodeFile(t, "shop.yaml")
	created := timestamppb.New(time.Date(2025, 3, 4, 5, 6, 7, 0, time.UTC))
	lb := objs[2].GetLoadBalancer()
	lb.Meta = &pb.Meta{Revision: 12, Generation: 2, Created: created, Updated: created}
	lb.Status = &pb.LoadBalancerStatus{Address: "192.0.2.1", Problems: []*pb.Problem{{Field: "listeners[0].tls", Reason: "no certificate yet"}}}

	golden(t, "shop.json.golden", encode(t, objs, manifest.FormatJSON))
	golden(t, "lb.yaml.golden", encode(t, objs[2:], manifest.FormatYAML))
	golden(t, "lb.json.golden", encode(t, objs[2:], manifest.FormatJSON))

	var list bytes.Buffer
	if err := manifest.EncodeList(&list, objs[:1], manifest.FormatJSON); err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(list.String(), "[\n  {\n    \"kind\": \"VIPPool\"") {
		t.Errorf("EncodeList of one object is not a list:\n%s", list.String())
	}
	list.Reset()
	if err := manifest.EncodeList(&list, nil, manifest.FormatJSON); err != nil || list.String() != "[]\n" {
		t.Errorf("EncodeList of nothing = %q, %v", list.String(), err)
	}
	if err := manifest.Encode(&list, objs, "xml"); err == nil {
		t.Error("format xml accepted")
	}

	again, err := manifest.Decode(bytes.NewReader(encode(t, objs[2:], manifest.FormatYAML)), "lb.yaml")
	if err != nil {
		t.Fatal(err)
	}
	assertEqual(t, again, objs[2:])
}

func TestEncodeMessage(t *testing.T) {
	st := &pb.ClusterStatusResponse{
		ClusterId: "c1", LeaderId: "n1", Term: 3, CommitIndex: 40, Revision: 17,
		Nodes:            []*pb.NodeStatus{{Id: "n1", State: "leader", Healthy: true, AppliedIndex: 40, Term: 3}},
		HeartbeatTimeout: "500ms", ElectionTimeout: "1s",
	}
	for _, format := range []string{manifest.FormatYAML, manifest.FormatJSON} {
		var buf bytes.Buffer
		if err := manifest.EncodeMessage(&buf, st, format); err != nil {
			t.Fatal(err)
		}
		golden(t, "status."+format+".golden", buf.Bytes())
	}
}

// decodeErrors are manifests Decode must refuse, each with a one-line
// reason kept in testdata/errors.golden.
var decodeErrors = []struct{ name, text string }{
	{"malformed yaml", "kind: VIPPool\nname: a\n---\nkind: Tenant\nname: b\n  pools: [x]\n"},
	{"duplicate key", "kind: Tenant\nname: a\nname: b\n"},
	{"no kind", "name: public\ncidrs: [192.0.2.0/28]\n"},
	{"kind not a string", "kind: 3\n"},
	{"unknown kind", "kind: Gateway\nname: x\n"},
	{"node", "kind: Node\nid: n1\n"},
	{"certificate alias", "kind: cert\nname: x\n"},
	{"join token", "kind: JoinToken\nid: x\n"},
	{"unknown field", "kind: VIPPool\nname: a\n---\nkind: Tenant\nname: acme\n---\nkind: LoadBalancer\nname: shop\ntenant: acme\nlistners: []\n"},
	{"unknown field far from any", "kind: Tenant\nname: acme\napiVersion: v1\n"},
	{"unknown nested field", "kind: LoadBalancer\nname: shop\ntenant: acme\nlisteners:\n- port: 80\n  protocl: http\n"},
	{"port not a number", "kind: LoadBalancer\nname: shop\ntenant: acme\nlisteners:\n- port: abc\n"},
	{"port negative", "kind: lb\nname: shop\ntenant: acme\nlisteners: [{port: -1}]\n"},
	{"port too big", "kind: lb\nname: shop\ntenant: acme\nlisteners: [{port: 4294967296}]\n"},
	{"port fraction", "kind: lb\nname: shop\ntenant: acme\nlisteners: [{port: 80.5}]\n"},
	{"name a number", "kind: Tenant\nname: 42\n"},
	{"bool a string", "kind: VIPPool\nname: p\nallowShared: \"maybe\"\n"},
	{"list expected", "kind: VIPPool\nname: p\ncidrs: 192.0.2.0/28\n"},
	{"mapping expected", "kind: Tenant\nname: t\nquotas: 4\n"},
	{"member not a string", "kind: lb\nname: s\ntenant: t\npools: {web: {members: [42]}}\n"},
	{"member field", "kind: lb\nname: s\ntenant: t\npools: {web: {members: [{addr: x}]}}\n"},
	{"map key with dots", "kind: lb\nname: s\ntenant: t\npools: {web.v2: {algoritm: x}}\n"},
	{"bad duration", "kind: lb\nname: s\ntenant: t\npools: {web: {healthCheck: {interval: 2 seconds}}}\n"},
	{"duration a number", "kind: lb\nname: s\ntenant: t\npools: {web: {healthCheck: {interval: 2}}}\n"},
	{"bad time", "kind: Tenant\nname: t\nmeta: {created: yesterday}\n"},
	{"twice", "kind: lb\nname: s\ntenant: t\npools: {web: {healthCheck: {}, health_check: {}}}\n"},
	{"empty list item", "kind: Tenant\nname: t\ndomains: [a.example, ]\npools:\n-\n"},
	{"scalar document", "just words\n"},
	{"list of scalars", "- a\n- b\n"},
	{"bad list item", "[{kind: Tenant, name: a}, {kind: Tenant, nam: b}]"},
	{"yaml 1.1 boolean", "kind: Tenant\nname: t\ndomains: [yes]\n"},
}

func TestDecodeErrors(t *testing.T) {
	var out strings.Builder
	for _, tt := range decodeErrors {
		t.Run(tt.name, func(t *testing.T) {
			objs, err := manifest.Decode(strings.NewReader(tt.text), "shop.yaml")
			if err == nil {
				t.Fatalf("decoded %v, want an error", objs)
			}
			if !errors.Is(err, manifest.ErrInvalid) {
				t.Errorf("error %q does not wrap ErrInvalid", err)
			}
			msg := err.Error()
			if strings.Contains(msg, "\n") || strings.Contains(msg, "proto:") || !strings.HasPrefix(msg, "shop.yaml: document ") {
				t.Errorf("error is not one clean line: %q", msg)
			}
			fmt.Fprintf(&out, "%s\n\t%s\n", tt.name, msg)
		})
	}
	golden(t, "errors.golden", []byte(out.String()))
}

func TestDecodeSkipsEmpty(t *testing.T) {
	tests := []struct{ name, text string }{
		{"nothing", ""},
		{"comments", "# only a comment\n"},
		{"separators", "---\n---\n# c\n---\n"},
		{"byte order mark", "\ufeff---\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			objs, err := manifest.Decode(strings.NewReader(tt.text), "x.yaml")
			if err != nil || len(objs) != 0 {
				t.Errorf("got %v, %v; want nothing", objs, err)
			}
		})
	}
}

func TestDocumentNumbers(t *testing.T) {
	text := "---\n# first\n---\nkind: VIPPool\nname: a\n---\n\n---\nkind: Tenant\nname: b\nbogus: 1\n"
	_, err := manifest.Decode(strings.NewReader(text), "f.yaml")
	want := `f.yaml: document 2 (Tenant b): unknown field "bogus"`
	if err == nil || err.Error() != want {
		t.Errorf("err = %v\nwant  %s", err, want)
	}
}

// A tenant's bgp.bfd is written like the rest of its bgp, durations as
// Go durations.
func TestDecodeTenantBFD(t *testing.T) {
	t.Parallel()
	objs, err := manifest.Decode(strings.NewReader("kind: Tenant\nname: a\nbgp: {asn: 64600, peers: [10.0.0.10], bfd: {minTx: 300ms, minRx: 1s, multiplier: 4}}\n"), "t.yaml")
	if err != nil {
		t.Fatal(err)
	}
	f := objs[0].GetTenant().GetBgp().GetBfd()
	if f.GetMinTx().AsDuration() != 300*time.Millisecond || f.GetMinRx().AsDuration() != time.Second || f.GetMultiplier() != 4 {
		t.Fatalf("bfd %v", f)
	}
}
