package client

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/resolver"
	"google.golang.org/grpc/resolver/manual"
	"google.golang.org/grpc/status"

	"github.com/teapot-lb/teapot-lb/api/pki"
	pb "github.com/teapot-lb/teapot-lb/api/proto/teapotv1"
)

// Timeouts of one connection attempt. A dead or blackholed address costs at
// most this much before the next address is tried.
const (
	DialTimeout    = time.Second     // TCP connect
	ConnectTimeout = 2 * time.Second // TCP connect plus TLS handshake
)

// ErrNoServers is returned by Dial when there is no address to dial.
var ErrNoServers = errors.New("no server address")

// serviceConfig picks the first reachable server in order and retries
// calls that failed because a server went away.
const serviceConfig = `{
  "loadBalancingConfig": [{"pick_first": {}}],
  "methodConfig": [{
    "name": [{"service": "teapot.v1.Admin"}, {"service": "teapot.v1.Cluster"}],
    "retryPolicy": {
      "maxAttempts": 5,
      "initialBackoff": "0.05s",
      "maxBackoff": "0.5s",
      "backoffMultiplier": 2,
      "retryableStatusCodes": ["UNAVAILABLE"]
    }
  }]
}`

// Conn is a connection to the cluster's admin API. It fails over between
// the configured servers on its own.
type Conn struct {
	Admin   pb.AdminClient
	Cluster pb.ClusterClient
	// Servers are the addresses in use, in the order they are tried.
	Servers []string

	cc *grpc.ClientConn
}

// Dial prepares a connection to the servers of cfg, or to override (one
// address or several separated by commas) when it is not empty. It
// authenticates with the admin certificate of cfg. Dial does not wait for a
// server: each call connects as needed, bounded by the call's context. It
// fails at once if ctx is already done.
func Dial(ctx context.Context, cfg *Config, override string) (*Conn, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	servers := cfg.Servers
	if override != "" {
		servers = splitList(override)
	}
	if len(servers) == 0 {
		return nil, fmt.Errorf("%w: the admin config lists no servers; pass --server HOST:PORT", ErrNoServers)
	}
	for _, s := range servers {
		if _, port, err := net.SplitHostPort(s); err != nil || port == "" {
			return nil, fmt.Errorf("server address %q: want HOST:PORT", s)
		}
	}
	tlsCfg, err := pki.ClientTLS([]byte(cfg.CA), []byte(cfg.Cert), []byte(cfg.Key))
	if err != nil {
		return nil, fmt.Errorf("admin credentials: %w", err)
	}

	addrs := make([]resolver.Address, len(servers))
	for i, s := range servers {
		addrs[i] = resolver.Address{Addr: s}
	}
	r := manual.NewBuilderWithScheme("teapot-lb")
	r.InitialState(resolver.State{Addresses: addrs})

	dialer := &net.Dialer{Timeout: DialTimeout}
	cc, err := grpc.NewClient(r.Scheme()+":///admin",
		grpc.WithResolvers(r),
		grpc.WithTransportCredentials(credentials.NewTLS(tlsCfg)),
		grpc.WithDefaultServiceConfig(serviceConfig),
		grpc.WithContextDialer(func(ctx context.Context, addr string) (net.Conn, error) {
			return dialer.DialContext(ctx, "tcp", addr)
		}),
		grpc.WithConnectParams(grpc.ConnectParams{
			Backoff: backoff.Config{
				BaseDelay:  100 * time.Millisecond,
				Multiplier: 1.6,
				Jitter:     0.2,
				MaxDelay:   time.Second,
			},
			MinConnectTimeout: ConnectTimeout,
		}),
		grpc.WithChainUnaryInterceptor(unreachable(servers)),
	)
	if err != nil {
		return nil, fmt.Errorf("connect to %s: %w", strings.Join(servers, ", "), err)
	}
	return &Conn{
		Admin:   pb.NewAdminClient(cc),
		Cluster: pb.NewClusterClient(cc),
		Servers: servers,
		cc:      cc,
	}, nil
}

// Close releases the connection.
func (c *Conn) Close() error { return c.cc.Close() }

// ClientConn is the connection under the clients above, for the other
// services an LB host serves (tenant credentials).
func (c *Conn) ClientConn() grpc.ClientConnInterface { return c.cc }

// UnreachableError is returned by calls on a Conn that reached no server.
// It carries the gRPC status of the last attempt.
type UnreachableError struct {
	Servers []string
	Err     error
}

func (e *UnreachableError) Error() string {
	return "no teapot-lb server reachable at " + strings.Join(e.Servers, ", ") + ": " + cause(e.Err)
}

func (e *UnreachableError) Unwrap() error { return e.Err }

// GRPCStatus keeps status.Code and status.FromError working on the error.
func (e *UnreachableError) GRPCStatus() *status.Status { return status.Convert(e.Err) }

// unreachable turns failures of calls that never reached a server into an
// UnreachableError naming the servers that were tried.
func unreachable(servers []string) grpc.UnaryClientInterceptor {
	return func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		var p peer.Peer
		err := invoker(ctx, method, req, reply, cc, append(opts, grpc.Peer(&p))...)
		if err == nil || p.Addr != nil {
			return err
		}
		switch status.Code(err) {
		case codes.Unavailable, codes.DeadlineExceeded:
			return &UnreachableError{Servers: servers, Err: err}
		}
		return err
	}
}

func splitList(s string) []string {
	var out []string
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f != "" {
			out = append(out, f)
		}
	}
	return out
}
