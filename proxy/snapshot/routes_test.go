package snapshot

import (
	"strings"
	"testing"
)

// testTable has one route per interesting shape; Index names them.
func testTable() *RouteTable {
	return NewRouteTable([]Route{
		{Host: "shop.acme.example", Path: "/", Index: 0},
		{Host: "shop.acme.example", Path: "/api", Index: 1},
		{Host: "shop.acme.example", Path: "/api/v2/", Index: 2},
		{Host: "shop.acme.example", Path: "/api", PathType: PathExact, Index: 3},
		{Host: "*.acme.example", Path: "/", Index: 4},
		{Host: "*.eu.acme.example", Path: "/", Index: 5},
		{Host: "*.acme.example", Path: "/static", Index: 6},
		{Host: "", Path: "/healthz", PathType: PathExact, Index: 7},
		{Host: "", Path: "/", Index: 8},
		{Host: "only.acme.example", Path: "/x", Index: 9},
		{Host: "shop.acme.example", Path: "/", Index: 10}, // duplicate of 0: dropped
	})
}

func TestRouteTableMatch(t *testing.T) {
	rt := testTable()
	tests := []struct {
		host, path string
		want       int // route Index, -1 for none
	}{
		{"shop.acme.example", "/", 0},
		{"shop.acme.example", "", 0},
		{"shop.acme.example", "/index.html", 0},
		{"shop.acme.example", "/api", 3},
		{"shop.acme.example", "/api/", 1},
		{"shop.acme.example", "/api/users", 1},
		{"shop.acme.example", "/apix", 0},
		{"shop.acme.example", "/api/v2", 2},
		{"shop.acme.example", "/api/v2/x/y", 2},
		{"shop.acme.example", "/api/v20", 1},
		{"SHOP.Acme.Example", "/api/x", 1},
		{"shop.acme.example:8080", "/api/x", 1},
		{"shop.acme.example.", "/api/x", 1},
		{"shop.acme.example.:443", "/api/x", 1},
		{"a.acme.example", "/", 4},
		{"a.b.acme.example", "/", 4},
		{"a.acme.example", "/static/app.js", 6},
		{"x.eu.acme.example", "/static/app.js", 5},
		{"x.y.eu.acme.example", "/", 5},
		{"eu.acme.example", "/", 4},
		{"acme.example", "/", 8},
		{"acme.example", "/healthz", 7},
		{"shop.acme.example", "/healthz", 0},
		{"only.acme.example", "/x/y", 9},
		{"only.acme.example", "/y", 4},
		{"[2001:db8::1]:80", "/", 8},
		{"192.0.2.1", "/", 8},
		{"", "/", 8},
		{".acme.example", "/", 8},
		{"a..acme.example", "/", 8},
		{"bad host.acme.example", "/", 8},
		{"a.acme.example:x", "/", 8},
	}
	for _, tt := range tests {
		t.Run(tt.host+tt.path, func(t *testing.T) {
			r := rt.Match(tt.host, tt.path)
			got := -1
			if r != nil {
				got = r.Index
			}
			if got != tt.want {
				t.Errorf("Match(%q, %q) = route %d, want %d", tt.host, tt.path, got, tt.want)
			}
		})
	}
}

func TestRouteTableWithoutFallback(t *testing.T) {
	rt := NewRouteTable([]Route{{Host: "shop.acme.example", Path: "/api", Index: 0}})
	tests := []struct{ host, path string }{{"shop.acme.example", "/"}, {"other.acme.example", "/api"}}
	for _, tt := range tests {
		if r := rt.Match(tt.host, tt.path); r != nil {
			t.Errorf("Match(%q, %q) = route %d, want none", tt.host, tt.path, r.Index)
		}
	}
	var nilTable *RouteTable
	if nilTable.Match("a", "/") != nil {
		t.Error("a nil table matched")
	}
}

func TestRouteTableMatchDoesNotAllocate(t *testing.T) {
	rt := testTable()
	allocs := testing.AllocsPerRun(1000, func() {
		rt.Match("X.Eu.Acme.Example:443", "/static/app.js")
		rt.Match("shop.acme.example", "/api/v2/x")
	})
	if allocs != 0 {
		t.Errorf("Match allocates %.1f times per call", allocs)
	}
}

// referenceMatch is the slow, obviously correct matcher Match must agree
// with: rank every route and keep the best.
func referenceMatch(rt *RouteTable, host, path string) *Route {
	h, ok := refHost(host)
	if path == "" {
		path = "/"
	}
	// hostRank: 3 exact, 2 wildcard (plus suffix length), 1 any host.
	hostRank := func(r *Route) int {
		switch {
		case r.Host == "":
			return 1
		case !ok:
			return 0
		case strings.HasPrefix(r.Host, "*."):
			suffix := r.Host[1:]
			if strings.HasSuffix(h, suffix) && len(h) > len(suffix) {
				return 2 + len(suffix)
			}
			return 0
		case r.Host == h:
			return 1 << 20
		}
		return 0
	}
	pathRank := func(r *Route) int {
		if r.PathType == PathExact {
			if path == r.Path {
				return 1 << 20
			}
			return 0
		}
		if r.Path == "/" {
			return 1
		}
		if path == r.Path || strings.HasPrefix(path, r.Path+"/") {
			return 1 + len(r.Path)
		}
		return 0
	}
	var best *Route
	bestH, bestP := 0, 0
	for i := range rt.routes {
		r := &rt.routes[i]
		hr, pr := hostRank(r), pathRank(r)
		if hr == 0 || pr == 0 {
			continue
		}
		if hr > bestH || hr == bestH && pr > bestP {
			best, bestH, bestP = r, hr, pr
		}
	}
	return best
}

func refHost(host string) (string, bool) {
	if i := strings.LastIndexByte(host, ':'); i >= 0 {
		if strings.Trim(host[i+1:], "0123456789") != "" {
			return "", false
		}
		host = host[:i]
	}
	host = strings.TrimSuffix(host, ".")
	if host == "" || len(host) > maxHostLen {
		return "", false
	}
	for _, label := range strings.Split(host, ".") {
		if label == "" || strings.Trim(label, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_") != "" {
			return "", false
		}
	}
	return strings.ToLower(host), true
}

func TestRouteTableAgreesWithReference(t *testing.T) {
	rt := testTable()
	for _, host := range []string{"shop.acme.example", "a.b.eu.acme.example", "acme.example", "x", "[::1]", "only.acme.example"} {
		for _, path := range []string{"", "/", "/api", "/api/", "/api/v2", "/static/x", "/x", "/healthz", "x"} {
			if got, want := rt.Match(host, path), referenceMatch(rt, host, path); got != want {
				t.Errorf("Match(%q, %q) = %v, reference %v", host, path, got, want)
			}
		}
	}
}

func FuzzRouteMatch(f *testing.F) {
	for _, s := range [][2]string{
		{"shop.acme.example", "/api/v2/x"}, {"A.EU.acme.example.:443", "/static"}, {"[::1]:80", "/"},
		{"a..b", "//"}, {"", ""}, {"x.acme.example:", "/api//"}, {strings.Repeat("a.", 130), "/"},
	} {
		f.Add(s[0], s[1])
	}
	rt := testTable()
	f.Fuzz(func(t *testing.T, host, path string) {
		got := rt.Match(host, path)
		// Paths with empty segments are not clean; the reference and the
		// table may disagree on them, but Match must still not panic.
		if strings.Contains(path, "//") {
			return
		}
		if want := referenceMatch(rt, host, path); got != want {
			t.Fatalf("Match(%q, %q) = %+v, reference %+v", host, path, got, want)
		}
	})
}
