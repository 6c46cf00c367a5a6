package schema

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

// check validates v against the subset of JSON Schema that JSONSchema
// writes; it returns the first problem with its path.
func check(root, s map[string]any, v any, path string) error {
	if ref, ok := s["$ref"].(string); ok {
		return check(root, root["definitions"].(map[string]any)[strings.TrimPrefix(ref, "#/definitions/")].(map[string]any), v, path)
	}
	if alts, ok := s["oneOf"].([]any); ok {
		matched := 0
		var errs []string
		for _, a := range alts {
			if err := check(root, a.(map[string]any), v, path); err != nil {
				errs = append(errs, err.Error())
			} else {
				matched++
			}
		}
		if matched != 1 {
			return fmt.Errorf("%s: matches %d of oneOf: %s", path, matched, strings.Join(errs, "; "))
		}
		return nil
	}
	if c, ok := s["const"]; ok && c != v {
		return fmt.Errorf("%s: %v is not %v", path, v, c)
	}
	if enum, ok := s["enum"].([]any); ok {
		found := false
		for _, e := range enum {
			found = found || e == v
		}
		if !found {
			return fmt.Errorf("%s: %v is not one of %v", path, v, enum)
		}
	}
	switch s["type"] {
	case "object":
		m, ok := v.(map[string]any)
		if !ok {
			return fmt.Errorf("%s: want an object, got %T", path, v)
		}
		for _, r := range asList(s["required"]) {
			if _, ok := m[r.(string)]; !ok {
				return fmt.Errorf("%s: %s is required", path, r)
			}
		}
		props, _ := s["properties"].(map[string]any)
		keys := make([]string, 0, len(m))
		for k := range m {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			ps, ok := props[k].(map[string]any)
			if !ok {
				switch extra := s["additionalProperties"].(type) {
				case bool:
					if !extra {
						return fmt.Errorf("%s: unknown field %q", path, k)
					}
					continue
				case map[string]any:
					ps = extra
				default:
					continue
				}
			}
			if err := check(root, ps, m[k], path+"."+k); err != nil {
				return err
			}
		}
	case "array":
		l, ok := v.([]any)
		if !ok {
			return fmt.Errorf("%s: want a list, got %T", path, v)
		}
		for i, item := range l {
			if err := check(root, s["items"].(map[string]any), item, fmt.Sprintf("%s[%d]", path, i)); err != nil {
				return err
			}
		}
	case "string":
		str, ok := v.(string)
		if !ok {
			return fmt.Errorf("%s: want a string, got %T", path, v)
		}
		if p, ok := s["pattern"].(string); ok && !regexp.MustCompile(p).MatchString(str) {
			return fmt.Errorf("%s: %q does not match %s", path, str, p)
		}
	case "integer", "number":
		n, ok := v.(float64)
		if !ok || s["type"] == "integer" && n != float64(int64(n)) {
			return fmt.Errorf("%s: want a %s, got %v", path, s["type"], v)
		}
		if lo, ok := s["minimum"].(float64); ok && n < lo {
			return fmt.Errorf("%s: %v is below %v", path, n, lo)
		}
		if hi, ok := s["maximum"].(float64); ok && n > hi {
			return fmt.Errorf("%s: %v is above %v", path, n, hi)
		}
	case "boolean":
		if _, ok := v.(bool); !ok {
			return fmt.Errorf("%s: want true or false, got %T", path, v)
		}
	}
	return nil
}

func asList(v any) []any {
	l, _ := v.([]any)
	return l
}

func loadSchema(t *testing.T) map[string]any {
	t.Helper()
	data, err := os.ReadFile(jsonSchemaPath)
	if err != nil {
		t.Fatal(err)
	}
	var root map[string]any
	if err := json.Unmarshal(data, &root); err != nil {
		t.Fatal(err)
	}
	return root
}

// Every document of examples/ is valid under the JSON Schema editors
// use, and the schema refuses what the cluster refuses to decode.
func TestJSONSchemaAcceptsExamples(t *testing.T) {
	root := loadSchema(t)
	files, err := filepath.Glob("../../examples/*.yaml")
	if err != nil || len(files) == 0 {
		t.Fatalf("no examples: %v", err)
	}
	docs := 0
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for i, doc := range strings.Split(string(data), "\n---\n") {
			var v any
			if err := yaml.Unmarshal([]byte(doc), &v); err != nil {
				t.Fatalf("%s document %d: %v", f, i+1, err)
			}
			if err := check(root, root, v, "$"); err != nil {
				t.Errorf("%s document %d: %v", f, i+1, err)
			}
			docs++
		}
	}
	if docs < 15 {
		t.Fatalf("checked only %d documents", docs)
	}
	for _, bad := range []string{
		"kind: VIPPool\nname: p\ncidrs: [192.0.2.0/28]\nmode: arp\nallowShard: true\n",
		"kind: VIPPool\nname: p\ncidrs: [192.0.2.0/28]\nmode: ospf\n",
		"kind: LoadBalancer\nname: s\ntenant: a\nvip: {pool: p}\nlisteners: [{port: 80, protocol: http}]\npools: {web: {healthCheck: {interval: soon}}}\n",
		"kind: LoadBalancer\nname: s\ntenant: a\nvip: {pool: p}\nlisteners: [{port: 80, protocol: http}]\npools: {web: {members: [{adress: 10.0.0.1:80}]}}\n",
		"kind: Tenant\nname: a\nquotas: {loadBalancers: -1}\n",
		"kind: Widget\nname: a\n",
	} {
		var v any
		if err := yaml.Unmarshal([]byte(bad), &v); err != nil {
			t.Fatal(err)
		}
		if err := check(root, root, v, "$"); err == nil {
			t.Errorf("the JSON Schema accepts:\n%s", bad)
		}
	}
}
