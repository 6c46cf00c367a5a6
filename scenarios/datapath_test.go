package scenarios

import (
	"bytes"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/teapot-lb/teapot-lb/proxy"
)

// dataPathVIP is the VIP of TestServeDataPathIOURing.
const dataPathVIP = "127.0.0.139"

// TestServeDataPathIOURing runs `serve --data-path io_uring` as a user
// does: the host says io_uring in cluster status and /metrics, a tcp
// listener's connection moves its bytes through the ring (the ring's
// connection counter), with a half-close passed on; an unknown path is
// refused before anything starts.
func TestServeDataPathIOURing(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: starts a host")
	}
	if _, _, err := proxy.ChooseDataPath(proxy.DataPathIOURing); err != nil {
		t.Skipf("io_uring unavailable here: %v", err)
	}
	c := newCluster(t)
	bad := c.newNode()
	out, err := c.commandOf(t.Context(), c.bin, "serve", "--data-dir", bad.dir, "--data-path", "uring", "--check-config").CombinedOutput()
	if err == nil || !strings.Contains(string(out), "data-path") {
		t.Fatalf("--data-path uring: %v, %s; want a refusal naming data-path", err, out)
	}
	c.nodes = c.nodes[:0]

	n := c.newNode()
	c.start(n, "--data-path", "io_uring")
	c.waitMember(n)
	st, err := c.status(n)
	if err != nil {
		t.Fatal(err)
	}
	if got := st.GetNodes()[0].GetDataPath(); got != "io_uring" {
		t.Fatalf("cluster status says data path %q, want io_uring", got)
	}
	if text, err := c.cli(n, "cluster", "status"); err != nil || !strings.Contains(text, "DATA PATH") || !strings.Contains(text, "io_uring") {
		t.Fatalf("cluster status: %v\n%s", err, text)
	}

	member, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer member.Close()
	go func() {
		for {
			conn, err := member.Accept()
			if err != nil {
				return
			}
			go func() {
				defer conn.Close()
				_, _ = io.Copy(conn, conn)
				_ = conn.(*net.TCPConn).CloseWrite()
			}()
		}
	}()
	port := freePortOn(t, dataPathVIP)
	manifest := fmt.Sprintf(`
kind: VIPPool
name: local
cidrs: [%[1]s/32]
mode: static
---
kind: Tenant
name: acme
networks: [127.0.0.1/32]
pools: [local]
---
kind: LoadBalancer
name: echo
tenant: acme
vip: { pool: local, address: "%[1]s" }
listeners: [{ port: %[2]d, protocol: tcp, pool: app }]
pools: { app: { members: ["%[3]s"] } }
`, dataPathVIP, port, member.Addr().String())
	mpath := filepath.Join(c.dir, "echo.yaml")
	if err := os.WriteFile(mpath, []byte(manifest), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := c.cli(n, "apply", "-f", mpath); err != nil {
		t.Fatalf("apply: %v\n%s", err, out)
	}
	msg := bytes.Repeat([]byte("through the ring "), 1<<16)
	addr := net.JoinHostPort(dataPathVIP, strconv.Itoa(port))
	waitFor(t, 30*time.Second, "an echo through the listener", func() error {
		conn, err := net.DialTimeout("tcp", addr, 2*time.Second)
		if err != nil {
			return err
		}
		defer conn.Close()
		_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
		go func() {
			_, _ = conn.Write(msg)
			_ = conn.(*net.TCPConn).CloseWrite()
		}()
		got, err := io.ReadAll(conn)
		if err != nil {
			return err
		}
		if !bytes.Equal(got, msg) {
			return fmt.Errorf("echoed %d bytes, sent %d", len(got), len(msg))
		}
		return nil
	})
	waitFor(t, 10*time.Second, "the ring's counters in /metrics", func() error {
		m, err := scrape(n)
		if err != nil {
			return err
		}
		if v := sum(m, "teapot_lb_data_path", map[string]string{"path": "io_uring"}); v != 1 {
			return fmt.Errorf("teapot_lb_data_path{path=io_uring} = %v", v)
		}
		if v := sum(m, "teapot_lb_io_uring_connections_total", nil); v < 1 {
			return fmt.Errorf("teapot_lb_io_uring_connections_total = %v", v)
		}
		return nil
	})
}
