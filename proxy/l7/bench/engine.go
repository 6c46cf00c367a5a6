package main

import (
	"context"
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/signal"
	"runtime/pprof"
	"syscall"
	"time"

	"github.com/teapot-lb/teapot-lb/proxy/l7"
)

// member is the single member of the benchmark's backend.
type member struct{ addr netip.AddrPort }

func (m *member) Addr() netip.AddrPort                       { return m.addr }
func (m *member) Done(error, int, time.Duration)             {}
func (b *backend) Pick(netip.Addr, []byte) (l7.Member, bool) { return b.m, true }
func (b *backend) Options() *l7.BackendOptions               { return &b.opts }

type backend struct {
	m    *member
	opts l7.BackendOptions
}

type router struct{ r *l7.Route }

func (rt router) Route(string, string) *l7.Route { return rt.r }

// serveEngine runs teapot-lb's L7 engine with one route to one member, on a
// plain listener and optionally a TLS one (h2 and http/1.1), until SIGTERM.
func serveEngine(args []string) error {
	fs := flag.NewFlagSet("engine", flag.ContinueOnError)
	listen := fs.String("listen", "127.0.0.1:18090", "plain HTTP listener")
	tlsListen := fs.String("tls-listen", "", "TLS listener (h2 via ALPN)")
	certFile := fs.String("cert", "", "certificate PEM for -tls-listen")
	keyFile := fs.String("key", "", "key PEM for -tls-listen")
	upstream := fs.String("backend", "127.0.0.1:18080", "member address")
	cpuProfile := fs.String("cpuprofile", "", "write a CPU profile here on exit")
	withMetrics := fs.Bool("metrics", false, "record metrics as serve does, and gather them every second as a scrape would")
	if err := fs.Parse(args); err != nil {
		return err
	}
	addr, err := netip.ParseAddrPort(*upstream)
	if err != nil {
		return fmt.Errorf("-backend: %w", err)
	}
	if *cpuProfile != "" {
		f, err := os.Create(*cpuProfile)
		if err != nil {
			return err
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			return err
		}
		defer pprof.StopCPUProfile()
	}
	cfg := l7.Config{}
	if *withMetrics {
		stop := recordMetrics(&cfg)
		defer stop()
	}
	srv := l7.New(cfg)
	defer srv.Close()
	var rt l7.Router = router{&l7.Route{Name: "bench", Backend: &backend{m: &member{addr: addr}}}}
	info := l7.ConnInfo{Listener: "bench", LB: "bench/bench", Tenant: "bench", Router: func() l7.Router { return rt }}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()

	serve := func(ln net.Listener, tlsCfg *tls.Config) {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				if tlsCfg != nil {
					srv.ServeConn(ctx, tls.Server(l7.ClientTransport(c), tlsCfg), info)
					return
				}
				srv.ServeConn(ctx, c, info)
			}()
		}
	}
	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		return err
	}
	defer ln.Close()
	go serve(ln, nil)
	if *tlsListen != "" {
		cert, err := tls.LoadX509KeyPair(*certFile, *keyFile)
		if err != nil {
			return fmt.Errorf("-cert, -key: %w", err)
		}
		tln, err := net.Listen("tcp", *tlsListen)
		if err != nil {
			return err
		}
		defer tln.Close()
		go serve(tln, &tls.Config{Certificates: []tls.Certificate{cert}, NextProtos: []string{"h2", "http/1.1"}})
	}
	fmt.Println("ready")
	<-ctx.Done()
	if errors.Is(ctx.Err(), context.Canceled) {
		return nil
	}
	return ctx.Err()
}
