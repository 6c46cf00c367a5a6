package manifest

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"sort"
	"strconv"
	"time"

	yamlv2 "go.yaml.in/yaml/v2"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/teapot-lb/teapot-lb/api"
	pb "github.com/teapot-lb/teapot-lb/api/proto/teapotv1"
)

// Output formats of Encode.
const (
	FormatYAML = "yaml"
	FormatJSON = "json"
)

// Encode writes objects in the shape Decode reads, with kind first and the
// fields in the order of the model. format is "yaml" (documents separated
// by "---") or "json" (one object, or a list when there are several).
func Encode(w io.Writer, objs []*pb.Object, format string) error {
	return encode(w, objs, format, len(objs) != 1)
}

// EncodeList is Encode that writes a JSON list even for one object or
// none, as the answer to a list request should be.
func EncodeList(w io.Writer, objs []*pb.Object, format string) error {
	return encode(w, objs, format, true)
}

// EncodeMessage writes any message (a cluster status, say) as YAML or
// JSON, fields in the order of the model.
func EncodeMessage(w io.Writer, m proto.Message, format string) error {
	return write(w, []ordered{messageValue(m.ProtoReflect())}, format, false)
}

// EncodeMessageList writes messages as the answer to a list request:
// one JSON array (empty for none) or YAML documents separated by "---".
func EncodeMessageList(w io.Writer, ms []proto.Message, format string) error {
	vals := make([]ordered, len(ms))
	for i, m := range ms {
		vals[i] = messageValue(m.ProtoReflect())
	}
	return write(w, vals, format, true)
}

// EncodeMessageLine writes a message as one line of JSON, for a stream of
// newline-delimited JSON (one object per line).
func EncodeMessageLine(w io.Writer, m proto.Message) error {
	var pretty, line bytes.Buffer
	writeJSON(&pretty, messageValue(m.ProtoReflect()), "")
	if err := json.Compact(&line, pretty.Bytes()); err != nil {
		return fmt.Errorf("encode json: %w", err)
	}
	line.WriteByte('\n')
	_, err := w.Write(line.Bytes())
	return err
}

func encode(w io.Writer, objs []*pb.Object, format string, list bool) error {
	vals := make([]ordered, 0, len(objs))
	for _, o := range objs {
		m, ok := api.Unwrap(o).(proto.Message)
		if !ok {
			return fmt.Errorf("encode: empty object")
		}
		body := messageValue(m.ProtoReflect())
		vals = append(vals, append(ordered{{"kind", api.RefOf(o).GetKind()}}, body...))
	}
	return write(w, vals, format, list)
}

func write(w io.Writer, vals []ordered, format string, list bool) error {
	var buf bytes.Buffer
	switch format {
	case FormatYAML:
		for i, v := range vals {
			if i > 0 {
				buf.WriteString("---\n")
			}
			b, err := yamlv2.Marshal(v.yaml())
			if err != nil {
				return fmt.Errorf("encode yaml: %w", err)
			}
			buf.Write(b)
		}
	case FormatJSON:
		if list {
			items := make([]any, len(vals))
			for i, v := range vals {
				items[i] = v
			}
			writeJSON(&buf, items, "")
		} else if len(vals) == 1 {
			writeJSON(&buf, vals[0], "")
		}
		buf.WriteByte('\n')
	default:
		return fmt.Errorf("unknown output format %q (use yaml or json)", format)
	}
	_, err := w.Write(buf.Bytes())
	return err
}

// ordered is a JSON object that keeps its keys in order.
type ordered []field

type field struct {
	key string
	val any
}

// messageValue renders the populated fields of m in field-number order.
// Values are ordered, []any, string, bool, int64, uint64 or float64.
func messageValue(m protoreflect.Message) ordered {
	var fds []protoreflect.FieldDescriptor
	m.Range(func(fd protoreflect.FieldDescriptor, _ protoreflect.Value) bool {
		fds = append(fds, fd)
		return true
	})
	sort.Slice(fds, func(i, j int) bool { return fds[i].Number() < fds[j].Number() })
	out := make(ordered, 0, len(fds))
	for _, fd := range fds {
		out = append(out, field{fd.JSONName(), fieldOut(fd, m.Get(fd))})
	}
	return out
}

func fieldOut(fd protoreflect.FieldDescriptor, v protoreflect.Value) any {
	switch {
	case fd.IsMap():
		mp := v.Map()
		keys := make([]protoreflect.MapKey, 0, mp.Len())
		mp.Range(func(k protoreflect.MapKey, _ protoreflect.Value) bool {
			keys = append(keys, k)
			return true
		})
		sort.Slice(keys, func(i, j int) bool { return keys[i].String() < keys[j].String() })
		out := make(ordered, 0, len(keys))
		for _, k := range keys {
			out = append(out, field{k.String(), valueOut(fd.MapValue(), mp.Get(k))})
		}
		return out
	case fd.IsList():
		l := v.List()
		out := make([]any, l.Len())
		for i := range l.Len() {
			out[i] = valueOut(fd, l.Get(i))
		}
		return out
	}
	return valueOut(fd, v)
}

func valueOut(fd protoreflect.FieldDescriptor, v protoreflect.Value) any {
	switch fd.Kind() {
	case protoreflect.MessageKind, protoreflect.GroupKind:
		return messageOut(v.Message())
	case protoreflect.EnumKind:
		if ev := fd.Enum().Values().ByNumber(v.Enum()); ev != nil {
			return string(ev.Name())
		}
		return int64(v.Enum())
	case protoreflect.BytesKind:
		return base64.StdEncoding.EncodeToString(v.Bytes())
	case protoreflect.BoolKind:
		return v.Bool()
	case protoreflect.StringKind:
		return v.String()
	case protoreflect.Int32Kind, protoreflect.Sint32Kind, protoreflect.Sfixed32Kind,
		protoreflect.Int64Kind, protoreflect.Sint64Kind, protoreflect.Sfixed64Kind:
		return v.Int()
	case protoreflect.Uint32Kind, protoreflect.Fixed32Kind, protoreflect.Uint64Kind, protoreflect.Fixed64Kind:
		return v.Uint()
	case protoreflect.FloatKind, protoreflect.DoubleKind:
		return v.Float()
	}
	return v.Interface()
}

func messageOut(m protoreflect.Message) any {
	switch msg := m.Interface().(type) {
	case *durationpb.Duration:
		if err := msg.CheckValid(); err == nil && msg.AsDuration() != math.MaxInt64 && msg.AsDuration() != math.MinInt64 {
			return msg.AsDuration().String()
		}
		return formatSeconds(msg.GetSeconds(), msg.GetNanos())
	case *timestamppb.Timestamp:
		return msg.AsTime().UTC().Format(time.RFC3339Nano)
	case *pb.Member:
		// The short form Decode reads: a member with an address only.
		if msg.Weight == nil {
			return msg.GetAddress()
		}
	}
	return messageValue(m)
}

// formatSeconds writes a duration out of time.Duration's range the way
// protojson reads it.
func formatSeconds(sec int64, nanos int32) string {
	if nanos == 0 {
		return strconv.FormatInt(sec, 10) + "s"
	}
	sign := ""
	if sec < 0 || nanos < 0 {
		sign = "-"
	}
	return fmt.Sprintf("%s%d.%09ds", sign, abs(sec), abs(int64(nanos)))
}

func abs(n int64) int64 {
	if n < 0 {
		return -n
	}
	return n
}

func (o ordered) yaml() yamlv2.MapSlice {
	out := make(yamlv2.MapSlice, len(o))
	for i, f := range o {
		out[i] = yamlv2.MapItem{Key: f.key, Value: yamlValue(f.val)}
	}
	return out
}

func yamlValue(v any) any {
	switch v := v.(type) {
	case ordered:
		return v.yaml()
	case []any:
		out := make([]any, len(v))
		for i, item := range v {
			out[i] = yamlValue(item)
		}
		return out
	}
	return v
}

// writeJSON writes v indented by two spaces per level.
func writeJSON(buf *bytes.Buffer, v any, indent string) {
	inner := indent + "  "
	switch v := v.(type) {
	case ordered:
		if len(v) == 0 {
			buf.WriteString("{}")
			return
		}
		buf.WriteString("{\n")
		for i, f := range v {
			buf.WriteString(inner)
			writeScalar(buf, f.key)
			buf.WriteString(": ")
			writeJSON(buf, f.val, inner)
			if i < len(v)-1 {
				buf.WriteByte(',')
			}
			buf.WriteByte('\n')
		}
		buf.WriteString(indent + "}")
	case []any:
		if len(v) == 0 {
			buf.WriteString("[]")
			return
		}
		buf.WriteString("[\n")
		for i, item := range v {
			buf.WriteString(inner)
			writeJSON(buf, item, inner)
			if i < len(v)-1 {
				buf.WriteByte(',')
			}
			buf.WriteByte('\n')
		}
		buf.WriteString(indent + "]")
	default:
		writeScalar(buf, v)
	}
}

func writeScalar(buf *bytes.Buffer, v any) {
	if f, ok := v.(float64); ok && (math.IsNaN(f) || math.IsInf(f, 0)) {
		// protojson's spelling; JSON has no literal for these.
		switch {
		case math.IsNaN(f):
			v = "NaN"
		case f > 0:
			v = "Infinity"
		default:
			v = "-Infinity"
		}
	}
	enc := json.NewEncoder(buf)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(v) // scalars of known types always encode
	buf.Truncate(buf.Len() - 1)
}
