// Package gen writes the files teapot-lb's packages ship that come from
// the command tree: the documented serve configuration file (one key per
// serve flag, with the flag's help and default) and the man pages.
package gen

import (
	"bytes"
	"fmt"
	"sort"
	"strings"

	"github.com/spf13/pflag"
)

// ServeFile describes the serve configuration file to write.
type ServeFile struct {
	// Header is the opening comment (without the leading "# ").
	Header []string
	// Set are the keys written uncommented, with their values as YAML.
	Set map[string]string
	// DefaultText replaces the default shown for flags whose default
	// depends on the machine (the node id is the host name).
	DefaultText map[string]string
	// Skip are flags that have no key in the file.
	Skip []string
	// Sections are further commented blocks (the bgp: section), written
	// after the flags, one line each without the leading "# ".
	Sections [][]string
}

// ServeYAML writes one commented key per flag in flags, in flag order
// sorted by name, so that the file follows the command line exactly.
func ServeYAML(flags *pflag.FlagSet, sf ServeFile) []byte {
	var b bytes.Buffer
	for _, l := range sf.Header {
		comment(&b, l)
	}
	var all []*pflag.Flag
	flags.VisitAll(func(f *pflag.Flag) {
		for _, s := range sf.Skip {
			if s == f.Name {
				return
			}
		}
		all = append(all, f)
	})
	sort.Slice(all, func(i, j int) bool { return all[i].Name < all[j].Name })
	for _, f := range all {
		b.WriteString("\n")
		for _, l := range wrap(f.Usage, 76) {
			comment(&b, l)
		}
		def := f.DefValue
		if t, ok := sf.DefaultText[f.Name]; ok {
			def = t
		}
		if v, ok := sf.Set[f.Name]; ok {
			if def != "" {
				comment(&b, "default: "+def)
			}
			fmt.Fprintf(&b, "%s: %s\n", f.Name, v)
			continue
		}
		if def == "" || def == "0" || def == "0s" {
			fmt.Fprintf(&b, "#%s:\n", f.Name)
			continue
		}
		fmt.Fprintf(&b, "#%s: %s\n", f.Name, yamlScalar(def))
	}
	for _, sec := range sf.Sections {
		b.WriteString("\n")
		for _, l := range sec {
			comment(&b, l)
		}
	}
	return b.Bytes()
}

func comment(b *bytes.Buffer, l string) {
	if l == "" {
		b.WriteString("#\n")
		return
	}
	b.WriteString("# " + l + "\n")
}

// yamlScalar quotes values YAML would read as something else.
func yamlScalar(s string) string {
	if strings.ContainsAny(s, ":#{}[],&*!|>'\"%@`") || strings.HasPrefix(s, "-") {
		return fmt.Sprintf("%q", s)
	}
	return s
}

func wrap(s string, width int) []string {
	var lines []string
	var cur string
	for _, w := range strings.Fields(s) {
		if cur != "" && len(cur)+1+len(w) > width {
			lines = append(lines, cur)
			cur = w
			continue
		}
		if cur != "" {
			cur += " "
		}
		cur += w
	}
	if cur != "" {
		lines = append(lines, cur)
	}
	return lines
}
