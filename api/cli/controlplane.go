package cli

import (
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/spf13/cobra"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/teapot-lb/teapot-lb/api"
	pb "github.com/teapot-lb/teapot-lb/api/proto/teapotv1"
)

// controlPlaneOptions are the flags of lb control-plane.
type controlPlaneOptions struct {
	members                []string
	pool, address          string
	port                   uint32
	caFile                 string
	insecure               bool
	clientCert, clientKey  string
	serverName, algorithm  string
	path                   string
	idleTimeout            time.Duration
	interval, checkTimeout time.Duration
	dryRun                 bool
}

// controlPlaneCmd writes the load balancer of a tenant cluster's API
// servers: TCP on 6443, HTTPS /readyz checks, least-request balancing
// and an idle timeout long enough for watches.
func (a *app) controlPlaneCmd() *cobra.Command {
	o := controlPlaneOptions{}
	cmd := &cobra.Command{
		Use:   "control-plane TENANT NAME --members IP:PORT,... (--ca-file FILE | --insecure-skip-verify)",
		Short: "Create or update the load balancer in front of a cluster's kube-apiservers",
		Long: "control-plane writes one load balancer for a Kubernetes control plane: a tcp listener\n" +
			"(6443 by default) on a VIP of --pool, forwarding to the API servers with least-request\n" +
			"balancing; each member is checked with GET /readyz over TLS, verified against the\n" +
			"cluster CA of --ca-file, so an API server that is up but not ready (etcd lost, still\n" +
			"starting) gets no new connections, and its established ones are closed so that its\n" +
			"clients reconnect to a ready one. Watches live long: the idle timeout is an hour.\n" +
			"Running it again updates the load balancer; with --dry-run the cluster checks it and\n" +
			"writes nothing (-o yaml shows what it would store).",
		Example: "  teapot-lb lb control-plane acme cp --pool public --members 10.20.0.11:6443,10.20.0.12:6443,10.20.0.13:6443 \\\n" +
			"      --ca-file /etc/kubernetes/pki/ca.crt",
		Args: args(cobra.ExactArgs(2)),
		RunE: func(cmd *cobra.Command, argv []string) error {
			lb, err := o.loadBalancer(argv[0], argv[1])
			if err != nil {
				return err
			}
			return a.applyObjects(cmd, []*pb.Object{api.Wrap(lb)}, pb.ApplyMode_APPLY_MODE_UPSERT, o.dryRun)
		},
	}
	f := cmd.Flags()
	f.StringSliceVar(&o.members, "members", nil, "API servers as IP:PORT (repeatable or comma-separated)")
	f.StringVar(&o.pool, "pool", "", "VIP pool to take the address from")
	f.StringVar(&o.address, "address", "", "a specific VIP (inside --pool, or inside any pool when --pool is empty)")
	f.Uint32Var(&o.port, "port", 6443, "port of the listener on the VIP")
	f.StringVar(&o.caFile, "ca-file", "", "PEM CA bundle that signed the API servers' certificates")
	f.BoolVar(&o.insecure, "insecure-skip-verify", false, "check /readyz without verifying the API servers' certificates")
	f.StringVar(&o.clientCert, "client-cert", "", "PEM client certificate for the checks (API servers without anonymous access)")
	f.StringVar(&o.clientKey, "client-key", "", "PEM private key of --client-cert (stored, never shown again)")
	f.StringVar(&o.serverName, "server-name", "", "name verified in the API servers' certificates (default: each member's IP)")
	f.StringVar(&o.algorithm, "algorithm", "least-request", "least-request or hash (client IP)")
	f.StringVar(&o.path, "path", "/readyz", "path of the health check")
	f.DurationVar(&o.idleTimeout, "idle-timeout", time.Hour, "close connections silent this long both ways")
	f.DurationVar(&o.interval, "check-interval", 2*time.Second, "time between checks of a member")
	f.DurationVar(&o.checkTimeout, "check-timeout", time.Second, "time a check may take")
	f.BoolVar(&o.dryRun, "dry-run", false, "have the cluster check the load balancer against its current state; write nothing")
	_ = cmd.MarkFlagFilename("ca-file", "crt", "pem")
	_ = cmd.MarkFlagFilename("client-cert", "crt", "pem")
	_ = cmd.MarkFlagFilename("client-key", "key", "pem")
	_ = cmd.RegisterFlagCompletionFunc("algorithm", cobra.FixedCompletions([]string{"least-request", "hash"}, cobra.ShellCompDirectiveNoFileComp))
	return cmd
}

// loadBalancer builds the load balancer; validation on the server checks
// the rest.
func (o *controlPlaneOptions) loadBalancer(tenant, name string) (*pb.LoadBalancer, error) {
	if len(o.members) == 0 {
		return nil, errors.New("control-plane needs --members (the API servers as IP:PORT)")
	}
	if o.pool == "" && o.address == "" {
		return nil, errors.New("control-plane needs --pool (or --address) for the VIP")
	}
	if (o.caFile == "") == !o.insecure {
		return nil, errors.New("control-plane needs --ca-file (the cluster CA) to verify the API servers, or --insecure-skip-verify, not both")
	}
	https := &pb.HTTPSCheck{Path: o.path, ServerName: o.serverName, InsecureSkipVerify: o.insecure}
	for _, fl := range []struct {
		flag, file string
		dst        *string
	}{
		{"--ca-file", o.caFile, &https.CaPem},
		{"--client-cert", o.clientCert, &https.ClientCertPem},
		{"--client-key", o.clientKey, &https.ClientKeyPem},
	} {
		if fl.file == "" {
			continue
		}
		data, err := os.ReadFile(fl.file)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", fl.flag, bare(err))
		}
		*fl.dst = string(data)
	}
	pool := &pb.BackendPool{
		Algorithm: o.algorithm,
		HealthCheck: &pb.HealthCheck{Https: https, Interval: durationpb.New(o.interval), Timeout: durationpb.New(o.checkTimeout),
			Rise: 2, Fall: 2, CloseOnDown: true},
	}
	if o.algorithm == "hash" {
		pool.HashOn = "client-ip"
	}
	for _, m := range o.members {
		pool.Members = append(pool.Members, &pb.Member{Address: m})
	}
	return &pb.LoadBalancer{
		Name:      name,
		Tenant:    tenant,
		Vip:       &pb.VIPRequest{Pool: o.pool, Address: o.address},
		Listeners: []*pb.Listener{{Port: o.port, Protocol: "tcp", Pool: "apiservers", IdleTimeout: durationpb.New(o.idleTimeout)}},
		Pools:     map[string]*pb.BackendPool{"apiservers": pool},
	}, nil
}
