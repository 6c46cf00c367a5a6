package snapshot

import (
	"net/url"
	"strings"
	"testing"
)

// FuzzQueryValue checks that a query condition reads the value
// url.ParseQuery gives, without it.
func FuzzQueryValue(f *testing.F) {
	for _, s := range [][2]string{
		{"a=1&b=2", "b"}, {"a=1&a=2", "a"}, {"a=%zz&a=2", "a"}, {"a=1;b=2&a=3", "a"}, {"%61=1", "a"},
		{"a+b=c+d", "a b"}, {"&&a&", "a"}, {"a=%2", "a"}, {"=1", ""}, {"a", "a"}, {"a=1=2", "a"},
		{strings.Repeat("x&", maxQueryParams-1) + "a=1", "a"}, {strings.Repeat("x&", maxQueryParams) + "a=1", "a"},
	} {
		f.Add(s[0], s[1])
	}
	f.Fuzz(func(t *testing.T, raw, name string) {
		vals, _ := url.ParseQuery(raw)
		want, wok := "", false
		if vs, ok := vals[name]; ok && len(vs) > 0 {
			want, wok = vs[0], true
		}
		if got, ok := queryValue(raw, name); got != want || ok != wok {
			t.Fatalf("queryValue(%q, %q) = %q %v, want %q %v", raw, name, got, ok, want, wok)
		}
	})
}

// A plain query is read in place.
func TestQueryValueAllocs(t *testing.T) {
	if a := testing.AllocsPerRun(100, func() {
		if v, ok := queryValue("a=0&v=1&z", "v"); !ok || v != "1" {
			t.Fatalf("got %q %v", v, ok)
		}
	}); a != 0 {
		t.Errorf("%.1f allocations, want 0", a)
	}
}
