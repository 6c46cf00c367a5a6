package proxy

import (
	"bytes"
	"context"
	"io"
	"net"
	"testing"

	pb "github.com/teapot-lb/teapot-lb/api/proto/teapotv1"
	"github.com/teapot-lb/teapot-lb/proxy/accesslog"
	"github.com/teapot-lb/teapot-lb/proxy/cpubudget"
	"github.com/teapot-lb/teapot-lb/proxy/l7"
	"github.com/teapot-lb/teapot-lb/proxy/metrics"
	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

const allocsResponse = "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 13\r\n\r\nhello, world\n"

// fixedMember answers every request head with allocsResponse without
// allocating per request.
func fixedMember(c net.Conn) {
	buf := make([]byte, 16<<10)
	out := []byte(allocsResponse)
	n := 0
	for {
		k, err := c.Read(buf[n:])
		if err != nil {
			return
		}
		n += k
		for {
			i := bytes.Index(buf[:n], []byte("\r\n\r\n"))
			if i < 0 {
				break
			}
			if _, err := c.Write(out); err != nil {
				return
			}
			n = copy(buf, buf[i+4:n])
		}
	}
}

// servedPath starts a proxy wired like serve's (the L7 engine reporting
// through the access log to the metrics) with one http listener routing
// to a member of each algorithm's pool, and returns the listener's
// address.
func servedPath(t *testing.T) string {
	member := startBackend(t, "127.0.0.1", fixedMember)
	engine := l7.New(l7.Config{Metrics: accesslog.New(accesslog.Config{Next: &metrics.Memory{}})})
	t.Cleanup(func() { engine.Close() })
	// Every request is counted in its tenant's host CPU budget, which an
	// accountant charges as serve's does (a budget the test's requests
	// under the race detector do not spend).
	cpu := cpubudget.New(cpubudget.Options{HostMillicores: 1 << 20})
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	go cpu.Run(ctx)
	p, _ := newProxy(t, Config{HTTP: NewHTTP(engine, nil), CPU: cpu})
	port := freePort(t)
	lb := &pb.LoadBalancer{Name: "allocs", Tenant: "acme",
		Listeners: []*pb.Listener{{Port: uint32(port), Protocol: "http"}},
		Routes: []*pb.Route{
			{Host: shopHost, Path: "/rr/", Pool: "rr"},
			{Host: shopHost, Path: "/least/", Pool: "least"},
			{Host: shopHost, Path: "/hash/", Pool: "hash"},
			// Hashing on a field that is not a forwarding one reads the
			// client's field in place.
			{Host: shopHost, Path: "/hashua/", Pool: "hashua"},
			// Hashing on X-Forwarded-For hashes a copy of the value the
			// member receives.
			{Host: shopHost, Path: "/hashxff/", Pool: "hashxff"},
			// Chosen by the whole request: method, header and query.
			{Host: shopHost, Matches: []*pb.RouteMatch{{Path: "/cond/", Method: "GET",
				Headers:     []*pb.ValueMatch{{Name: "x-variant", Value: "b"}},
				QueryParams: []*pb.ValueMatch{{Name: "v", Value: "1"}}}}, Pool: "rr"},
			// A regular expression: every request of the table above is
			// looked up under the tenant's regex CPU budget.
			{Host: shopHost, Path: "/re/[a-z]+/[0-9]+", PathType: "regex", Pool: "rr"},
		},
		Pools: map[string]*pb.BackendPool{
			"rr":      {Members: []*pb.Member{{Address: member.addr}}},
			"least":   {Algorithm: "least-request", Members: []*pb.Member{{Address: member.addr}}},
			"hash":    {Algorithm: "hash", Members: []*pb.Member{{Address: member.addr}}},
			"hashua":  {Algorithm: "hash", HashOn: "header:User-Agent", Members: []*pb.Member{{Address: member.addr}}},
			"hashxff": {Algorithm: "hash", HashOn: "header:X-Forwarded-For", Members: []*pb.Member{{Address: member.addr}}},
		},
		Status: &pb.LoadBalancerStatus{Address: "127.0.0.7"},
	}
	// The test's thousands of requests (slowed by the race detector)
	// would spend the default regex budget.
	objs := labObjects(lb)
	objs[0].GetTenant().Quotas = &pb.Quotas{RegexCpuMillicores: 1 << 20}
	if err := p.Update(objs, 1); err != nil {
		t.Fatal(err)
	}
	if st := p.Status()["acme/allocs"]; len(st) != 0 {
		t.Fatalf("problems: %v", st)
	}
	return vipAddr("127.0.0.7", port)
}

// TestServedPathAllocs counts the allocations per request of the whole
// data plane as serve runs it (listener, compiled router, pools and
// their balancers, health accounting, access log and metrics), for
// HTTP/1.1 and for HTTP/2 (cleartext, prior knowledge), with the client
// and the member in this process allocating nothing per request. "hashua"
// hashes on User-Agent, "hashxff" on X-Forwarded-For (one allocation: the
// value the member receives), "cond" is a route chosen by method, header
// and query (a mismatch is a 404), "re" one chosen by a regular
// expression.
func TestServedPathAllocs(t *testing.T) {
	addr := servedPath(t)
	for _, pool := range []string{"rr", "least", "hash", "hashua", "hashxff", "cond", "re"} {
		path, fields := "/"+pool+"/x", "User-Agent: wrk\r\n"
		want := 0.0
		if pool == "hashxff" {
			want = 1
		}
		if pool == "re" {
			path = "/re/items/42"
		}
		var h2fields [][2]string
		if pool == "cond" {
			path, fields = "/cond/x?a=0&v=1", "User-Agent: wrk\r\nX-Variant: b\r\n"
			h2fields = [][2]string{{"x-variant", "b"}}
		}
		t.Run("http1/"+pool, func(t *testing.T) {
			c, err := net.Dial("tcp", addr)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			req := []byte("GET " + path + " HTTP/1.1\r\nHost: " + shopHost + "\r\n" + fields + "\r\n")
			buf := make([]byte, 4096)
			do := func() {
				if _, err := c.Write(req); err != nil {
					t.Fatal(err)
				}
				n := 0
				for n < len(allocsResponse) {
					k, err := c.Read(buf[n:])
					if err != nil {
						t.Fatal(err)
					}
					n += k
				}
				if !bytes.HasPrefix(buf[:n], []byte("HTTP/1.1 200 ")) {
					t.Fatalf("response %q", buf[:n])
				}
			}
			for range 20 {
				do()
			}
			if a := testing.AllocsPerRun(1000, do); a > want {
				t.Errorf("%.2f allocations per request, want %v", a, want)
			}
		})
		t.Run("h2c/"+pool, func(t *testing.T) {
			h := newH2cClient(t, addr, path, h2fields...)
			for range 20 {
				h.do(t)
			}
			if a := testing.AllocsPerRun(1000, func() { h.do(t) }); a > want {
				t.Errorf("%.2f allocations per request, want %v", a, want)
			}
		})
	}
}

// h2cClient sends one pre-encoded request at a time over cleartext
// HTTP/2 and reads frames until its stream ends, allocating nothing.
type h2cClient struct {
	c        net.Conn
	id       uint32
	blk, out []byte
	hdr      [9]byte
	buf      []byte
}

func newH2cClient(t *testing.T, addr, path string, extra ...[2]string) *h2cClient {
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	var b bytes.Buffer
	b.WriteString(http2.ClientPreface)
	fr := http2.NewFramer(&b, nil)
	_ = fr.WriteSettings(http2.Setting{ID: http2.SettingInitialWindowSize, Val: 1 << 30})
	_ = fr.WriteWindowUpdate(0, 1<<30)
	if _, err := c.Write(b.Bytes()); err != nil {
		t.Fatal(err)
	}
	// The first request enters the fields in the dynamic table, later
	// ones refer to them, as h2load's do.
	var hb bytes.Buffer
	enc := hpack.NewEncoder(&hb)
	fields := [][2]string{{":method", "GET"}, {":scheme", "http"}, {":authority", shopHost}, {":path", path}, {"user-agent", "h2load"}}
	fields = append(fields, extra...)
	for _, f := range fields {
		_ = enc.WriteField(hpack.HeaderField{Name: f[0], Value: f[1]})
	}
	h := &h2cClient{c: c, id: 1, blk: bytes.Clone(hb.Bytes()), buf: make([]byte, 1<<16)}
	h.out = make([]byte, 9+len(h.blk))
	h.do(t)
	hb.Reset()
	for _, f := range fields {
		_ = enc.WriteField(hpack.HeaderField{Name: f[0], Value: f[1]})
	}
	h.blk = bytes.Clone(hb.Bytes())
	h.out = make([]byte, 9+len(h.blk))
	return h
}

func (h *h2cClient) do(t *testing.T) {
	o := h.out
	n := len(h.blk)
	o[0], o[1], o[2] = byte(n>>16), byte(n>>8), byte(n)
	o[3] = byte(http2.FrameHeaders)
	o[4] = byte(http2.FlagHeadersEndHeaders | http2.FlagHeadersEndStream)
	o[5], o[6], o[7], o[8] = byte(h.id>>24), byte(h.id>>16), byte(h.id>>8), byte(h.id)
	copy(o[9:], h.blk)
	if _, err := h.c.Write(o); err != nil {
		t.Fatal(err)
	}
	head := true
	for {
		if _, err := io.ReadFull(h.c, h.hdr[:]); err != nil {
			t.Fatal(err)
		}
		ln := int(h.hdr[0])<<16 | int(h.hdr[1])<<8 | int(h.hdr[2])
		if _, err := io.ReadFull(h.c, h.buf[:ln]); err != nil {
			t.Fatal(err)
		}
		typ, flags := http2.FrameType(h.hdr[3]), http2.Flags(h.hdr[4])
		sid := uint32(h.hdr[5]&0x7f)<<24 | uint32(h.hdr[6])<<16 | uint32(h.hdr[7])<<8 | uint32(h.hdr[8])
		if typ == http2.FrameGoAway || (typ == http2.FrameRSTStream && sid == h.id) {
			t.Fatalf("stream %d: frame %v", h.id, typ)
		}
		if sid == h.id && typ == http2.FrameHeaders && head {
			// The response head starts with :status 200, indexed.
			if head = false; ln == 0 || h.buf[0] != 0x88 {
				t.Fatalf("stream %d: response head %x, want :status 200", h.id, h.buf[:min(ln, 8)])
			}
		}
		if sid == h.id && (typ == http2.FrameData || typ == http2.FrameHeaders) && flags&http2.FlagDataEndStream != 0 {
			h.id += 2
			return
		}
	}
}
