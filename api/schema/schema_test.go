package schema

import (
	"bytes"
	"encoding/json"
	"os"
	"strings"
	"testing"

	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/teapot-lb/teapot-lb/api"
	"github.com/teapot-lb/teapot-lb/api/catalogtest"
	pb "github.com/teapot-lb/teapot-lb/api/proto/teapotv1"
)

const (
	referencePath  = "../../docs/reference.md"
	jsonSchemaPath = "../../docs/teapot-lb.schema.json"
)

// The committed reference and JSON Schema are what the model compiled
// here renders; make generate rewrites them (and generated.go, from
// model.proto's comments), and make generate-check fails when they are
// stale.
func TestGeneratedFilesCurrent(t *testing.T) {
	ref := Default()
	for _, tt := range []struct {
		path   string
		render func(*bytes.Buffer) error
	}{
		{referencePath, func(b *bytes.Buffer) error { return ref.Markdown(b) }},
		{jsonSchemaPath, func(b *bytes.Buffer) error { return ref.JSONSchema(b) }},
	} {
		var got bytes.Buffer
		if err := tt.render(&got); err != nil {
			t.Fatal(err)
		}
		want, err := os.ReadFile(tt.path)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got.Bytes(), want) {
			t.Errorf("%s is stale: run make generate and commit it", tt.path)
		}
	}
}

// opaqueMessages are described as a whole, without their fields: what
// the cluster stamps.
var opaqueMessages = map[protoreflect.FullName]bool{"teapot.v1.Meta": true, "teapot.v1.LoadBalancerStatus": true}

// walkModel calls fn with the manifest path of every field under md,
// found from the descriptors alone (not through the reference).
func walkModel(md protoreflect.MessageDescriptor, path []string, fn func(path []string, fd protoreflect.FieldDescriptor)) {
	fds := md.Fields()
	for i := range fds.Len() {
		fd := fds.Get(i)
		p := append(append([]string{}, path...), fd.JSONName())
		fn(p, fd)
		m := fd.Message()
		if fd.IsMap() {
			m = fd.MapValue().Message()
		}
		if m == nil || opaqueMessages[m.FullName()] || strings.HasPrefix(string(m.FullName()), "google.protobuf.") {
			continue
		}
		walkModel(m, p, fn)
	}
}

var kindMessages = map[string]protoreflect.MessageDescriptor{
	api.KindVIPPool:      (&pb.VIPPool{}).ProtoReflect().Descriptor(),
	api.KindTenant:       (&pb.Tenant{}).ProtoReflect().Descriptor(),
	api.KindLoadBalancer: (&pb.LoadBalancer{}).ProtoReflect().Descriptor(),
}

// Every field of every kind is in docs/reference.md (in its kind's
// section), in the JSON Schema, and found by Lookup.
func TestEveryFieldInReference(t *testing.T) {
	md, err := os.ReadFile(referencePath)
	if err != nil {
		t.Fatal(err)
	}
	sections := map[string]string{}
	for _, s := range strings.Split(string(md), "\n## ")[1:] {
		name, _, _ := strings.Cut(s, "\n")
		sections[name] = s
	}
	var js map[string]any
	data, err := os.ReadFile(jsonSchemaPath)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(data, &js); err != nil {
		t.Fatal(err)
	}
	ref := Default()
	fields := 0
	for kind, desc := range kindMessages {
		section, ok := sections[kind]
		if !ok {
			t.Errorf("reference has no section %q", kind)
			continue
		}
		def, _ := js["definitions"].(map[string]any)[kind].(map[string]any)
		if def == nil {
			t.Errorf("JSON Schema has no definition of %s", kind)
			continue
		}
		walkModel(desc, nil, func(path []string, fd protoreflect.FieldDescriptor) {
			fields++
			shown := displayPath(desc, path)
			if !strings.Contains(section, "| `"+shown+"` |") {
				t.Errorf("%s.%s is not in %s", kind, shown, referencePath)
			}
			if schemaAt(def, desc, path) == nil {
				t.Errorf("%s.%s is not in %s", kind, shown, jsonSchemaPath)
			}
			if _, f, err := ref.Lookup(kind + "." + strings.Join(path, ".")); err != nil || f == nil || f.Path != shown {
				t.Errorf("Lookup(%s.%s): %v %v", kind, strings.Join(path, "."), f, err)
			}
		})
	}
	if fields < 80 {
		t.Fatalf("walked only %d fields", fields)
	}
}

// displayPath writes a path as the reference does: "listeners[].port",
// "pools.<name>.members[].weight".
func displayPath(md protoreflect.MessageDescriptor, path []string) string {
	var b strings.Builder
	for i, name := range path {
		fd := md.Fields().ByJSONName(name)
		if i > 0 {
			b.WriteString(".")
		}
		b.WriteString(name)
		if i == len(path)-1 {
			break
		}
		switch {
		case fd.IsMap():
			b.WriteString(".<name>")
			md = fd.MapValue().Message()
		case fd.IsList():
			b.WriteString("[]")
			md = fd.Message()
		default:
			md = fd.Message()
		}
	}
	return b.String()
}

// schemaAt finds the JSON Schema of the field at path under def.
func schemaAt(def map[string]any, md protoreflect.MessageDescriptor, path []string) map[string]any {
	cur := def
	for i, name := range path {
		if alt, ok := cur["oneOf"].([]any); ok { // a member: "IP:port" or an object
			cur, _ = alt[len(alt)-1].(map[string]any)
		}
		props, _ := cur["properties"].(map[string]any)
		s, _ := props[name].(map[string]any)
		if s == nil {
			return nil
		}
		if i == len(path)-1 {
			return s
		}
		fd := md.Fields().ByJSONName(name)
		switch {
		case fd.IsMap():
			s, _ = s["additionalProperties"].(map[string]any)
			md = fd.MapValue().Message()
		case fd.IsList():
			s, _ = s["items"].(map[string]any)
			md = fd.Message()
		default:
			md = fd.Message()
		}
		if s == nil {
			return nil
		}
		cur = s
	}
	return cur
}

func testCatalog() *catalogtest.Catalog {
	return catalogtest.New(
		&pb.VIPPool{Name: "public", Cidrs: []string{"192.0.2.0/28", "2001:db8:10::/124"}, Mode: "arp"},
		&pb.Tenant{Name: "acme", Domains: []string{"acme.example"}, Networks: []string{"10.20.0.0/16"}, Pools: []string{"public"}},
	)
}

func testLB() *pb.LoadBalancer {
	return &pb.LoadBalancer{
		Name: "shop", Tenant: "acme", Vip: &pb.VIPRequest{Pool: "public"},
		Listeners: []*pb.Listener{{Port: 443, Protocol: "https", Tls: &pb.TLSPolicy{Acme: true}}},
		Routes:    []*pb.Route{{Host: "shop.acme.example", Path: "/", Pool: "web"}},
		Pools:     map[string]*pb.BackendPool{"web": {Members: []*pb.Member{{Address: "10.20.0.11:30080"}}}},
	}
}

// The values the reference lists for a field are the ones validation
// accepts, and it refuses another: every rule with values has a case.
func TestEnumsMatchValidation(t *testing.T) {
	lbCase := func(field string, set func(lb *pb.LoadBalancer, v string)) func(v string) (string, error) {
		return func(v string) (string, error) {
			lb := testLB()
			set(lb, v)
			return field, api.ValidateLoadBalancer(lb, testCatalog())
		}
	}
	cases := map[string]func(v string) (string, error){
		"teapot.v1.VIPPool.mode": func(v string) (string, error) {
			return "mode", api.ValidatePool(&pb.VIPPool{Name: "more", Cidrs: []string{"198.51.100.0/28"}, Mode: v}, testCatalog())
		},
		"teapot.v1.VIPRequest.family": lbCase("vip.family", func(lb *pb.LoadBalancer, v string) { lb.Vip.Family = v }),
		"teapot.v1.VIPRequest.family_policy": lbCase("vip.familyPolicy", func(lb *pb.LoadBalancer, v string) {
			lb.Vip.Families, lb.Vip.FamilyPolicy = []string{"ipv4"}, v
		}),
		"teapot.v1.Listener.protocol":     lbCase("listeners[0].protocol", func(lb *pb.LoadBalancer, v string) { lb.Listeners[0].Protocol = v }),
		"teapot.v1.TLSPolicy.min_version": lbCase("listeners[0].tls.minVersion", func(lb *pb.LoadBalancer, v string) { lb.Listeners[0].Tls.MinVersion = v }),
		"teapot.v1.Route.path_type":       lbCase("routes[0].pathType", func(lb *pb.LoadBalancer, v string) { lb.Routes[0].PathType = v }),
		"teapot.v1.RouteMatch.path_type": lbCase("routes[0].matches[0].pathType", func(lb *pb.LoadBalancer, v string) {
			lb.Routes[0].Path = ""
			lb.Routes[0].Matches = []*pb.RouteMatch{{Path: "/a", PathType: v}}
		}),
		"teapot.v1.RouteMatch.method": lbCase("routes[0].matches[0].method", func(lb *pb.LoadBalancer, v string) {
			lb.Routes[0].Path = ""
			lb.Routes[0].Matches = []*pb.RouteMatch{{Method: v}}
		}),
		"teapot.v1.ValueMatch.type": lbCase("routes[0].matches[0].headers[0].type", func(lb *pb.LoadBalancer, v string) {
			lb.Routes[0].Path = ""
			lb.Routes[0].Matches = []*pb.RouteMatch{{Headers: []*pb.ValueMatch{{Name: "X-V", Value: "a", Type: v}}}}
		}),
		"teapot.v1.GRPCMethodMatch.type": lbCase("routes[0].matches[0].grpc.type", func(lb *pb.LoadBalancer, v string) {
			lb.Routes[0].Path = ""
			lb.Routes[0].Matches = []*pb.RouteMatch{{Grpc: &pb.GRPCMethodMatch{Service: "shop.Cart", Type: v}}}
		}),
		"teapot.v1.RequestRedirect.scheme": lbCase("routes[0].filters[0].requestRedirect.scheme", func(lb *pb.LoadBalancer, v string) {
			lb.Routes[0].Filters = []*pb.RouteFilter{{RequestRedirect: &pb.RequestRedirect{Scheme: v}}}
		}),
		"teapot.v1.WAF.mode": lbCase("routes[0].waf.mode", func(lb *pb.LoadBalancer, v string) {
			lb.Routes[0].Waf = &pb.WAF{Mode: v}
		}),
		"teapot.v1.RateLimit.key": lbCase("routes[0].rateLimit.key", func(lb *pb.LoadBalancer, v string) {
			lb.Routes[0].RateLimit = &pb.RateLimit{RequestsPerSecond: 10, Key: v}
		}),
		"teapot.v1.BackendPool.algorithm": lbCase("pools.web.algorithm", func(lb *pb.LoadBalancer, v string) { lb.Pools["web"].Algorithm = v }),
		"teapot.v1.BackendPool.proxy_protocol": lbCase("pools.web.proxyProtocol", func(lb *pb.LoadBalancer, v string) {
			lb.Pools["web"].ProxyProtocol = v
		}),
		"teapot.v1.BackendPool.backend_protocol": lbCase("pools.web.backendProtocol", func(lb *pb.LoadBalancer, v string) {
			lb.Pools["web"].BackendProtocol = v
		}),
	}
	for _, name := range sortedKeys(rules) {
		r := rules[name]
		if len(r.enum) == 0 {
			continue
		}
		check, ok := cases[name]
		if !ok {
			t.Errorf("%s lists values but this test has no case for it", name)
			continue
		}
		for _, v := range append(append([]string{}, r.enum...), "bogus") {
			field, err := check(v)
			mentioned := err != nil && strings.Contains(err.Error(), field+":")
			if v == "bogus" && !mentioned {
				t.Errorf("%s: validation accepts %q, which the reference does not list (%v)", name, v, err)
			}
			if v != "bogus" && mentioned {
				t.Errorf("%s: the reference lists %q but validation refuses it: %v", name, v, err)
			}
		}
	}
}

func TestLookup(t *testing.T) {
	ref := Default()
	for _, tt := range []struct{ in, kind, path string }{
		{"lb", api.KindLoadBalancer, ""},
		{"LoadBalancer.listeners.tls.acme", api.KindLoadBalancer, "listeners[].tls.acme"},
		{"lb.pools.web.members.weight", api.KindLoadBalancer, "pools.<name>.members[].weight"},
		{"lb.pools.healthCheck.interval", api.KindLoadBalancer, "pools.<name>.healthCheck.interval"},
		{"pool.allow_shared", api.KindVIPPool, "allowShared"},
		{"tenant.quotas.loadBalancers", api.KindTenant, "quotas.loadBalancers"},
	} {
		k, f, err := ref.Lookup(tt.in)
		if err != nil || k.Name != tt.kind || (f == nil) != (tt.path == "") || f != nil && f.Path != tt.path {
			t.Errorf("Lookup(%q) = %v %v %v", tt.in, k, f, err)
		}
	}
	for _, bad := range []string{"frob", "lb.listners", "tenant.quotas.nope"} {
		if _, _, err := ref.Lookup(bad); err == nil {
			t.Errorf("Lookup(%q) found something", bad)
		}
	}
}
