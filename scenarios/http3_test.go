package scenarios

import (
	"context"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"encoding/hex"
	"encoding/pem"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/quic-go/quic-go"
	"github.com/quic-go/quic-go/http3"
)

// http3VIP is the loopback address of the scenario's load balancer.
const http3VIP = "127.0.0.83"

// h3Client is an HTTP/3 client that sends every request to addr and
// counts the QUIC connections it dials.
type h3Client struct {
	*http.Client
	tr    *http3.Transport
	dials atomic.Int64
}

func newH3Client(t testing.TB, addr string) *h3Client {
	c := &h3Client{}
	c.tr = &http3.Transport{
		TLSClientConfig: &tls.Config{InsecureSkipVerify: true, ServerName: benchTLSHost},
		Dial: func(ctx context.Context, _ string, tc *tls.Config, qc *quic.Config) (*quic.Conn, error) {
			c.dials.Add(1)
			return quic.DialAddr(ctx, addr, tc, qc)
		},
	}
	c.Client = &http.Client{Transport: c.tr, Timeout: 30 * time.Second}
	t.Cleanup(func() { c.tr.Close() })
	return c
}

// TestHTTP3ThroughServe drives HTTP/3 through the real binary: an https
// listener with http3 and an uploaded certificate, a route with a
// response header filter to a real member. A quic-go client gets routed
// and filtered answers, sends and gets back an 8 MiB body, and runs 200
// requests at once on one connection; a client that first speaks HTTP/2
// learns the port from Alt-Svc and then speaks HTTP/3; headless Chromium
// forced onto QUIC fetches a page over HTTP/3; the access log says
// HTTP/3.
func TestHTTP3ThroughServe(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: starts serve")
	}
	var served atomic.Int64
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		served.Add(1)
		h := sha256.New()
		n, _ := io.Copy(h, r.Body)
		w.Header().Set("X-Body-Sha256", hex.EncodeToString(h.Sum(nil)))
		w.Header().Set("X-Body-Bytes", strconv.FormatInt(n, 10))
		w.Header().Set("X-Proto-Seen", r.Proto)
		if size, err := strconv.Atoi(r.URL.Query().Get("size")); err == nil {
			_, _ = io.Copy(w, io.LimitReader(zeros{}, int64(size)))
			return
		}
		fmt.Fprintf(w, "member: %s %s\n", r.Method, r.URL.Path)
	})}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })

	dir := t.TempDir()
	certFile, keyFile := benchCert(t, dir)
	c := newCluster(t)
	n := c.bootstrap()
	l, err := net.Listen("tcp", http3VIP+":0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	tenant := fmt.Sprintf(`
kind: VIPPool
name: h3
cidrs: [%[1]s/32]
mode: static
---
kind: Tenant
name: acme
domains: [acme.example]
networks: [127.0.0.1/32]
pools: [h3]
`, http3VIP)
	lb := fmt.Sprintf(`
kind: LoadBalancer
name: h3
tenant: acme
vip: { pool: h3, address: "%[1]s" }
listeners: [{ port: %[2]d, protocol: https, http3: true, tls: { certificates: [h3] } }]
routes:
  - { host: %[4]s, path: /, pool: web, filters: [{ responseHeaderModifier: { set: [{ name: X-Filtered, value: "yes" }] } }] }
pools: { web: { members: ["%[3]s"] } }
accessLog: { enabled: true, sample: 1.0 }
`, http3VIP, port, ln.Addr().String(), benchTLSHost)
	for i, doc := range []string{tenant, lb} {
		p := filepath.Join(dir, fmt.Sprintf("m%d.yaml", i))
		if err := os.WriteFile(p, []byte(doc), 0o644); err != nil {
			t.Fatal(err)
		}
		if i == 1 {
			if _, err := c.cli(n, "cert", "upload", "h3", "--tenant", "acme", "--cert", certFile, "--key", keyFile); err != nil {
				t.Fatal(err)
			}
		}
		if out, err := c.cli(n, "apply", "-f", p); err != nil {
			t.Fatalf("apply: %v\n%s", err, out)
		}
	}
	addr := net.JoinHostPort(http3VIP, strconv.Itoa(port))
	if err := waitHandshake(addr, 30*time.Second); err != nil {
		t.Fatal(err)
	}
	base := "https://" + benchTLSHost + ":" + strconv.Itoa(port)

	t.Run("routed and filtered", func(t *testing.T) {
		hc := newH3Client(t, addr)
		var resp *http.Response
		waitFor(t, 30*time.Second, "an HTTP/3 answer", func() error {
			var err error
			resp, err = hc.Get(base + "/hello")
			return err
		})
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || resp.ProtoMajor != 3 || resp.Header.Get("X-Filtered") != "yes" || string(body) != "member: GET /hello\n" {
			t.Fatalf("%s %d, X-Filtered %q: %q", resp.Proto, resp.StatusCode, resp.Header.Get("X-Filtered"), body)
		}
	})

	t.Run("large bodies", func(t *testing.T) {
		hc := newH3Client(t, addr)
		big := make([]byte, 8<<20)
		for i := range big {
			big[i] = byte(i * 7)
		}
		sum := sha256.Sum256(big)
		resp, err := hc.Post(base+"/upload?size="+strconv.Itoa(8<<20), "application/octet-stream", strings.NewReader(string(big)))
		if err != nil {
			t.Fatal(err)
		}
		n, _ := io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || resp.Header.Get("X-Body-Sha256") != hex.EncodeToString(sum[:]) || n != 8<<20 {
			t.Fatalf("status %d, member got %s bytes (sha %s), %d bytes back", resp.StatusCode, resp.Header.Get("X-Body-Bytes"), resp.Header.Get("X-Body-Sha256"), n)
		}
	})

	t.Run("many streams", func(t *testing.T) {
		hc := newH3Client(t, addr)
		const streams = 200
		errs := make(chan error, streams)
		for i := range streams {
			go func() {
				resp, err := hc.Get(fmt.Sprintf("%s/s/%d", base, i))
				if err == nil {
					body, _ := io.ReadAll(resp.Body)
					resp.Body.Close()
					if want := fmt.Sprintf("member: GET /s/%d\n", i); resp.StatusCode != 200 || string(body) != want {
						err = fmt.Errorf("stream %d: %d %q", i, resp.StatusCode, body)
					}
				}
				errs <- err
			}()
		}
		for range streams {
			if err := <-errs; err != nil {
				t.Fatal(err)
			}
		}
		if d := hc.dials.Load(); d != 1 {
			t.Errorf("%d QUIC connections for %d requests, want 1", d, streams)
		}
	})

	t.Run("alt-svc then http3", func(t *testing.T) {
		var d net.Dialer
		tr := &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true, ServerName: benchTLSHost}, ForceAttemptHTTP2: true,
			DialContext: func(ctx context.Context, network, _ string) (net.Conn, error) {
				return d.DialContext(ctx, network, addr)
			}}
		defer tr.CloseIdleConnections()
		resp, err := (&http.Client{Transport: tr, Timeout: 10 * time.Second}).Get(base + "/first")
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		alt := resp.Header.Get("Alt-Svc")
		if resp.ProtoMajor != 2 || !strings.HasPrefix(alt, `h3=":`) {
			t.Fatalf("%s answer, Alt-Svc %q: want HTTP/2 advertising h3", resp.Proto, alt)
		}
		altPort := strings.TrimSuffix(strings.TrimPrefix(strings.SplitN(alt, ";", 2)[0], `h3=":`), `"`)
		hc := newH3Client(t, net.JoinHostPort(http3VIP, altPort))
		resp, err = hc.Get(base + "/second")
		if err != nil {
			t.Fatalf("HTTP/3 to the advertised port %s: %v", altPort, err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.ProtoMajor != 3 || string(body) != "member: GET /second\n" {
			t.Fatalf("%s %d: %q", resp.Proto, resp.StatusCode, body)
		}
	})

	t.Run("chromium", func(t *testing.T) {
		if _, err := os.Stat(chromiumPath); err != nil {
			unavailable(t, "the HTTP/3 browser test needs headless Chromium at %s (Debian package chromium): %v", chromiumPath, err)
		}
		spki := leafSPKI(t, certFile)
		origin := benchTLSHost + ":" + strconv.Itoa(port)
		opts := []chromedp.ExecAllocatorOption{
			chromedp.ExecPath(chromiumPath),
			chromedp.Flag("headless", true),
			chromedp.NoSandbox,
			chromedp.DisableGPU,
			chromedp.NoFirstRun,
			chromedp.NoDefaultBrowserCheck,
			chromedp.Flag("disable-background-networking", true),
			chromedp.Flag("disable-component-update", true),
			chromedp.Flag("disable-dev-shm-usage", true),
			chromedp.Flag("enable-quic", true),
			chromedp.Flag("origin-to-force-quic-on", origin),
			chromedp.Flag("host-resolver-rules", "MAP "+benchTLSHost+" "+http3VIP),
			chromedp.Flag("ignore-certificate-errors-spki-list", spki),
			chromedp.UserDataDir(t.TempDir()),
		}
		ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
		defer cancel()
		actx, acancel := chromedp.NewExecAllocator(ctx, opts...)
		defer acancel()
		bctx, bcancel := chromedp.NewContext(actx)
		defer bcancel()
		before := served.Load()
		if _, err := chromedp.Run(bctx, chromedp.Navigate("https://"+origin+"/page")); err != nil {
			t.Fatalf("navigate: %v", err)
		}
		proto, err := chromedp.Run(bctx, chromedp.Evaluate[string](`performance.getEntriesByType("navigation")[0].nextHopProtocol`))
		if err != nil {
			t.Fatal(err)
		}
		text, err := chromedp.Run(bctx, chromedp.Evaluate[string](`document.body.innerText`))
		if err != nil {
			t.Fatal(err)
		}
		if proto != "h3" || !strings.Contains(text, "member: GET /page") || served.Load() == before {
			t.Fatalf("Chromium fetched over %q: %q", proto, text)
		}
	})

	waitFor(t, 30*time.Second, "an access-log line with protocol HTTP/3", func() error {
		data, err := os.ReadFile(n.logPath)
		if err != nil {
			return err
		}
		if !strings.Contains(string(data), `"protocol":"HTTP/3"`) {
			return fmt.Errorf("no HTTP/3 line in %s", n.logPath)
		}
		return nil
	})
	if served.Load() == 0 {
		t.Error("no request reached the member")
	}
}

// zeros reads as endless zero bytes.
type zeros struct{}

func (zeros) Read(p []byte) (int, error) {
	clear(p)
	return len(p), nil
}

// leafSPKI is the base64 SHA-256 of the first certificate's public key in
// certFile, for Chromium's --ignore-certificate-errors-spki-list.
func leafSPKI(t testing.TB, certFile string) string {
	t.Helper()
	data, err := os.ReadFile(certFile)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := pem.Decode(data)
	if b == nil {
		t.Fatalf("no PEM in %s", certFile)
	}
	c, err := x509.ParseCertificate(b.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(c.RawSubjectPublicKeyInfo)
	return base64.StdEncoding.EncodeToString(sum[:])
}
