package main

import (
	"slices"
	"strings"
	"testing"
)

func TestFormatsOf(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		names []string
		want  []string
		err   string
	}{
		{names: []string{"deb", "rpm"}, want: []string{"deb", "rpm"}},
		{names: []string{"deb"}, want: []string{"deb"}},
		{names: []string{"rpm"}, want: []string{"rpm"}},
		{names: []string{"rpm", "deb", "rpm"}, want: []string{"deb", "rpm"}},
		{names: []string{"deb", "apk"}, err: `--format "apk": not a package format`},
		{names: []string{"DEB"}, err: `--format "DEB": not a package format`},
		{names: nil, err: "--format: no format named"},
	} {
		got, err := formatsOf(tc.names)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("formatsOf(%q) = %q, %v; want the error %q", tc.names, got, err, tc.err)
			}
			continue
		}
		if err != nil || !slices.Equal(got, tc.want) {
			t.Errorf("formatsOf(%q) = %q, %v; want %q", tc.names, got, err, tc.want)
		}
	}
}
