package scenarios

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/quic-go/quic-go"
	"github.com/quic-go/quic-go/http3"
)

// The steered HTTP/3 scenario's two VIPs, one tenant's.
const (
	h3SteeredVIPA = "127.0.0.77"
	h3SteeredVIPB = "127.0.0.78"
)

// connectedUDP is a UDP socket connected to one address, as a
// net.PacketConn: the kernel gives it only datagrams from that address.
type connectedUDP struct{ c *net.UDPConn }

func (c connectedUDP) ReadFrom(b []byte) (int, net.Addr, error) {
	n, err := c.c.Read(b)
	return n, c.c.RemoteAddr(), err
}
func (c connectedUDP) WriteTo(b []byte, _ net.Addr) (int, error) { return c.c.Write(b) }
func (c connectedUDP) Close() error                              { return c.c.Close() }
func (c connectedUDP) LocalAddr() net.Addr                       { return c.c.LocalAddr() }
func (c connectedUDP) SetDeadline(t time.Time) error             { return c.c.SetDeadline(t) }
func (c connectedUDP) SetReadDeadline(t time.Time) error         { return c.c.SetReadDeadline(t) }
func (c connectedUDP) SetWriteDeadline(t time.Time) error        { return c.c.SetWriteDeadline(t) }

// h3GetConnected sends GET url over HTTP/3 from a UDP socket connected to
// addr: an answer came from addr.
func h3GetConnected(addr, url string) (string, error) {
	ua, err := net.ResolveUDPAddr("udp", addr)
	if err != nil {
		return "", err
	}
	uc, err := net.DialUDP("udp", nil, ua)
	if err != nil {
		return "", err
	}
	defer uc.Close()
	tr := &quic.Transport{Conn: connectedUDP{uc}}
	defer tr.Close()
	rt := &http3.Transport{
		TLSClientConfig: &tls.Config{InsecureSkipVerify: true, ServerName: benchTLSHost},
		Dial: func(ctx context.Context, _ string, tc *tls.Config, qc *quic.Config) (*quic.Conn, error) {
			return tr.DialEarly(ctx, ua, tc, qc)
		},
	}
	defer rt.Close()
	resp, err := (&http.Client{Transport: rt, Timeout: 10 * time.Second}).Get(url)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return "", err
	}
	if resp.StatusCode != http.StatusOK || resp.ProtoMajor != 3 {
		return "", fmt.Errorf("%s %d", resp.Proto, resp.StatusCode)
	}
	return string(body), nil
}

// udpSocketsOfProcess counts the UDP sockets of process pid bound to
// port (its descriptors' inodes, looked up in /proc/net/udp and udp6).
func udpSocketsOfProcess(t *testing.T, pid, port int) int {
	t.Helper()
	fds, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	if err != nil {
		t.Fatal(err)
	}
	inodes := map[string]bool{}
	for _, fd := range fds {
		link, err := os.Readlink(fmt.Sprintf("/proc/%d/fd/%s", pid, fd.Name()))
		if ino, ok := strings.CutPrefix(link, "socket:["); err == nil && ok {
			inodes[strings.TrimSuffix(ino, "]")] = true
		}
	}
	n := 0
	for _, f := range []string{"udp", "udp6"} {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/net/%s", pid, f))
		if err != nil {
			t.Fatal(err)
		}
		for _, line := range strings.Split(string(b), "\n")[1:] {
			fs := strings.Fields(line)
			if len(fs) > 9 && strings.HasSuffix(fs[1], fmt.Sprintf(":%04X", port)) && inodes[fs[9]] {
				n++
			}
		}
	}
	return n
}

// TestHTTP3SteeredThroughServe: serve with listen-sockets: tenant, one
// tenant's https listeners with http3 on two VIPs and one port. The
// process holds one UDP socket on that port for both (none bound to
// either VIP), and each VIP answers HTTP/3 from its own address (the
// client's socket is connected to it).
func TestHTTP3SteeredThroughServe(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: starts serve")
	}
	if os.Geteuid() != 0 {
		unavailable(t, "listen-sockets: tenant needs CAP_BPF and CAP_NET_ADMIN (run as root)")
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "member for %s", r.Header.Get("X-Lb"))
	})}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })

	dir := t.TempDir()
	certFile, keyFile := benchCert(t, dir)
	c := newCluster(t)
	n := c.newNode()
	c.start(n, "--listen-sockets", "tenant")
	c.waitMember(n)
	l, err := net.Listen("tcp", h3SteeredVIPA+":0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	docs := []string{fmt.Sprintf(`
kind: VIPPool
name: steered
cidrs: [%s/32, %s/32]
mode: static
---
kind: Tenant
name: acme
domains: [acme.example]
networks: [127.0.0.1/32]
pools: [steered]
`, h3SteeredVIPA, h3SteeredVIPB)}
	for _, name := range []string{"a", "b"} {
		vip := map[string]string{"a": h3SteeredVIPA, "b": h3SteeredVIPB}[name]
		docs = append(docs, fmt.Sprintf(`
kind: LoadBalancer
name: %[1]s
tenant: acme
vip: { pool: steered, address: "%[2]s" }
listeners: [{ port: %[3]d, protocol: https, http3: true, tls: { certificates: [h3] } }]
routes:
  - { host: %[5]s, path: /, pool: web, filters: [{ requestHeaderModifier: { set: [{ name: X-Lb, value: "%[1]s" }] } }] }
pools: { web: { members: ["%[4]s"] } }
`, name, vip, port, ln.Addr().String(), benchTLSHost))
	}
	for i, doc := range docs {
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
	for _, vip := range []string{h3SteeredVIPA, h3SteeredVIPB} {
		if err := waitHandshake(net.JoinHostPort(vip, strconv.Itoa(port)), 30*time.Second); err != nil {
			t.Fatal(err)
		}
	}
	for name, vip := range map[string]string{"a": h3SteeredVIPA, "b": h3SteeredVIPB} {
		addr := net.JoinHostPort(vip, strconv.Itoa(port))
		var body string
		waitFor(t, 30*time.Second, "an HTTP/3 answer from "+addr, func() error {
			var err error
			body, err = h3GetConnected(addr, "https://"+benchTLSHost+":"+strconv.Itoa(port)+"/")
			return err
		})
		if want := "member for " + name; body != want {
			t.Errorf("%s answered %q; want %q", addr, body, want)
		}
	}
	if got := udpSocketsOfProcess(t, n.cmd.Process.Pid, port); got != 1 {
		t.Errorf("serve holds %d UDP sockets on port %d for the tenant's two VIPs; want 1", got, port)
	}
	ss, err := exec.Command("ss", "-Huln").CombinedOutput()
	if err != nil {
		t.Fatalf("ss: %v\n%s", err, ss)
	}
	for _, vip := range []string{h3SteeredVIPA, h3SteeredVIPB} {
		if a := net.JoinHostPort(vip, strconv.Itoa(port)); strings.Contains(string(ss), a) {
			t.Errorf("a UDP socket is bound to %s itself:\n%s", a, ss)
		}
	}
}
