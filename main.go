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
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"sigs.k8s.io/yaml"

	"github.com/teapot-lb/teapot-lb/api"
	"github.com/teapot-lb/teapot-lb/api/adminserver"
	"github.com/teapot-lb/teapot-lb/api/cli"
	"github.com/teapot-lb/teapot-lb/api/client"
	"github.com/teapot-lb/teapot-lb/api/pki"
	pb "github.com/teapot-lb/teapot-lb/api/proto/teapotv1"
	"github.com/teapot-lb/teapot-lb/consensus"
	"github.com/teapot-lb/teapot-lb/proxy"
)

func main() {
	root := cli.NewRoot()
	root.AddCommand(serveCommand())
	os.Exit(cli.Main(root))
}

// serveConfig holds serve's settings; the YAML config file uses the flag
// names as keys.
type serveConfig struct {
	DataDir          string        `json:"data-dir"`
	NodeID           string        `json:"node-id"`
	RaftAddr         string        `json:"raft-addr"`
	APIAddr          string        `json:"api-addr"`
	Join             string        `json:"join"`
	Token            string        `json:"token"`
	HeartbeatTimeout time.Duration `json:"raft-heartbeat-timeout"`
	ElectionTimeout  time.Duration `json:"raft-election-timeout"`
	LogLevel         string        `json:"log-level"`
}

func serveCommand() *cobra.Command {
	cfg := serveConfig{
		DataDir:          "./teapot-data",
		NodeID:           defaultNodeID(),
		RaftAddr:         "127.0.0.1:7300",
		APIAddr:          "127.0.0.1:7443",
		HeartbeatTimeout: consensus.DefaultHeartbeatTimeout,
		ElectionTimeout:  consensus.DefaultElectionTimeout,
		LogLevel:         "info",
	}
	cmd := &cobra.Command{
		Use:   "serve",
		Short: "Run an LB host (bootstraps a single-node cluster in ./teapot-data when started with no flags)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := loadServeConfig(cmd, &cfg); err != nil {
				return err
			}
			return serve(cmd.Context(), cfg)
		},
	}
	f := cmd.Flags()
	f.StringVar(&cfg.DataDir, "data-dir", cfg.DataDir, "where this host keeps its state and credentials")
	f.StringVar(&cfg.NodeID, "node-id", cfg.NodeID, "this host's id in the cluster")
	f.StringVar(&cfg.RaftAddr, "raft-addr", cfg.RaftAddr, "IP:port for Raft traffic between hosts (mTLS)")
	f.StringVar(&cfg.APIAddr, "api-addr", cfg.APIAddr, "IP:port of the admin and cluster API (mTLS)")
	f.StringVar(&cfg.Join, "join", "", "API address of a cluster host to join through (with --token)")
	f.StringVar(&cfg.Token, "token", "", "join token printed by \"teapot-lb cluster join-token\"")
	f.DurationVar(&cfg.HeartbeatTimeout, "raft-heartbeat-timeout", cfg.HeartbeatTimeout, "time without a leader's heartbeat before a follower calls an election")
	f.DurationVar(&cfg.ElectionTimeout, "raft-election-timeout", cfg.ElectionTimeout, "time a candidate waits for votes before trying again")
	f.StringVar(&cfg.LogLevel, "log-level", cfg.LogLevel, "debug | info | warn | error")
	return cmd
}

// loadServeConfig reads --config (if given) and lets flags set on the
// command line win over it.
func loadServeConfig(cmd *cobra.Command, cfg *serveConfig) error {
	path, _ := cmd.Flags().GetString("config")
	if path == "" {
		return nil
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("read config: %w", err)
	}
	var file serveConfig
	if err := yaml.UnmarshalStrict(data, &file); err != nil {
		return fmt.Errorf("config %s: %w", path, err)
	}
	set := map[string]bool{}
	cmd.Flags().Visit(func(fl *pflag.Flag) { set[fl.Name] = true })
	pick := func(name string, dst *string, v string) {
		if v != "" && !set[name] {
			*dst = v
		}
	}
	pick("data-dir", &cfg.DataDir, file.DataDir)
	pick("node-id", &cfg.NodeID, file.NodeID)
	pick("raft-addr", &cfg.RaftAddr, file.RaftAddr)
	pick("api-addr", &cfg.APIAddr, file.APIAddr)
	pick("join", &cfg.Join, file.Join)
	pick("token", &cfg.Token, file.Token)
	pick("log-level", &cfg.LogLevel, file.LogLevel)
	if file.HeartbeatTimeout != 0 && !set["raft-heartbeat-timeout"] {
		cfg.HeartbeatTimeout = file.HeartbeatTimeout
	}
	if file.ElectionTimeout != 0 && !set["raft-election-timeout"] {
		cfg.ElectionTimeout = file.ElectionTimeout
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

func serve(ctx context.Context, cfg serveConfig) error {
	var level slog.Level
	if err := level.UnmarshalText([]byte(cfg.LogLevel)); err != nil {
		return fmt.Errorf("--log-level %q: use debug, info, warn or error", cfg.LogLevel)
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))
	if cfg.Join != "" && cfg.Token == "" {
		return errors.New("--join needs --token (from `teapot-lb cluster join-token` on a cluster host)")
	}
	ctx, stop := signal.NotifyContext(ctx, syscall.SIGTERM, syscall.SIGINT)
	defer stop()

	// The API port is taken before Raft starts so that a busy port fails
	// fast, before a new host joins anywhere.
	ln, err := net.Listen("tcp", cfg.APIAddr)
	if err != nil {
		return fmt.Errorf("listen on --api-addr: %w", err)
	}
	node, err := consensus.Open(ctx, consensus.Config{
		DataDir: cfg.DataDir, NodeID: cfg.NodeID, RaftAddr: cfg.RaftAddr, APIAddr: cfg.APIAddr,
		Join: cfg.Join, Token: cfg.Token,
		HeartbeatTimeout: cfg.HeartbeatTimeout, ElectionTimeout: cfg.ElectionTimeout,
		Logger: log, Version: cli.Version,
	})
	if err != nil {
		ln.Close()
		return err
	}
	rules := adminserver.DefaultRules
	srv := grpc.NewServer(
		grpc.Creds(credentials.NewTLS(node.ServerTLS())),
		grpc.ChainUnaryInterceptor(rules.Unary()),
		grpc.ChainStreamInterceptor(rules.Stream()),
	)
	pb.RegisterAdminServer(srv, adminserver.New(node))
	pb.RegisterClusterServer(srv, node.ClusterService())
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	log.Info("serving API", "component", "api", "addr", cfg.APIAddr)

	px := proxy.New(proxy.Config{Logger: log})
	fed := make(chan struct{})
	go func() { defer close(fed); feedProxy(ctx, node, px, log) }()

	select {
	case <-node.Ready():
		if err := writeAdminConfig(cfg.DataDir, node); err != nil {
			log.Error("write admin credentials", "err", err)
		}
		log.Info("ready", "node", cfg.NodeID, "cluster", node.ClusterID(), "admin", filepath.Join(cfg.DataDir, "admin.conf"))
		go keepAdminConfig(ctx, cfg.DataDir, node, log)
	case <-ctx.Done():
	case err := <-served:
		log.Error("API server stopped", "err", err)
	}
	<-ctx.Done()

	log.Info("shutting down")
	stopped := make(chan struct{})
	go func() { srv.GracefulStop(); close(stopped) }()
	select {
	case <-stopped:
	case <-time.After(3 * time.Second):
		srv.Stop()
	}
	err = node.Close()
	<-fed
	if perr := px.Close(); perr != nil && err == nil {
		err = perr
	}
	return err
}

// feedProxy hands every committed state to the data plane. Events that
// arrive while an update runs are folded into the next one: the proxy takes
// the whole desired state, never deltas.
func feedProxy(ctx context.Context, node *consensus.Node, px *proxy.Proxy, log *slog.Logger) {
	log = log.With("component", "proxy")
	var reported map[string]string
	for from := uint64(0); ; {
		if _, err := node.Watch(from).Next(ctx); err != nil {
			return
		}
		objs, rev := node.Objects()
		from = rev + 1
		err := px.Update(objs, rev)
		if err != nil && !errors.Is(err, proxy.ErrNoChanges) {
			log.Error("update data plane", "revision", rev, "err", err)
			continue
		}
		reported = logProblems(log, px.Status(), reported)
	}
}

// logProblems logs each load balancer's problems when they change.
func logProblems(log *slog.Logger, status map[string][]proxy.Problem, before map[string]string) map[string]string {
	now := make(map[string]string, len(status))
	for lb, problems := range status {
		var parts []string
		for _, p := range problems {
			parts = append(parts, p.Field+": "+p.Reason)
		}
		now[lb] = strings.Join(parts, "; ")
		if now[lb] != before[lb] {
			if now[lb] == "" {
				log.Info("load balancer serving", "lb", lb)
			} else {
				log.Warn("load balancer has problems", "lb", lb, "problems", now[lb])
			}
		}
	}
	return now
}

// writeAdminConfig writes DATA/admin.conf: the cluster's API addresses and
// an admin certificate, which the CLI finds without flags. The certificate
// is issued once and kept.
func writeAdminConfig(dataDir string, node *consensus.Node) error {
	path := filepath.Join(dataDir, "admin.conf")
	conf, err := client.LoadConfig(path)
	if err != nil {
		cert, key, err := node.CA().Issue(pki.IssueRequest{Identity: pki.Identity{Role: pki.RoleAdmin, Name: "admin"}})
		if err != nil {
			return err
		}
		conf = &client.Config{CA: string(node.CA().CertPEM), Cert: string(cert), Key: string(key)}
	}
	servers := node.APIAddrs()
	if strings.Join(servers, ",") == strings.Join(conf.Servers, ",") {
		return nil
	}
	conf.Servers = servers
	return client.SaveConfig(path, conf)
}

// keepAdminConfig rewrites admin.conf when hosts join or leave.
func keepAdminConfig(ctx context.Context, dataDir string, node *consensus.Node, log *slog.Logger) {
	w := node.Watch(node.Revision() + 1)
	for {
		ev, err := w.Next(ctx)
		if err != nil {
			return
		}
		touched := ev.Reset
		for _, c := range ev.Changes {
			touched = touched || c.Ref.GetKind() == api.KindNode
		}
		if touched {
			if err := writeAdminConfig(dataDir, node); err != nil {
				log.Warn("update admin credentials", "err", err)
			}
		}
	}
}
