package scenarios

import (
	"bufio"
	"context"
	"crypto/rand"
	"crypto/rsa"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/quic-go/quic-go"
	"github.com/quic-go/quic-go/http3"

	"github.com/teapot-lb/teapot-lb/api/porttest"
)

// The addresses of the HTTP/3 flood scenario: a's and b's VIPs and
// members.
const (
	h3FloodVIPA    = "127.0.0.84"
	h3FloodVIPB    = "127.0.0.85"
	h3FloodMemberA = "127.0.0.86"
	h3FloodMemberB = "127.0.0.87"
	h3FloodHostB   = "flood.bravo.example"
	// h3FlooderEnv makes the test binary the flooder of b's HTTP/3
	// listener and b's member (see h3FloodMain).
	h3FlooderEnv = "TEAPOT_H3_FLOODER"
)

// h3FloodQuiet and h3FloodPhase are how long a's probes run before and
// during b's flood.
const (
	h3FloodQuiet = 8 * time.Second
	h3FloodPhase = 12 * time.Second
)

// TestHTTP3FloodOtherTenants: tenant b floods its own https listener with
// http3 through the real binary, from another process, with everything a
// QUIC client can throw at it at once: client Initials from 64 sources
// that never answer, new connections one after another (each a full
// handshake signed with b's RSA-4096 key, 480 held open against b's
// quota of 400), and connections that keep 100 requests in flight each. Tenant a's probes (HTTP/3 on one connection,
// HTTP/3 with a new connection each, HTTP/1.1 and HTTP/2) all succeed,
// and the p99 of each stays within max(2x, +50 ms) of the quiet phase's
// (the goal; held to it plus what the machine's other work added).
// The flooder runs at the lowest CPU priority: on this machine of two
// cores its own CPU would be the machine's load, not the host's doing
// (a remote attacker spends its own); what its packets make the host do
// is measured.
func TestHTTP3FloodOtherTenants(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: starts serve and a flooder")
	}
	memberA := startNamedMember(t, h3FloodMemberA, "a")
	// b's member runs in the flooder process, so that b's requests do not
	// queue a's probers in the test process.
	fl := startH3Flooder(t)
	memberB := fl.member
	dir := t.TempDir()
	certA, keyA := benchCert(t, dir)
	certB, keyB := rsaCert(t, dir, h3FloodHostB, 4096)
	c := newCluster(t)
	n := c.bootstrap()
	port := freeUDPTCPPort(t, h3FloodVIPA, h3FloodVIPB)
	tenants := fmt.Sprintf(`
kind: VIPPool
name: h3fa
cidrs: [%[1]s/32]
mode: static
---
kind: VIPPool
name: h3fb
cidrs: [%[2]s/32]
mode: static
---
kind: Tenant
name: acme
domains: [acme.example]
networks: [%[3]s/32]
pools: [h3fa]
---
kind: Tenant
name: bravo
domains: [bravo.example]
networks: [%[4]s/32]
pools: [h3fb]
quotas: { connections: 400 }
`, h3FloodVIPA, h3FloodVIPB, h3FloodMemberA, h3FloodMemberB)
	lbs := fmt.Sprintf(`
kind: LoadBalancer
name: a
tenant: acme
vip: { pool: h3fa, address: "%[1]s" }
listeners: [{ port: %[3]d, protocol: https, http3: true, tls: { certificates: [a] } }]
routes: [{ host: %[5]s, path: /, pool: web }]
pools: { web: { members: ["%[6]s"] } }
---
kind: LoadBalancer
name: b
tenant: bravo
vip: { pool: h3fb, address: "%[2]s" }
listeners: [{ port: %[3]d, protocol: https, http3: true, tls: { certificates: [b] } }]
routes: [{ host: %[4]s, path: /, pool: web }]
pools: { web: { members: ["%[7]s"] } }
`, h3FloodVIPA, h3FloodVIPB, port, h3FloodHostB, benchTLSHost, memberA, memberB)
	applyDoc(t, c, n, dir, "tenants.yaml", tenants)
	for _, up := range [][4]string{{"a", "acme", certA, keyA}, {"b", "bravo", certB, keyB}} {
		if out, err := c.cli(n, "cert", "upload", up[0], "--tenant", up[1], "--cert", up[2], "--key", up[3]); err != nil {
			t.Fatalf("cert upload %s: %v\n%s", up[0], err, out)
		}
	}
	applyDoc(t, c, n, dir, "lbs.yaml", lbs)
	addrA := net.JoinHostPort(h3FloodVIPA, strconv.Itoa(port))
	addrB := net.JoinHostPort(h3FloodVIPB, strconv.Itoa(port))
	if err := waitHandshake(addrA, 30*time.Second); err != nil {
		t.Fatal(err)
	}
	base := "https://" + benchTLSHost + ":" + strconv.Itoa(port)
	probes := newH3FloodProbes(t, addrA, base)
	waitFor(t, 30*time.Second, "a's HTTP/3 and b's HTTP/3 answers", func() error {
		if err := probes.once(); err != nil {
			return err
		}
		return h3Get(addrB, h3FloodHostB)
	})

	pid := n.cmd.Process.Pid
	sched0, _ := readSchedStat(pid)
	start := time.Now()
	probes.run(h3FloodQuiet, 0)
	t.Logf("quiet: %s", schedNote(pid, sched0, time.Since(start)))
	fl.flood(addrB)
	// The flood has begun when each of its parts reached b's listener:
	// Initials sent, handshakes completed, requests served (those of the
	// parts asked for). On a loaded machine the niced flooder may take
	// seconds to prepare a part (64 Initials, each made by a QUIC
	// client); the flood phase is measured only once all of them run.
	waitFor(t, 90*time.Second, "every part of the flood", func() error {
		c := fl.last.Load()
		if c == nil {
			return fmt.Errorf("no counts yet")
		}
		if missing := fl.partsMissing(*c); missing != "" {
			return fmt.Errorf("not begun: %s (%s)", missing, c)
		}
		return nil
	})
	sched1, _ := readSchedStat(pid)
	start = time.Now()
	if dir := os.Getenv("TEAPOT_H3_FLOOD_PROFILE"); dir != "" {
		// An execution trace and a CPU profile of the host during the
		// flood, to see what a slow probe waited on.
		go func() {
			for _, what := range []string{"trace?seconds=4", "profile?seconds=4"} {
				resp, err := http.Get(fmt.Sprintf("http://%s/debug/pprof/%s", n.metricsAddr, what))
				if err != nil {
					continue
				}
				data, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				_ = os.WriteFile(filepath.Join(dir, strings.SplitN(what, "?", 2)[0]+".out"), data, 0o644)
			}
		}()
	}
	probes.run(h3FloodPhase, 1)
	t.Logf("flood: %s", schedNote(pid, sched1, time.Since(start)))
	got := fl.stop()
	t.Logf("b's flood: %s", got)
	if parts := os.Getenv("TEAPOT_H3_FLOOD_PARTS"); parts == "" && (got.Initials == 0 || got.Handshakes == 0 || got.Requests == 0) {
		t.Errorf("the flood did not reach b's listener: %s", got)
	}
	for phase, name := range []string{"quiet", "flood"} {
		t.Logf("the test process's 5 ms timer was late by p50 %.1f ms, p99 %.1f ms (%s)", ms(probes.late(phase, 50)), ms(probes.late(phase, 99)), name)
	}
	for _, k := range probes.kinds {
		quiet, flood := probes.stat(k, 0), probes.stat(k, 1)
		t.Logf("a's %-16s quiet %s, flood %s", k, quiet, flood)
		t.Logf("a's %s slowest during the flood: %s", k, probes.slowest(k, 1, 5, start))
		if flood.failed > 0 {
			t.Errorf("a's %s: %d of %d failed during b's flood (%s)", k, flood.failed, flood.n, flood.firstErr)
		}
		if quiet.failed > 0 {
			t.Errorf("a's %s: %d of %d failed while quiet (%s)", k, quiet.failed, quiet.n, quiet.firstErr)
		}
		// The goal is p99BoundShared of the quiet p99; the test holds it to the
		// goal plus what the machine's other work added, as the noisy
		// neighbour's phases do (lateFactor times the p99 of how late the
		// test process's own timer woke). Its probers share the test
		// process, so under the race detector the goal's floor is 150 ms
		// (p99BoundShared).
		goal := p99BoundShared(quiet.p99)
		held := goal + lateFactor*probes.late(1, 99)
		if flood.p99 > goal {
			t.Logf("a's %s: p99 %.1f ms during b's flood, over the goal of %.1f ms (quiet %.1f ms; held to %.1f ms)", k, ms(flood.p99), ms(goal), ms(quiet.p99), ms(held))
		}
		if flood.p99 > held {
			t.Errorf("a's %s: p99 %.1f ms during b's flood, want at most %.1f ms (the goal %.1f ms, quiet %.1f ms, and %d times the test process's timer p99 of %.1f ms)",
				k, ms(flood.p99), ms(held), ms(goal), ms(quiet.p99), lateFactor, ms(probes.late(1, 99)))
		}
	}
}

// startNamedMember serves name on a free port of addr; it returns the
// member's address.
func startNamedMember(t testing.TB, addr, name string) string {
	t.Helper()
	ln, err := net.Listen("tcp", addr+":0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		fmt.Fprintln(w, name)
	})}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	return ln.Addr().String()
}

// freeUDPTCPPort returns a port free for TCP and UDP on every address.
func freeUDPTCPPort(t testing.TB, addrs ...string) int {
	t.Helper()
	return porttest.Pick(t, addrs...)
}

// applyDoc writes doc to dir/name and applies it.
func applyDoc(t testing.TB, c *cluster, n *node, dir, name, doc string) {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte(doc), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := c.cli(n, "apply", "-f", p); err != nil {
		t.Fatalf("apply %s: %v\n%s", name, err, out)
	}
}

// rsaCert writes a self-signed RSA certificate of bits for host, and its
// key.
func rsaCert(t testing.TB, dir, host string, bits int) (certFile, keyFile string) {
	t.Helper()
	key, err := rsa.GenerateKey(rand.Reader, bits)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(3), Subject: pkix.Name{CommonName: host}, DNSNames: []string{host},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}, KeyUsage: x509.KeyUsageDigitalSignature}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	kd, _ := x509.MarshalPKCS8PrivateKey(key)
	certFile, keyFile = filepath.Join(dir, host+".pem"), filepath.Join(dir, host+".key")
	if err := os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: kd}), 0o600); err != nil {
		t.Fatal(err)
	}
	return certFile, keyFile
}

// h3Get makes one HTTP/3 request for host on a new connection to addr.
func h3Get(addr, host string) error {
	tr := &http3.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true, ServerName: host},
		Dial: func(ctx context.Context, _ string, tc *tls.Config, qc *quic.Config) (*quic.Conn, error) {
			return quic.DialAddr(ctx, addr, tc, qc)
		}}
	defer tr.Close()
	resp, err := (&http.Client{Transport: tr, Timeout: 5 * time.Second}).Get("https://" + host + "/")
	if err != nil {
		return err
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 {
		return fmt.Errorf("status %d", resp.StatusCode)
	}
	return nil
}

// h3FloodProbes are a's probes: each kind one request at a time.
type h3FloodProbes struct {
	t     testing.TB
	base  string
	kinds []string
	do    map[string]func() error

	mu      sync.Mutex
	samples map[string][][]h3Sample // kind, phase
	lates   [][]time.Duration       // phase
}

// late is the pth percentile of how late a 5 ms timer of the test
// process woke in phase: what the machine's other work costs the probes.
func (p *h3FloodProbes) late(phase, pct int) time.Duration {
	p.mu.Lock()
	defer p.mu.Unlock()
	if phase >= len(p.lates) || len(p.lates[phase]) == 0 {
		return 0
	}
	ds := slices.Clone(p.lates[phase])
	slices.Sort(ds)
	return ds[min(len(ds)-1, len(ds)*pct/100)]
}

type h3Sample struct {
	at  time.Time
	d   time.Duration
	err error
}

// slowest lists the n slowest probes of kind in phase: when they began
// (after start) and how long they took.
func (p *h3FloodProbes) slowest(kind string, phase, n int, start time.Time) string {
	p.mu.Lock()
	defer p.mu.Unlock()
	if phase >= len(p.samples[kind]) {
		return ""
	}
	ss := slices.Clone(p.samples[kind][phase])
	slices.SortFunc(ss, func(a, b h3Sample) int { return int(b.d - a.d) })
	var out []string
	for _, x := range ss[:min(n, len(ss))] {
		out = append(out, fmt.Sprintf("%.2fs+%.0fms", x.at.Sub(start).Seconds(), ms(x.d)))
	}
	return strings.Join(out, " ")
}

func newH3FloodProbes(t testing.TB, addr, base string) *h3FloodProbes {
	p := &h3FloodProbes{t: t, base: base, do: map[string]func() error{}, samples: map[string][][]h3Sample{}}
	var d net.Dialer
	dial := func(ctx context.Context, network, _ string) (net.Conn, error) {
		return d.DialContext(ctx, network, addr)
	}
	// A config of its own for each transport: an HTTP/2 one adds h2 to
	// its config's NextProtos in place, and an HTTP/1.1 transport on the
	// same config would then be given h2 by the server at its next dial.
	tlsConf := func(protos ...string) *tls.Config {
		return &tls.Config{InsecureSkipVerify: true, ServerName: benchTLSHost, NextProtos: protos}
	}
	h1 := &http.Transport{TLSClientConfig: tlsConf("http/1.1"), DialContext: dial, TLSNextProto: map[string]func(string, *tls.Conn) http.RoundTripper{}}
	h2 := &http.Transport{TLSClientConfig: tlsConf(), DialContext: dial, ForceAttemptHTTP2: true}
	h3 := newH3Client(t, addr)
	t.Cleanup(h1.CloseIdleConnections)
	t.Cleanup(h2.CloseIdleConnections)
	get := func(rt http.RoundTripper, major int) func() error {
		c := &http.Client{Transport: rt, Timeout: 5 * time.Second}
		return func() error {
			resp, err := c.Get(base + "/probe")
			if err != nil {
				return err
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != 200 || resp.ProtoMajor != major || string(body) != "a\n" {
				return fmt.Errorf("%s %d: %q", resp.Proto, resp.StatusCode, body)
			}
			return nil
		}
	}
	p.add("http3", get(h3.tr, 3))
	p.add("http3 new conn", func() error { return h3Get(addr, benchTLSHost) })
	p.add("http/1.1", get(h1, 1))
	p.add("http/2", get(h2, 2))
	return p
}

func (p *h3FloodProbes) add(kind string, f func() error) {
	p.kinds = append(p.kinds, kind)
	p.do[kind] = f
}

// once runs each probe once.
func (p *h3FloodProbes) once() error {
	for _, k := range p.kinds {
		if err := p.do[k](); err != nil {
			return fmt.Errorf("%s: %w", k, err)
		}
	}
	return nil
}

// run probes every kind, every 20 ms, for d, as phase.
func (p *h3FloodProbes) run(d time.Duration, phase int) {
	end := time.Now().Add(d)
	var wg sync.WaitGroup
	wg.Go(func() {
		var lates []time.Duration
		for time.Now().Before(end) {
			t0 := time.Now()
			time.Sleep(5 * time.Millisecond)
			lates = append(lates, time.Since(t0)-5*time.Millisecond)
		}
		p.mu.Lock()
		for len(p.lates) <= phase {
			p.lates = append(p.lates, nil)
		}
		p.lates[phase] = lates
		p.mu.Unlock()
	})
	for _, k := range p.kinds {
		wg.Go(func() {
			tick := time.NewTicker(20 * time.Millisecond)
			defer tick.Stop()
			for time.Now().Before(end) {
				start := time.Now()
				err := p.do[k]()
				s := h3Sample{at: start, d: time.Since(start), err: err}
				p.mu.Lock()
				for len(p.samples[k]) <= phase {
					p.samples[k] = append(p.samples[k], nil)
				}
				p.samples[k][phase] = append(p.samples[k][phase], s)
				p.mu.Unlock()
				<-tick.C
			}
		})
	}
	wg.Wait()
}

type h3Stat struct {
	n, failed int
	p50, p99  time.Duration
	firstErr  error
}

func (s h3Stat) String() string {
	return fmt.Sprintf("%d probes, %d failed, p50 %.1f ms, p99 %.1f ms", s.n, s.failed, ms(s.p50), ms(s.p99))
}

func (p *h3FloodProbes) stat(kind string, phase int) h3Stat {
	p.mu.Lock()
	defer p.mu.Unlock()
	var s h3Stat
	var ds []time.Duration
	if phase < len(p.samples[kind]) {
		for _, x := range p.samples[kind][phase] {
			s.n++
			if x.err != nil {
				s.failed++
				if s.firstErr == nil {
					s.firstErr = x.err
				}
				continue
			}
			ds = append(ds, x.d)
		}
	}
	if len(ds) == 0 {
		return s
	}
	slices.Sort(ds)
	s.p50 = ds[len(ds)/2]
	s.p99 = ds[min(len(ds)-1, len(ds)*99/100)]
	return s
}

// h3FloodCounts is what the flooder did.
type h3FloodCounts struct {
	Initials   int64 `json:"initials"`
	Handshakes int64 `json:"handshakes"`
	Refused    int64 `json:"refused"`
	Requests   int64 `json:"requests"`
	Failed     int64 `json:"failed"`
	// Member is the address of b's member, in the first report.
	Member string `json:"member,omitempty"`
}

func (c h3FloodCounts) String() string {
	return fmt.Sprintf("%d Initials sent, %d handshakes completed, %d refused, %d requests served, %d failed",
		c.Initials, c.Handshakes, c.Refused, c.Requests, c.Failed)
}

// h3Flooder is the parent's handle of the flooder process.
type h3Flooder struct {
	t      testing.TB
	cmd    *exec.Cmd
	in     io.WriteCloser
	member string
	parts  string // the parts of the flood asked for
	last   atomic.Pointer[h3FloodCounts]
	done   chan struct{}
}

// startH3Flooder starts the test binary as b's member and flooder (one
// CPU); it floods once told where (flood).
func startH3Flooder(t testing.TB) *h3Flooder {
	t.Helper()
	// At the lowest priority: the flooder's own CPU, on a machine of two
	// cores, is the machine's load, not the host's doing; what b's
	// packets make the host do is.
	cmd := exec.Command("nice", "-n", "19", os.Args[0])
	cmd.Env = append(os.Environ(), h3FlooderEnv+"=1", "GOMAXPROCS=1")
	parts := os.Getenv("TEAPOT_H3_FLOOD_PARTS")
	if parts == "" {
		parts = "initials,handshakes,streams"
		cmd.Env = append(cmd.Env, "TEAPOT_H3_FLOOD_PARTS="+parts)
	}
	cmd.Stderr = os.Stderr
	in, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	f := &h3Flooder{t: t, cmd: cmd, in: in, parts: parts, done: make(chan struct{})}
	dec := json.NewDecoder(out)
	var first h3FloodCounts
	if err := dec.Decode(&first); err != nil || first.Member == "" {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		t.Fatalf("the flooder's member: %v", err)
	}
	f.member = first.Member
	go func() {
		defer close(f.done)
		for {
			var c h3FloodCounts
			if err := dec.Decode(&c); err != nil {
				return
			}
			f.last.Store(&c)
		}
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-f.done
		_ = cmd.Wait()
	})
	return f
}

// partsMissing names the parts of the flood asked for that have not yet
// reached b's listener in c ("" when all have).
func (f *h3Flooder) partsMissing(c h3FloodCounts) string {
	var missing []string
	for _, p := range []struct {
		part string
		n    int64
	}{{"initials", c.Initials}, {"handshakes", c.Handshakes}, {"streams", c.Requests}} {
		if strings.Contains(f.parts, p.part) && p.n == 0 {
			missing = append(missing, p.part)
		}
	}
	return strings.Join(missing, ", ")
}

// flood starts the flood of addr.
func (f *h3Flooder) flood(addr string) {
	if _, err := fmt.Fprintln(f.in, addr); err != nil {
		f.t.Fatalf("flooder: %v", err)
	}
}

// stop ends the flood and returns its last counts.
func (f *h3Flooder) stop() h3FloodCounts {
	f.in.Close()
	select {
	case <-f.done:
	case <-time.After(30 * time.Second):
		f.t.Error("the flooder did not stop")
	}
	if c := f.last.Load(); c != nil {
		return *c
	}
	return h3FloodCounts{}
}

// h3FloodMain serves b's member and writes its address to stdout, then
// floods the HTTP/3 listener whose address is the first line of stdin
// until stdin closes, writing its counts to stdout every 200 ms and at
// the end.
func h3FloodMain() int {
	ln, err := net.Listen("tcp", h3FloodMemberB+":0")
	if err != nil {
		fmt.Fprintln(os.Stderr, "flooder:", err)
		return 1
	}
	go func() {
		_ = http.Serve(ln, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			_, _ = io.Copy(io.Discard, r.Body)
			fmt.Fprintln(w, "b")
		}))
	}()
	enc := json.NewEncoder(os.Stdout)
	_ = enc.Encode(h3FloodCounts{Member: ln.Addr().String()})
	in := bufio.NewReader(os.Stdin)
	line, err := in.ReadString('\n')
	if err != nil {
		return 0
	}
	addr := strings.TrimSpace(line)
	ua, err := net.ResolveUDPAddr("udp", addr)
	if err != nil {
		fmt.Fprintln(os.Stderr, "flooder:", err)
		return 1
	}
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		_, _ = io.Copy(io.Discard, in)
		cancel()
	}()
	var c struct{ initials, handshakes, refused, requests, failed atomic.Int64 }
	var wg sync.WaitGroup
	tlsConf := &tls.Config{InsecureSkipVerify: true, ServerName: h3FloodHostB, NextProtos: []string{"h3"}}
	parts := os.Getenv("TEAPOT_H3_FLOOD_PARTS")
	// Initials from 64 sources that never answer.
	if strings.Contains(parts, "initials") {
		wg.Go(func() {
			pkts := make([][]byte, 64)
			socks := make([]*net.UDPConn, len(pkts))
			// The Initials are made at once: one after another, each by a
			// QUIC client of a niced process, they took longer than the
			// flood phase on a loaded machine.
			var made sync.WaitGroup
			for i := range pkts {
				made.Go(func() { pkts[i] = captureInitial(ua) })
			}
			made.Wait()
			for i := range pkts {
				s, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
				if err != nil {
					return
				}
				defer s.Close()
				socks[i] = s
			}
			for i := 0; ctx.Err() == nil; i++ {
				if pkts[i%len(pkts)] != nil {
					if _, err := socks[i%len(socks)].WriteToUDP(pkts[i%len(pkts)], ua); err == nil {
						c.initials.Add(1)
					}
				}
				if i%64 == 63 {
					time.Sleep(time.Millisecond)
				}
			}
		})
	}
	// New connections one after another: full handshakes with b's
	// RSA-4096 key.
	// Each dialer holds its last 60 connections open: 480 in all, past
	// b's quota of 400 connections.
	for range 8 * bool2int(strings.Contains(parts, "handshakes")) {
		wg.Go(func() {
			held := make([]*quic.Conn, 60)
			defer func() {
				for _, h := range held {
					if h != nil {
						_ = h.CloseWithError(0, "")
					}
				}
			}()
			for i := 0; ctx.Err() == nil; i++ {
				dctx, dcancel := context.WithTimeout(ctx, 5*time.Second)
				conn, err := quic.DialAddr(dctx, addr, tlsConf, &quic.Config{MaxIdleTimeout: time.Minute, KeepAlivePeriod: 10 * time.Second})
				dcancel()
				if err != nil {
					c.refused.Add(1)
					time.Sleep(10 * time.Millisecond)
					continue
				}
				c.handshakes.Add(1)
				if old := held[i%len(held)]; old != nil {
					_ = old.CloseWithError(0, "")
				}
				held[i%len(held)] = conn
			}
		})
	}
	// Connections that keep 100 requests in flight each.
	for range 4 * bool2int(strings.Contains(parts, "streams")) {
		wg.Go(func() {
			tr := &http3.Transport{TLSClientConfig: tlsConf.Clone(),
				Dial: func(ctx context.Context, _ string, tc *tls.Config, qc *quic.Config) (*quic.Conn, error) {
					return quic.DialAddr(ctx, addr, tc, qc)
				}}
			defer tr.Close()
			hc := &http.Client{Transport: tr, Timeout: 5 * time.Second}
			var inner sync.WaitGroup
			for range 100 {
				inner.Go(func() {
					for ctx.Err() == nil {
						req, _ := http.NewRequestWithContext(ctx, "POST", "https://"+h3FloodHostB+"/flood", strings.NewReader("x"))
						resp, err := hc.Do(req)
						if err != nil {
							c.failed.Add(1)
							time.Sleep(10 * time.Millisecond)
							continue
						}
						_, _ = io.Copy(io.Discard, resp.Body)
						resp.Body.Close()
						c.requests.Add(1)
					}
				})
			}
			inner.Wait()
		})
	}
	report := func() {
		_ = enc.Encode(h3FloodCounts{Initials: c.initials.Load(), Handshakes: c.handshakes.Load(), Refused: c.refused.Load(),
			Requests: c.requests.Load(), Failed: c.failed.Load()})
	}
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
	for ctx.Err() == nil {
		select {
		case <-tick.C:
			report()
		case <-ctx.Done():
		}
	}
	wg.Wait()
	report()
	return 0
}

// captureInitial returns a client Initial for target with fresh
// connection IDs, nil if quic-go sent none.
func captureInitial(target *net.UDPAddr) []byte {
	pc := &initialPC{got: make(chan []byte, 1), done: make(chan struct{})}
	tr := &quic.Transport{Conn: pc}
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		_, _ = tr.Dial(ctx, target, &tls.Config{InsecureSkipVerify: true, NextProtos: []string{"h3"}, ServerName: h3FloodHostB,
			CurvePreferences: []tls.CurveID{tls.X25519}}, &quic.Config{})
	}()
	var b []byte
	select {
	case b = <-pc.got:
	case <-time.After(10 * time.Second):
	}
	cancel()
	close(pc.done)
	_ = tr.Close()
	return b
}

// initialPC is a net.PacketConn that keeps the first datagram written and
// delivers nothing.
type initialPC struct {
	once sync.Once
	got  chan []byte
	done chan struct{}
}

func (c *initialPC) ReadFrom([]byte) (int, net.Addr, error) {
	<-c.done
	return 0, nil, net.ErrClosed
}

func (c *initialPC) WriteTo(b []byte, _ net.Addr) (int, error) {
	c.once.Do(func() { c.got <- append([]byte(nil), b...) })
	return len(b), nil
}
func (c *initialPC) Close() error                     { return nil }
func (c *initialPC) LocalAddr() net.Addr              { return &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 9} }
func (c *initialPC) SetDeadline(time.Time) error      { return nil }
func (c *initialPC) SetReadDeadline(time.Time) error  { return nil }
func (c *initialPC) SetWriteDeadline(time.Time) error { return nil }

func bool2int(b bool) int {
	if b {
		return 1
	}
	return 0
}
