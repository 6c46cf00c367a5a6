// Command gen regenerates what package schema derives from files outside
// the Go build: the comments of api/proto/teapotv1/model.proto (read with
// protoc) and the example of each kind (from examples/) go into
// api/schema/generated.go; then it writes docs/reference.md and
// docs/teapot-lb.schema.json from them. Run from the repository root (make
// generate does).
package main

import (
	"bytes"
	"flag"
	"fmt"
	"go/format"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/descriptorpb"

	"github.com/teapot-lb/teapot-lb/api/manifest"
	"github.com/teapot-lb/teapot-lb/api/schema"
)

func main() {
	protoDir := flag.String("proto-dir", "api/proto", "include directory of the .proto files")
	model := flag.String("model", "teapotv1/model.proto", "the model, relative to -proto-dir")
	examples := flag.String("examples", "examples", "directory of example manifests")
	goOut := flag.String("go-out", "api/schema/generated.go", "generated Go file")
	mdOut := flag.String("reference", "docs/reference.md", "Markdown reference")
	jsonOut := flag.String("json-schema", "docs/teapot-lb.schema.json", "JSON Schema")
	flag.Parse()
	if err := run(*protoDir, *model, *examples, *goOut, *mdOut, *jsonOut); err != nil {
		fmt.Fprintln(os.Stderr, "schema gen:", err)
		os.Exit(1)
	}
}

func run(protoDir, model, examplesDir, goOut, mdOut, jsonOut string) error {
	comments, err := protoComments(protoDir, model)
	if err != nil {
		return err
	}
	examples, err := kindExamples(examplesDir)
	if err != nil {
		return err
	}
	src, err := goSource(comments, examples)
	if err != nil {
		return err
	}
	ref := schema.Build(comments, examples)
	var md, js bytes.Buffer
	if err := ref.Markdown(&md); err != nil {
		return err
	}
	if err := ref.JSONSchema(&js); err != nil {
		return err
	}
	for path, data := range map[string][]byte{goOut: src, mdOut: md.Bytes(), jsonOut: js.Bytes()} {
		if err := os.WriteFile(path, data, 0o644); err != nil {
			return err
		}
	}
	return nil
}

// protoComments returns the leading comment of every message and field
// of the model by full name ("teapot.v1.Listener.port").
func protoComments(protoDir, model string) (map[string]string, error) {
	tmp, err := os.MkdirTemp("", "schema-gen-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(tmp)
	set := filepath.Join(tmp, "model.binpb")
	cmd := exec.Command("protoc", "-I", protoDir, "--include_source_info", "--descriptor_set_out="+set, filepath.Join(protoDir, model))
	if out, err := cmd.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("protoc: %w: %s", err, out)
	}
	data, err := os.ReadFile(set)
	if err != nil {
		return nil, err
	}
	var fds descriptorpb.FileDescriptorSet
	if err := proto.Unmarshal(data, &fds); err != nil {
		return nil, err
	}
	out := map[string]string{}
	for _, f := range fds.GetFile() {
		if !strings.HasSuffix(f.GetName(), model) {
			continue
		}
		byPath := map[string]string{}
		for _, loc := range f.GetSourceCodeInfo().GetLocation() {
			if c := clean(loc.GetLeadingComments()); c != "" {
				byPath[fmt.Sprint(loc.GetPath())] = c
			}
		}
		// Paths: [4 m] is message m, [4 m 2 f] its field f.
		for mi, m := range f.GetMessageType() {
			name := f.GetPackage() + "." + m.GetName()
			if c := byPath[fmt.Sprint([]int32{4, int32(mi)})]; c != "" {
				out[name] = c
			}
			for fi, fd := range m.GetField() {
				if c := byPath[fmt.Sprint([]int32{4, int32(mi), 2, int32(fi)})]; c != "" {
					out[name+"."+fd.GetName()] = c
				}
			}
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("no comments found in %s", model)
	}
	return out, nil
}

// clean joins a comment's lines into one paragraph.
func clean(c string) string {
	return strings.Join(strings.Fields(c), " ")
}

// kindExamples returns, per kind, the first document of that kind in the
// example files (sorted by name), with the file it came from.
func kindExamples(dir string) (map[string]schema.Example, error) {
	files, err := filepath.Glob(filepath.Join(dir, "*.yaml"))
	if err != nil {
		return nil, err
	}
	sort.Strings(files)
	out := map[string]schema.Example{}
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			return nil, err
		}
		if _, err := manifest.Decode(bytes.NewReader(data), f); err != nil {
			return nil, err
		}
		for _, doc := range strings.Split(string(data), "\n---\n") {
			kind := kindOf(doc)
			if _, seen := out[kind]; kind == "" || seen {
				continue
			}
			out[kind] = schema.Example{File: filepath.ToSlash(f), YAML: strings.TrimSpace(stripLeadingComments(doc)) + "\n"}
		}
	}
	return out, nil
}

func kindOf(doc string) string {
	for _, line := range strings.Split(doc, "\n") {
		if k, ok := strings.CutPrefix(line, "kind:"); ok {
			return strings.TrimSpace(k)
		}
	}
	return ""
}

// stripLeadingComments drops the comment lines before the first field
// (a file's introduction).
func stripLeadingComments(doc string) string {
	lines := strings.Split(doc, "\n")
	for len(lines) > 0 && (strings.HasPrefix(lines[0], "#") || strings.TrimSpace(lines[0]) == "") {
		lines = lines[1:]
	}
	return strings.Join(lines, "\n")
}

func goSource(comments map[string]string, examples map[string]schema.Example) ([]byte, error) {
	var b bytes.Buffer
	b.WriteString("// Code generated by go run ./api/schema/gen; DO NOT EDIT.\n\npackage schema\n\n")
	b.WriteString("// protoComments are the leading comments of api/proto/teapotv1/model.proto by full name.\n")
	b.WriteString("var protoComments = map[string]string{\n")
	keys := make([]string, 0, len(comments))
	for k := range comments {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		fmt.Fprintf(&b, "\t%q: %q,\n", k, comments[k])
	}
	b.WriteString("}\n\n// kindExamples are the first document of each kind in examples/.\nvar kindExamples = map[string]Example{\n")
	keys = keys[:0]
	for k := range examples {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		fmt.Fprintf(&b, "\t%q: {File: %q, YAML: %q},\n", k, examples[k].File, examples[k].YAML)
	}
	b.WriteString("}\n")
	return format.Source(b.Bytes())
}
