package l7

import (
	"bytes"
	"io"
	"net/http"
	"net/netip"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

func TestPathChange(t *testing.T) {
	tests := []struct {
		pc           PathChange
		path, prefix string
		want         string
	}{
		{PathChange{Value: "/full"}, "/a/b", "/a", "/full"},
		{PathChange{Prefix: true, Value: "/new"}, "/old", "/old", "/new"},
		{PathChange{Prefix: true, Value: "/new"}, "/old/", "/old", "/new/"},
		{PathChange{Prefix: true, Value: "/new"}, "/old/x/y", "/old", "/new/x/y"},
		{PathChange{Prefix: true, Value: "/new/"}, "/old/x", "/old", "/new/x"},
		{PathChange{Prefix: true, Value: "/"}, "/old/x", "/old", "/x"},
		{PathChange{Prefix: true, Value: "/"}, "/old", "/old", "/"},
		{PathChange{Prefix: true, Value: ""}, "/old/x", "/old", "/x"},
		{PathChange{Prefix: true, Value: "/v2"}, "/x", "", "/v2/x"},
		{PathChange{Prefix: true, Value: "/v2/"}, "/x", "", "/v2/x"},
	}
	for _, tc := range tests {
		if got := tc.pc.apply(tc.path, tc.prefix); got != tc.want {
			t.Errorf("%+v on %s (prefix %q) = %s, want %s", tc.pc, tc.path, tc.prefix, got, tc.want)
		}
	}
}

func TestRedirectLocation(t *testing.T) {
	tests := []struct {
		rd   Redirect
		tls  bool
		port uint16
		want string
	}{
		{Redirect{}, false, 80, "http://shop.example/a/b?q=1"},
		{Redirect{}, false, 8080, "http://shop.example:8080/a/b?q=1"},
		{Redirect{}, true, 443, "https://shop.example/a/b?q=1"},
		{Redirect{Scheme: "https"}, false, 8080, "https://shop.example/a/b?q=1"},
		{Redirect{Scheme: "http"}, true, 8443, "http://shop.example/a/b?q=1"},
		{Redirect{Scheme: "https", Port: 8443}, false, 80, "https://shop.example:8443/a/b?q=1"},
		{Redirect{Port: 443}, true, 80, "https://shop.example/a/b?q=1"},
		{Redirect{Hostname: "www.example"}, false, 80, "http://www.example/a/b?q=1"},
		{Redirect{Path: &PathChange{Prefix: true, Value: "/z"}}, false, 80, "http://shop.example/z/b?q=1"},
		{Redirect{Path: &PathChange{Value: "/full"}}, false, 80, "http://shop.example/full?q=1"},
	}
	for _, tc := range tests {
		if got := tc.rd.location(tc.tls, tc.port, "shop.example", "/a/b", "q=1", "/a"); got != tc.want {
			t.Errorf("%+v tls=%v port=%d: %s, want %s", tc.rd, tc.tls, tc.port, got, tc.want)
		}
	}
}

// namedServer answers with its name in X-Backend and in the body what it
// saw: "name method host path?query set-header"; /slow waits 2 s.
func namedServer(t testing.TB, name string, got chan<- string) *testBackend {
	return newBackend(t, backendServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasSuffix(r.URL.Path, "/slow") {
			time.Sleep(2 * time.Second)
		}
		body, _ := io.ReadAll(r.Body)
		line := strings.Join([]string{name, r.Method, r.Host, r.URL.RequestURI(), r.Header.Get("X-Set"), string(body)}, " ")
		if got != nil {
			select {
			case got <- line:
			default:
			}
		}
		w.Header().Set("X-Backend", name)
		w.Header().Set("X-Drop-Me", "1")
		io.WriteString(w, line)
	})))
}

// Routes with Select and Ext behave the same for HTTP/1.1 and HTTP/2
// clients, through real sockets: selection by header, header edits both
// ways, redirects, rewrites, weights, backend timeouts and mirrors.
func TestRouteExtBothProtocols(t *testing.T) {
	mirrored := make(chan string, 16)
	a, b := namedServer(t, "a", nil), namedServer(t, "b", nil)
	m := namedServer(t, "m", mirrored)
	routeA, routeB := &Route{Name: "a", Backend: a}, &Route{Name: "b", Backend: b}
	router := testRouter{
		{prefix: "/sel", route: &Route{Name: "sel", Select: func(r Request, host, path string) *Route {
			switch v, _ := r.Header("X-Pick"); v {
			case "b":
				return routeB
			case "none":
				return nil
			}
			return routeA
		}}},
		{prefix: "/edit", route: &Route{Backend: a, Ext: &RouteExt{
			RequestHeaders:  &HeaderEdit{Set: []HeaderField{{"X-Set", "set"}}},
			ResponseHeaders: &HeaderEdit{Add: []HeaderField{{"X-Backend", "edited"}}, Remove: []string{"X-Drop-Me"}},
		}}},
		{prefix: "/redir", route: &Route{Ext: &RouteExt{Redirect: &Redirect{Scheme: "https", Hostname: "example.test", Status: 308}}}},
		{prefix: "/rw", route: &Route{Backend: a, Ext: &RouteExt{RewriteHost: "rw.example", RewritePath: &PathChange{Prefix: true, Value: "/x"}, Prefix: "/rw"}}},
		{prefix: "/weights", route: &Route{Ext: &RouteExt{Backends: []WeightedBackend{{Backend: a, Weight: 0}, {Backend: b, Weight: 5}}}}},
		{prefix: "/unusable", route: &Route{Ext: &RouteExt{Backends: []WeightedBackend{{Weight: 1}}}}},
		{prefix: "/timeout", route: &Route{Backend: a, Ext: &RouteExt{BackendTimeout: 200 * time.Millisecond}}},
		{prefix: "/mirror", route: &Route{Backend: a, Ext: &RouteExt{Mirrors: []Mirror{{Backend: m, Numerator: 1, Denominator: 1}}}}},
	}
	h2addr := proxyUnder(t, New(Config{}), router, selfSigned(t))
	h1addr := proxyUnder(t, New(Config{}), router, nil)
	h1 := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }, Timeout: 20 * time.Second}
	h2 := h2TestClient()
	h2.CheckRedirect, h2.Timeout = h1.CheckRedirect, h1.Timeout
	tests := []struct {
		name, method, path string
		hdr                http.Header
		body               string
		status             int
		want               string // the body starts with it
		check              func(t *testing.T, resp *http.Response)
	}{
		{name: "select a", path: "/sel/x", want: "a GET"},
		{name: "select b", path: "/sel/x", hdr: http.Header{"X-Pick": {"b"}}, want: "b GET"},
		{name: "select none", path: "/sel/x", hdr: http.Header{"X-Pick": {"none"}}, status: 404},
		{name: "edit", path: "/edit/x", hdr: http.Header{"X-Set": {"client"}}, want: "a GET HOST /edit/x set",
			check: func(t *testing.T, resp *http.Response) {
				if got := resp.Header.Values("X-Backend"); len(got) != 1 || got[0] != "a,edited" || resp.Header.Get("X-Drop-Me") != "" {
					t.Errorf("response fields %v", resp.Header)
				}
			}},
		{name: "redirect", method: "POST", path: "/redir/p?q=1", status: 308, check: func(t *testing.T, resp *http.Response) {
			if loc := resp.Header.Get("Location"); loc != "https://example.test/redir/p?q=1" {
				t.Errorf("Location %q", loc)
			}
		}},
		{name: "rewrite", path: "/rw/y?z=1", want: "a GET rw.example /x/y?z=1"},
		{name: "weights", path: "/weights", want: "b GET"},
		{name: "unusable", path: "/unusable", status: 500},
		{name: "backend timeout", path: "/timeout/slow", status: 504},
		{name: "mirror", method: "PUT", path: "/mirror/m", body: "data", want: "a PUT HOST /mirror/m  data"},
	}
	for _, proto := range []struct {
		name   string
		addr   string
		scheme string
		client *http.Client
	}{{"HTTP/1.1", h1addr, "http", h1}, {"HTTP/2", h2addr, "https", h2}} {
		t.Run(proto.name, func(t *testing.T) {
			for _, tc := range tests {
				t.Run(tc.name, func(t *testing.T) {
					method := tc.method
					if method == "" {
						method = "GET"
					}
					req, _ := http.NewRequest(method, proto.scheme+"://"+proto.addr+tc.path, strings.NewReader(tc.body))
					for k, v := range tc.hdr {
						req.Header[k] = v
					}
					resp, err := proto.client.Do(req)
					if err != nil {
						t.Fatal(err)
					}
					data, _ := io.ReadAll(resp.Body)
					resp.Body.Close()
					want := tc.status
					if want == 0 {
						want = 200
					}
					if resp.StatusCode != want {
						t.Fatalf("status %d, want %d: %s", resp.StatusCode, want, data)
					}
					if w := strings.ReplaceAll(tc.want, "HOST", proto.addr); !strings.HasPrefix(string(data), w) {
						t.Errorf("body %q, want %q...", data, w)
					}
					if tc.check != nil {
						tc.check(t, resp)
					}
					if tc.name == "mirror" {
						select {
						case got := <-mirrored:
							if w := "m PUT " + proto.addr + " /mirror/m  data"; got != w {
								t.Errorf("mirror saw %q, want %q", got, w)
							}
						case <-time.After(10 * time.Second):
							t.Fatal("no mirrored request")
						}
					}
				})
			}
		})
	}
}

// FuzzPathChange: a prefix replacement of a path starting with "/" by a
// value starting with "/" (or empty) gives a path starting with "/", and
// keeps what followed the prefix.
func FuzzPathChange(f *testing.F) {
	f.Add("/old/x", "/old", "/new/")
	f.Add("/", "", "")
	f.Add("/a//b", "/a", "/")
	f.Fuzz(func(t *testing.T, path, prefix, value string) {
		if !strings.HasPrefix(path, "/") || (value != "" && !strings.HasPrefix(value, "/")) ||
			(prefix != "" && !strings.HasPrefix(prefix, "/")) || strings.HasSuffix(prefix, "/") {
			return
		}
		got := (&PathChange{Prefix: true, Value: value}).apply(path, prefix)
		if !strings.HasPrefix(got, "/") {
			t.Fatalf("apply(%q, %q) with %q = %q", path, prefix, value, got)
		}
		if strings.HasPrefix(path, prefix+"/") {
			rest := path[len(prefix)+1:]
			if !strings.HasSuffix(got, rest) {
				t.Fatalf("apply(%q, %q) with %q = %q lost %q", path, prefix, value, got, rest)
			}
		}
	})
}

// One tenant's mirrors take at most MaxTenantMirrors slots: with its
// copies stuck at a member that does not answer, another tenant's copy
// still goes out.
func TestMirrorSlotsPerTenant(t *testing.T) {
	release := make(chan struct{})
	var arrived sync32
	stuck := newBackend(t, backendServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		arrived.add()
		<-release
	})))
	defer close(release)
	s := New(Config{})
	t.Cleanup(func() { s.Close() })
	mirrorFor := func(tenant string) {
		r, _ := http.NewRequest("GET", "http://shop.example/m", nil)
		ca := newClientAddrs(netip.MustParseAddrPort("192.0.2.1:1234"), false, nil)
		q := &rtRequest{r: r, path: "/m", ca: &ca, scope: &connScope{s: s}, stats: &RequestStats{Tenant: tenant}}
		if !s.mirror(q, []Mirror{{Backend: stuck, Numerator: 1, Denominator: 1}}) {
			t.Fatal("mirror refused a request without a body")
		}
	}
	for range MaxTenantMirrors + 20 {
		mirrorFor("greedy")
	}
	waitUntil(t, 20*time.Second, "the greedy tenant's copies at the member", func() bool { return arrived.get() >= MaxTenantMirrors })
	time.Sleep(200 * time.Millisecond)
	if got := arrived.get(); got != MaxTenantMirrors {
		t.Fatalf("%d copies of one tenant reached the member, want %d", got, MaxTenantMirrors)
	}
	mirrorFor("modest")
	waitUntil(t, 20*time.Second, "the other tenant's copy at the member", func() bool { return arrived.get() == MaxTenantMirrors+1 })
}

// countingBody counts the bytes read from a request body.
type countingBody struct {
	r io.Reader
	n int
}

func (c *countingBody) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += n
	return n, err
}

func (c *countingBody) Close() error { return nil }

// A copy for a tenant with no mirror slot left is dropped before its
// body is read and held; with a slot, the body is held for the copy.
func TestMirrorSlotBeforeBody(t *testing.T) {
	release := make(chan struct{})
	stuck := newBackend(t, backendServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		<-release
	})))
	defer close(release)
	s := New(Config{})
	t.Cleanup(func() { s.Close() })
	mirrorBody := func(tenant string) int {
		const size = MaxMirrorBody
		body := &countingBody{r: strings.NewReader(strings.Repeat("b", size))}
		r, _ := http.NewRequest("POST", "http://shop.example/m", body)
		r.ContentLength = size
		ca := newClientAddrs(netip.MustParseAddrPort("192.0.2.1:1234"), false, nil)
		q := &rtRequest{r: r, path: "/m", ca: &ca, scope: &connScope{s: s}, stats: &RequestStats{Tenant: tenant}}
		if !s.mirror(q, []Mirror{{Backend: stuck, Numerator: 1, Denominator: 1}}) {
			t.Fatal("mirror refused a request with a readable body")
		}
		return body.n
	}
	for i := range MaxTenantMirrors {
		if n := mirrorBody("greedy"); n != MaxMirrorBody {
			t.Fatalf("copy %d with a slot read %d body bytes, want %d", i, n, MaxMirrorBody)
		}
	}
	if n := mirrorBody("greedy"); n != 0 {
		t.Errorf("a copy with no slot left read %d body bytes, want 0", n)
	}
	if n := mirrorBody("modest"); n != MaxMirrorBody {
		t.Errorf("another tenant's copy read %d body bytes, want %d", n, MaxMirrorBody)
	}
}

// unitCount is a tenant's CPU budget that counts the units charged.
type unitCount struct{ n atomic.Int64 }

func (u *unitCount) Relay(units int64) { u.n.Add(units) }

// Mirrored copies are charged to the tenant's CPU budget: two copies of
// a request with a 64 KiB body (MaxMirrorBody), each answered with
// 128 KiB, count a unit each for the request, 1 each for the body sent
// again and 2 each for the answer read and dropped: 8.
func TestMirrorCopiesCharged(t *testing.T) {
	t.Parallel()
	var answered sync32
	member := newBackend(t, backendServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		w.Write(bytes.Repeat([]byte("a"), 128<<10))
		answered.add()
	})))
	s := New(Config{})
	t.Cleanup(func() { s.Close() })
	cpu := &unitCount{}
	const size = MaxMirrorBody
	r, _ := http.NewRequest("POST", "http://shop.example/m", strings.NewReader(strings.Repeat("b", size)))
	r.ContentLength = size
	ca := newClientAddrs(netip.MustParseAddrPort("192.0.2.1:1234"), false, nil)
	q := &rtRequest{r: r, path: "/m", ca: &ca, scope: &connScope{s: s, cpu: cpu}, stats: &RequestStats{Tenant: "acme"}}
	m := Mirror{Backend: member, Numerator: 1, Denominator: 1}
	if !s.mirror(q, []Mirror{m, m}) {
		t.Fatal("mirror refused a request with a readable body")
	}
	waitUntil(t, 20*time.Second, "both copies answered and counted", func() bool { return answered.get() == 2 && cpu.n.Load() == 8 })
	time.Sleep(50 * time.Millisecond)
	if n := cpu.n.Load(); n != 8 {
		t.Fatalf("%d units charged for two copies, want 8", n)
	}
}
