package agent

import (
	"cmp"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/spf13/cobra"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	gwclient "sigs.k8s.io/gateway-api/pkg/client/clientset/versioned"

	"github.com/teapot-lb/teapot-lb/tenantsync/translate"
)

// DefaultCredentials is where the manifests mount the credentials Secret.
const DefaultCredentials = "/etc/teapot-lb/credentials"

// DefaultHealthAddr serves no probes: the manifests pass --health-addr=:8081.
const DefaultHealthAddr = ""

// serviceAccountNamespace holds the pod's namespace in a cluster.
const serviceAccountNamespace = "/var/run/secrets/kubernetes.io/serviceaccount/namespace"

// Command returns the teapot-lb agent command; version is the binary's.
func Command(version string) *cobra.Command {
	cfg := Config{LeaderElect: true, Version: version}
	var kubeconfig, logLevel string
	var noGateway bool
	var qps float32
	var burst int
	cmd := &cobra.Command{
		Use:     "agent",
		Version: version,
		Short:   "Run the tenant agent in a Kubernetes cluster: stream its LoadBalancer Services, Ingresses and Gateways to the LB cluster",
		Long: "Runs inside a tenant's Kubernetes cluster (see packaging/k8s). It uses the in-cluster\n" +
			"configuration, or --kubeconfig from outside, and the credentials Secret printed by\n" +
			"teapot-lb tenant credentials NAME, mounted at --credentials.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			var level slog.Level
			if err := level.UnmarshalText([]byte(logLevel)); err != nil {
				return fmt.Errorf("--log-level %q: use debug, info, warn or error", logLevel)
			}
			cfg.Logger = slog.New(slog.NewTextHandler(cmd.ErrOrStderr(), &slog.HandlerOptions{Level: level}))
			rc, err := kubeConfig(kubeconfig)
			if err != nil {
				return err
			}
			rc.UserAgent = "teapot-lb-agent/" + version
			rc.QPS, rc.Burst = qps, burst
			kube, err := kubernetes.NewForConfig(rc)
			if err != nil {
				return fmt.Errorf("kubernetes client: %w", err)
			}
			cfg.Kube = kube
			if !noGateway {
				if cfg.Gateway, err = gwclient.NewForConfig(rc); err != nil {
					return fmt.Errorf("gateway API client: %w", err)
				}
				if cfg.Dynamic, err = dynamic.NewForConfig(rc); err != nil {
					return fmt.Errorf("kubernetes dynamic client: %w", err)
				}
			}
			// Events get their own rate limiter, a fifth of the status
			// writes', so that they never hold back status writes, nor take
			// the API server's time from them on a first sync (one Event
			// per Service).
			erc := rest.CopyConfig(rc)
			erc.QPS, erc.Burst = qps/5, max(1, burst/5)
			if cfg.Events, err = kubernetes.NewForConfig(erc); err != nil {
				return fmt.Errorf("kubernetes client: %w", err)
			}
			if cfg.Namespace == "" {
				cfg.Namespace = podNamespace()
			}
			if cfg.Identity == "" {
				cfg.Identity = cmp.Or(os.Getenv("POD_NAME"), hostname())
			}
			a, err := New(cfg)
			if err != nil {
				return err
			}
			ctx, stop := signal.NotifyContext(cmd.Context(), syscall.SIGTERM, syscall.SIGINT)
			defer stop()
			return a.Run(ctx)
		},
	}
	f := cmd.Flags()
	f.StringVar(&kubeconfig, "kubeconfig", "", "kubeconfig to use instead of the in-cluster configuration")
	f.StringVar(&cfg.Credentials, "credentials", DefaultCredentials, "directory of the mounted credentials Secret (tenant, servers, ca.crt, tls.crt, tls.key)")
	f.StringVar(&cfg.Servers, "servers", "", "LB host API addresses HOST:PORT, comma-separated (default: the Secret's servers)")
	f.BoolVar(&cfg.Options.DefaultClass, "default-class", false, "also take LoadBalancer Services that set no loadBalancerClass")
	f.StringVar(&cfg.Options.LoadBalancerClass, "lb-class", translate.LoadBalancerClass, "spec.loadBalancerClass of the Services to take")
	f.StringVar(&cfg.Options.IngressController, "ingress-controller", translate.IngressController, "spec.controller of the IngressClasses whose Ingresses to take")
	f.StringVar(&cfg.Options.GatewayController, "gateway-controller", translate.GatewayController, "spec.controllerName of the GatewayClasses whose Gateways to take")
	f.BoolVar(&noGateway, "no-gateway-api", false, "do not watch Gateway API objects even when their CRDs are installed")
	f.StringVar(&cfg.Options.DefaultPool, "default-pool", "", "VIP pool for objects that name none (default: the tenant's first pool)")
	f.BoolVar(&cfg.LeaderElect, "leader-elect", cfg.LeaderElect, "elect one active replica through a Lease")
	f.StringVar(&cfg.Namespace, "namespace", "", "namespace of the Lease (default: the pod's namespace, or $POD_NAMESPACE)")
	f.StringVar(&cfg.LeaseName, "lease-name", DefaultLeaseName, "name of the Lease")
	f.DurationVar(&cfg.LeaseDuration, "lease-duration", DefaultLeaseDuration, "how long a replica waits for a silent leader before taking over")
	f.DurationVar(&cfg.RenewDeadline, "renew-deadline", DefaultRenewDeadline, "how long the leader keeps trying to renew before it steps down")
	f.DurationVar(&cfg.RetryPeriod, "retry-period", DefaultRetryPeriod, "time between lease attempts")
	f.StringVar(&cfg.Identity, "id", "", "this replica's name in the Lease (default: $POD_NAME or the host name)")
	f.Float32Var(&qps, "kube-qps", DefaultKubeQPS, "requests per second to the Kubernetes API for status writes (Events: a fifth of it)")
	f.IntVar(&burst, "kube-burst", DefaultKubeBurst, "burst of requests to the Kubernetes API")
	f.StringVar(&cfg.HealthAddr, "health-addr", DefaultHealthAddr, "address of /healthz (live) and /readyz (caches synced and, on the leading replica, connected to the LB cluster); empty turns it off")
	f.StringVar(&logLevel, "log-level", "info", "debug | info | warn | error")
	return cmd
}

func kubeConfig(path string) (*rest.Config, error) {
	if path != "" {
		rc, err := clientcmd.BuildConfigFromFlags("", path)
		if err != nil {
			return nil, fmt.Errorf("--kubeconfig %s: %w", path, err)
		}
		return rc, nil
	}
	rc, err := rest.InClusterConfig()
	if err != nil {
		return nil, fmt.Errorf("in-cluster configuration: %w (outside a cluster, pass --kubeconfig)", err)
	}
	return rc, nil
}

func podNamespace() string {
	if ns := os.Getenv("POD_NAMESPACE"); ns != "" {
		return ns
	}
	if b, err := os.ReadFile(serviceAccountNamespace); err == nil {
		return strings.TrimSpace(string(b))
	}
	return ""
}

func hostname() string {
	h, _ := os.Hostname()
	return h
}
