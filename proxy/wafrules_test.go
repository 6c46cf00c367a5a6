package proxy

import (
	"bufio"
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	pb "github.com/teapot-lb/teapot-lb/api/proto/teapotv1"
	"github.com/teapot-lb/teapot-lb/proxy/accesslog"
	"github.com/teapot-lb/teapot-lb/proxy/l7"
)

type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) lines() []accesslog.Line {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []accesslog.Line
	sc := bufio.NewScanner(bytes.NewReader(l.b.Bytes()))
	for sc.Scan() {
		var ln accesslog.Line
		if json.Unmarshal(sc.Bytes(), &ln) == nil {
			out = append(out, ln)
		}
	}
	return out
}

// evilRule denies a request with the header X-Evil: yes.
const evilRule = `SecRule REQUEST_HEADERS:X-Evil "@streq yes" "id:1001,phase:1,deny,status:403,log,msg:'evil header'"`

// TestWAFTenantRulesOverRealSockets: a tenant's own rule blocks a
// request with its header in block mode (the member never sees it) and
// only logs it in detect mode (served; the access log names rule 1001);
// requests without the header pass. Two routes with the same list share
// one engine.
func TestWAFTenantRulesOverRealSockets(t *testing.T) {
	addr, got := wafMember(t)
	var out lockedBuffer
	srv := l7.New(l7.Config{Metrics: accesslog.New(accesslog.Config{Out: &out})})
	t.Cleanup(func() { srv.Close() })
	p, _ := newProxy(t, Config{HTTP: NewHTTP(srv, nil)})
	port := freePort(t)
	lb := httpLB("acme", "web", "127.0.0.2", port, addr)
	lb.AccessLog = &pb.AccessLog{Enabled: true}
	lb.Routes = []*pb.Route{
		{Path: "/detect", Pool: "app", Waf: &pb.WAF{Mode: "detect", Rules: []string{evilRule}}},
		{Path: "/other", Pool: "app", Waf: &pb.WAF{Mode: "block", ParanoiaLevel: 2, Rules: []string{evilRule}}},
		{Path: "/", Pool: "app", Waf: &pb.WAF{Mode: "block", Rules: []string{evilRule}}},
	}
	if err := p.Update(wafRoomy(labObjects(lb)), 1); err != nil {
		t.Fatal(err)
	}
	if st := p.Status()["acme/web"]; len(st) != 0 {
		t.Fatalf("problems: %v", st)
	}
	if n := p.RuleEngines("acme"); n != 1 {
		t.Fatalf("%d engines of acme's rules; want 1 for one list", n)
	}
	base := "http://" + vipAddr("127.0.0.2", port)
	c := sourceClient(t, "127.0.0.3")
	do := func(path string, evil bool) int {
		t.Helper()
		req, _ := http.NewRequest("GET", base+path, nil)
		req.Header.Set("User-Agent", "Mozilla/5.0")
		req.Header.Set("Accept", "text/html")
		if evil {
			req.Header.Set("X-Evil", "yes")
		}
		resp, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode
	}
	before := got.Load()
	if code := do("/shop", true); code != 403 {
		t.Fatalf("block mode, X-Evil: %d, want 403", code)
	}
	if code := do("/other", true); code != 403 {
		t.Fatalf("block mode at paranoia 2, X-Evil: %d, want 403", code)
	}
	if n := got.Load() - before; n != 0 {
		t.Fatalf("the member got %d blocked requests", n)
	}
	if code := do("/shop", false); code != 200 {
		t.Fatalf("block mode, no header: %d", code)
	}
	if code := do("/detect", true); code != 200 {
		t.Fatalf("detect mode, X-Evil: %d, want it served", code)
	}
	if st := p.WAFStats("acme"); st.Blocked != 2 || st.Detected != 1 {
		t.Fatalf("WAF stats %+v", st)
	}
	var lines []accesslog.Line
	for deadline := time.Now().Add(10 * time.Second); len(lines) < 4 && time.Now().Before(deadline); {
		time.Sleep(10 * time.Millisecond)
		lines = out.lines()
	}
	var detect *accesslog.Line
	for i := range lines {
		if strings.HasPrefix(lines[i].Path, "/detect") {
			detect = &lines[i]
		}
	}
	if detect == nil || detect.Status != 200 || !strings.Contains(","+detect.WAFRules+",", ",1001,") {
		t.Fatalf("access log of the detected request: %+v (all %d lines)", detect, len(lines))
	}
}
