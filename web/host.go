package web

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"time"

	"google.golang.org/grpc"

	pb "github.com/teapot-lb/teapot-lb/api/proto/teapotv1"
)

// HostConfig configures the dashboard an LB host serves itself
// (`serve --web-addr`).
type HostConfig struct {
	// Listener, when set, is served (ListenWeb bound it early); otherwise
	// Addr, the IP:port to serve HTTPS on, is bound.
	Listener net.Listener
	Addr     string
	// TLS carries the host's certificate (the one its API serves, from
	// the cluster CA). Client certificates are not asked for.
	TLS *tls.Config
	// CA verifies the dashboard tokens.
	CA *x509.Certificate
	// Source reads the cluster (LocalSource over the host's admin API).
	Source   Source
	Interval time.Duration
	Logger   *slog.Logger
}

// Host is the dashboard of one LB host: HTTPS, logins with CA-signed
// dashboard tokens.
type Host struct {
	srv *Server
	lis net.Listener
	log *slog.Logger
}

// ListenHost binds cfg.Addr (so a busy port fails before the host joins
// anything) and prepares the dashboard; Run serves it.
func ListenHost(cfg HostConfig) (*Host, error) {
	if cfg.TLS == nil || cfg.CA == nil {
		return nil, errors.New("web: the host dashboard needs the host's TLS certificate and the cluster CA")
	}
	srv, err := New(Config{Source: cfg.Source, Interval: cfg.Interval, Logger: cfg.Logger, Secure: true, TokenKey: cfg.CA.PublicKey})
	if err != nil {
		return nil, err
	}
	tc := cfg.TLS.Clone()
	tc.ClientAuth = tls.NoClientCert
	tc.ClientCAs = nil
	tc.VerifyPeerCertificate, tc.VerifyConnection = nil, nil
	tc.NextProtos = []string{"h2", "http/1.1"}
	tc.MinVersion = tls.VersionTLS12
	lis := cfg.Listener
	if lis == nil {
		if lis, err = ListenWeb(cfg.Addr); err != nil {
			return nil, err
		}
	}
	return &Host{srv: srv, lis: tls.NewListener(lis, tc), log: srv.log}, nil
}

// ListenWeb binds the address of serve --web-addr, so that a busy port
// fails before the host starts or joins anything.
func ListenWeb(addr string) (net.Listener, error) {
	lis, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("--web-addr %s: %w", addr, err)
	}
	return lis, nil
}

// Addr is the address served.
func (h *Host) Addr() net.Addr { return h.lis.Addr() }

// Run reads the cluster and serves the dashboard until ctx ends.
func (h *Host) Run(ctx context.Context) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	hs := &http.Server{
		Handler: h.srv.Handler(), ReadHeaderTimeout: 10 * time.Second, IdleTimeout: 2 * time.Minute,
		MaxHeaderBytes: 64 << 10,
		BaseContext:    func(net.Listener) context.Context { return ctx },
		ErrorLog:       slog.NewLogLogger(h.log.Handler(), slog.LevelDebug),
	}
	go h.srv.Run(ctx)
	return serveUntilDone(ctx, cancel, hs, h.lis, func() {
		h.log.Info("serving the dashboard over HTTPS", "addr", h.lis.Addr().String())
	})
}

// Close releases the address of a Host that was never run.
func (h *Host) Close() error { return h.lis.Close() }

// AdminReader is the part of the admin API's server the dashboard reads.
type AdminReader interface {
	List(context.Context, *pb.ListRequest) (*pb.ListResponse, error)
	ClusterStatus(context.Context, *pb.ClusterStatusRequest) (*pb.ClusterStatusResponse, error)
	Observe(context.Context, *pb.ObserveRequest) (*pb.ObserveResponse, error)
}

// LocalSource reads the cluster through the host's own admin API server,
// in process: the same calls `teapot-lb dashboard` makes over mTLS.
func LocalSource(s AdminReader) Source { return localSource{s} }

type localSource struct{ s AdminReader }

func (l localSource) List(ctx context.Context, in *pb.ListRequest, _ ...grpc.CallOption) (*pb.ListResponse, error) {
	return l.s.List(ctx, in)
}

func (l localSource) ClusterStatus(ctx context.Context, in *pb.ClusterStatusRequest, _ ...grpc.CallOption) (*pb.ClusterStatusResponse, error) {
	return l.s.ClusterStatus(ctx, in)
}

func (l localSource) Observe(ctx context.Context, in *pb.ObserveRequest, _ ...grpc.CallOption) (*pb.ObserveResponse, error) {
	return l.s.Observe(ctx, in)
}

// loginPage asks for a dashboard token; the form posts it, so it stays
// out of the address bar and the history.
func loginPage(w http.ResponseWriter) {
	h := w.Header()
	h.Set("Content-Type", "text/html; charset=utf-8")
	h.Set("Content-Security-Policy", "default-src 'none'; style-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'")
	w.WriteHeader(http.StatusUnauthorized)
	fmt.Fprint(w, `<!doctype html><html lang="en"><head><meta charset="utf-8"><title>teapot-lb dashboard: log in</title></head>
<body><h1>teapot-lb dashboard</h1>
<p>Paste a read-only dashboard token from <code>teapot-lb dashboard token --ttl 1h</code>.</p>
<form method="post" action="/login"><input name="token" type="password" size="60" autocomplete="off" autofocus>
<button type="submit">Log in</button></form></body></html>
`)
}
