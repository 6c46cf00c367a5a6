package manifest

import (
	"encoding/json"
	"fmt"
	"math"
	"sort"
	"strconv"
	"strings"
	"time"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// Full names of messages the walk treats specially.
const (
	durationName  = "google.protobuf.Duration"
	timestampName = "google.protobuf.Timestamp"
	memberName    = "teapot.v1.Member"
)

// fieldError is a problem with the value at one path of an object.
type fieldError struct {
	path string
	msg  string
}

func (e *fieldError) Error() string {
	if e.path == "" {
		return e.msg
	}
	return "field " + e.path + ": " + e.msg
}

// normalise checks the generic JSON value m against the message md, field
// by field, and returns it in the form protojson reads: field names in
// their JSON spelling, members given as "addr:port" expanded, durations in
// Go syntax ("1m30s") turned into seconds. Field names match in any case
// and with or without underscores and dashes ("redirectToHTTPS",
// "health_check").
func normalise(md protoreflect.MessageDescriptor, m map[string]any, path string) (map[string]any, error) {
	out := make(map[string]any, len(m))
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		fd := lookup(md, k)
		if fd == nil {
			return nil, unknownField(md, join(path, k), k)
		}
		if _, dup := out[fd.JSONName()]; dup {
			return nil, &fieldError{msg: fmt.Sprintf("field %s is given twice (as %q and another spelling)", join(path, fd.JSONName()), k)}
		}
		v, err := fieldValue(fd, m[k], join(path, k))
		if err != nil {
			return nil, err
		}
		out[fd.JSONName()] = v
	}
	return out, nil
}

func lookup(md protoreflect.MessageDescriptor, key string) protoreflect.FieldDescriptor {
	fields := md.Fields()
	if fd := fields.ByJSONName(key); fd != nil {
		return fd
	}
	if fd := fields.ByTextName(key); fd != nil {
		return fd
	}
	folded := fold(key)
	for i := range fields.Len() {
		if fd := fields.Get(i); fold(fd.JSONName()) == folded {
			return fd
		}
	}
	return nil
}

func fold(s string) string {
	s = strings.ToLower(s)
	return strings.NewReplacer("_", "", "-", "").Replace(s)
}

func unknownField(md protoreflect.MessageDescriptor, path, key string) error {
	msg := fmt.Sprintf("unknown field %q", path)
	best, bestDist := "", 3
	fields := md.Fields()
	for i := range fields.Len() {
		name := fields.Get(i).JSONName()
		k, n := fold(key), fold(name)
		d := distance(k, n)
		if len(k) >= 3 && (strings.HasPrefix(n, k) || strings.HasPrefix(k, n)) {
			d = min(d, 2)
		}
		if d < bestDist && d < len(name)/2+1 {
			best, bestDist = name, d
		}
	}
	if best != "" {
		msg += fmt.Sprintf(" (did you mean %q?)", best)
	}
	return &fieldError{msg: msg}
}

// distance is the Levenshtein distance between a and b.
func distance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}

func fieldValue(fd protoreflect.FieldDescriptor, v any, path string) (any, error) {
	if v == nil {
		return nil, nil // protojson reads null as "not set"
	}
	switch {
	case fd.IsMap():
		m, ok := v.(map[string]any)
		if !ok {
			return nil, &fieldError{path, "expected a mapping of names to values, got " + describe(v)}
		}
		out := make(map[string]any, len(m))
		for k, item := range m {
			nv, err := singular(fd.MapValue(), item, mapPath(path, k))
			if err != nil {
				return nil, err
			}
			out[k] = nv
		}
		return out, nil
	case fd.IsList():
		l, ok := v.([]any)
		if !ok {
			return nil, &fieldError{path, "expected a list, got " + describe(v)}
		}
		out := make([]any, len(l))
		for i, item := range l {
			if item == nil {
				return nil, &fieldError{fmt.Sprintf("%s[%d]", path, i), "empty list item"}
			}
			nv, err := singular(fd, item, fmt.Sprintf("%s[%d]", path, i))
			if err != nil {
				return nil, err
			}
			out[i] = nv
		}
		return out, nil
	}
	return singular(fd, v, path)
}

func singular(fd protoreflect.FieldDescriptor, v any, path string) (any, error) {
	if v == nil {
		return nil, nil
	}
	switch fd.Kind() {
	case protoreflect.MessageKind, protoreflect.GroupKind:
		return message(fd.Message(), v, path)
	case protoreflect.StringKind:
		if _, ok := v.(string); !ok {
			return nil, &fieldError{path, "expected a string, got " + describe(v) + " (write it in quotes)"}
		}
	case protoreflect.BytesKind:
		if _, ok := v.(string); !ok {
			return nil, &fieldError{path, "expected base64 text, got " + describe(v)}
		}
	case protoreflect.BoolKind:
		if _, ok := v.(bool); !ok {
			return nil, &fieldError{path, "expected true or false, got " + describe(v)}
		}
	case protoreflect.EnumKind:
		switch v.(type) {
		case string, json.Number:
		default:
			return nil, &fieldError{path, "expected a name, got " + describe(v)}
		}
	case protoreflect.FloatKind, protoreflect.DoubleKind:
		return number(v, path, func(s string) error {
			_, err := strconv.ParseFloat(s, 64)
			return err
		}, "a number")
	case protoreflect.Int32Kind, protoreflect.Sint32Kind, protoreflect.Sfixed32Kind:
		return integer(v, path, math.MinInt32, math.MaxInt32)
	case protoreflect.Int64Kind, protoreflect.Sint64Kind, protoreflect.Sfixed64Kind:
		return integer(v, path, math.MinInt64, math.MaxInt64)
	case protoreflect.Uint32Kind, protoreflect.Fixed32Kind:
		return unsigned(v, path, math.MaxUint32)
	case protoreflect.Uint64Kind, protoreflect.Fixed64Kind:
		return unsigned(v, path, math.MaxUint64)
	}
	return v, nil
}

func message(md protoreflect.MessageDescriptor, v any, path string) (any, error) {
	switch md.FullName() {
	case durationName:
		return duration(v, path)
	case timestampName:
		return timestamp(v, path)
	case memberName:
		switch m := v.(type) {
		case string:
			v = map[string]any{"address": m}
		case map[string]any:
		default:
			return nil, &fieldError{path, `expected an address like "10.0.0.1:80" or a mapping with address: and weight:, got ` + describe(v)}
		}
	}
	m, ok := v.(map[string]any)
	if !ok {
		return nil, &fieldError{path, "expected a mapping of fields, got " + describe(v)}
	}
	return normalise(md, m, path)
}

// number accepts a JSON number, or a string holding one (protojson's way
// of writing 64-bit integers).
func number(v any, path string, check func(string) error, want string) (any, error) {
	var s string
	switch v := v.(type) {
	case json.Number:
		s = string(v)
	case string:
		s = strings.TrimSpace(v)
	default:
		return nil, &fieldError{path, "expected " + want + ", got " + describe(v)}
	}
	if err := check(s); err != nil {
		return nil, &fieldError{path, "expected " + want + ", got " + describe(v)}
	}
	return json.Number(s), nil
}

func integer(v any, path string, lo, hi int64) (any, error) {
	want := fmt.Sprintf("a whole number from %d to %d", lo, hi)
	return number(v, path, func(s string) error {
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			return err
		}
		if n < lo || n > hi {
			return strconv.ErrRange
		}
		return nil
	}, want)
}

func unsigned(v any, path string, hi uint64) (any, error) {
	want := fmt.Sprintf("a whole number from 0 to %d", hi)
	return number(v, path, func(s string) error {
		n, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			return err
		}
		if n > hi {
			return strconv.ErrRange
		}
		return nil
	}, want)
}

// duration accepts Go's syntax ("500ms", "1m30s") and protojson's ("90s").
func duration(v any, path string) (any, error) {
	bad := &fieldError{path, `expected a duration like "2s" or "1m30s", got ` + describe(v)}
	s, ok := v.(string)
	if !ok {
		return nil, bad
	}
	if d, err := time.ParseDuration(strings.TrimSpace(s)); err == nil {
		b, err := protojson.Marshal(durationpb.New(d))
		if err != nil {
			return nil, bad
		}
		return json.RawMessage(b), nil
	}
	q, _ := json.Marshal(s)
	if err := protojson.Unmarshal(q, &durationpb.Duration{}); err != nil {
		return nil, bad
	}
	return s, nil
}

func timestamp(v any, path string) (any, error) {
	bad := &fieldError{path, `expected a time like "2025-01-02T15:04:05Z", got ` + describe(v)}
	s, ok := v.(string)
	if !ok {
		return nil, bad
	}
	q, _ := json.Marshal(s)
	if err := protojson.Unmarshal(q, &timestamppb.Timestamp{}); err != nil {
		return nil, bad
	}
	return s, nil
}

// describe renders a value the user wrote, for "got ..." in messages.
func describe(v any) string {
	switch v := v.(type) {
	case nil:
		return "nothing"
	case string:
		if r := []rune(v); len(r) > 40 {
			v = string(r[:37]) + "..."
		}
		return strconv.Quote(v)
	case json.Number:
		return string(v)
	case bool:
		return strconv.FormatBool(v)
	case []any:
		return "a list"
	case map[string]any:
		return "a mapping"
	}
	return fmt.Sprintf("%v", v)
}

func join(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

func mapPath(path, key string) string {
	for _, r := range key {
		if !(r == '-' || r == '_' || r >= '0' && r <= '9' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z') {
			return fmt.Sprintf("%s[%q]", path, key)
		}
	}
	return join(path, key)
}
