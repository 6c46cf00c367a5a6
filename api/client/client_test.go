package client_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/teapot-lb/teapot-lb/api/client"
	"github.com/teapot-lb/teapot-lb/api/client/clienttest"
	"github.com/teapot-lb/teapot-lb/api/pki"
	pb "github.com/teapot-lb/teapot-lb/api/proto/teapotv1"
)

// named answers ClusterStatus with its own name, so a test can tell which
// server a call reached.
type named struct {
	pb.UnimplementedAdminServer
	name string
}

func (n *named) ClusterStatus(context.Context, *pb.ClusterStatusRequest) (*pb.ClusterStatusResponse, error) {
	return &pb.ClusterStatusResponse{LeaderId: n.name}, nil
}

func (n *named) Get(_ context.Context, req *pb.GetRequest) (*pb.Object, error) {
	return nil, status.Errorf(codes.NotFound, "%s %q not found", req.GetRef().GetKind(), req.GetRef().GetName())
}

// deadAddr returns a loopback address where nothing listens.
func deadAddr(t *testing.T) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := lis.Addr().String()
	lis.Close()
	return addr
}

// silentAddr returns a loopback address that accepts connections and never
// says a word, like a host that hangs.
func silentAddr(t *testing.T) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { lis.Close() })
	go func() {
		var held []net.Conn
		defer func() {
			for _, c := range held {
				c.Close()
			}
		}()
		for {
			c, err := lis.Accept()
			if err != nil {
				return
			}
			held = append(held, c)
		}
	}()
	return lis.Addr().String()
}

func dial(t *testing.T, cfg *client.Config, override string) *client.Conn {
	t.Helper()
	conn, err := client.Dial(context.Background(), cfg, override)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

func leader(t *testing.T, conn *client.Conn) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err := conn.Admin.ClusterStatus(ctx, &pb.ClusterStatusRequest{})
	return resp.GetLeaderId(), err
}

func TestFailover(t *testing.T) {
	env := clienttest.Start(t, &named{name: "one"}, &named{name: "two"})
	cfg := *env.Config
	cfg.Servers = append([]string{deadAddr(t)}, env.Config.Servers...)
	conn := dial(t, &cfg, "")

	for i := range 3 {
		got, err := leader(t, conn)
		if err != nil || got != "one" {
			t.Fatalf("call %d before stop: got %q, %v; want one", i, got, err)
		}
	}
	env.Servers[0].Stop()
	for i := range 10 {
		got, err := leader(t, conn)
		if err != nil || got != "two" {
			t.Fatalf("call %d after stop: got %q, %v; want two", i, got, err)
		}
	}
}

func TestSilentServerIsSkipped(t *testing.T) {
	env := clienttest.Start(t, &named{name: "one"})
	cfg := *env.Config
	cfg.Servers = []string{silentAddr(t), env.Config.Servers[0]}
	conn := dial(t, &cfg, "")

	start := time.Now()
	got, err := leader(t, conn)
	if err != nil || got != "one" {
		t.Fatalf("got %q, %v; want one", got, err)
	}
	if d := time.Since(start); d > 3*client.ConnectTimeout {
		t.Errorf("call took %v behind a silent server", d)
	}
}

func TestNoServerReachable(t *testing.T) {
	env := clienttest.Start(t)
	cfg := *env.Config
	a, b := deadAddr(t), deadAddr(t)
	cfg.Servers = []string{a, b}
	conn := dial(t, &cfg, "")

	start := time.Now()
	_, err := leader(t, conn)
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("failing call took %v", d)
	}
	var ue *client.UnreachableError
	if !errors.As(err, &ue) {
		t.Fatalf("err = %v (%T), want *UnreachableError", err, err)
	}
	if status.Code(err) != codes.Unavailable {
		t.Errorf("code = %v, want Unavailable", status.Code(err))
	}
	line := client.ErrorLine(fmt.Errorf("cluster status: %w", err))
	want := fmt.Sprintf("cluster status: no teapot-lb server reachable at %s, %s: dial tcp ", a, b)
	if !strings.HasPrefix(line, want) || !strings.Contains(line, "connection refused") || strings.Contains(line, "rpc error") {
		t.Errorf("ErrorLine = %q, want prefix %q and the cause", line, want)
	}
}

func TestSilentServersFailInTime(t *testing.T) {
	env := clienttest.Start(t)
	cfg := *env.Config
	cfg.Servers = []string{silentAddr(t), silentAddr(t)}
	conn := dial(t, &cfg, "")

	start := time.Now()
	_, err := leader(t, conn)
	if d := time.Since(start); d > 8*time.Second {
		t.Errorf("failing call took %v, want well under the 10s timeout", d)
	}
	line := client.ErrorLine(err)
	if !strings.HasPrefix(line, "no teapot-lb server reachable at "+strings.Join(cfg.Servers, ", ")+": ") || !strings.Contains(line, "handshake") {
		t.Errorf("ErrorLine = %q", line)
	}
}

func TestOverride(t *testing.T) {
	env := clienttest.Start(t, &named{name: "one"}, &named{name: "two"})
	cfg := *env.Config
	cfg.Servers = []string{deadAddr(t)}
	conn := dial(t, &cfg, " "+env.Servers[1].Addr+" ")
	if got, err := leader(t, conn); err != nil || got != "two" {
		t.Fatalf("got %q, %v; want two", got, err)
	}
	if len(conn.Servers) != 1 || conn.Servers[0] != env.Servers[1].Addr {
		t.Errorf("Servers = %v", conn.Servers)
	}
}

func TestCredentialsRefused(t *testing.T) {
	env := clienttest.Start(t, &named{name: "one"})
	other, err := pki.NewCA("other")
	if err != nil {
		t.Fatal(err)
	}
	tenantCert, tenantKey, err := env.CA.Issue(pki.IssueRequest{Identity: pki.Identity{Role: pki.RoleTenant, Name: "acme"}})
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name   string
		mutate func(*client.Config)
		want   string
	}{
		{"unknown CA", func(c *client.Config) { c.CA = string(other.CertPEM) }, "certificate signed by unknown authority"},
		{"tenant certificate", func(c *client.Config) { c.Cert, c.Key = string(tenantCert), string(tenantKey) }, "admin certificate required"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := *env.Config
			tt.mutate(&cfg)
			_, err := leader(t, dial(t, &cfg, ""))
			if line := client.ErrorLine(err); !strings.Contains(line, tt.want) || strings.Contains(line, "rpc error") {
				t.Errorf("ErrorLine = %q, want it to contain %q", line, tt.want)
			}
		})
	}
}

func TestDialErrors(t *testing.T) {
	env := clienttest.Start(t)
	tests := []struct {
		name     string
		servers  []string
		override string
		ca       string
		want     string
	}{
		{"no servers", nil, "", "", "the admin config lists no servers"},
		{"no port", []string{"10.0.0.1"}, "", "", `server address "10.0.0.1": want HOST:PORT`},
		{"bad override", []string{"127.0.0.1:1"}, "host", "", `server address "host": want HOST:PORT`},
		{"bad CA", []string{"127.0.0.1:1"}, "", "junk", "admin credentials: no CA certificate in PEM"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := *env.Config
			cfg.Servers = tt.servers
			if tt.ca != "" {
				cfg.CA = tt.ca
			}
			_, err := client.Dial(context.Background(), &cfg, tt.override)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("err = %v, want it to contain %q", err, tt.want)
			}
		})
	}
}

func TestErrorLine(t *testing.T) {
	tests := []struct {
		name string
		err  error
		want string
	}{
		{"nil", nil, ""},
		{"plain", errors.New("open x: no such file"), "open x: no such file"},
		{"invalid argument", status.Error(codes.InvalidArgument, `LoadBalancer acme/shop: listeners[0].port: must be 1-65535`), `LoadBalancer acme/shop: listeners[0].port: must be 1-65535`},
		{"wrapped", fmt.Errorf("apply: %w", status.Error(codes.AlreadyExists, `tenant "acme" already exists`)), `apply: tenant "acme" already exists`},
		{"not found", status.Error(codes.NotFound, `VIPPool "x" not found`), `VIPPool "x" not found`},
		{"unavailable from a server", status.Error(codes.Unavailable, `connection error: desc = "transport: Error while dialing: dial tcp 127.0.0.1:9: connect: connection refused"`), "no teapot-lb server reachable: dial tcp 127.0.0.1:9: connect: connection refused"},
		{"unreachable", &client.UnreachableError{Servers: []string{"a:1", "b:2"}, Err: status.Error(codes.Unavailable, `connection error: desc = "transport: Error while dialing: dial tcp a:1: i/o timeout"`)}, "no teapot-lb server reachable at a:1, b:2: dial tcp a:1: i/o timeout"},
		{"unreachable in time", &client.UnreachableError{Servers: []string{"a:1"}, Err: status.Error(codes.DeadlineExceeded, "context deadline exceeded")}, "no answer from a teapot-lb server at a:1 in time: context deadline exceeded (raise --timeout if the cluster is busy)"},
		{"deadline", status.Error(codes.DeadlineExceeded, "context deadline exceeded"), "the server did not answer in time (raise --timeout if the cluster is busy)"},
		{"unimplemented", status.Error(codes.Unimplemented, "unknown method Foo"), "the server does not support this request (is it an older teapot-lb?): unknown method Foo"},
		{"multi-line", status.Error(codes.Internal, "first\nsecond"), "first second"},
		{"no message", status.Error(codes.Aborted, ""), "Aborted"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := client.ErrorLine(tt.err); got != tt.want {
				t.Errorf("ErrorLine = %q\nwant          %q", got, tt.want)
			}
		})
	}
}

func TestConfigRoundTrip(t *testing.T) {
	env := clienttest.Start(t)
	env.Config.Servers = []string{"192.0.2.1:7443", "[2001:db8::1]:7443"}
	path := filepath.Join(t.TempDir(), "sub", "dir", "admin.conf")
	if err := client.SaveConfig(path, env.Config); err != nil {
		t.Fatal(err)
	}
	got, err := client.LoadConfig(path)
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(*got) != fmt.Sprint(*env.Config) {
		t.Errorf("loaded %+v, saved %+v", got, env.Config)
	}
	for p, want := range map[string]os.FileMode{path: 0o600, filepath.Dir(path): 0o700 | os.ModeDir} {
		fi, err := os.Stat(p)
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode() != want {
			t.Errorf("%s: mode %v, want %v", p, fi.Mode(), want)
		}
	}
	data, _ := os.ReadFile(path)
	if !strings.HasPrefix(string(data), "apiVersion: teapot-lb/v1\n") || !strings.Contains(string(data), "kind: AdminConfig\n") {
		t.Errorf("file does not start with apiVersion and kind:\n%s", data)
	}
	entries, _ := os.ReadDir(filepath.Dir(path))
	if len(entries) != 1 {
		t.Errorf("directory holds %d entries, want only the config", len(entries))
	}
}

func TestLoadConfigErrors(t *testing.T) {
	tests := []struct {
		name, text, want string
	}{
		{"wrong kind", "apiVersion: teapot-lb/v1\nkind: Tenant\n", `kind is "Tenant", want AdminConfig`},
		{"wrong version", "apiVersion: v2\nkind: AdminConfig\n", `apiVersion is "v2", want teapot-lb/v1`},
		{"unknown field", "apiVersion: teapot-lb/v1\nkind: AdminConfig\nserver: [a]\n", `unknown field "server"`},
		{"no servers", "apiVersion: teapot-lb/v1\nkind: AdminConfig\nca: x\ncert: c\nkey: k\n", "servers: no server address listed"},
		{"no CA", "apiVersion: teapot-lb/v1\nkind: AdminConfig\nservers: [a:1]\ncert: c\nkey: k\n", "ca: missing cluster CA certificate"},
		{"no key", "apiVersion: teapot-lb/v1\nkind: AdminConfig\nservers: [a:1]\nca: x\ncert: c\n", "cert, key: missing"},
		{"not yaml", "servers: [", "admin config"},
		{"wrong type", "apiVersion: teapot-lb/v1\nkind: AdminConfig\ncert: yes\n", "cannot unmarshal bool into field cert of type string"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "admin.conf")
			if err := os.WriteFile(path, []byte(tt.text), 0o600); err != nil {
				t.Fatal(err)
			}
			_, err := client.LoadConfig(path)
			if err == nil || !strings.Contains(err.Error(), tt.want) || strings.Contains(err.Error(), "\n") {
				t.Errorf("err = %v, want one line containing %q", err, tt.want)
			}
		})
	}
	if _, err := client.LoadConfig(filepath.Join(t.TempDir(), "missing")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("missing file: err = %v", err)
	}
}

func TestFindConfig(t *testing.T) {
	dir := t.TempDir()
	home := filepath.Join(dir, "home")
	work := filepath.Join(dir, "work")
	touch := func(p string) string {
		t.Helper()
		if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, nil, 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	if err := os.MkdirAll(work, 0o700); err != nil {
		t.Fatal(err)
	}
	t.Chdir(work)
	t.Setenv("HOME", home)
	t.Setenv("XDG_CONFIG_HOME", "")
	t.Setenv(client.EnvConfig, "")

	_, err := client.FindConfig("")
	if !errors.Is(err, client.ErrNoConfig) {
		t.Fatalf("nothing there: err = %v", err)
	}
	for _, want := range []string{"$TEAPOT_LB_CONFIG (unset)", "teapot-data/admin.conf", filepath.Join(home, ".config/teapot-lb/admin.conf"), client.SystemConfig, "start `teapot-lb serve` or pass --config"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not mention %q", err, want)
		}
	}

	user := touch(filepath.Join(home, ".config/teapot-lb/admin.conf"))
	check := func(flag, want string) {
		t.Helper()
		got, err := client.FindConfig(flag)
		if err != nil || got != want {
			t.Errorf("FindConfig(%q) = %q, %v; want %q", flag, got, err, want)
		}
	}
	check("", user)
	touch(filepath.Join(work, "teapot-data/admin.conf"))
	check("", "./teapot-data/admin.conf")
	env := touch(filepath.Join(dir, "env.conf"))
	t.Setenv(client.EnvConfig, env)
	check("", env)
	flag := touch(filepath.Join(dir, "flag.conf"))
	check(flag, flag)

	if _, err := client.FindConfig(filepath.Join(dir, "nope.conf")); !errors.Is(err, client.ErrNoConfig) || !strings.Contains(err.Error(), "--config names") {
		t.Errorf("missing --config file: err = %v", err)
	}
	t.Setenv(client.EnvConfig, filepath.Join(dir, "nope.conf"))
	if _, err := client.FindConfig(""); !errors.Is(err, client.ErrNoConfig) || !strings.Contains(err.Error(), "$TEAPOT_LB_CONFIG names") {
		t.Errorf("missing $TEAPOT_LB_CONFIG file: err = %v", err)
	}
}
