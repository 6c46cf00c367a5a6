// Package echo is `teapot-lb echo`: a small HTTP backend for trying load
// balancers on one machine without anything else installed. Every answer
// is the backend's name and the request line it received, so a client sees
// which member served it; /healthz answers the same, so health checks pass.
package echo

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/spf13/cobra"
)

// Command is `teapot-lb echo`.
func Command() *cobra.Command {
	var listen []string
	var name string
	cmd := &cobra.Command{
		Use:   "echo --listen ADDR [--listen ADDR...] [--name NAME]",
		Short: "Run a small HTTP backend that answers with its name and the request line (for trying load balancers)",
		Long: `echo answers every HTTP request on each --listen address with one line:
its name (--name, else the address it was reached on), and the request line
it received. Run it as the members of a load balancer to see which member
served a request:

  teapot-lb echo --listen 127.0.0.1:30080 --listen 127.0.0.2:30080 &
  curl http://127.0.0.1:30080/hello     # 127.0.0.1:30080: GET /hello HTTP/1.1`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if len(listen) == 0 {
				return errors.New("give at least one --listen ADDR (like 127.0.0.1:30080)")
			}
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			return Serve(ctx, listen, name, cmd.OutOrStdout())
		},
	}
	cmd.Flags().StringArrayVar(&listen, "listen", nil, "address to listen on (repeat for several)")
	cmd.Flags().StringVar(&name, "name", "", "name to answer with (default: the address a request reached)")
	return cmd
}

// Serve answers on every address in addrs until ctx ends. It writes one
// line to out per address once it listens.
func Serve(ctx context.Context, addrs []string, name string, out interface{ Write([]byte) (int, error) }) error {
	var lns []net.Listener
	closeAll := func() {
		for _, ln := range lns {
			ln.Close()
		}
	}
	for _, a := range addrs {
		ln, err := net.Listen("tcp", a)
		if err != nil {
			closeAll()
			return fmt.Errorf("echo: listen on %s: %w", a, err)
		}
		lns = append(lns, ln)
	}
	errs := make(chan error, len(lns))
	var servers []*http.Server
	for _, ln := range lns {
		srv := &http.Server{Handler: handler(name, ln.Addr().String()), ReadHeaderTimeout: 10 * time.Second}
		servers = append(servers, srv)
		fmt.Fprintf(out, "echo: listening on %s\n", ln.Addr())
		go func() { errs <- srv.Serve(ln) }()
	}
	select {
	case <-ctx.Done():
		for _, srv := range servers {
			srv.Close()
		}
		return nil
	case err := <-errs:
		for _, srv := range servers {
			srv.Close()
		}
		return fmt.Errorf("echo: %w", err)
	}
}

func handler(name, addr string) http.Handler {
	if name == "" {
		name = addr
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		fmt.Fprintf(w, "%s: %s %s %s\n", name, r.Method, r.URL.RequestURI(), r.Proto)
	})
}
