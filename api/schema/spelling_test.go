package schema

import (
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"
)

// otherSpellings maps the other spellings of every manifest field of
// several words to its manifest spelling: the proto name ("ca_pem") and
// the word folded to lower case ("capem", which matches "caPEM").
func otherSpellings(r *Reference) map[string]string {
	out := map[string]string{}
	var walk func([]*Field)
	walk = func(fs []*Field) {
		for _, f := range fs {
			if n := string(f.fd.Name()); n != f.Name {
				out[n] = f.Name
				out[strings.ToLower(f.Name)] = f.Name
			}
			walk(f.Fields)
		}
	}
	for _, k := range r.Kinds {
		walk(k.Fields)
	}
	return out
}

// fieldWord is a word that may name a field: snake_case, or with a
// capital after its first letter.
var fieldWord = regexp.MustCompile(`\b[a-z][a-zA-Z0-9]*(?:_[a-z0-9]+)+\b|\b[a-z][a-z0-9]*[A-Z][a-zA-Z0-9]*\b`)

// misspelt returns the words of text that name a manifest field in
// another spelling than a manifest's.
func misspelt(text string, names map[string]string) []string {
	var out []string
	for _, w := range fieldWord.FindAllString(text, -1) {
		key := w
		if !strings.Contains(w, "_") {
			key = strings.ToLower(w)
		}
		if json, ok := names[key]; ok && json != w {
			out = append(out, w+" (write "+json+")")
		}
	}
	return out
}

// One spelling per field: what an operator reads (the reference, the JSON
// Schema's descriptions, `teapot-lb schema`, and the refusals of api)
// names a manifest field as a manifest spells it, never by its proto name.
func TestFieldsSpeltAsManifestsSpellThem(t *testing.T) {
	t.Parallel()
	r := Default()
	names := otherSpellings(r)
	if names["ca_pem"] != "caPem" {
		t.Fatalf("ca_pem's manifest spelling is %q, want caPem", names["ca_pem"])
	}
	keys := make([]string, 0, len(protoComments))
	for k := range protoComments {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		if bad := misspelt(protoComments[k], names); len(bad) > 0 {
			t.Errorf("the comment of %s (api/proto) names %s", k, strings.Join(bad, ", "))
		}
	}
	for _, kind := range r.Kinds {
		var walk func([]*Field)
		walk = func(fs []*Field) {
			for _, f := range fs {
				for _, text := range []string{f.Doc, f.Limits, f.Default, f.Example} {
					if bad := misspelt(text, names); len(bad) > 0 {
						t.Errorf("%s.%s is described with %s", kind.Name, f.Path, strings.Join(bad, ", "))
					}
				}
				walk(f.Fields)
			}
		}
		walk(kind.Fields)
	}
	// The refusals: every string of api's checks, of the CLI and of the
	// health checks' errors.
	var files []string
	for _, dir := range []string{"..", "../cli", "../manifest", "../../proxy/health", "../../proxy/snapshot"} {
		fs, err := filepath.Glob(filepath.Join(dir, "*.go"))
		if err != nil || len(fs) == 0 {
			t.Fatalf("list the files of %s: %v", dir, err)
		}
		files = append(files, fs...)
	}
	fset := token.NewFileSet()
	for _, file := range files {
		if strings.HasSuffix(file, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, file, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		ast.Inspect(f, func(n ast.Node) bool {
			lit, ok := n.(*ast.BasicLit)
			if !ok || lit.Kind != token.STRING {
				return true
			}
			s, err := strconv.Unquote(lit.Value)
			if err != nil {
				return true
			}
			if bad := misspelt(s, names); len(bad) > 0 {
				t.Errorf("%s: %q names %s", fset.Position(lit.Pos()), s, strings.Join(bad, ", "))
			}
			return true
		})
	}
}
