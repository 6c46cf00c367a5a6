package scenarios

import (
	"cmp"
	"fmt"
	"io/fs"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	coreruleset "github.com/corazawaf/coraza-coreruleset/v4"
)

// The WAF benchmark: `teapot-lb serve` with a route inspected by its
// embedded Coraza and OWASP CRS v4 (block, paranoia 1) against nginx (one
// worker) with ModSecurity v3 (Debian's libnginx-mod-http-modsecurity)
// loading the very same CRS files (copied out of the module teapot-lb
// embeds), the same paranoia level, body access and limits; both in
// front of the same nginx member, proxies pinned to core 0, member and
// wrk on core 1. Each workload replays a corpus in a loop: the ordinary
// requests (all served) and the attacks (all refused). The headline is
// requests per second of proxy CPU (from /proc). Before the rounds, each
// corpus request is sent once through each proxy and the verdicts
// compared.
const (
	wafBenchTeapot = "127.0.0.92"
	wafBenchNginx  = "127.0.0.93"
	wafBenchBody   = 131072 // routes[].waf.maxBodyBytes's default; SecRequestBodyLimit
)

// wafBenchModsecConf is ModSecurity's configuration: Coraza's recommended
// base (the same directives as ModSecurity's, minus the in-memory limit
// ModSecurity v3 refuses) then what proxy/waf sets, then the CRS.
const wafBenchModsecConf = `Include %[1]s/base.conf
SecRuleEngine On
SecRequestBodyAccess On
SecRequestBodyLimit %[2]d
SecRequestBodyLimitAction ProcessPartial
SecResponseBodyAccess Off
SecAuditEngine Off
SecDataDir %[1]s
Include %[1]s/crs-setup.conf
SecAction "id:900000,phase:1,pass,t:none,nolog,setvar:tx.blocking_paranoia_level=1"
SecAction "id:900001,phase:1,pass,t:none,nolog,setvar:tx.detection_paranoia_level=1"
Include %[1]s/crs/*.conf
`

// chainedWithoutActions matches a chained rule without an action list,
// which CRS v4 writes and libmodsecurity 3.0.9 cannot parse; "t:none"
// is added to it (no change in what it does).
var chainedWithoutActions = regexp.MustCompile(`(?m)^(\s+SecRule [^ ]+ "(?:[^"\\]|\\.)*")\s*$`)

// writeCRS copies the embedded CRS into dir for ModSecurity.
func writeCRS(tb testing.TB, dir string) {
	tb.Helper()
	if err := os.MkdirAll(filepath.Join(dir, "crs"), 0o755); err != nil {
		tb.Fatal(err)
	}
	copyFile := func(from, to string) {
		data, err := fs.ReadFile(coreruleset.FS, from)
		if err != nil {
			tb.Fatal(err)
		}
		s := string(data)
		if to == "base.conf" {
			s = regexp.MustCompile(`(?m)^SecRequestBodyInMemoryLimit.*$`).ReplaceAllString(s, "")
		}
		if strings.HasSuffix(to, ".conf") {
			s = chainedWithoutActions.ReplaceAllString(s, `$1 "t:none"`)
		}
		if err := os.WriteFile(filepath.Join(dir, to), []byte(s), 0o644); err != nil {
			tb.Fatal(err)
		}
	}
	copyFile("@coraza.conf-recommended", "base.conf")
	copyFile("@crs-setup.conf.example", "crs-setup.conf")
	entries, err := fs.ReadDir(coreruleset.FS, "@owasp_crs")
	if err != nil {
		tb.Fatal(err)
	}
	for _, e := range entries {
		copyFile("@owasp_crs/"+e.Name(), "crs/"+e.Name())
	}
}

// wafNginxConf is nginx with one worker and ModSecurity in front of the
// member. Its error log (where ModSecurity reports each blocked request)
// is at crit: teapot-lb logs one blocked request in a hundred.
func wafNginxConf(dir string, port int, member string) string {
	return fmt.Sprintf(`load_module /usr/lib/nginx/modules/ngx_http_modsecurity_module.so;
worker_processes 1;
master_process off;
daemon off;
pid %[1]s/waf-nginx.pid;
error_log %[1]s/waf-nginx.err crit;
events { worker_connections 8192; }
http {
  access_log off;
  client_body_temp_path %[1]s/w-body; proxy_temp_path %[1]s/w-proxy; fastcgi_temp_path %[1]s/w-fcgi;
  uwsgi_temp_path %[1]s/w-uwsgi; scgi_temp_path %[1]s/w-scgi;
  keepalive_requests 100000000;
  keepalive_timeout 300s;
  client_body_buffer_size %[5]d;
  upstream be { server %[4]s; keepalive 256; keepalive_requests 100000000; }
  server {
    listen %[2]s:%[3]d backlog=8192;
    modsecurity on;
    modsecurity_rules_file %[1]s/modsec.conf;
    location / {
      proxy_pass http://be;
      proxy_http_version 1.1;
      proxy_set_header Connection "";
      proxy_set_header Host $host;
      proxy_set_header X-Forwarded-For $proxy_add_x_forwarded_for;
    }
  }
}
`, dir, wafBenchNginx, port, member, wafBenchBody)
}

// wrkScript writes a wrk script replaying the corpus in a loop.
func wrkScript(tb testing.TB, dir, name string, corpus []edgeRequest) string {
	tb.Helper()
	var b strings.Builder
	b.WriteString("local reqs = {}\n")
	for i, r := range corpus {
		hdr := `["Host"]="shop.example", ["User-Agent"]="Mozilla/5.0 (X11; Linux x86_64; rv:128.0) Gecko/20100101 Firefox/128.0", ["Accept"]="text/html,application/json"`
		if r.ctype != "" {
			hdr += fmt.Sprintf(`, ["Content-Type"]=%q`, r.ctype)
		}
		body := "nil"
		if r.body != "" {
			body = strconv.Quote(r.body)
		}
		fmt.Fprintf(&b, "reqs[%d] = wrk.format(%q, %q, {%s}, %s)\n", i+1, r.method, r.target, hdr, body)
	}
	b.WriteString("local i = 0\nrequest = function()\n  i = i % #reqs + 1\n  return reqs[i]\nend\n")
	return writeConf(tb, dir, name+".lua", b.String())
}

var wrkNon2xx = regexp.MustCompile(`Non-2xx or 3xx responses: (\d+)`)

// runWrkCorpus replays a corpus with wrk (64 connections, core 1) and
// returns the requests answered and how many were not 2xx/3xx.
func runWrkCorpus(url, script string) (total, non2xx int64, err error) {
	out, err := runBounded(l7BenchRun, "taskset", "-c", "1", "wrk", "-t1", "-c64", "-d"+strconv.Itoa(int(l7BenchRun.Seconds()))+"s", "-s", script, url)
	if err != nil {
		return 0, 0, fmt.Errorf("wrk %s: %v\n%s", url, err, out)
	}
	m := wrkRequests.FindSubmatch(out)
	if m == nil {
		return 0, 0, fmt.Errorf("wrk %s: no request count\n%s", url, out)
	}
	total, _ = strconv.ParseInt(string(m[1]), 10, 64)
	if e := wrkNon2xx.FindSubmatch(out); e != nil {
		non2xx, _ = strconv.ParseInt(string(e[1]), 10, 64)
	}
	if total == 0 {
		return 0, 0, fmt.Errorf("wrk %s: no request answered\n%s", url, out)
	}
	return total, non2xx, nil
}

func BenchmarkWAFServe(b *testing.B) {
	for _, tool := range []string{"nginx", "taskset", "wrk"} {
		if _, err := exec.LookPath(tool); err != nil {
			unavailable(b, "%s is not installed (Debian packages nginx, util-linux, wrk)", tool)
		}
	}
	if _, err := os.Stat("/usr/lib/nginx/modules/ngx_http_modsecurity_module.so"); err != nil {
		unavailable(b, "nginx's ModSecurity module is not installed (Debian package libnginx-mod-http-modsecurity)")
	}
	dir := b.TempDir()
	member := startNginxMember(b, dir)
	port := freePortOn(b, wafBenchTeapot)
	for {
		l, err := net.Listen("tcp", net.JoinHostPort(wafBenchNginx, strconv.Itoa(port)))
		if err == nil {
			l.Close()
			break
		}
		port = freePortOn(b, wafBenchTeapot)
	}

	c := newCluster(b)
	n := bootstrapForBench(c)
	manifest := fmt.Sprintf(`
kind: VIPPool
name: wafbench
cidrs: [%[1]s/32]
mode: static
---
kind: Tenant
name: shop
domains: [shop.example]
networks: [127.0.0.1/32]
pools: [wafbench]
quotas: { wafCpuMillicores: 2000, cpuMillicores: %[5]d }
---
kind: LoadBalancer
name: wafbench
tenant: shop
vip: { pool: wafbench, address: "%[1]s" }
listeners: [{ port: %[2]d, protocol: http }]
routes: [{ path: /, pool: web, waf: { mode: block, paranoiaLevel: 1, maxBodyBytes: %[4]d } }]
pools:
  web: { members: ["%[3]s"] }
`, wafBenchTeapot, port, member, wafBenchBody, 1000*runtime.NumCPU())
	path := writeConf(b, dir, "wafbench.yaml", manifest)
	if out, err := c.cli(n, "apply", "-f", path); err != nil {
		b.Fatalf("apply: %v\n%s", err, out)
	}
	writeCRS(b, dir)
	writeConf(b, dir, "modsec.conf", fmt.Sprintf(wafBenchModsecConf, dir, wafBenchBody))
	conf := writeConf(b, dir, "waf-nginx.conf", wafNginxConf(dir, port, member))
	if out, err := exec.Command("nginx", "-t", "-e", filepath.Join(dir, "waf-nginx.stderr"), "-c", conf).CombinedOutput(); err != nil {
		b.Fatalf("nginx -t: %v\n%s", err, out)
	}
	nginxPid := startProcess(b, dir, "waf-nginx", "0", "nginx", "-e", filepath.Join(dir, "waf-nginx.stderr"), "-c", conf)
	n.mu.Lock()
	teapotPid := n.cmd.Process.Pid
	n.mu.Unlock()
	pin(b, teapotPid, "0")

	proxies := []*l7Proxy{
		{name: "teapot-lb", host: wafBenchTeapot, port: port, pid: teapotPid},
		{name: "nginx+modsecurity", host: wafBenchNginx, port: port, pid: nginxPid},
	}
	cl := edgeHTTPClient("127.0.0.1")
	for _, p := range proxies {
		base := fmt.Sprintf("http://%s:%d", p.host, p.port)
		waitFor(b, startTimeout, p.name+" to serve", func() error {
			code, _, err := edgeDo(cl, base, edgeRequest{"GET", "/", "", ""})
			if err == nil && code != 200 {
				err = fmt.Errorf("GET /: %d", code)
			}
			return err
		})
	}

	// The verdicts on the corpus, request by request.
	var verdicts strings.Builder
	fmt.Fprintf(&verdicts, "\nWAF verdicts on the corpus (CRS v4.25.0, paranoia 1, block): status through each proxy\n| request | teapot-lb | nginx+modsecurity |\n|---|---:|---:|\n")
	blocked := map[string]int{}
	passed := map[string]int{}
	var disagree int
	for _, set := range []struct {
		attack bool
		rs     []edgeRequest
	}{{true, edgeAttacks}, {false, edgeOrdinary}} {
		for _, r := range set.rs {
			var codes []int
			for _, p := range proxies {
				code, _, err := edgeDo(cl, fmt.Sprintf("http://%s:%d", p.host, p.port), r)
				if err != nil {
					b.Fatalf("%s %s through %s: %v", r.method, r.target, p.name, err)
				}
				codes = append(codes, code)
				if set.attack && code >= 400 && code != 429 {
					blocked[p.name]++
				}
				if !set.attack && code == 200 {
					passed[p.name]++
				}
			}
			if (codes[0] >= 400) != (codes[1] >= 400) {
				disagree++
			}
			fmt.Fprintf(&verdicts, "| %s %s | %d | %d |\n", r.method, r.target, codes[0], codes[1])
		}
	}
	for _, p := range proxies {
		fmt.Fprintf(&verdicts, "%s: %d of %d attacks refused, %d of %d ordinary requests served\n",
			p.name, blocked[p.name], len(edgeAttacks), passed[p.name], len(edgeOrdinary))
	}
	fmt.Fprintf(&verdicts, "requests served by one proxy and refused by the other: %d (nginx answers 400 itself, before ModSecurity, to a path climbing above the root)\n", disagree)
	fmt.Print(verdicts.String())

	workloads := []struct {
		name   string
		script string
		attack bool
	}{
		{"ordinary", wrkScript(b, dir, "ordinary", edgeOrdinary), false},
		{"attacks", wrkScript(b, dir, "attacks", edgeAttacks), true},
	}
	samples := map[string][]l7Sample{}
	b.ResetTimer()
	for round := range l7BenchRounds {
		for _, w := range workloads {
			for _, p := range proxies {
				cpu0, t0 := cpuTime(b, p.pid), time.Now()
				total, non2xx, err := runWrkCorpus(fmt.Sprintf("http://%s:%d/", p.host, p.port), w.script)
				if err != nil {
					b.Fatalf("round %d, %s through %s: %v", round+1, w.name, p.name, err)
				}
				el, cpu := time.Since(t0), cpuTime(b, p.pid)-cpu0
				// Each request must get its corpus's verdict (a 429 of
				// a spent WAF budget would count as neither).
				want := int64(0)
				if w.attack {
					want = total
				}
				if d := non2xx - want; d > total/100 || -d > total/100 {
					b.Fatalf("round %d, %s through %s: %d of %d answers not 2xx/3xx, want %d", round+1, w.name, p.name, non2xx, total, want)
				}
				s := l7Sample{perSec: float64(total) / el.Seconds()}
				if cpu > 0 {
					s.perCPU = float64(total) / cpu.Seconds()
				}
				k := w.name + "/" + p.name
				samples[k] = append(samples[k], s)
			}
		}
	}
	b.StopTimer()
	med := func(k string, f func(l7Sample) float64) float64 {
		v := slices.SortedFunc(slices.Values(samples[k]), func(x, y l7Sample) int { return cmp.Compare(f(x), f(y)) })
		return f(v[len(v)/2])
	}
	perSec := func(s l7Sample) float64 { return s.perSec }
	perCPU := func(s l7Sample) float64 { return s.perCPU }
	var out strings.Builder
	fmt.Fprintf(&out, "\nWAF (CRS v4.25.0, paranoia 1, block) through `teapot-lb serve` and nginx+ModSecurity v3, proxies on core 0, member and wrk on core 1, %d interleaved rounds of %v, medians\n", l7BenchRounds, l7BenchRun)
	fmt.Fprintf(&out, "| corpus | proxy | req/s | req per proxy CPU-s | per CPU-s vs nginx+modsecurity |\n|---|---|---:|---:|---:|\n")
	for _, w := range workloads {
		ref := med(w.name+"/nginx+modsecurity", perCPU)
		for _, p := range proxies {
			k := w.name + "/" + p.name
			s, c := med(k, perSec), med(k, perCPU)
			fmt.Fprintf(&out, "| %s | %s | %.0f | %.0f | %.2f× |\n", w.name, p.name, s, c, c/ref)
			b.ReportMetric(s, k+"-req/s")
			b.ReportMetric(c, k+"-req/cpu-s")
		}
	}
	fmt.Print(out.String())
	b.ReportMetric(0, "ns/op")
}
