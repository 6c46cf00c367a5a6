package api

import (
	"fmt"
	"strconv"
	"unicode/utf8"
)

// A refusal names the field, the bound and how to raise it; it never
// echoes a long value. A tenant controls the values it sends, and each
// refusal travels to its agent, into the events every host keeps, and
// into the logs: quoting a 100 KB value would let one tenant fill them.
const (
	// MaxQuoted is how many bytes of a value a refusal quotes.
	MaxQuoted = 64
	// MaxReason bounds one reason (FieldError.Reason) and MaxFieldPath
	// one field path (a path holds map keys the writer chose).
	MaxReason    = 512
	MaxFieldPath = 160
)

// Excerpt quotes s as %q would, cut to its first MaxQuoted bytes (at a
// character boundary) and followed by its full length when it is longer:
// "aaaa…" (102400 bytes).
func Excerpt(s string) string {
	if len(s) <= MaxQuoted {
		return strconv.Quote(s)
	}
	return strconv.Quote(cut(s, MaxQuoted)) + "… (" + strconv.Itoa(len(s)) + " bytes)"
}

// Clip returns s cut at a character boundary to at most max bytes,
// followed by "… (N bytes)" when it was longer. Event and log text goes
// through it.
func Clip(s string, max int) string {
	if len(s) <= max {
		return s
	}
	return cut(s, max) + "… (" + strconv.Itoa(len(s)) + " bytes)"
}

// cut returns the longest prefix of s of at most n bytes that does not
// split a UTF-8 sequence (protobuf strings must stay valid UTF-8).
func cut(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}

// quoted is a string argument of a refusal's format: %q quotes an
// Excerpt of it, other verbs print it whole (the reason is bounded as a
// whole by MaxReason).
type quoted string

func (q quoted) Format(f fmt.State, verb rune) {
	if verb == 'q' {
		_, _ = f.Write([]byte(Excerpt(string(q))))
		return
	}
	_, _ = f.Write([]byte(q))
}

// Reasonf formats a refusal's reason (or a data-plane problem's): string
// arguments quoted with %q are excerpts, and the whole reason is at most
// MaxReason bytes.
func Reasonf(format string, args ...any) string { return reasonf(format, args) }

func reasonf(format string, args []any) string {
	for i, a := range args {
		if s, ok := a.(string); ok && len(s) > MaxQuoted {
			args[i] = quoted(s)
		}
	}
	return Clip(fmt.Sprintf(format, args...), MaxReason)
}
