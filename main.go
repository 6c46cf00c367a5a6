// Command teapot-lb is the multi-tenant load balancer appliance: `serve`
// runs an LB host, the other commands talk to a cluster's admin API.
//
// This file builds the cobra root and wires the parts of `serve`: it starts
// them in order and stops them in reverse.
package main

import (
	"context"
	"fmt"
	"log/slog"
	"math"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"sync"
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
	"github.com/teapot-lb/teapot-lb/api/echo"
	"github.com/teapot-lb/teapot-lb/api/observe"
	pb "github.com/teapot-lb/teapot-lb/api/proto/teapotv1"
	"github.com/teapot-lb/teapot-lb/consensus"
	"github.com/teapot-lb/teapot-lb/packaging/gen"
	"github.com/teapot-lb/teapot-lb/packaging/sdnotify"
	"github.com/teapot-lb/teapot-lb/proxy"
	"github.com/teapot-lb/teapot-lb/proxy/certs"
	"github.com/teapot-lb/teapot-lb/proxy/clientsource"
	"github.com/teapot-lb/teapot-lb/proxy/cpubudget"
	"github.com/teapot-lb/teapot-lb/proxy/l7"
	"github.com/teapot-lb/teapot-lb/proxy/memlimit"
	"github.com/teapot-lb/teapot-lb/proxy/metrics"
	"github.com/teapot-lb/teapot-lb/tenantsync"
	"github.com/teapot-lb/teapot-lb/tenantsync/agent"
	"github.com/teapot-lb/teapot-lb/vip"
	"github.com/teapot-lb/teapot-lb/vip/attach"
	"github.com/teapot-lb/teapot-lb/vip/tenantbgp"
	"github.com/teapot-lb/teapot-lb/web"
)

func main() {
	root := cli.NewRoot()
	root.AddCommand(serveCommand(), agent.Command(cli.Version), web.Command(), gen.ManCommand())
	root.AddCommand(echo.Command())
	os.Exit(cli.Main(root))
}

// serveCommand is serve's command (serve_config.go: its flags).
func serveCommand() *cobra.Command { return serveCommandWith(serve) }

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
		log.Info("listeners share a socket per tenant", "component", "serve", "listen-sockets", cfg.ListenSockets)
	}
	dataPath, err := chooseDataPath(cfg.DataPath, log)
	if err != nil {
		return err
	}
	var taken dataPathOf // the data path in cluster status, once the proxy runs
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
	// The data plane writes its readiness and member health to plane,
	// which the VIP manager and the tenant streams follow.
	host, plane := observe.NewHost(cfg.NodeID), observe.NewPlane()
	vcfg := vip.Config{
		NodeID: cfg.NodeID, Interface: cfg.VIPInterface, HeartbeatAddr: cfg.HeartbeatAddr, RaftAddr: cfg.RaftAddr,
		HeartbeatInterval: time.Duration(cfg.HeartbeatInterval), HeartbeatMisses: cfg.HeartbeatMisses,
		BGP: cfg.BGP, Logger: log, Events: host.Events().Add, HandoverTimeout: time.Duration(cfg.DrainTimeout),
		Observed: plane, NetnsDir: cfg.NetnsDir, StateDir: cfg.DataDir,
	}
	// The tenants' BGP sessions: before the VIP manager (see
	// vip.BGPIdentity), stopped after it.
	// Attached tenants' namespaces, from which their members are dialled
	// and their BGP sessions made.
	attachments, err := attach.New(attach.Config{NodeID: cfg.NodeID, Logger: log, Events: host.Events().Add, NetnsDir: cfg.NetnsDir})
	if err != nil {
		return err
	}
	stack.Push(attachments.Close)
	host.Add(attachmentSource{attachments})
	go attachments.Run(ctx)
	asn, routerID := vip.BGPIdentity(vcfg)
	upstream := &upstreamTo{}
	relay, err := tenantbgp.New(tenantbgp.Config{ASN: asn, RouterID: routerID, Logger: log, Events: host.Events().Add, Reannounce: upstream.announce, FabricSessions: upstream.fabricSessions,
		NodeID: cfg.NodeID, Attachments: attachments})
	if err != nil {
		return err
	}
	stack.Push(relay.Close)
	host.Add(relay)
	vcfg.TenantVIPs = relay
	vm, err := vip.Open(vcfg)
	if err != nil {
		return err
	}
	upstream.vm.Store(vm)
	releaseVIPs := sync.OnceFunc(func() {
		if err := vm.Close(); err != nil {
			log.Error("release VIPs", "component", "vip", "err", err)
		}
	})
	stack.PushFunc(releaseVIPs)
	go relay.Run(ctx)
	ccfg := consensus.Config{
		DataDir: cfg.DataDir, NodeID: cfg.NodeID, RaftAddr: cfg.RaftAddr, APIAddr: cfg.APIAddr,
		Join: cfg.Join, Token: cfg.Token,
		HeartbeatTimeout: time.Duration(cfg.HeartbeatTimeout), ElectionTimeout: time.Duration(cfg.ElectionTimeout),
		Logger: log, Version: cli.Version,
		Observe: host.Observe, Event: host.Events().Add,
		Restore: restore, Recover: cfg.Recover,
		Services: append(ownServices(msrv, webLn, cfg.BGP), rateShareService(vm.HeartbeatAddr())...), Addresses: hostAddresses(),
		HeartbeatAddr: vm.HeartbeatAddr(), VIPInterface: cfg.VIPInterface, Describe: func(ns *pb.NodeStatus) { vm.Describe(ns); taken.describe(ns) },
	}
	node, err := consensus.Open(ctx, ccfg)
	if err != nil {
		return err
	}
	stack.Push(node.Close)
	dnsSrv, err := openDNS(ctx, cfg, log, node.Objects, certs.NewStorage(node, cfg.NodeID, 0, log), func() *consensus.Watcher { return node.Watch(0) }, vm, plane, node.IsLeader, node.Status, &stack)
	if err != nil {
		return err
	}
	vm.SetKey(vip.HeartbeatKey(node.CA().KeyPEM))
	vm.SetStateContact(node.LeaderContact)
	rules := adminserver.DefaultRules
	guard := connguard.New(connguard.Config{Logger: log})
	adminTiming := adminserver.NewTiming()
	srv := grpc.NewServer(
		grpc.Creds(guard.Credentials(credentials.NewTLS(node.ServerTLS()))),
		grpc.ChainUnaryInterceptor(rules.Unary()),
		grpc.StatsHandler(adminTiming),
		grpc.ChainStreamInterceptor(rules.Stream()),
	)
	admin := adminserver.New(node).WithDashboardSigner(node.CA().Key)
	if dnsSrv != nil {
		admin.WithDNSKeys(dnsSrv)
	}
	pb.RegisterAdminServer(srv, admin)
	pb.RegisterClusterServer(srv, node.ClusterService())
	certAPI := certs.NewService(node)
	pb.RegisterCertificatesServer(srv, certAPI)
	// One budget of signature CPU per tenant, drawn on by its listeners'
	// handshakes and its health checks' client certificates.
	// Its accountant charges each tenant's host CPU budget
	// (quotas.cpuMillicores) with what the process spends for it, its
	// streams' member-health pushes included.
	cpu := cpubudget.New(cpubudget.Options{Rate: cfg.TLSCPUPerTenant, HostMillicores: int(cfg.CPUPerTenant * 1000)})
	go cpu.Run(ctx)
	tenants := tenantsync.New(tenantsync.Config{Store: node, Logger: log, Events: host.Events().Add, Certificates: certAPI, Observed: plane, CPU: tenantCPUs(cpu)})
	pb.RegisterTenantSyncServer(srv, tenants)
	pb.RegisterTenantCredentialsServer(srv, tenants.Credentials())
	served := make(chan error, 1)
	go func() { served <- srv.Serve(guard.Listener(ln)) }()
	stack.PushFunc(func() { stopGRPC(srv, 3*time.Second) })
	log.Info("serving API", "component", "api", "addr", cfg.APIAddr)

	// Certificates: ACME with the configured CA, and those uploaded through
	// the API, kept in the replicated store. Session ticket keys derive
	// from the cluster CA's key, so every host resumes the others' sessions.
	roots, err := certs.LoadRoots(cfg.ACMECARoot)
	if err != nil {
		return err
	}
	ccm := certs.Config{
		Store: node, Host: cfg.NodeID, CA: cfg.ACMECA, Email: cfg.ACMEEmail, Roots: roots,
		TicketSecret: node.CA().KeyPEM, RenewCheckInterval: time.Duration(cfg.ACMERenewCheck), Logger: log,
		Events: host.Events().Add, OrdersPerHour: cfg.ACMEOrdersPerTenant, CPU: cpu,
	}
	if dnsSrv != nil {
		// Wildcards of the zones this host answers: DNS-01 from its own DNS.
		ccm.DNSZones, ccm.DNS01Wait = dnsSrv.Zones(), dnsSrv.WaitChallenge
	}
	cm, err := certs.New(ccm)
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
	// Policy routing for pools that dial from clients' addresses, installed
	// when first needed, removed after the data plane stops.
	clientSrc := clientsource.New(clientsource.Config{Logger: log})
	stack.Push(clientSrc.Close)
	px := proxy.New(proxy.Config{
		Logger: log, DrainTimeout: time.Duration(cfg.DrainTimeout), Metrics: counters, HTTP: cm.Terminator(proxy.NewHTTP(engine, cm.Challenge)),
		Events: host.Events().Add, Steer: steering, CPU: cpu, Observed: plane, ClientCertificate: cm.Uploaded,
		DataPath: dataPath, Attachments: attachments, ClientSource: clientSrc,
	})
	taken.Store(px)
	stack.Push(px.Close)
	engine.SetPipes(px.Pipes()) // tunnels splice through the host's bounded pipe pool
	// Total rate limits count what the other hosts admit too (BGP ECMP).
	share := openRateShare(ctx, vm.HeartbeatAddr(), node.CA().KeyPEM, px, log, &stack)
	vm.SetHandover(px)
	host.Add(px)
	host.Add(counters)
	// The history ring adds the members' rates to the counters' traffic.
	history := metrics.NewHistory(counters)
	go history.Run(ctx)
	host.Add(history)
	host.Add(cm)
	host.Add(vm)
	host.Add(dnsSrv)
	if err := serveMetrics(ctx, msrv, counters, px, node, tenants, cm, vm, append(dnsSrv.Collectors(), guard.Collector(), adminTiming.Collector(), relay.Collector(), attachmentCollector{attachments}, px.EdgeCollector(), px.DataPathCollector(), cpu.Collector())...); err != nil {
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
	// manager.
	feed, fed := proxy.NewFeed(px), make(chan struct{})
	go func() {
		defer close(fed)
		feed.Follow(ctx, attachedFirst{revisions{node.Watch(0)}, attachments, node.Objects}, func(r proxy.Revision, _ []string) {
			vm.Follow(r.Reset, r.Objects, r.Transitions(), r.Revision, node.Objects)
			followTenantBGP(relay, r, node.Objects)
			followRateSharePeers(share, cfg.NodeID, r, node.Objects)
			dnsSrv.Follow(r.Reset, r.Transitions())
		})
	}()
	stack.PushFunc(func() { <-fed })
	go settleAttachments(ctx, attachments, node.Ready(), node.Revision, feed)
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
