package schema

import (
	"fmt"
	"sort"
	"strings"

	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/teapot-lb/teapot-lb/api"
	pb "github.com/teapot-lb/teapot-lb/api/proto/teapotv1"
)

// Example is a manifest document showing a kind, and the file of
// examples/ it comes from.
type Example struct {
	File string
	YAML string
}

// Field is one field of a kind, with what an operator needs to write it.
type Field struct {
	// Path from the kind, as written in errors: "listeners[].tls.acme",
	// "pools.<name>.members[].weight".
	Path string
	// Name as written in manifests ("redirectToHttps").
	Name     string
	Type     string
	Doc      string
	Default  string
	Limits   string
	Enum     []string
	Example  string
	Required bool
	// ReadOnly fields are set by the cluster; values in a manifest are
	// ignored.
	ReadOnly bool
	Fields   []*Field

	fd protoreflect.FieldDescriptor
}

// Kind is one kind of manifest document.
type Kind struct {
	Name    string
	Aliases []string
	Doc     string
	Fields  []*Field
	Example Example

	md protoreflect.MessageDescriptor
}

// Reference is the whole manifest format.
type Reference struct {
	Kinds []*Kind
}

// Default is the reference built from the model compiled into this
// binary and the comments and examples generated beside it.
func Default() *Reference { return Build(protoComments, kindExamples) }

// Build builds the reference from the model's descriptors, comments by
// full protobuf name, and an example per kind.
func Build(comments map[string]string, examples map[string]Example) *Reference {
	b := &builder{comments: comments}
	ref := &Reference{}
	for _, k := range []struct {
		name    string
		msg     protoreflect.ProtoMessage
		aliases []string
	}{
		{api.KindVIPPool, &pb.VIPPool{}, []string{"pool", "vippool"}},
		{api.KindTenant, &pb.Tenant{}, []string{"tenant"}},
		{api.KindLoadBalancer, &pb.LoadBalancer{}, []string{"lb", "loadbalancer"}},
	} {
		md := k.msg.ProtoReflect().Descriptor()
		ref.Kinds = append(ref.Kinds, &Kind{
			Name: k.name, Aliases: k.aliases, md: md,
			Doc:     comments[string(md.FullName())],
			Fields:  b.fields(md, "", map[protoreflect.FullName]bool{md.FullName(): true}),
			Example: examples[k.name],
		})
	}
	return ref
}

type builder struct {
	comments map[string]string
}

// fields lists the fields of md under path; seen guards against a
// message that contains itself.
func (b *builder) fields(md protoreflect.MessageDescriptor, path string, seen map[protoreflect.FullName]bool) []*Field {
	var out []*Field
	fds := md.Fields()
	for i := range fds.Len() {
		fd := fds.Get(i)
		r := rules[string(fd.FullName())]
		f := &Field{
			Path: join(path, fd.JSONName()), Name: fd.JSONName(), Type: typeName(fd),
			Doc: b.doc(fd, r), Default: r.def, Limits: r.limits, Enum: r.enum, Example: r.example,
			Required: r.required, ReadOnly: r.readOnly, fd: fd,
		}
		if m := elemMessage(fd); m != nil && !r.opaque && !wellKnown(m) && !seen[m.FullName()] {
			seen[m.FullName()] = true
			f.Fields = b.fields(m, childPath(f.Path, fd), seen)
			delete(seen, m.FullName())
		}
		out = append(out, f)
	}
	return out
}

// doc is the rule's sentence when it has one (the model's comments on
// some fields head a group, "Per load balancer.", or only list values),
// else the field's comment, else its message's.
func (b *builder) doc(fd protoreflect.FieldDescriptor, r rule) string {
	if r.doc != "" {
		return r.doc
	}
	if c := b.comments[string(fd.FullName())]; c != "" {
		return c
	}
	if m := elemMessage(fd); m != nil {
		if c := b.comments[string(m.FullName())]; c != "" {
			return c
		}
		return rules[string(m.FullName())].doc
	}
	return ""
}

// elemMessage is the message of a message field, of a list's elements or
// of a map's values; nil for scalars.
func elemMessage(fd protoreflect.FieldDescriptor) protoreflect.MessageDescriptor {
	if fd.IsMap() {
		return fd.MapValue().Message()
	}
	return fd.Message()
}

func wellKnown(m protoreflect.MessageDescriptor) bool {
	return strings.HasPrefix(string(m.FullName()), "google.protobuf.")
}

func join(path, name string) string {
	if path == "" {
		return name
	}
	return path + "." + name
}

// childPath is the path under which a field's sub-fields are written.
func childPath(path string, fd protoreflect.FieldDescriptor) string {
	switch {
	case fd.IsMap():
		return path + ".<name>"
	case fd.IsList():
		return path + "[]"
	}
	return path
}

func typeName(fd protoreflect.FieldDescriptor) string {
	switch {
	case fd.IsMap():
		return "map[name]" + scalarName(fd.MapValue())
	case fd.IsList():
		return "[]" + scalarName(fd)
	}
	return scalarName(fd)
}

func scalarName(fd protoreflect.FieldDescriptor) string {
	switch fd.Kind() {
	case protoreflect.MessageKind, protoreflect.GroupKind:
		switch fd.Message().FullName() {
		case "google.protobuf.Duration":
			return "duration"
		case "google.protobuf.Timestamp":
			return "timestamp"
		}
		return string(fd.Message().Name())
	case protoreflect.BoolKind:
		return "boolean"
	case protoreflect.StringKind:
		return "string"
	case protoreflect.DoubleKind, protoreflect.FloatKind:
		return "number"
	case protoreflect.BytesKind:
		return "bytes (base64)"
	case protoreflect.EnumKind:
		return "enum"
	}
	return "integer"
}

// Lookup finds a kind ("lb", "LoadBalancer") or a field path under one
// ("lb.listeners.tls", "lb.pools.web.healthCheck", "tenant.quotas"). The
// field is nil when path names a kind.
func (r *Reference) Lookup(path string) (*Kind, *Field, error) {
	parts := strings.Split(strings.Trim(path, "."), ".")
	var kind *Kind
	for _, k := range r.Kinds {
		if strings.EqualFold(parts[0], k.Name) || contains(k.Aliases, strings.ToLower(parts[0])) {
			kind = k
		}
	}
	if kind == nil {
		return nil, nil, fmt.Errorf("unknown kind %q (kinds: %s)", parts[0], r.kindNames())
	}
	fields := kind.Fields
	var cur *Field
	for i := 1; i < len(parts); i++ {
		seg := strings.TrimSuffix(parts[i], "[]")
		if cur != nil && cur.fd.IsMap() && find(fields, seg) == nil {
			continue // a map key: "web" in pools.web.members
		}
		f := find(fields, seg)
		if f == nil {
			names := make([]string, len(fields))
			for j, x := range fields {
				names[j] = x.Name
			}
			where := kind.Name
			if cur != nil {
				where = cur.Path
			}
			return nil, nil, fmt.Errorf("%s has no field %q (its fields: %s)", where, parts[i], strings.Join(names, ", "))
		}
		cur, fields = f, f.Fields
	}
	return kind, cur, nil
}

func (r *Reference) kindNames() string {
	var names []string
	for _, k := range r.Kinds {
		names = append(names, k.Name)
	}
	return strings.Join(names, ", ")
}

func find(fields []*Field, name string) *Field {
	for _, f := range fields {
		if strings.EqualFold(f.Name, name) || strings.EqualFold(string(f.fd.Name()), name) {
			return f
		}
	}
	return nil
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// Walk calls fn for every field of every kind, depth first in model order.
func (r *Reference) Walk(fn func(k *Kind, f *Field)) {
	var walk func(k *Kind, fs []*Field)
	walk = func(k *Kind, fs []*Field) {
		for _, f := range fs {
			fn(k, f)
			walk(k, f.Fields)
		}
	}
	for _, k := range r.Kinds {
		walk(k, k.Fields)
	}
}

// sortedKeys returns m's keys in order.
func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
