package api

import (
	"errors"
	"net/netip"
	"strings"
	"testing"
)

func TestParsePoolRanges(t *testing.T) {
	tests := []struct {
		name     string
		in       []string
		from, to string
		err      string
	}{
		{"v4 cidr", []string{"192.0.2.0/28"}, "192.0.2.0", "192.0.2.15", ""},
		{"v4 slash 0", []string{"0.0.0.0/0"}, "0.0.0.0", "255.255.255.255", ""},
		{"v4 slash 32", []string{"192.0.2.7/32"}, "192.0.2.7", "192.0.2.7", ""},
		{"v6 cidr", []string{"2001:db8:10::/124"}, "2001:db8:10::", "2001:db8:10::f", ""},
		{"v6 slash 64", []string{"2001:db8::/64"}, "2001:db8::", "2001:db8::ffff:ffff:ffff:ffff", ""},
		{"v6 slash 63", []string{"2001:db8::/63"}, "2001:db8::", "2001:db8:0:1:ffff:ffff:ffff:ffff", ""},
		{"v6 slash 0", []string{"::/0"}, "::", "ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff", ""},
		{"v4 range", []string{"192.0.2.10-192.0.2.20"}, "192.0.2.10", "192.0.2.20", ""},
		{"v4 range spaces", []string{" 192.0.2.10 - 192.0.2.20 "}, "192.0.2.10", "192.0.2.20", ""},
		{"v4 range single", []string{"192.0.2.10-192.0.2.10"}, "192.0.2.10", "192.0.2.10", ""},
		{"v6 range", []string{"2001:db8::10-2001:db8::1:0"}, "2001:db8::10", "2001:db8::1:0", ""},
		{"not canonical", []string{"192.0.2.1/28"}, "", "", "cidrs[0]: 192.0.2.1/28 is not in canonical form; use 192.0.2.0/28"},
		{"second bad", []string{"192.0.2.0/28", "nope"}, "", "", `cidrs[1]: "nope" is not a CIDR or a range`},
		{"empty", []string{""}, "", "", "cidrs[0]: empty"},
		{"bare address", []string{"2001:db8::1"}, "", "", "write it as 2001:db8::1/128"},
		{"reversed", []string{"192.0.2.20-192.0.2.10"}, "", "", "start 192.0.2.20 is after end 192.0.2.10"},
		{"families", []string{"192.0.2.1-2001:db8::1"}, "", "", "different families"},
		{"zone", []string{"fe80::1%eth0-fe80::2"}, "", "", "zones are not allowed"},
		{"mapped range", []string{"::ffff:192.0.2.1-::ffff:192.0.2.9"}, "", "", "use 192.0.2.1"},
		{"mapped cidr", []string{"::ffff:192.0.2.0/120"}, "", "", "IPv4 form"},
		{"prefix too long", []string{"192.0.2.0/33"}, "", "", "is not a CIDR or a range"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rs, err := ParsePoolRanges(tt.in)
			if tt.err != "" {
				if err == nil || !strings.Contains(err.Error(), tt.err) || !errors.Is(err, ErrInvalid) {
					t.Fatalf("got %v, want ErrInvalid with %q", err, tt.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			r := rs[len(rs)-1]
			if r.From != netip.MustParseAddr(tt.from) || r.To != netip.MustParseAddr(tt.to) {
				t.Fatalf("got %v, want %s-%s", r, tt.from, tt.to)
			}
		})
	}
}

func TestRangeContains(t *testing.T) {
	r := Range{From: netip.MustParseAddr("192.0.2.10"), To: netip.MustParseAddr("192.0.2.20")}
	r6 := Range{From: netip.MustParseAddr("2001:db8::"), To: netip.MustParseAddr("2001:db8::ff")}
	tests := []struct {
		r    Range
		a    string
		want bool
	}{
		{r, "192.0.2.10", true},
		{r, "192.0.2.20", true},
		{r, "192.0.2.15", true},
		{r, "192.0.2.9", false},
		{r, "192.0.2.21", false},
		{r, "::ffff:192.0.2.15", false},
		{r, "2001:db8::1", false},
		{r6, "2001:db8::1", true},
		{r6, "2001:db8::100", false},
		{r6, "192.0.2.15", false},
	}
	for _, tt := range tests {
		t.Run(tt.r.String()+" "+tt.a, func(t *testing.T) {
			if got := tt.r.Contains(netip.MustParseAddr(tt.a)); got != tt.want {
				t.Fatalf("Contains(%s) = %v", tt.a, got)
			}
		})
	}
	if r.Contains(netip.Addr{}) {
		t.Error("contains the zero Addr")
	}
}

func TestUsableRange(t *testing.T) {
	tests := []struct {
		in, from, to string
	}{
		{"192.0.2.0/28", "192.0.2.1", "192.0.2.14"},
		{"192.0.2.0/30", "192.0.2.1", "192.0.2.2"},
		{"192.0.2.0/31", "192.0.2.0", "192.0.2.1"},
		{"192.0.2.0/32", "192.0.2.0", "192.0.2.0"},
		{"2001:db8::/126", "2001:db8::1", "2001:db8::3"},
		{"2001:db8::/127", "2001:db8::", "2001:db8::1"},
		{"192.0.2.0-192.0.2.255", "192.0.2.0", "192.0.2.255"},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			pr, err := parsePoolRange(tt.in)
			if err != nil {
				t.Fatal(err)
			}
			if pr.usable.From.String() != tt.from || pr.usable.To.String() != tt.to {
				t.Fatalf("usable %v, want %s-%s", pr.usable, tt.from, tt.to)
			}
		})
	}
}

func FuzzParsePoolRanges(f *testing.F) {
	for _, s := range []string{
		"192.0.2.0/28", "192.0.2.10-192.0.2.20", "2001:db8:10::/124", "2001:db8::1-2001:db8::ff",
		"0.0.0.0/0", "::/0", "192.0.2.1/28", "1.2.3.4-::1", "fe80::1%eth0/64", "::ffff:1.2.3.4/128", "-", "/",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		rs, err := ParsePoolRanges([]string{s})
		if err != nil {
			if !errors.Is(err, ErrInvalid) || !strings.HasPrefix(err.Error(), "cidrs[0]: ") {
				t.Fatalf("error %q does not wrap ErrInvalid with the field", err)
			}
			return
		}
		r := rs[0]
		if !r.From.IsValid() || !r.To.IsValid() || r.From.Is4() != r.To.Is4() || r.From.Zone() != "" || r.From.Is4In6() {
			t.Fatalf("%q: bad range %v", s, r)
		}
		if r.From.Compare(r.To) > 0 || !r.Contains(r.From) || !r.Contains(r.To) {
			t.Fatalf("%q: inconsistent range %v", s, r)
		}
		back, err := ParsePoolRanges([]string{r.String()})
		if err != nil || back[0] != r {
			t.Fatalf("%q: %v does not round-trip: %v %v", s, r, back, err)
		}
		pr, err := parsePoolRange(s)
		if err != nil || !r.Contains(pr.usable.From) || !r.Contains(pr.usable.To) || pr.usable.From.Compare(pr.usable.To) > 0 {
			t.Fatalf("%q: usable part %v outside %v (%v)", s, pr.usable, r, err)
		}
	})
}
