package api

import (
	"strings"
	"testing"
	"unicode/utf8"
)

func TestExcerptAndClip(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ in, excerpt string }{
		{"tcp", `"tcp"`},
		{strings.Repeat("a", MaxQuoted), `"` + strings.Repeat("a", MaxQuoted) + `"`},
		{strings.Repeat("a", 100000), `"` + strings.Repeat("a", MaxQuoted) + `"… (100000 bytes)`},
		{"a" + strings.Repeat("é", 100), `"a` + strings.Repeat("é", 31) + `"… (201 bytes)`}, // never half a character
	} {
		if got := Excerpt(tc.in); got != tc.excerpt {
			t.Errorf("Excerpt(%.20s…) = %s, want %s", tc.in, got, tc.excerpt)
		}
	}
	if got := Clip(strings.Repeat("é", 1000), 11); got != strings.Repeat("é", 5)+"… (2000 bytes)" || !utf8.ValidString(got) {
		t.Errorf("Clip: %s", got)
	}
}
