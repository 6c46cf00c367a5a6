package scenarios

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/net/http2"
)

// Tenant b's heaviest abuses run in a process of their own: the test
// binary started again with attackerEnv naming the role. In the test
// process, b's thousands of goroutines (2,000 HTTP/2 streams, 1,000 TLS
// members, under the race detector) shared the Go scheduler with a's
// probers and the admin prober: a probe then waited behind b's goroutines
// in the test process, not in the LB host, and the scenario measured the
// harness. An attacker is another party with its own CPU time; so is this
// process, and the host's budgets still see every connection it makes.
const attackerEnv = "TEAPOT_NOISY_ATTACKER"

// attackerMain runs the role an attacker process was started for; its
// result is the exit code. The parent talks to it with JSON lines: the
// child writes them on stdout, reads commands on stdin.
func attackerMain(role string) int {
	log.SetOutput(io.Discard) // the members' "TLS handshake error" lines
	out := json.NewEncoder(os.Stdout)
	in := bufio.NewScanner(os.Stdin)
	in.Buffer(make([]byte, 64<<10), 1<<20)
	var err error
	switch role {
	case "fanout":
		err = attackFanOut(in, out)
	case "checkmembers":
		err = attackCheckMembers(in, out)
	case "ratelimit":
		err = attackRateLimit(in, out)
	case "tenant-a":
		err = attackTenantA(in, out)
	default:
		err = fmt.Errorf("no attacker role %q", role)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "attacker:", err)
		return 1
	}
	return 0
}

// attacker is the parent's handle of an attacker process.
type attacker struct {
	tb   testing.TB
	cmd  *exec.Cmd
	in   io.WriteCloser
	out  *json.Decoder
	done chan struct{}
}

// startAttacker starts the test binary as an attacker in role, with env
// added to its environment. It is killed at the end of the test.
func startAttacker(tb testing.TB, role string, env ...string) *attacker {
	tb.Helper()
	return startAttackerCmd(tb, role, exec.Command(os.Args[0]), env...)
}

// startAttackerCmd is startAttacker with the command that runs the test
// binary (e.g. through nice).
func startAttackerCmd(tb testing.TB, role string, cmd *exec.Cmd, env ...string) *attacker {
	tb.Helper()
	cmd.Env = append(append(os.Environ(), attackerEnv+"="+role), env...)
	cmd.Stderr = os.Stderr
	in, err := cmd.StdinPipe()
	if err != nil {
		tb.Fatalf("attacker %s: %v", role, err)
	}
	outR, err := cmd.StdoutPipe()
	if err != nil {
		tb.Fatalf("attacker %s: %v", role, err)
	}
	if err := cmd.Start(); err != nil {
		tb.Fatalf("start attacker %s: %v", role, err)
	}
	a := &attacker{tb: tb, cmd: cmd, in: in, out: json.NewDecoder(outR), done: make(chan struct{})}
	go func() {
		cmd.Wait()
		close(a.done)
	}()
	tb.Cleanup(a.stop)
	return a
}

// recv decodes the attacker's next message into v.
func (a *attacker) recv(v any) error {
	if err := a.out.Decode(v); err != nil {
		return fmt.Errorf("attacker %s: %w", a.cmd.Env[len(a.cmd.Env)-1], err)
	}
	return nil
}

// send writes one command line to the attacker.
func (a *attacker) send(line string) error {
	_, err := fmt.Fprintln(a.in, line)
	return err
}

// stop ends the attacker (closing its stdin, then killing it).
func (a *attacker) stop() {
	a.in.Close()
	select {
	case <-a.done:
	case <-time.After(5 * time.Second):
		a.cmd.Process.Kill()
		<-a.done
	}
}

// fanOutResult is what the fan-out attacker saw.
type fanOutResult struct {
	Addr                   string `json:",omitempty"` // the slow member's address (first message)
	OK, Failed, ConnFailed int64
	MaxOpen                int64 // connections the member had open at once
	FirstErr               string
}

// attackFanOut starts the slow member, says its address, waits for the
// listener's address and host name ("addr host"), opens fanOutConns
// cleartext HTTP/2 connections of fanOutStreams streams each, and says
// what they got.
func attackFanOut(in *bufio.Scanner, out *json.Encoder) error {
	slow, err := listenSlowBackend("127.0.51.4", fanOutHold)
	if err != nil {
		return err
	}
	if err := out.Encode(fanOutResult{Addr: slow.addr}); err != nil {
		return err
	}
	if !in.Scan() {
		return nil // the parent gave up
	}
	addr, host, _ := strings.Cut(in.Text(), " ")
	var (
		ok, failed, connFailed atomic.Int64
		firstErr               atomic.Value
		wg                     sync.WaitGroup
	)
	// A stream's answer may come up to 8 s late on a loaded machine and
	// still count; a fan-out that ends sooner ends the phase sooner.
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Second+fanOutHold)
	defer cancel()
	tr := &http2.Transport{AllowHTTP: true}
	fail := func(n *atomic.Int64, err error) {
		n.Add(1)
		firstErr.CompareAndSwap(nil, err.Error())
	}
	for range fanOutConns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c, err := net.DialTimeout("tcp", addr, 10*time.Second)
			if err != nil {
				fail(&connFailed, err)
				return
			}
			defer c.Close()
			cc, err := tr.NewClientConn(c)
			if err != nil {
				fail(&connFailed, err)
				return
			}
			var streams sync.WaitGroup
			for range fanOutStreams {
				streams.Add(1)
				go func() {
					defer streams.Done()
					req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+host+"/", nil)
					resp, err := cc.RoundTrip(req)
					if err != nil {
						fail(&failed, err)
						return
					}
					io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
					if resp.StatusCode == http.StatusOK {
						ok.Add(1)
					} else {
						failed.Add(1)
					}
				}()
			}
			streams.Wait()
		}()
	}
	wg.Wait()
	e, _ := firstErr.Load().(string)
	return out.Encode(fanOutResult{OK: ok.Load(), Failed: failed.Load(), ConnFailed: connFailed.Load(), MaxOpen: slow.maxOpen.Load(), FirstErr: e})
}

// checkMembersResult is what the check-members attacker saw.
type checkMembersResult struct {
	Addrs      []string `json:",omitempty"` // the members' addresses (first message)
	Handshakes int64    // full handshakes: client certificates verified
	Conns      int64
}

// Environment of the check-members attacker: its server certificate and
// key (PEM).
const (
	checkCertEnv = "TEAPOT_NOISY_CHECK_CERT"
	checkKeyEnv  = "TEAPOT_NOISY_CHECK_KEY"
)

// attackCheckMembers starts checkMembers TLS servers that each require a
// client certificate, says their addresses, and on end of input says how
// many handshakes and connections they saw.
func attackCheckMembers(in *bufio.Scanner, out *json.Encoder) error {
	cert, err := tls.X509KeyPair([]byte(os.Getenv(checkCertEnv)), []byte(os.Getenv(checkKeyEnv)))
	if err != nil {
		return fmt.Errorf("server certificate: %w", err)
	}
	var handshakes, conns atomic.Int64
	cfg := &tls.Config{Certificates: []tls.Certificate{cert}, ClientAuth: tls.RequireAnyClientCert,
		VerifyPeerCertificate: func([][]byte, [][]*x509.Certificate) error { handshakes.Add(1); return nil }}
	handler := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, "ok") })
	quiet := log.New(io.Discard, "", 0)
	var res checkMembersResult
	for i := range checkMembers {
		ln, err := net.Listen("tcp", fmt.Sprintf("127.0.51.%d:0", 100+i%100))
		if err != nil {
			return fmt.Errorf("member %d: %w", i, err)
		}
		srv := &http.Server{Handler: handler, TLSConfig: cfg.Clone(), ReadHeaderTimeout: 5 * time.Second, ErrorLog: quiet,
			ConnState: func(_ net.Conn, st http.ConnState) {
				if st == http.StateNew {
					conns.Add(1)
				}
			}}
		go srv.ServeTLS(ln, "", "")
		res.Addrs = append(res.Addrs, ln.Addr().String())
	}
	if err := out.Encode(res); err != nil {
		return err
	}
	for in.Scan() {
	}
	return out.Encode(checkMembersResult{Handshakes: handshakes.Load(), Conns: conns.Load()})
}
