package promtext

import (
	"bufio"
	"io"
	"math"
	"strconv"
	"strings"
)

// Text writes the Prometheus text format (version 0.0.4) line by line,
// for a metrics server's TextWriter: it reuses one line buffer, so writing a series
// allocates nothing. The first error stops it and is returned by Flush.
type Text struct {
	w   *bufio.Writer
	buf []byte
	err error
}

// NewText returns a Text writing to w.
func NewText(w io.Writer) *Text { return &Text{w: bufio.NewWriterSize(w, 32<<10)} }

// Family writes a family's HELP and TYPE lines, unless it has no series.
func (t *Text) Family(name, help, typ string, series int) {
	if series == 0 || t.err != nil {
		return
	}
	b := append(t.buf[:0], "# HELP "...)
	b = append(b, name...)
	b = append(b, ' ')
	b = AppendEscaped(b, help, false)
	b = append(b, "\n# TYPE "...)
	b = append(b, name...)
	b = append(b, ' ')
	b = append(b, typ...)
	b = append(b, '\n')
	t.Write(b)
}

// Sample writes one line: name+suffix{names=values[,extra=extraValue]} v,
// without braces when there are no labels.
func (t *Text) Sample(name, suffix string, names, values []string, extra, extraValue string, v float64) {
	if t.err != nil {
		return
	}
	b := append(t.buf[:0], name...)
	b = append(b, suffix...)
	if len(names) > 0 || extra != "" {
		b = append(b, '{')
		for i, n := range names {
			if i > 0 {
				b = append(b, ',')
			}
			b = AppendLabel(b, n, values[i])
		}
		if extra != "" {
			if len(names) > 0 {
				b = append(b, ',')
			}
			b = AppendLabel(b, extra, extraValue)
		}
		b = append(b, '}')
	}
	b = append(b, ' ')
	b = AppendFloat(b, v)
	b = append(b, '\n')
	t.Write(b)
}

// Line returns the line buffer, empty, for a line built by hand and
// handed to Write.
func (t *Text) Line() []byte { return t.buf[:0] }

// Write writes a line built on Line (or on anything) and keeps its
// buffer for the next; after an error it writes nothing.
func (t *Text) Write(b []byte) {
	t.buf = b
	if t.err != nil {
		return
	}
	if _, err := t.w.Write(b); err != nil {
		t.err = err
	}
}

// Flush writes what is buffered and returns the first error.
func (t *Text) Flush() error {
	if t.err != nil {
		return t.err
	}
	return t.w.Flush()
}

// AppendLabel appends name="value", the value escaped.
func AppendLabel(b []byte, name, value string) []byte {
	b = append(b, name...)
	b = append(b, '=', '"')
	b = AppendEscaped(b, value, true)
	return append(b, '"')
}

// AppendEscaped escapes a backslash and a line feed, and in a label value
// (quote) a double quote, as the text format asks.
func AppendEscaped(b []byte, s string, quote bool) []byte {
	if !strings.ContainsAny(s, "\\\n\"") {
		return append(b, s...)
	}
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c == '\\':
			b = append(b, `\\`...)
		case c == '\n':
			b = append(b, `\n`...)
		case c == '"' && quote:
			b = append(b, `\"`...)
		default:
			b = append(b, c)
		}
	}
	return b
}

// AppendFloat formats v as the text format's encoder does.
func AppendFloat(b []byte, v float64) []byte {
	switch {
	case v == 1:
		return append(b, '1')
	case v == 0:
		return append(b, '0')
	case v == -1:
		return append(b, "-1"...)
	case math.IsNaN(v):
		return append(b, "NaN"...)
	case math.IsInf(v, +1):
		return append(b, "+Inf"...)
	case math.IsInf(v, -1):
		return append(b, "-Inf"...)
	}
	return strconv.AppendFloat(b, v, 'g', -1, 64)
}
