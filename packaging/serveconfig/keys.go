package serveconfig

import (
	"encoding"
	"fmt"
	"log/slog"
	"net"
	"reflect"
	"strings"

	yaml "go.yaml.in/yaml/v3"
)

// setter is what a section's field type may implement to check a
// scalar the way its flag would (vip.Duration).
type setter interface{ Set(string) error }

func typeOf(target any) reflect.Type {
	t := reflect.TypeOf(target)
	for t != nil && t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	return t
}

// checkKeys walks a section's node along its Go type: every key must be
// a json tag of the struct it lands in, every scalar must suit its
// field. A scalar meant for a string (or a setter) is retagged as a
// string, so that `password: 123` is the string "123".
func checkKeys(at string, n *yaml.Node, t reflect.Type) error {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if n.Tag == "!!null" {
		return nil
	}
	if reflect.PointerTo(t).Implements(reflect.TypeFor[setter]()) ||
		reflect.PointerTo(t).Implements(reflect.TypeFor[encoding.TextUnmarshaler]()) {
		if n.Kind != yaml.ScalarNode {
			return fmt.Errorf("%d: %s is %s, want one value", n.Line, at, shape(n))
		}
		if s, ok := reflect.New(t).Interface().(setter); ok {
			if err := s.Set(n.Value); err != nil {
				return fmt.Errorf("%d: %s: %w", n.Line, at, err)
			}
		}
		n.Tag = "!!str"
		return nil
	}
	switch t.Kind() {
	case reflect.Struct:
		if n.Kind != yaml.MappingNode {
			return fmt.Errorf("%d: %s is %s, want a mapping of keys", n.Line, at, shape(n))
		}
		fields := map[string]reflect.Type{}
		var names []string
		for i := range t.NumField() {
			tag := strings.Split(t.Field(i).Tag.Get("json"), ",")[0]
			if tag == "" || tag == "-" || !t.Field(i).IsExported() {
				continue
			}
			fields[tag] = t.Field(i).Type
			names = append(names, tag)
		}
		for i := 0; i+1 < len(n.Content); i += 2 {
			k, v := n.Content[i], n.Content[i+1]
			ft, ok := fields[k.Value]
			if !ok {
				if near := nearest(k.Value, names); near != "" {
					return fmt.Errorf("%d: unknown key %s.%s: did you mean %s?", k.Line, at, quoteLong(k.Value), near)
				}
				return fmt.Errorf("%d: unknown key %s.%s: the keys are %s", k.Line, at, quoteLong(k.Value), strings.Join(names, ", "))
			}
			if err := checkKeys(at+"."+k.Value, v, ft); err != nil {
				return err
			}
		}
	case reflect.Slice:
		if n.Kind != yaml.SequenceNode {
			return fmt.Errorf("%d: %s is %s, want a list", n.Line, at, shape(n))
		}
		for i, e := range n.Content {
			if err := checkKeys(fmt.Sprintf("%s[%d]", at, i), e, t.Elem()); err != nil {
				return err
			}
		}
	case reflect.String:
		if n.Kind != yaml.ScalarNode {
			return fmt.Errorf("%d: %s is %s, want one value", n.Line, at, shape(n))
		}
		n.Tag = "!!str"
	case reflect.Bool:
		if n.Kind != yaml.ScalarNode || n.Tag != "!!bool" {
			return fmt.Errorf("%d: %s is %s, want true or false", n.Line, at, shape(n))
		}
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		if n.Kind != yaml.ScalarNode || n.Tag != "!!int" {
			return fmt.Errorf("%d: %s is %s, want a whole number", n.Line, at, shape(n))
		}
	case reflect.Float32, reflect.Float64:
		if n.Kind != yaml.ScalarNode || (n.Tag != "!!int" && n.Tag != "!!float") {
			return fmt.Errorf("%d: %s is %s, want a number", n.Line, at, shape(n))
		}
	}
	return nil
}

// nearest returns the key of keys closest to name by edit distance, or
// "" when none is close enough to be what was meant.
func nearest(name string, keys []string) string {
	best, bestD := "", 0
	for _, k := range keys {
		d := distance(name, k)
		if best == "" || d < bestD {
			best, bestD = k, d
		}
	}
	if best == "" || bestD > max(2, len(name)/3) {
		return ""
	}
	return best
}

// distance is the Levenshtein distance of a and b.
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

// Checked is a string flag whose every value passes check, on the
// command line and in the file alike.
type Checked struct {
	p     *string
	typ   string
	check func(string) error
}

// NewChecked returns a flag value that stores into p the values check
// accepts; typ names the value in help (size, address).
func NewChecked(p *string, typ string, check func(string) error) *Checked {
	return &Checked{p: p, typ: typ, check: check}
}

// Set checks s and stores it.
func (c *Checked) Set(s string) error {
	if err := c.check(s); err != nil {
		return err
	}
	*c.p = s
	return nil
}

// String is the value stored.
func (c *Checked) String() string {
	if c == nil || c.p == nil {
		return ""
	}
	return *c.p
}

// Type names the value in help.
func (c *Checked) Type() string { return c.typ }

// HostPort accepts host:port (an IP or a name, and a port).
func HostPort(s string) error {
	if _, port, err := net.SplitHostPort(s); err != nil || port == "" {
		return fmt.Errorf("%s is not IP:port (for example 127.0.0.1:7443)", quoteLong(s))
	}
	return nil
}

// LogLevel accepts slog's level names.
func LogLevel(s string) error {
	var level slog.Level
	if err := level.UnmarshalText([]byte(s)); err != nil {
		return fmt.Errorf("%s is not a level: use debug, info, warn or error", quoteLong(s))
	}
	return nil
}

// OptionalHostPort accepts "" (off) or host:port.
func OptionalHostPort(s string) error {
	if s == "" {
		return nil
	}
	return HostPort(s)
}
