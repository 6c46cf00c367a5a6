package translate_test

import (
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"reflect"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/teapot-lb/teapot-lb/tenantsync/translate"
)

var update = flag.Bool("update", false, "rewrite FIELDS.md from translate.Fields")

// specTypes are the Go types of the specs the agent reads, by kind.
var specTypes = map[string]reflect.Type{
	translate.KindService:   reflect.TypeOf(corev1.ServiceSpec{}),
	translate.KindIngress:   reflect.TypeOf(networkingv1.IngressSpec{}),
	translate.KindGateway:   reflect.TypeOf(gwv1.GatewaySpec{}),
	translate.KindHTTPRoute: reflect.TypeOf(gwv1.HTTPRouteSpec{}),
	translate.KindGRPCRoute: reflect.TypeOf(gwv1.GRPCRouteSpec{}),
	translate.KindTLSRoute:  reflect.TypeOf(gwv1.TLSRouteSpec{}),
	translate.KindTCPRoute:  reflect.TypeOf(gwv1.TCPRouteSpec{}),
	translate.KindUDPRoute:  reflect.TypeOf(gwv1.UDPRouteSpec{}),

	translate.KindBackendTLSPolicy: reflect.TypeOf(gwv1.BackendTLSPolicySpec{}),
}

// specPaths returns the JSON path of every field below t, [] for the
// items of lists and maps; a type with its own JSON form (IntOrString,
// Quantity) is one field.
func specPaths(t reflect.Type, path string, seen map[reflect.Type]bool, out *[]string) {
	for t.Kind() == reflect.Pointer || t.Kind() == reflect.Slice || t.Kind() == reflect.Map {
		if t.Kind() != reflect.Pointer {
			path += "[]"
		}
		t = t.Elem()
	}
	marshaler := reflect.TypeOf((*json.Marshaler)(nil)).Elem()
	if t.Kind() != reflect.Struct || t.Implements(marshaler) || reflect.PointerTo(t).Implements(marshaler) || seen[t] {
		return
	}
	seen[t] = true
	defer delete(seen, t)
	for i := range t.NumField() {
		f := t.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if name == "-" || !f.IsExported() {
			continue
		}
		if f.Anonymous && name == "" {
			specPaths(f.Type, path, seen, out)
			continue
		}
		p := path + "." + name
		*out = append(*out, p)
		specPaths(f.Type, p, seen, out)
	}
}

// TestEveryFieldIsDecided walks the Kubernetes and Gateway API Go types
// the agent reads: every field of their specs must have a decision in
// translate.Fields (honoured, refused with a warning and condition, or
// not applicable with the reason), so that a field an upgrade adds fails
// this test until someone decides it. A decision for a field that no
// longer exists fails too.
func TestEveryFieldIsDecided(t *testing.T) {
	t.Parallel()
	for _, kind := range translate.FieldKinds {
		typ := specTypes[kind]
		if typ == nil {
			t.Fatalf("no Go type for %s", kind)
		}
		var paths []string
		specPaths(typ, "spec", map[reflect.Type]bool{}, &paths)
		rules := map[string]translate.Field{}
		for _, f := range translate.Fields[kind] {
			if _, dup := rules[f.Path]; dup {
				t.Errorf("%s: %s is decided twice", kind, f.Path)
			}
			if f.What == "" || !slices.Contains([]translate.Handling{translate.Honoured, translate.HonouredInPart, translate.Refused, translate.NotApplicable}, f.Handling) {
				t.Errorf("%s: %s has no handling or no words", kind, f.Path)
			}
			rules[f.Path] = f
		}
		covered := func(p string) bool {
			if _, ok := rules[p]; ok {
				return true
			}
			for q, f := range rules {
				if f.Subtree && (strings.HasPrefix(p, q+".") || strings.HasPrefix(p, q+"[].")) {
					return true
				}
			}
			return false
		}
		for _, p := range paths {
			if !covered(p) {
				t.Errorf("%s: field %s is not decided: add it to translate.Fields (honoured, refused with a warning, or not applicable and why)", kind, p)
			}
		}
		for q := range rules {
			if !slices.Contains(paths, q) {
				t.Errorf("%s: translate.Fields decides %s, which the type does not have", kind, q)
			}
		}
	}
}

// TestFieldsDoc: FIELDS.md is translate.Fields (go test -run
// TestFieldsDoc -args -update rewrites it).
func TestFieldsDoc(t *testing.T) {
	t.Parallel()
	var b strings.Builder
	b.WriteString("# What the agent does with each field\n\n")
	b.WriteString("Generated from `translate.Fields` (`fields.go`) by `go test ./tenantsync/translate -run TestFieldsDoc -args -update`;\n")
	b.WriteString("`TestEveryFieldIsDecided` walks the Kubernetes and Gateway API Go types, so a field nobody\n")
	b.WriteString("decided fails the build. *Honoured*: the field changes what the load balancer does.\n")
	b.WriteString("*Refused*: not applied; a Warning Event and a condition (a Service's `teapot-lb.io/Accepted`,\n")
	b.WriteString("the Gateway API's own conditions; an Ingress has no conditions, so Events only) name the field\n")
	b.WriteString("and say what the load balancer does instead.\n")
	b.WriteString("*Honoured in part*: some values served, the others refused so. *Not applicable*: Kubernetes\n")
	b.WriteString("itself acts on the field, or it means nothing to an external load balancer. A path ending in\n")
	b.WriteString("`.*` covers every field below it.\n")
	for _, kind := range translate.FieldKinds {
		fmt.Fprintf(&b, "\n## %s\n\n| field | | what happens |\n|---|---|---|\n", kind)
		for _, f := range translate.Fields[kind] {
			p := "`" + f.Path + "`"
			if f.Subtree {
				p = "`" + f.Path + ".*`"
			}
			fmt.Fprintf(&b, "| %s | %s | %s |\n", p, f.Handling, strings.ReplaceAll(f.What, "|", "\\|"))
		}
	}
	want := b.String()
	if *update {
		if err := os.WriteFile("FIELDS.md", []byte(want), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	got, err := os.ReadFile("FIELDS.md")
	if err != nil || string(got) != want {
		t.Errorf("FIELDS.md is not translate.Fields (%v): run go test ./tenantsync/translate -run TestFieldsDoc -args -update", err)
	}
}
