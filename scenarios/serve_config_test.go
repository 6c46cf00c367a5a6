package scenarios

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// TestServeConfigFileOnRunningHost starts a host whose memory settings
// come from its serve.yaml, written as the README advises, and checks
// through /metrics that the runtime took them: the soft memory limit
// (go_gc_gomemlimit_bytes) and the headroom, which lowers the
// collector's target below GOGC once the live heap needs it (GOGC=1000
// here: a headroom of 16 MiB then binds on a live heap above 1.6 MiB, as
// a fresh host's is). log-level: debug from the file shows the target.
func TestServeConfigFileOnRunningHost(t *testing.T) {
	t.Setenv("GOGC", "1000")
	c := newCluster(t)
	n := c.newNode()
	conf := filepath.Join(c.dir, "serve.yaml")
	if err := os.WriteFile(conf, []byte("memory-limit: 1900MiB\ngc-headroom: 16MiB\nlog-level: debug\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	c.start(n, "--config", conf)
	c.waitMember(n)
	var limit, gogc float64
	waitFor(t, startTimeout, "the file's memory-limit and gc-headroom in /metrics", func() error {
		// A collection, after which the headroom sets the target.
		if resp, err := http.Get("http://" + n.metricsAddr + "/debug/pprof/heap?gc=1"); err == nil {
			resp.Body.Close()
		}
		s, err := scrape(n)
		if err != nil {
			return err
		}
		if v := s["go_gc_gomemlimit_bytes"]; len(v) == 1 {
			limit = v[0].value
		}
		if v := s["go_gc_gogc_percent"]; len(v) == 1 {
			gogc = v[0].value
		}
		if limit != 1900<<20 || gogc <= 0 || gogc >= 1000 {
			return fmt.Errorf("go_gc_gomemlimit_bytes %.0f (want %d), go_gc_gogc_percent %.0f (want below GOGC=1000)", limit, 1900<<20, gogc)
		}
		return nil
	})
	t.Logf("memory-limit: 1900MiB and gc-headroom: 16MiB from the file: limit %.0f MiB, GOGC %.0f", limit/(1<<20), gogc)
}

// TestServeRefusesBadConfigFile: the real binary refuses a bad file at
// once, naming the file, the line and the fix, with exit status 78 (the
// unit's RestartPreventExitStatus); --check-config accepts a good file
// and starts nothing.
func TestServeRefusesBadConfigFile(t *testing.T) {
	c := newCluster(t)
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad.yaml")
	good := filepath.Join(dir, "good.yaml")
	if err := os.WriteFile(bad, []byte("data-dir: "+filepath.Join(dir, "data")+"\ndrain-timeout: 30\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(good, []byte("data-dir: "+filepath.Join(dir, "data")+"\ndrain-timeout: 30s\nmemory-limit: 1900MiB\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	run := func(args ...string) (int, string) {
		ctx, cancel := context.WithTimeout(context.Background(), cliTimeout)
		defer cancel()
		cmd := c.command(ctx, append([]string{"serve"}, args...)...)
		cmd.Env = childEnv()
		out, err := cmd.CombinedOutput()
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			return ee.ExitCode(), string(out)
		}
		if err != nil {
			t.Fatalf("serve %v: %v", args, err)
		}
		return 0, string(out)
	}
	if code, out := run("--config", bad, "--api-addr", freeAddrs(t, 1)[0]); code != 78 || !strings.Contains(out, bad+":2: drain-timeout: 30 has no unit; write 30s") {
		t.Errorf("serve with a bad file: exit %d, want 78:\n%s", code, out)
	}
	if code, out := run("--check-config", "--config", good); code != 0 || !strings.Contains(out, "configuration is valid") {
		t.Errorf("serve --check-config of a good file: exit %d:\n%s", code, out)
	}
	if _, err := os.Stat(filepath.Join(dir, "data")); err == nil {
		t.Errorf("serve --check-config or a refused serve created the data directory")
	}
}

// notifySocket listens on a NOTIFY_SOCKET for the serve processes the
// test starts and records, when READY=1 arrives, whether admin.conf
// existed at that moment.
type notifySocket struct {
	conn      *net.UnixConn
	adminConf string

	mu    sync.Mutex
	ready chan struct{}
	// confAtReady is the result of the stat of admin.conf when READY=1
	// arrived.
	confAtReady error
}

func listenNotify(t *testing.T, adminConf string) *notifySocket {
	t.Helper()
	path := filepath.Join(t.TempDir(), "notify")
	conn, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: path, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	t.Setenv("NOTIFY_SOCKET", path)
	ns := &notifySocket{conn: conn, adminConf: adminConf, ready: make(chan struct{})}
	go func() {
		buf := make([]byte, 4096)
		for {
			n, err := conn.Read(buf)
			if err != nil {
				return
			}
			for _, l := range strings.Split(string(buf[:n]), "\n") {
				if l != "READY=1" {
					continue
				}
				_, statErr := os.Stat(adminConf)
				ns.mu.Lock()
				select {
				case <-ns.ready:
				default:
					ns.confAtReady = statErr
					close(ns.ready)
				}
				ns.mu.Unlock()
			}
		}
	}()
	return ns
}

// TestServeReadyAfterAdminCredentials runs serve under a NOTIFY_SOCKET as
// systemd would: READY=1 arrives only once admin.conf is written (and the
// admin API answers: cluster status works right after it); a host that
// cannot write admin.conf never says READY=1, so that systemd does not
// report a started host an operator cannot reach.
func TestServeReadyAfterAdminCredentials(t *testing.T) {
	c := newCluster(t)
	n := c.newNode()
	ns := listenNotify(t, n.adminConf())
	c.start(n)
	select {
	case <-ns.ready:
	case <-time.After(startTimeout):
		t.Fatal("no READY=1 from a new host")
	}
	if ns.confAtReady != nil {
		t.Fatalf("READY=1 arrived before admin.conf was written: %v", ns.confAtReady)
	}
	if _, err := c.status(n); err != nil {
		t.Fatalf("cluster status right after READY=1: %v", err)
	}
	c.stop(n)

	// admin.conf cannot be written (a directory is in its place).
	n2 := c.newNode()
	if err := os.MkdirAll(filepath.Join(n2.adminConf(), "in-the-way"), 0o700); err != nil {
		t.Fatal(err)
	}
	ns2 := listenNotify(t, n2.adminConf())
	c.start(n2)
	waitFor(t, startTimeout, n2.id+" fails to write admin.conf", func() error {
		if !n2.running() {
			return errStop(fmt.Errorf("%s exited", n2.id))
		}
		if !strings.Contains(tail(n2.logPath, 200), "write admin credentials") {
			return errors.New("not yet")
		}
		return nil
	})
	// The host serves otherwise (its data plane applied the state before
	// it wrote admin.conf); a READY=1 would follow within milliseconds.
	select {
	case <-ns2.ready:
		t.Errorf("READY=1 from a host without admin credentials")
	case <-time.After(3 * time.Second):
	}
}
