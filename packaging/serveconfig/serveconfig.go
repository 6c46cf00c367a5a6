// Package serveconfig merges serve's configuration file with its flags.
//
// The file is derived from the flag set: every flag has a key of the same
// name, and a key's value is applied by the flag's own Value.Set, so that
// a value is parsed and checked the same way whether it comes from the
// command line or from the file. A flag given on the command line wins
// over its key. Keys that are not flags (sections such as bgp:) are
// decoded strictly into the value the caller names. Whatever the file
// says is either applied or refused with the file, the line and a reason:
// an unknown key (with the nearest known one), a value of the wrong shape,
// a duration without a unit.
package serveconfig

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"

	"github.com/spf13/pflag"
	yaml "go.yaml.in/yaml/v3"
)

// ExitConfig is the exit status of a serve refused for its configuration
// (sysexits' EX_CONFIG). The unit names it in RestartPreventExitStatus=:
// a bad file fails at once instead of restarting forever.
const ExitConfig = 78

// ErrConfig is wrapped by every error of this package.
var ErrConfig = errors.New("configuration")

// Error is a refused configuration; it ends serve with ExitConfig.
type Error struct{ err error }

// Refuse wraps err as a configuration error.
func Refuse(err error) error {
	if err == nil {
		return nil
	}
	var ce *Error
	if errors.As(err, &ce) {
		return err
	}
	return &Error{err: err}
}

func (e *Error) Error() string { return e.err.Error() }

// Unwrap returns the refusal's cause.
func (e *Error) Unwrap() error { return e.err }

// Is makes every Error match ErrConfig.
func (e *Error) Is(target error) bool { return target == ErrConfig }

// ExitCode is the process's exit status for this error.
func (e *Error) ExitCode() int { return ExitConfig }

// File describes the keys of the file besides the flags.
type File struct {
	// CommandLineOnly are flags without a key (--config itself, and
	// what happens once, such as a restore): such a key is refused.
	CommandLineOnly []string
	// Sections are the keys that are not flags, each decoded strictly
	// into its value: a pointer, to a pointer to a struct with json tags.
	Sections map[string]any
}

// Keys returns the keys of the file: a key per flag of flags not in
// CommandLineOnly, and the sections, sorted.
func (f File) Keys(flags *pflag.FlagSet) []string {
	var keys []string
	flags.VisitAll(func(fl *pflag.Flag) {
		if !slices.Contains(f.CommandLineOnly, fl.Name) {
			keys = append(keys, fl.Name)
		}
	})
	for k := range f.Sections {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// Apply reads the YAML file at path and applies every key to flags: the
// flag of the same name is set through its Value.Set, unless it was
// given on the command line (flags.Changed); a section is decoded into
// its value. Every error names path and the line, and wraps ErrConfig.
func Apply(flags *pflag.FlagSet, path string, f File) error {
	data, err := os.ReadFile(path)
	if err != nil {
		return Refuse(fmt.Errorf("read the configuration file: %w", err))
	}
	return Refuse(apply(flags, path, data, f))
}

func apply(flags *pflag.FlagSet, path string, data []byte, f File) error {
	var doc, next yaml.Node
	dec := yaml.NewDecoder(bytes.NewReader(data))
	if err := dec.Decode(&doc); err != nil && !errors.Is(err, io.EOF) {
		return fmt.Errorf("%s: %s", path, strings.TrimPrefix(err.Error(), "yaml: "))
	}
	// A second document would be ignored: refuse it.
	if err := dec.Decode(&next); err == nil {
		return fmt.Errorf("%s:%d: a second document (after ---): the file is one set of keys", path, max(next.Line-1, 1))
	} else if !errors.Is(err, io.EOF) {
		return fmt.Errorf("%s: %s", path, strings.TrimPrefix(err.Error(), "yaml: "))
	}
	if doc.Kind == 0 || len(doc.Content) == 0 {
		return nil // empty file, or comments only
	}
	top := doc.Content[0]
	if top.Kind == yaml.ScalarNode && top.Tag == "!!null" {
		return nil
	}
	if top.Kind != yaml.MappingNode {
		return fmt.Errorf("%s:%d: the file is %s, want keys such as data-dir: /var/lib/teapot-lb", path, top.Line, shape(top))
	}
	seen := map[string]int{}
	for i := 0; i+1 < len(top.Content); i += 2 {
		k, v := top.Content[i], top.Content[i+1]
		at := fmt.Sprintf("%s:%d", path, k.Line)
		if k.Kind != yaml.ScalarNode {
			return fmt.Errorf("%s: a key is %s, want a name such as data-dir", at, shape(k))
		}
		name := k.Value
		if first, ok := seen[name]; ok {
			return fmt.Errorf("%s: %s is set twice (first on line %d)", at, name, first)
		}
		seen[name] = k.Line
		if target, ok := f.Sections[name]; ok {
			if err := decodeSection(name, v, target); err != nil {
				return fmt.Errorf("%s:%w", path, err)
			}
			continue
		}
		fl := flags.Lookup(name)
		if fl == nil || slices.Contains(f.CommandLineOnly, name) {
			return fmt.Errorf("%s: %s", at, unknownKey(name, fl != nil, f.Keys(flags)))
		}
		if v.Kind != yaml.ScalarNode {
			return fmt.Errorf("%s: %s is %s, want %s", at, name, shape(v), want(fl))
		}
		if flags.Changed(name) {
			continue // the command line wins
		}
		text := v.Value
		if v.Tag == "!!null" {
			text = ""
		}
		if err := fl.Value.Set(text); err != nil {
			return fmt.Errorf("%s: %s: %s", at, name, setError(fl, text, err))
		}
	}
	return nil
}

// unknownKey explains a key that is not a key of the file.
func unknownKey(name string, commandLine bool, keys []string) string {
	if commandLine {
		return fmt.Sprintf("%s is not a key of the file: give it on the command line (--%s), it must not outlive a restart", name, name)
	}
	if near := nearest(name, keys); near != "" {
		return fmt.Sprintf("unknown key %s: did you mean %s?", quoteLong(name), near)
	}
	return fmt.Sprintf("unknown key %s: the keys are serve's flags without their dashes (teapot-lb serve --help)", quoteLong(name))
}

// quoteLong quotes a key, cut to 40 characters.
func quoteLong(s string) string {
	if len(s) > 40 {
		s = s[:40] + "..."
	}
	return fmt.Sprintf("%q", s)
}

// want describes what a flag's key takes.
func want(fl *pflag.Flag) string {
	switch fl.Value.Type() {
	case "duration":
		return "a duration such as 30s"
	case "int", "int32", "int64", "uint", "uint32", "uint64":
		return "a whole number"
	case "bool":
		return "true or false"
	}
	return "one value such as " + cmpOr(fl.DefValue, "the flag --"+fl.Name+" takes")
}

func cmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// setError words the error of Value.Set for a key; pflag's own values
// return strconv's errors.
func setError(fl *pflag.Flag, text string, err error) string {
	if text == "" {
		return fmt.Sprintf("no value: give %s or remove the key (default %s)", want(fl), cmpOr(fl.DefValue, "none"))
	}
	switch fl.Value.Type() {
	case "int", "int32", "int64", "uint", "uint32", "uint64", "bool":
		return fmt.Sprintf("%s is not %s", quoteLong(text), want(fl))
	}
	return err.Error()
}

// shape names the kind of a YAML node for an error.
func shape(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	case yaml.AliasNode:
		return "an alias"
	}
	return fmt.Sprintf("the value %s", quoteLong(n.Value))
}

// decodeSection checks the keys of a section against the json tags of
// its type (line, nearest key), then decodes it through JSON so that the
// types' own UnmarshalJSON apply.
func decodeSection(name string, v *yaml.Node, target any) error {
	if err := checkKeys(name, v, typeOf(target)); err != nil {
		return err
	}
	var plain any
	if err := v.Decode(&plain); err != nil {
		return fmt.Errorf("%d: %s: %s", v.Line, name, strings.TrimPrefix(err.Error(), "yaml: "))
	}
	b, err := json.Marshal(plain)
	if err != nil {
		return fmt.Errorf("%d: %s: %w", v.Line, name, err)
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(target); err != nil {
		return fmt.Errorf("%d: %s: %s", v.Line, name, strings.TrimPrefix(err.Error(), "json: "))
	}
	return nil
}
