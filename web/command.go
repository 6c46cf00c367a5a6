package web

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/spf13/cobra"

	"github.com/teapot-lb/teapot-lb/api/client"
)

// Command returns `teapot-lb dashboard`: it serves the dashboard on a
// loopback address and reads the cluster with the admin credentials the
// other commands use (the root's --config and --server flags). It prints
// a login URL whose token works once.
func Command() *cobra.Command {
	var addr string
	var interval time.Duration
	cmd := &cobra.Command{
		Use:   "dashboard",
		Short: "Serve the web dashboard on 127.0.0.1 with the admin credentials",
		Long: "dashboard serves the read-only web dashboard on a loopback address and reads the\n" +
			"cluster through the admin API with your admin credentials, like `kubectl proxy`.\n" +
			"It prints a login URL; its token works once and opens a session cookie in that\n" +
			"browser. Nothing is served to other machines.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			configPath, _ := cmd.Flags().GetString("config")
			server, _ := cmd.Flags().GetString("server")
			return runDashboard(cmd.Context(), cmd, addr, interval, configPath, server)
		},
	}
	cmd.Flags().StringVar(&addr, "addr", "127.0.0.1:0", "loopback address to serve on (port 0: a free port)")
	cmd.Flags().DurationVar(&interval, "interval", DefaultInterval, "how often the cluster is read")
	cmd.AddCommand(tokenCommand())
	return cmd
}

// checkLoopback refuses an address other hosts could reach.
func checkLoopback(addr string) error {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("--addr %q: want HOST:PORT, e.g. 127.0.0.1:8080", addr)
	}
	if host == "localhost" {
		return nil
	}
	if ip := net.ParseIP(host); ip == nil || !ip.IsLoopback() {
		return fmt.Errorf("--addr %q: the dashboard serves only loopback (127.0.0.1 or [::1]); reach it from elsewhere through an SSH tunnel", addr)
	}
	return nil
}

func runDashboard(ctx context.Context, cmd *cobra.Command, addr string, interval time.Duration, configPath, server string) error {
	if err := checkLoopback(addr); err != nil {
		return err
	}
	if interval < 100*time.Millisecond {
		return fmt.Errorf("--interval %v: want at least 100ms", interval)
	}
	path, err := client.FindConfig(configPath)
	if err != nil {
		return err
	}
	cfg, err := client.LoadConfig(path)
	if err != nil {
		return err
	}
	conn, err := client.Dial(ctx, cfg, server)
	if err != nil {
		return err
	}
	defer conn.Close()

	log := slog.New(slog.NewTextHandler(cmd.ErrOrStderr(), nil))
	srv, err := New(Config{Source: conn.Admin, Interval: interval, Logger: log})
	if err != nil {
		return err
	}
	lis, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("--addr %s: %w", addr, err)
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	// Requests live in ctx, so open event streams end when it does.
	hs := &http.Server{
		Handler: srv.Handler(), ReadHeaderTimeout: 10 * time.Second,
		BaseContext: func(net.Listener) context.Context { return ctx },
	}
	go srv.Run(ctx)
	return serveUntilDone(ctx, cancel, hs, lis, func() {
		fmt.Fprintf(cmd.OutOrStdout(), "Dashboard of %s at http://%s/\nLog in (works once): http://%s/login?token=%s\n",
			path, lis.Addr(), lis.Addr(), srv.LoginToken())
	})
}

// serveUntilDone serves hs on lis, calls started, and returns when ctx ends
// (after a graceful shutdown of at most 2 s) or the server fails. cancel
// ends the requests' context so that open event streams stop first.
func serveUntilDone(ctx context.Context, cancel context.CancelFunc, hs *http.Server, lis net.Listener, started func()) error {
	errc := make(chan error, 1)
	go func() { errc <- hs.Serve(lis) }()
	started()
	select {
	case <-ctx.Done():
	case err := <-errc:
		return fmt.Errorf("serve dashboard: %w", err)
	}
	cancel()
	sctx, scancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer scancel()
	if err := hs.Shutdown(sctx); err != nil && !errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	return nil
}
