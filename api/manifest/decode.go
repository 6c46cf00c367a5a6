package manifest

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"regexp"
	"strconv"
	"strings"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"sigs.k8s.io/yaml"

	"github.com/teapot-lb/teapot-lb/api"
	pb "github.com/teapot-lb/teapot-lb/api/proto/teapotv1"
)

// ErrInvalid is wrapped by every error Decode returns for a bad manifest.
var ErrInvalid = errors.New("invalid manifest")

// Kinds lists the kinds a manifest may hold, in the order they must be
// applied (a tenant names pools, a load balancer names a tenant).
var Kinds = []string{api.KindVIPPool, api.KindTenant, api.KindLoadBalancer}

// newMessage returns an empty message of a kind a manifest may hold.
func newMessage(kind string) proto.Message {
	switch kind {
	case api.KindVIPPool:
		return &pb.VIPPool{}
	case api.KindTenant:
		return &pb.Tenant{}
	case api.KindLoadBalancer:
		return &pb.LoadBalancer{}
	}
	return nil
}

// docError is a problem with one document (or one item of a document that
// is a list of objects).
type docError struct {
	file   string
	doc    int
	item   int    // 1-based; 0 when the document is one object
	object string // "LoadBalancer acme/shop" when known
	msg    string
}

func (e *docError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s: document %d", e.file, e.doc)
	if e.item > 0 {
		fmt.Fprintf(&b, ", item %d", e.item)
	}
	if e.object != "" {
		fmt.Fprintf(&b, " (%s)", e.object)
	}
	b.WriteString(": ")
	b.WriteString(e.msg)
	return b.String()
}

func (e *docError) Unwrap() error { return ErrInvalid }

// Decode reads every object in a manifest. name is the file name used in
// error messages. Empty documents are skipped; a document may also be a
// list of objects (as `get -o json` prints).
func Decode(r io.Reader, name string) ([]*pb.Object, error) {
	data, err := io.ReadAll(r)
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", name, err)
	}
	var objs []*pb.Object
	n := 0
	for _, d := range splitDocuments(data) {
		j, err := yaml.YAMLToJSONStrict(d.text)
		if err == nil && isNull(j) {
			continue
		}
		n++
		if err != nil {
			return nil, &docError{file: name, doc: n, msg: yamlError(err, d.line)}
		}
		v, err := decodeJSON(j)
		if err != nil {
			return nil, &docError{file: name, doc: n, msg: err.Error()}
		}
		switch v := v.(type) {
		case map[string]any:
			o, err := decodeObject(v)
			if err != nil {
				err.file, err.doc = name, n
				return nil, err
			}
			objs = append(objs, o)
		case []any:
			for i, item := range v {
				m, ok := item.(map[string]any)
				if !ok {
					return nil, &docError{file: name, doc: n, item: i + 1, msg: "expected an object with kind: and its fields, got " + describe(item)}
				}
				o, err := decodeObject(m)
				if err != nil {
					err.file, err.doc, err.item = name, n, i+1
					return nil, err
				}
				objs = append(objs, o)
			}
		default:
			return nil, &docError{file: name, doc: n, msg: "expected an object with kind: and its fields, got " + describe(v)}
		}
	}
	return objs, nil
}

// decodeObject turns one manifest object into a model object. The error
// it returns lacks the file and document number.
func decodeObject(m map[string]any) (*pb.Object, *docError) {
	kind, err := kindOf(m)
	if err != nil {
		return nil, &docError{msg: err.Error()}
	}
	e := &docError{object: label(kind, m)}
	fields := make(map[string]any, len(m))
	for k, v := range m {
		if k != "kind" {
			fields[k] = v
		}
	}
	msg := newMessage(kind)
	norm, err := normalise(msg.ProtoReflect().Descriptor(), fields, "")
	if err != nil {
		e.msg = err.Error()
		return nil, e
	}
	j, err := json.Marshal(norm)
	if err != nil {
		e.msg = err.Error()
		return nil, e
	}
	if err := (protojson.UnmarshalOptions{DiscardUnknown: false}).Unmarshal(j, msg); err != nil {
		e.msg = protojsonError(err)
		return nil, e
	}
	return api.Wrap(msg), nil
}

// kindOf reads and checks the kind: field of a manifest object.
func kindOf(m map[string]any) (string, error) {
	v, ok := m["kind"]
	if !ok {
		return "", fmt.Errorf("missing kind: (one of %s)", strings.Join(Kinds, ", "))
	}
	s, ok := v.(string)
	if !ok {
		return "", fmt.Errorf("kind: expected a string, got %s", describe(v))
	}
	kind := s
	switch s {
	case api.KindTenant, api.KindVIPPool, api.KindLoadBalancer, api.KindNode, api.KindCertificate, api.KindJoinToken:
	default:
		k, err := api.ParseKind(s)
		if err != nil {
			return "", fmt.Errorf("unknown kind %q (one of %s)", s, strings.Join(Kinds, ", "))
		}
		kind = k
	}
	if newMessage(kind) == nil {
		return "", fmt.Errorf("kind %s is managed by the cluster: a manifest may hold %s", kind, strings.Join(Kinds, ", "))
	}
	return kind, nil
}

// label names the object for messages, as far as its fields tell.
func label(kind string, m map[string]any) string {
	name, _ := m["name"].(string)
	tenant, _ := m["tenant"].(string)
	if name == "" {
		return kind
	}
	if !api.Namespaced(kind) {
		tenant = ""
	}
	return api.RefString(&pb.ObjectRef{Kind: kind, Tenant: tenant, Name: name})
}

type document struct {
	text []byte
	line int // line of the file where text starts, from 1
}

// splitDocuments cuts a YAML stream at its "---" separator lines.
func splitDocuments(data []byte) []document {
	data = bytes.TrimPrefix(data, []byte("\ufeff"))
	var docs []document
	cur := document{line: 1}
	lineNo := 0
	for len(data) > 0 {
		lineNo++
		line := data
		if i := bytes.IndexByte(data, '\n'); i >= 0 {
			line, data = data[:i+1], data[i+1:]
		} else {
			data = nil
		}
		if isSeparator(line) {
			docs = append(docs, cur)
			// Whatever follows the marker on its line belongs to the new
			// document; blank out the marker to keep columns right.
			cur = document{line: lineNo, text: append([]byte("   "), line[3:]...)}
			continue
		}
		cur.text = append(cur.text, line...)
	}
	return append(docs, cur)
}

func isSeparator(line []byte) bool {
	if !bytes.HasPrefix(line, []byte("---")) {
		return false
	}
	rest := line[3:]
	return len(rest) == 0 || rest[0] == ' ' || rest[0] == '\t' || rest[0] == '\n' || rest[0] == '\r'
}

func isNull(j []byte) bool { return string(bytes.TrimSpace(j)) == "null" }

func decodeJSON(j []byte) (any, error) {
	d := json.NewDecoder(bytes.NewReader(j))
	d.UseNumber()
	var v any
	if err := d.Decode(&v); err != nil {
		return nil, fmt.Errorf("decode: %w", err)
	}
	return v, nil
}

var yamlLine = regexp.MustCompile(`line (\d+)`)

// yamlError makes a YAML parser error one line with line numbers counted
// from the start of the file.
func yamlError(err error, first int) string {
	msg := err.Error()
	msg = strings.TrimPrefix(msg, "error converting YAML to JSON: ")
	if rest, ok := strings.CutPrefix(msg, "yaml: unmarshal errors:"); ok {
		var parts []string
		for _, l := range strings.Split(rest, "\n") {
			if l = strings.TrimSpace(l); l != "" {
				parts = append(parts, l)
			}
		}
		msg = "yaml: " + strings.Join(parts, "; ")
	}
	msg = yamlLine.ReplaceAllStringFunc(msg, func(s string) string {
		n, err := strconv.Atoi(strings.TrimPrefix(s, "line "))
		if err != nil {
			return s
		}
		return "line " + strconv.Itoa(n+first-1)
	})
	return strings.Join(strings.Fields(msg), " ")
}

var protojsonPrefix = regexp.MustCompile(`^proto:\s*(\(line \d+:\d+\):\s*)?`)

// protojsonError rewords protojson's messages, which point into JSON the
// user never wrote.
func protojsonError(err error) string {
	msg := protojsonPrefix.ReplaceAllString(err.Error(), "")
	return strings.Join(strings.Fields(msg), " ")
}
