// Command teapot-lb is the multi-tenant load balancer appliance: `serve`
// runs an LB host, the other commands talk to a cluster's admin API.
//
// This file builds the cobra root and wires the parts of `serve`: it starts
// them in order and stops them in reverse.
package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	"github.com/teapot-lb/teapot-lb/api/adminserver"
	"github.com/teapot-lb/teapot-lb/api/backup"
	"github.com/teapot-lb/teapot-lb/api/cli"
	"github.com/teapot-lb/teapot-lb/api/client"
	"github.com/teapot-lb/teapot-lb/api/connguard"
	"github.com/teapot-lb/teapot-lb/api/memlimit"
	"github.com/teapot-lb/teapot-lb/api/observe"
	pb "github.com/teapot-lb/teapot-lb/api/proto/teapotv1"
	"github.com/teapot-lb/teapot-lb/consensus"
	"github.com/teapot-lb/teapot-lb/packaging/gen"
	"github.com/teapot-lb/teapot-lb/packaging/sdnotify"
	"github.com/teapot-lb/teapot-lb/packaging/serveconfig"
	"github.com/teapot-lb/teapot-lb/proxy"
	"github.com/teapot-lb/teapot-lb/proxy/certs"
	"github.com/teapot-lb/teapot-lb/proxy/cpubudget"
	"github.com/teapot-lb/teapot-lb/proxy/l7"
	"github.com/teapot-lb/teapot-lb/proxy/metrics"
	"github.com/teapot-lb/teapot-lb/tenantsync"
	"github.com/teapot-lb/teapot-lb/tenantsync/agent"
	"github.com/teapot-lb/teapot-lb/vip"
	"github.com/teapot-lb/teapot-lb/web"
)

func main() {
	root := cli.NewRoot()
	root.AddCommand(serveCommand(), agent.Command(cli.Version), web.Command(), gen.ManCommand())
	os.Exit(cli.Main(root))
}

// serveConfig holds serve's settings; the YAML config file uses the flag
// names as keys.
type serveConfig struct {
	DataDir          string       `json:"data-dir"`
	NodeID           string       `json:"node-id"`
	RaftAddr         string       `json:"raft-addr"`
	APIAddr          string       `json:"api-addr"`
	Join             string       `json:"join"`
	Token            string       `json:"token"`
	HeartbeatTimeout vip.Duration `json:"raft-heartbeat-timeout"`
	ElectionTimeout  vip.Duration `json:"raft-election-timeout"`
	LogLevel         string       `json:"log-level"`
	// MetricsAddr serves Prometheus metrics at /metrics; "" turns it off.
	MetricsAddr string `json:"metrics-addr"`
	// WebAddr serves the dashboard over HTTPS; "" (the default) turns it off.
	WebAddr string `json:"web-addr"`
	// DrainTimeout is how long a drained or stopping host keeps its arp
	// VIPs while its clients are handed over, and how long a stopping
	// host then lets its connections finish after it closed its
	// listeners.
	DrainTimeout vip.Duration `json:"drain-timeout"`
	// AccessLog is the file of the load balancers' access logs; ""
	// writes them to stderr.
	AccessLog string `json:"access-log"`
	// MemoryLimit is the Go runtime's soft memory limit: a size or a
	// share of the memory available; "" leaves GOMEMLIMIT's.
	MemoryLimit string `json:"memory-limit"`
	// GCHeadroom is the most the Go heap grows past what is live between
	// collections: a size, or "none" for GOGC alone.
	GCHeadroom string `json:"gc-headroom"`
	// ListenSockets is how TCP listeners listen: a socket per listener,
	// or one per tenant and address family steered to by a BPF program.
	ListenSockets string `json:"listen-sockets"`

	// VIPs: the arp interface, the failure detector, and the BGP speaker
	// (the bgp: section exists only in the file).
	VIPInterface      string         `json:"vip-interface"`
	HeartbeatAddr     string         `json:"heartbeat-addr"`
	HeartbeatInterval vip.Duration   `json:"heartbeat-interval"`
	HeartbeatMisses   int            `json:"heartbeat-misses"`
	BGP               *vip.BGPConfig `json:"bgp"`

	// ACME: the CA's directory (default Let's Encrypt production), a PEM
	// file of roots for its HTTPS endpoint, the account's contact.
	ACMECA         string       `json:"acme-ca"`
	ACMECARoot     string       `json:"acme-ca-root"`
	ACMEEmail      string       `json:"acme-email"`
	ACMERenewCheck vip.Duration `json:"acme-renew-check"`
	// ACMEOrdersPerTenant bounds each tenant's new ACME orders an hour
	// on this host.
	ACMEOrdersPerTenant int `json:"acme-orders-per-tenant"`
	// TLSCPUPerTenant is the CPU (cores) one tenant's TLS signatures may
	// use on average; 0 takes a quarter of the host's CPUs.
	TLSCPUPerTenant float64 `json:"tls-cpu-per-tenant"`

	// Restore and RestorePassphraseFile start a new cluster from a backup
	// (command line only: a restore happens once).
	Restore               string `json:"-"`
	RestorePassphraseFile string `json:"-"`
	// Recover makes a survivor of a lost majority a one-host cluster
	// (command line only, like --restore).
	Recover bool `json:"-"`
}

// commandLineOnly are serve's flags without a key in the file: --config
// and --check-config themselves, and --restore and --recover, which
// happen once and must not outlive a restart.
var commandLineOnly = []string{"config", "check-config", "restore", "restore-passphrase-file", "recover"}

// serveFile is the serve configuration file: a key per flag, and the bgp:
// section.
func serveFile(cfg *serveConfig) serveconfig.File {
	return serveconfig.File{CommandLineOnly: commandLineOnly, Sections: map[string]any{"bgp": &cfg.BGP}}
}

func serveCommand() *cobra.Command { return serveCommandWith(serve) }

// serveCommandWith builds serve's command; run gets the configuration
// merged from the flags and the file.
func serveCommandWith(run func(context.Context, serveConfig) error) *cobra.Command {
	cfg := serveConfig{
		DataDir:          "./teapot-data",
		NodeID:           defaultNodeID(),
		RaftAddr:         "127.0.0.1:7300",
		APIAddr:          "127.0.0.1:7443",
		HeartbeatTimeout: vip.Duration(consensus.DefaultHeartbeatTimeout),
		ElectionTimeout:  vip.Duration(consensus.DefaultElectionTimeout),
		LogLevel:         "info",
		MetricsAddr:      defaultMetricsAddr,
		DrainTimeout:     vip.Duration(proxy.DefaultDrainTimeout),
		ListenSockets:    proxy.ListenPerListener,
		GCHeadroom:       memlimit.DefaultHeadroom,
		ACMECA:           certs.LetsEncrypt,
		ACMERenewCheck:   vip.Duration(10 * time.Minute), // certmagic's own

		ACMEOrdersPerTenant: certs.DefaultOrdersPerHour,

		HeartbeatInterval: vip.Duration(vip.DefaultHeartbeatInterval),
		HeartbeatMisses:   vip.DefaultHeartbeatMisses,
	}
	cmd := &cobra.Command{
		Use:   "serve",
		Short: "Run an LB host (bootstraps a single-node cluster in ./teapot-data when started with no flags)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			f := cmd.Flags()
			if path, _ := f.GetString("config"); path != "" {
				if err := serveconfig.Apply(f, path, serveFile(&cfg)); err != nil {
					return err
				}
			}
			if err := checkServeConfig(cfg); err != nil {
				return serveconfig.Refuse(err)
			}
			if check, _ := f.GetBool("check-config"); check {
				fmt.Fprintln(cmd.OutOrStdout(), "configuration is valid")
				return nil
			}
			return run(cmd.Context(), cfg)
		},
	}
	// A flag the command line gets wrong is a configuration error too.
	cmd.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return serveconfig.Refuse(err) })
	f := cmd.Flags()
	checked := func(p *string, name, typ string, check func(string) error, usage string) {
		f.Var(serveconfig.NewChecked(p, typ, check), name, usage)
	}
	// serve's own --config shadows the root's admin --config.
	f.String("config", "", "serve configuration file: YAML with the flag names as keys and a bgp: section (the packages install a documented /etc/teapot-lb/serve.yaml); flags given on the command line win")
	f.Bool("check-config", false, "check the flags and the --config file, print what is wrong, and exit (0: valid, 78: refused) without starting anything")
	f.StringVar(&cfg.DataDir, "data-dir", cfg.DataDir, "where this host keeps its state and credentials")
	f.StringVar(&cfg.NodeID, "node-id", cfg.NodeID, "this host's id in the cluster")
	checked(&cfg.RaftAddr, "raft-addr", "address", serveconfig.HostPort, "IP:port for Raft traffic between hosts (mTLS)")
	checked(&cfg.APIAddr, "api-addr", "address", serveconfig.HostPort, "IP:port of the admin and cluster API (mTLS)")
	f.StringVar(&cfg.Join, "join", "", "API address of a cluster host to join through (with --token)")
	f.StringVar(&cfg.Token, "token", "", "join token printed by \"teapot-lb cluster join-token\"")
	f.Var(&cfg.HeartbeatTimeout, "raft-heartbeat-timeout", "time without a leader's heartbeat before a follower calls an election")
	f.Var(&cfg.ElectionTimeout, "raft-election-timeout", "time a candidate waits for votes before trying again")
	checked(&cfg.LogLevel, "log-level", "level", serveconfig.LogLevel, "debug | info | warn | error")
	f.Var(&cfg.DrainTimeout, "drain-timeout", "how long a drained or stopping (SIGTERM) host keeps its arp VIPs while its clients are handed over (HTTP connections close after their next response; other connections may end), and, on stop, how long open connections may run to their end after the listeners closed")
	f.StringVar(&cfg.AccessLog, "access-log", "", "file that receives the access logs of load balancers with accessLog enabled (default: stderr)")
	checked(&cfg.MemoryLimit, "memory-limit", "size", memlimit.Check, "soft limit of the Go heap and runtime: a size (1536MiB, 2GiB) or a share of the memory available (80%: of the service's cgroup memory.max when set, else of the host's); near it the collector runs more often instead of letting the heap grow to twice what is live (default: GOMEMLIMIT, else none)")
	checked(&cfg.GCHeadroom, "gc-headroom", "size", memlimit.CheckHeadroom, `the most the Go heap may grow past what the last collection found live: below it the collector runs as GOGC says (by default when the heap doubled), above it every time the heap grew by this much, never by less than a quarter of what is live; such a host also collects when it goes quiet after a burst (a bulk load, a resync); a size (512MiB) or "none" for GOGC alone`)
	checked(&cfg.ListenSockets, "listen-sockets", "mode", proxy.CheckListenSockets, `how TCP listeners listen: "listener" opens a socket per listener (address and port); "tenant" opens one per tenant and address family and steers each listener's address to it with a BPF sk_lookup program (Linux 5.9 or later, CAP_BPF and CAP_NET_ADMIN), for hosts of tens of thousands of listeners`)
	checked(&cfg.MetricsAddr, "metrics-addr", "address", serveconfig.OptionalHostPort, `IP:port serving Prometheus metrics at /metrics, and Go profiles at /debug/pprof/ when it is a loopback address ("" turns them off)`)
	checked(&cfg.WebAddr, "web-addr", "address", serveconfig.OptionalHostPort, "IP:port serving the read-only dashboard over HTTPS with this host's certificate; logins take a token from \"teapot-lb dashboard token\" (default off)")
	f.StringVar(&cfg.VIPInterface, "vip-interface", "", "interface that carries the VIPs of arp pools (needs CAP_NET_ADMIN and CAP_NET_RAW)")
	checked(&cfg.HeartbeatAddr, "heartbeat-addr", "address", serveconfig.OptionalHostPort, fmt.Sprintf("IP:port of the VIP failure detector on the data-plane network (default: the --raft-addr IP, port %d)", vip.DefaultHeartbeatPort))
	f.Var(&cfg.HeartbeatInterval, "heartbeat-interval", "time between VIP heartbeats to each peer")
	f.IntVar(&cfg.HeartbeatMisses, "heartbeat-misses", cfg.HeartbeatMisses, "heartbeats a peer may miss before its VIPs move")
	f.StringVar(&cfg.ACMECA, "acme-ca", cfg.ACMECA, "ACME directory URL of the CA that issues certificates for https listeners with acme: true")
	f.StringVar(&cfg.ACMECARoot, "acme-ca-root", "", "PEM file of extra root certificates that verify the ACME CA's HTTPS endpoint")
	f.StringVar(&cfg.ACMEEmail, "acme-email", "", "contact address of the cluster's ACME account")
	f.Var(&cfg.ACMERenewCheck, "acme-renew-check", "how often certificates are checked for renewal")
	_ = f.MarkHidden("acme-renew-check")
	f.IntVar(&cfg.ACMEOrdersPerTenant, "acme-orders-per-tenant", cfg.ACMEOrdersPerTenant, "new ACME orders one tenant may start in an hour on this host (the cluster shares one ACME account, whose limits the CA counts); a name whose order failed also waits 1 minute, doubling with each failure up to a day")
	f.Float64Var(&cfg.TLSCPUPerTenant, "tls-cpu-per-tenant", 0, "CPU cores one tenant's TLS handshakes may use on average on this host: the ClientHellos and full handshakes of its https listeners (over it they wait up to 200ms, then are refused) and the client certificates of its HTTPS health checks (over it they are delayed); resumed sessions sign nothing (0: a quarter of the host's CPUs)")
	f.StringVar(&cfg.Restore, "restore", "", "start a new cluster from this backup (\"teapot-lb cluster backup\"): needs an empty --data-dir; other hosts then --join it")
	f.BoolVar(&cfg.Recover, "recover", false, "the other voters are gone for good: make this host a one-host cluster with the state in its data dir (refused while any other voter answers); new hosts then --join it")
	f.StringVar(&cfg.RestorePassphraseFile, "restore-passphrase-file", "", "passphrase of an encrypted --restore backup (the file's first line)")
	return cmd
}

// checkServeConfig refuses settings that are each valid but do not go
// together.
func checkServeConfig(cfg serveConfig) error {
	if cfg.ACMEOrdersPerTenant < 1 {
		return fmt.Errorf("--acme-orders-per-tenant %d: give 1 or more new orders an hour (default %d)", cfg.ACMEOrdersPerTenant, certs.DefaultOrdersPerHour)
	}
	if cfg.TLSCPUPerTenant < 0 {
		return fmt.Errorf("--tls-cpu-per-tenant %g: give the CPU cores a tenant's TLS signatures may use, like 0.5, or 0 for a quarter of the host's CPUs", cfg.TLSCPUPerTenant)
	}
	if cfg.Join != "" && cfg.Token == "" {
		return errors.New("--join needs --token (from `teapot-lb cluster join-token` on a cluster host)")
	}
	return nil
}

var nonID = regexp.MustCompile(`[^a-z0-9.-]+`)

func defaultNodeID() string {
	h, err := os.Hostname()
	h = strings.Trim(nonID.ReplaceAllString(strings.ToLower(h), "-"), "-.")
	if err != nil || h == "" {
		return "node1"
	}
	return h
}

func serve(ctx context.Context, cfg serveConfig) (err error) {
	var level slog.Level
	if err := level.UnmarshalText([]byte(cfg.LogLevel)); err != nil {
		return fmt.Errorf("--log-level %q: use debug, info, warn or error", cfg.LogLevel)
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))
	memLimit, err := memlimit.Set(cfg.MemoryLimit)
	if err != nil {
		return fmt.Errorf("--memory-limit: %w", err)
	}
	if memLimit != math.MaxInt64 {
		log.Info("memory limit", "component", "serve", "bytes", memLimit, "MiB", memLimit>>20)
	}
	room, err := memlimit.ParseHeadroom(cfg.GCHeadroom)
	if err != nil {
		return fmt.Errorf("--gc-headroom: %w", err)
	}
	if h := memlimit.NewHeadroom(room, log); h != nil {
		go h.Run(ctx)
	}
	// Each part pushes its stop once it runs; they stop in reverse, on an
	// error as at the end.
	var stack closers
	defer func() {
		if cerr := stack.Close(); err == nil {
			err = cerr
		}
	}()
	steering, err := proxy.OpenSteer(cfg.ListenSockets)
	if err != nil {
		return fmt.Errorf("--listen-sockets: %w", err)
	}
	if steering != nil {
		stack.PushFunc(func() { steering.Close() })
		log.Info("TCP listeners share a socket per tenant", "component", "serve", "listen-sockets", cfg.ListenSockets)
	}
	restore, err := backup.ReadRestore(cfg.Restore, cfg.RestorePassphraseFile)
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(ctx, syscall.SIGTERM, syscall.SIGINT)
	stack.PushFunc(stop)

	// The API port is taken before Raft starts so that a busy port fails
	// fast, before a new host joins anywhere.
	ln, err := net.Listen("tcp", cfg.APIAddr)
	if err != nil {
		return fmt.Errorf("listen on --api-addr: %w", err)
	}
	stack.PushFunc(func() { ln.Close() })
	msrv, err := listenMetrics(cfg.MetricsAddr, log)
	if err != nil {
		return err
	}
	var webLn net.Listener
	if cfg.WebAddr != "" {
		if webLn, err = web.ListenWeb(cfg.WebAddr); err != nil {
			return err
		}
		stack.PushFunc(func() { webLn.Close() })
	}
	// The VIP manager checks its interfaces and capabilities before Raft
	// starts, for the same reason.
	// What this host sees (listeners, member health, VIPs, certificates,
	// events) is gathered here on demand; the parts add themselves below.
	host := observe.NewHost(cfg.NodeID)
	vm, err := vip.Open(vip.Config{
		NodeID: cfg.NodeID, Interface: cfg.VIPInterface, HeartbeatAddr: cfg.HeartbeatAddr, RaftAddr: cfg.RaftAddr,
		HeartbeatInterval: time.Duration(cfg.HeartbeatInterval), HeartbeatMisses: cfg.HeartbeatMisses,
		BGP: cfg.BGP, Logger: log, Events: host.Events().Add, HandoverTimeout: time.Duration(cfg.DrainTimeout),
	})
	if err != nil {
		return err
	}
	releaseVIPs := sync.OnceFunc(func() {
		if err := vm.Close(); err != nil {
			log.Error("release VIPs", "component", "vip", "err", err)
		}
	})
	stack.PushFunc(releaseVIPs)
	ccfg := consensus.Config{
		DataDir: cfg.DataDir, NodeID: cfg.NodeID, RaftAddr: cfg.RaftAddr, APIAddr: cfg.APIAddr,
		Join: cfg.Join, Token: cfg.Token,
		HeartbeatTimeout: time.Duration(cfg.HeartbeatTimeout), ElectionTimeout: time.Duration(cfg.ElectionTimeout),
		Logger: log, Version: cli.Version,
		Observe: host.Observe, Event: host.Events().Add,
		Restore: restore, Recover: cfg.Recover,
		Services: ownServices(msrv, webLn, cfg.BGP), Addresses: hostAddresses(),
		HeartbeatAddr: vm.HeartbeatAddr(), VIPInterface: cfg.VIPInterface, Describe: vm.Describe,
	}
	node, err := consensus.Open(ctx, ccfg)
	if err != nil {
		return err
	}
	stack.Push(node.Close)
	vm.SetKey(vip.HeartbeatKey(node.CA().KeyPEM))
	vm.SetStateContact(node.LeaderContact)
	rules := adminserver.DefaultRules
	guard := connguard.New(connguard.Config{Logger: log})
	srv := grpc.NewServer(
		grpc.Creds(guard.Credentials(credentials.NewTLS(node.ServerTLS()))),
		grpc.ChainUnaryInterceptor(rules.Unary()),
		grpc.ChainStreamInterceptor(rules.Stream()),
	)
	admin := adminserver.New(node).WithDashboardSigner(node.CA().Key)
	pb.RegisterAdminServer(srv, admin)
	pb.RegisterClusterServer(srv, node.ClusterService())
	certAPI := certs.NewService(node)
	pb.RegisterCertificatesServer(srv, certAPI)
	// The data plane starts below; tenant streams see its member health
	// once it exists.
	var dataPlane atomic.Pointer[proxy.Proxy]
	tenants := tenantsync.New(tenantsync.Config{Store: node, Logger: log, Events: host.Events().Add, Certificates: certAPI, Members: func(lb string) []*pb.MemberState {
		return dataPlane.Load().MemberStates(lb)
	}, MembersNotified: true})
	pb.RegisterTenantSyncServer(srv, tenants)
	pb.RegisterTenantCredentialsServer(srv, tenants.Credentials())
	served := make(chan error, 1)
	go func() { served <- srv.Serve(guard.Listener(ln)) }()
	stack.PushFunc(func() { stopGRPC(srv, 3*time.Second) })
	log.Info("serving API", "component", "api", "addr", cfg.APIAddr)

	// One budget of signature CPU per tenant, drawn on by its listeners'
	// handshakes and its health checks' client certificates.
	cpu := cpubudget.New(cpubudget.Options{Rate: cfg.TLSCPUPerTenant})
	cm, err := newCertManager(cfg, node, log, host.Events().Add, cpu)
	if err != nil {
		return err
	}
	go cm.Run(ctx)
	stack.PushFunc(cm.Close)
	go cm.Follow(ctx, revisions{node.Watch(0).Only(certs.Kinds...)}, node.Objects)
	// http and https listeners: TLS termination (https), then the L7 engine,
	// which also answers ACME HTTP-01 challenges on http listeners.
	counters := &metrics.Memory{}
	access, err := openAccessLog(cfg.AccessLog, counters)
	if err != nil {
		return err
	}
	engine := l7.New(l7.Config{Logger: log.With("component", "l7"), Metrics: access})
	stack.Push(engine.Close)
	challenge := func(path string) http.Handler {
		if certs.IsHTTPChallenge(path) {
			return cm.HTTPChallengeHandler()
		}
		return nil
	}
	px := proxy.New(proxy.Config{
		Logger: log, DrainTimeout: time.Duration(cfg.DrainTimeout), Metrics: counters, HTTP: cm.Terminator(proxy.NewHTTP(engine, challenge)),
		Events: host.Events().Add, Steer: steering, CPU: cpu,
		// Member health and listeners opened on retry change readiness
		// without a change of the committed state; a member's health, that
		// of the load balancers holding it only.
		Changed: func() {
			if px := dataPlane.Load(); px != nil {
				vm.SetReady(px.Readiness())
			}
		},
		MembersChanged: func(lbs []string) {
			tenants.MembersChanged(lbs)
			if px := dataPlane.Load(); px != nil {
				vm.SetReadyFor(px.ReadinessOf(lbs))
			}
		},
	})
	stack.Push(px.Close)
	engine.SetPipes(px.Pipes()) // tunnels splice through the host's bounded pipe pool
	dataPlane.Store(px)
	vm.SetHandover(px)
	host.Add(px)
	host.Add(counters)
	host.Add(cm)
	host.Add(vm)
	if err := serveMetrics(ctx, msrv, counters, px, node, tenants, cm, vm, guard.Collector()); err != nil {
		log.Error("metrics are off", "component", "metrics", "err", err)
	}
	if webLn != nil {
		dash, err := web.ListenHost(web.HostConfig{
			Listener: webLn, TLS: node.ServerTLS(), CA: node.CA().Cert, Source: web.LocalSource(admin), Logger: log,
		})
		if err != nil {
			log.Error("dashboard is off", "component", "web", "err", err)
		} else {
			go func() {
				if err := dash.Run(ctx); err != nil {
					log.Error("dashboard stopped", "component", "web", "err", err)
				}
			}()
		}
	}
	// Each committed revision reaches the data plane, then the VIP
	// manager with the data plane's readiness.
	feed, fed := proxy.NewFeed(px), make(chan struct{})
	go func() {
		defer close(fed)
		feed.Follow(ctx, revisions{node.Watch(0)}, func(r proxy.Revision, touched []string) {
			vm.Follow(r.Reset, r.Objects, r.Transitions(), r.Revision, touched, node.Objects, px)
		})
	}()
	stack.PushFunc(func() { <-fed })
	// systemd hears READY=1 once Raft has formed or joined, the data
	// plane has applied the state committed by then, the admin
	// credentials are written and the admin API answers with them.
	adminConf, adminWritten := filepath.Join(cfg.DataDir, "admin.conf"), make(chan struct{})
	go sdnotify.FromEnv(log).Run(ctx, func(ctx context.Context) (string, error) {
		select {
		case <-node.Ready():
		case <-ctx.Done():
			return "", ctx.Err()
		}
		if err := feed.WaitApplied(ctx, node.Revision()); err != nil {
			return "", err
		}
		status := fmt.Sprintf("serving revision %d of cluster %s", feed.Applied(), node.ClusterID())
		select {
		case <-adminWritten:
		case <-ctx.Done():
			return "", ctx.Err()
		}
		return status, client.WaitAnswers(ctx, adminConf, cfg.APIAddr)
	}, func() error { node.Revision(); return feed.Alive() })
	// The VIP loop outlives the signal: a stop hands clients over first,
	// then VIPs and routes, before any listener closes.
	go func() {
		if err := vm.Run(context.WithoutCancel(ctx)); err != nil {
			log.Error("VIP manager stopped", "component", "vip", "err", err)
		}
	}()
	stack.PushFunc(func() {
		// At most the drain timeout (and a second).
		ctx, cancel := context.WithTimeout(context.Background(), time.Duration(cfg.DrainTimeout)+time.Second)
		defer cancel()
		vm.HandOverClients(ctx)
		releaseVIPs()
	})

	select {
	case <-node.Ready():
		if err := node.WriteAdminConfig(adminConf); err != nil {
			log.Error("write admin credentials; systemd will not hear READY=1", "component", "serve", "err", err)
		} else {
			close(adminWritten)
		}
		log.Info("ready", "component", "serve", "node", cfg.NodeID, "cluster", node.ClusterID(), "admin", adminConf)
		go node.KeepAdminConfig(ctx, adminConf)
	case <-ctx.Done():
	case err := <-served:
		log.Error("API server stopped", "component", "api", "err", err)
	}
	<-ctx.Done()
	log.Info("shutting down", "component", "serve")
	return nil
}

// stopGRPC lets the API's calls finish for at most grace, then ends them.
func stopGRPC(srv *grpc.Server, grace time.Duration) {
	stopped := make(chan struct{})
	go func() { srv.GracefulStop(); close(stopped) }()
	select {
	case <-stopped:
	case <-time.After(grace):
		srv.Stop()
	}
}

// revisions is the committed state's watch as proxy reads it.
type revisions struct{ w *consensus.Watcher }

func (r revisions) Next(ctx context.Context) (proxy.Revision, error) {
	ev, err := r.w.Next(ctx)
	out := proxy.Revision{Revision: ev.Revision, Reset: ev.Reset, Objects: ev.Objects, Applied: ev.Applied, Changes: make([]proxy.Change, len(ev.Changes))}
	for i, c := range ev.Changes {
		out.Changes[i] = proxy.Change{Ref: c.Ref, Object: c.Object, Previous: c.Previous}
	}
	return out, err
}

// newCertManager sets up certificate management: ACME with the configured
// CA and certificates uploaded through the API, kept in the replicated
// store. Session ticket keys derive from the cluster CA's key, so every
// host resumes the sessions of the others.
func newCertManager(cfg serveConfig, node *consensus.Node, log *slog.Logger, events func(*pb.Event), cpu *cpubudget.Budgets) (*certs.Manager, error) {
	mc := certs.Config{
		Store: node, Host: cfg.NodeID, CA: cfg.ACMECA, Email: cfg.ACMEEmail,
		TicketSecret: node.CA().KeyPEM, RenewCheckInterval: time.Duration(cfg.ACMERenewCheck), Logger: log,
		Events: events, OrdersPerHour: cfg.ACMEOrdersPerTenant, CPU: cpu,
	}
	if cfg.ACMECARoot != "" {
		roots, err := certs.LoadRoots(cfg.ACMECARoot)
		if err != nil {
			return nil, err
		}
		mc.Roots = roots
	}
	return certs.New(mc)
}
