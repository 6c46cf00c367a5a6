package schema

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"strings"

	"google.golang.org/protobuf/reflect/protoreflect"
)

// Markdown writes the reference: per kind its fields in a table, then an
// example.
func (r *Reference) Markdown(w io.Writer) error {
	var b bytes.Buffer
	b.WriteString("# Manifest reference\n\n")
	b.WriteString("<!-- Generated from the model by `make generate` (go run ./api/schema/gen); do not edit. -->\n\n")
	b.WriteString("A manifest is YAML or JSON: documents separated by `---`, each with a `kind:` and the\n" +
		"object's fields at the top level. `teapot-lb apply -f FILE` creates or updates them all in\n" +
		"one change; `teapot-lb diff -f FILE` and `apply --dry-run` show and check a change first.\n" +
		"Field names match in any case and with or without `_` and `-`; durations are written like\n" +
		"`2s` or `1m30s`. A field left out takes its default. The same text is printed by\n" +
		"`teapot-lb schema KIND[.FIELD...]`, and `teapot-lb schema --json-schema` prints a JSON Schema\n" +
		"for editors (also in [teapot-lb.schema.json](teapot-lb.schema.json)); with\n" +
		"yaml-language-server, start a file with\n" +
		"`# yaml-language-server: $schema=teapot-lb.schema.json`.\n\n" +
		"Fields marked *set by the cluster* are shown by `get` and ignored when applied.\n" +
		"Complete manifests for common cases are in [examples/](../examples/).\n\n" +
		"A tenant's `quotas` (below, under Tenant) bound what it stores. What it makes an LB host\n" +
		"spend is bounded on each host where it is spent, per tenant: connections and the\n" +
		"descriptors of its member connections and splice pipes (`quotas.connections`, derived from\n" +
		"the host's `LimitNOFILE`), TLS handshake and health-check signature CPU\n" +
		"(`serve --tls-cpu-per-tenant`), regular-expression CPU (`quotas.regexCpuMillicores`),\n" +
		"new ACME orders (`serve --acme-orders-per-tenant`), connections to the API port (from\n" +
		"`LimitNOFILE`), access-log lines, UDP replies, retries of HTTP requests (`routes[].retry`:\n" +
		"a share of its requests in flight), DNS queries for its names\n" +
		"(`serve --dns-queries-per-tenant`), new DNSSEC signatures for its names\n" +
		"(`serve --dns-signatures-per-tenant`), the routes its BGP speakers announce\n" +
		"(`bgp.maxPrefixes` per session, `bgp.maxPrefixesTotal` per host) and the route changes they send\n" +
		"(`bgp.maxUpdatesPerSecond` per session), the bytes its agents write through the hosts' streams\n" +
		"(`quotas.writeBytesPerSecond`), and, on hosts with `serve --data-path io_uring`, the io_uring\n" +
		"buffers its TCP connections hold. The README's\n" +
		"[Tenant limits](../README.md#tenant-limits) lists each with its default and how to raise it.\n\n")
	for _, k := range r.Kinds {
		fmt.Fprintf(&b, "- [%s](#%s)\n", k.Name, strings.ToLower(k.Name))
	}
	for _, k := range r.Kinds {
		fmt.Fprintf(&b, "\n## %s\n\n", k.Name)
		if k.Doc != "" {
			b.WriteString(k.Doc + "\n\n")
		}
		fmt.Fprintf(&b, "`kind: %s` (the CLI also takes %s). `teapot-lb schema %s` prints this.\n\n", k.Name, strings.Join(quoteAll(k.Aliases), ", "), k.Aliases[0])
		b.WriteString("| field | type | default | limits | description |\n|---|---|---|---|---|\n")
		var rows func(fs []*Field)
		rows = func(fs []*Field) {
			for _, f := range fs {
				desc := f.Doc
				if f.Required {
					desc = "**Required.** " + desc
				}
				if f.ReadOnly {
					desc = "*Set by the cluster.* " + desc
				}
				if len(f.Enum) > 0 {
					desc += " One of: " + strings.Join(quoteAll(f.Enum), ", ") + "."
				}
				if f.Example != "" {
					desc += " Example: `" + f.Example + "`."
				}
				fmt.Fprintf(&b, "| `%s` | %s | %s | %s | %s |\n", f.Path, cell(f.Type), cell(f.Default), cell(f.Limits), cell(strings.TrimSpace(desc)))
				rows(f.Fields)
			}
		}
		rows(k.Fields)
		if k.Example.YAML != "" {
			fmt.Fprintf(&b, "\nExample (from [%s](../%s)):\n\n```yaml\n%s```\n", k.Example.File, k.Example.File, k.Example.YAML)
		}
	}
	_, err := w.Write(b.Bytes())
	return err
}

func quoteAll(s []string) []string {
	out := make([]string, len(s))
	for i, x := range s {
		out[i] = "`" + x + "`"
	}
	return out
}

// cell escapes a table cell.
func cell(s string) string {
	if s == "" {
		return ""
	}
	return strings.ReplaceAll(strings.ReplaceAll(s, "|", `\|`), "\n", " ")
}

// Text writes a kind, or one field of it, as `teapot-lb schema` prints
// it: the field itself, then every field under it.
func (r *Reference) Text(w io.Writer, k *Kind, f *Field) error {
	var b bytes.Buffer
	fields := k.Fields
	fmt.Fprintf(&b, "KIND:     %s\n", k.Name)
	if f == nil {
		if k.Doc != "" {
			fmt.Fprintf(&b, "\n%s\n", wrap(k.Doc, "  "))
		}
	} else {
		fmt.Fprintf(&b, "FIELD:    %s <%s>\n", f.Path, f.Type)
		b.WriteString("\n")
		describe(&b, f, "  ")
		fields = f.Fields
	}
	if len(fields) > 0 {
		b.WriteString("\nFIELDS:\n")
		var list func(fs []*Field, indent string)
		list = func(fs []*Field, indent string) {
			for _, x := range fs {
				fmt.Fprintf(&b, "%s%s <%s>\n", indent, x.Name, x.Type)
				describe(&b, x, indent+"    ")
				list(x.Fields, indent+"  ")
			}
		}
		list(fields, "  ")
	}
	if f == nil && k.Example.YAML != "" {
		fmt.Fprintf(&b, "\nEXAMPLE (%s):\n%s", k.Example.File, indentLines(k.Example.YAML, "  "))
	}
	_, err := w.Write(b.Bytes())
	return err
}

func describe(b *bytes.Buffer, f *Field, indent string) {
	var tags []string
	if f.Required {
		tags = append(tags, "required")
	}
	if f.ReadOnly {
		tags = append(tags, "set by the cluster")
	}
	if len(tags) > 0 {
		fmt.Fprintf(b, "%s(%s)\n", indent, strings.Join(tags, "; "))
	}
	if f.Doc != "" {
		b.WriteString(wrap(f.Doc, indent) + "\n")
	}
	for _, kv := range [][2]string{{"values", strings.Join(f.Enum, " | ")}, {"default", f.Default}, {"limits", f.Limits}, {"example", f.Example}} {
		if kv[1] != "" {
			fmt.Fprintf(b, "%s%s: %s\n", indent, kv[0], kv[1])
		}
	}
}

// wrap fills s into lines of about 80 columns, each starting with indent.
func wrap(s, indent string) string {
	var lines []string
	line := indent
	for _, word := range strings.Fields(s) {
		if len(line) > len(indent) && len(line)+1+len(word) > 80 {
			lines = append(lines, line)
			line = indent
		}
		if len(line) > len(indent) {
			line += " "
		}
		line += word
	}
	return strings.Join(append(lines, line), "\n")
}

func indentLines(s, indent string) string {
	var b strings.Builder
	for _, l := range strings.SplitAfter(s, "\n") {
		if l != "" {
			b.WriteString(indent + l)
		}
	}
	return b.String()
}

// durationPattern is the form of durations in manifests ("2s", "1m30s").
const durationPattern = `^-?([0-9]+(\.[0-9]+)?(ns|us|µs|ms|s|m|h))+$`

// JSONSchema writes a JSON Schema (draft 07) of a manifest document: one
// of the kinds, chosen by kind:. Field names are the ones Encode writes
// (the schema is strict where the CLI is lenient about spelling).
func (r *Reference) JSONSchema(w io.Writer) error {
	defs := map[string]any{}
	var oneOf []any
	for _, k := range r.Kinds {
		props := map[string]any{"kind": map[string]any{"const": k.Name, "description": "Kind of the document."}}
		required := []string{"kind"}
		for _, f := range k.Fields {
			props[f.Name] = fieldSchema(f)
			if f.Required {
				required = append(required, f.Name)
			}
		}
		defs[k.Name] = map[string]any{
			"type": "object", "description": k.Doc, "properties": props,
			"required": required, "additionalProperties": false,
		}
		oneOf = append(oneOf, map[string]any{"$ref": "#/definitions/" + k.Name})
	}
	doc := map[string]any{
		"$schema":     "http://json-schema.org/draft-07/schema#",
		"title":       "teapot-lb manifest",
		"description": "One document of a teapot-lb manifest (teapot-lb apply -f). Generated from the model; see docs/reference.md.",
		"oneOf":       oneOf,
		"definitions": defs,
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetIndent("", "  ")
	enc.SetEscapeHTML(false)
	if err := enc.Encode(doc); err != nil {
		return err
	}
	_, err := w.Write(buf.Bytes())
	return err
}

func fieldSchema(f *Field) map[string]any {
	var s map[string]any
	switch {
	case f.fd.IsMap():
		s = map[string]any{"type": "object", "additionalProperties": valueSchema(f.fd.MapValue(), f.Fields)}
	case f.fd.IsList():
		s = map[string]any{"type": "array", "items": valueSchema(f.fd, f.Fields)}
	default:
		s = valueSchema(f.fd, f.Fields)
	}
	desc := f.Doc
	for _, kv := range [][2]string{{"Default", f.Default}, {"Limits", f.Limits}} {
		if kv[1] != "" {
			desc += " " + kv[0] + ": " + kv[1] + "."
		}
	}
	if f.ReadOnly {
		s["readOnly"] = true
		desc = "Set by the cluster. " + desc
	}
	if desc = strings.TrimSpace(desc); desc != "" {
		s["description"] = desc
	}
	if len(f.Enum) > 0 && !f.fd.IsList() && !f.fd.IsMap() {
		s["enum"] = f.Enum
	}
	return s
}

// valueSchema is the schema of one value of fd (an element of a list or a
// map value); sub are the fields of a message value.
func valueSchema(fd protoreflect.FieldDescriptor, sub []*Field) map[string]any {
	switch fd.Kind() {
	case protoreflect.MessageKind, protoreflect.GroupKind:
		switch fd.Message().FullName() {
		case "google.protobuf.Duration":
			return map[string]any{"type": "string", "pattern": durationPattern}
		case "google.protobuf.Timestamp":
			return map[string]any{"type": "string", "format": "date-time"}
		}
		props := map[string]any{}
		for _, f := range sub {
			props[f.Name] = fieldSchema(f)
		}
		obj := map[string]any{"type": "object", "properties": props, "additionalProperties": false}
		if len(sub) == 0 {
			obj = map[string]any{"type": "object"}
		}
		if fd.Message().FullName() == "teapot.v1.Member" {
			return map[string]any{"oneOf": []any{map[string]any{"type": "string", "description": "IP:port"}, obj}}
		}
		return obj
	case protoreflect.BoolKind:
		return map[string]any{"type": "boolean"}
	case protoreflect.StringKind:
		return map[string]any{"type": "string"}
	case protoreflect.DoubleKind, protoreflect.FloatKind:
		return map[string]any{"type": "number"}
	case protoreflect.Uint32Kind, protoreflect.Fixed32Kind:
		return map[string]any{"type": "integer", "minimum": 0, "maximum": uint32(1<<32 - 1)}
	case protoreflect.Uint64Kind, protoreflect.Fixed64Kind:
		return map[string]any{"type": "integer", "minimum": 0}
	case protoreflect.BytesKind:
		return map[string]any{"type": "string", "contentEncoding": "base64"}
	}
	return map[string]any{"type": "integer"}
}
