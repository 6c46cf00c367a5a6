package main

// serve's configuration: the settings, their flags (whose names are the
// keys of the serve.yaml file) and the checks of settings that do not go
// together.

import (
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"regexp"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/teapot-lb/teapot-lb/consensus"
	"github.com/teapot-lb/teapot-lb/packaging/serveconfig"
	"github.com/teapot-lb/teapot-lb/proxy"
	"github.com/teapot-lb/teapot-lb/proxy/certs"
	"github.com/teapot-lb/teapot-lb/proxy/cpubudget"
	"github.com/teapot-lb/teapot-lb/proxy/dns"
	"github.com/teapot-lb/teapot-lb/proxy/memlimit"
	"github.com/teapot-lb/teapot-lb/vip"
)

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
	// DataPath is how TCP and TLS passthrough connections move their
	// bytes: auto, epoll or io_uring.
	DataPath string `json:"data-path"`

	// VIPs: the arp interface, the failure detector, and the BGP speaker
	// (the bgp: section exists only in the file).
	VIPInterface string `json:"vip-interface"`
	// NetnsDir is where the namespaces of tenants' attachments are bound.
	NetnsDir          string         `json:"netns-dir"`
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
	// CPUPerTenant is the CPU (cores) one tenant may make this host spend
	// on everything when its quotas.cpuMillicores is unset; 0 takes a
	// quarter of the host's CPUs.
	CPUPerTenant float64 `json:"cpu-per-tenant"`

	// DNS: the authoritative server of the zones delegated to the LB
	// hosts (off without --dns-addr).
	DNSAddr                string       `json:"dns-addr"`
	DNSZones               string       `json:"dns-zones"`
	DNSNameServers         string       `json:"dns-ns"`
	DNSTTL                 vip.Duration `json:"dns-ttl"`
	DNSResponsesPerSecond  int          `json:"dns-responses-per-second"`
	DNSSlip                int          `json:"dns-slip"`
	DNSQueriesPerTenant    int          `json:"dns-queries-per-tenant"`
	DNSSecondaries         string       `json:"dns-secondaries"`
	DNSTSIGKeys            string       `json:"dns-tsig-keys"`
	DNSSEC                 string       `json:"dns-dnssec"`
	DNSSignaturesPerTenant int          `json:"dns-signatures-per-tenant"`
	DNSPush                string       `json:"dns-push"`

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
		DataPath:         string(proxy.DataPathEpoll),
		GCHeadroom:       memlimit.DefaultHeadroom,
		ACMECA:           certs.LetsEncrypt,
		ACMERenewCheck:   vip.Duration(10 * time.Minute), // certmagic's own

		ACMEOrdersPerTenant: certs.DefaultOrdersPerHour,

		DNSTTL:                 vip.Duration(dns.DefaultTTL),
		DNSResponsesPerSecond:  dns.DefaultResponsesPerSecond,
		DNSSlip:                dns.DefaultSlip,
		DNSQueriesPerTenant:    dns.DefaultQueriesPerTenant,
		DNSSignaturesPerTenant: dns.DefaultSignaturesPerTenant,

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
	checked(&cfg.ListenSockets, "listen-sockets", "mode", proxy.CheckListenSockets, `how listeners listen: "listener" opens a socket per listener (address and port); "tenant" opens one per tenant and address family (and, for udp listeners and HTTP/3 ports, per port) and steers each listener's address to it with a BPF sk_lookup program (Linux 5.9 or later, CAP_BPF and CAP_NET_ADMIN), for hosts of tens of thousands of listeners`)
	checked(&cfg.DataPath, "data-path", "path", checkDataPath, `how TCP and TLS passthrough connections move their bytes between client and member: "io_uring" relays them through io_uring rings, a thread each (Linux 6.1 or later; no system call per read or write), "epoll" splices them on Go's netpoller; "auto" takes io_uring when the kernel offers it (not disabled by /proc/sys/kernel/io_uring_disabled or a seccomp filter) and epoll otherwise; io_uring where it is unavailable refuses to start. epoll is the default while io_uring copies what splice moves without copying (more CPU per byte on bulk transfers, fewer system calls). cluster status shows the path each host took`)
	checked(&cfg.MetricsAddr, "metrics-addr", "address", serveconfig.OptionalHostPort, `IP:port serving Prometheus metrics at /metrics, and Go profiles at /debug/pprof/ when it is a loopback address ("" turns them off)`)
	checked(&cfg.WebAddr, "web-addr", "address", serveconfig.OptionalHostPort, "IP:port serving the read-only dashboard over HTTPS with this host's certificate; logins take a token from \"teapot-lb dashboard token\" (default off)")
	f.StringVar(&cfg.VIPInterface, "vip-interface", "", "interface that carries the VIPs of arp pools, but for a pool that names its own (VIPPool.interface) (needs CAP_NET_ADMIN and CAP_NET_RAW)")
	f.StringVar(&cfg.NetnsDir, "netns-dir", vip.DefaultNetnsDir, "directory where the network namespaces of tenants' attachments (teapot-att-TENANT) are bound, where `ip netns` finds them by default; several LB hosts on one machine (labs) need one each")
	checked(&cfg.HeartbeatAddr, "heartbeat-addr", "address", serveconfig.OptionalHostPort, fmt.Sprintf("IP:port of the VIP failure detector on the data-plane network (default: the --raft-addr IP, port %d); the next port carries the hosts' counts of total rate limits (UDP, between the LB hosts)", vip.DefaultHeartbeatPort))
	f.Var(&cfg.HeartbeatInterval, "heartbeat-interval", "time between VIP heartbeats to each peer")
	f.IntVar(&cfg.HeartbeatMisses, "heartbeat-misses", cfg.HeartbeatMisses, "heartbeats a peer may miss before its VIPs move")
	f.StringVar(&cfg.ACMECA, "acme-ca", cfg.ACMECA, "ACME directory URL of the CA that issues certificates for https listeners with acme: true")
	f.StringVar(&cfg.ACMECARoot, "acme-ca-root", "", "PEM file of extra root certificates that verify the ACME CA's HTTPS endpoint")
	f.StringVar(&cfg.ACMEEmail, "acme-email", "", "contact address of the cluster's ACME account")
	f.Var(&cfg.ACMERenewCheck, "acme-renew-check", "how often certificates are checked for renewal")
	_ = f.MarkHidden("acme-renew-check")
	f.IntVar(&cfg.ACMEOrdersPerTenant, "acme-orders-per-tenant", cfg.ACMEOrdersPerTenant, "new ACME orders one tenant may start in an hour on this host (the cluster shares one ACME account, whose limits the CA counts); a name whose order failed also waits 1 minute, doubling with each failure up to a day")
	f.Float64Var(&cfg.CPUPerTenant, "cpu-per-tenant", 0, "CPU cores one tenant without quotas.cpuMillicores may make this host spend on everything it computes for it (requests, connections, TLS, signatures, regexes, the WAF); past it the tenant's requests, connections, handshakes and checks wait; 0.001 to the host's CPUs (0: a quarter of them)")
	f.Float64Var(&cfg.TLSCPUPerTenant, "tls-cpu-per-tenant", 0, "CPU cores one tenant's TLS handshakes may use on average on this host: the ClientHellos and full handshakes of its https listeners (over it they wait up to 200ms, then are refused) and the client certificates of its HTTPS health checks (over it they are delayed); resumed sessions sign nothing; 0.001 to the host's CPUs (0: a quarter of them)")
	checked(&cfg.DNSAddr, "dns-addr", "addresses", dns.CheckAddrs, "IP:port (comma-separated) where this host answers DNS, UDP and TCP, for --dns-zones: typically a VIP of a static pool that every host binds, or of an arp pool (default off)")
	checked(&cfg.DNSZones, "dns-zones", "zones", dns.CheckZones, "zones delegated to the LB hosts (comma-separated, like lb.example.com,acme.example): the route hosts of tenants' load balancers inside them, and inside their tenant's domains, are answered with the load balancer's VIP while some host holds or announces it and the load balancer has a member up; other names in them get NXDOMAIN, names outside them REFUSED")
	checked(&cfg.DNSNameServers, "dns-ns", "servers", dns.CheckNameServers, "the name servers of the zones' NS records, NAME=IP (comma-separated; repeat a name for several addresses): a name inside a zone is answered with its address (glue); the first is the SOA's primary")
	f.Var(&cfg.DNSTTL, "dns-ttl", fmt.Sprintf("TTL of DNS answers and of negative answers (%s to %s): a VIP that stops working leaves caches within it", dns.MinTTL, dns.MaxTTL))
	f.IntVar(&cfg.DNSResponsesPerSecond, "dns-responses-per-second", cfg.DNSResponsesPerSecond, "UDP responses a second one client prefix (/24, /56) gets for one name and type (NXDOMAIN: for one zone), with 15 s of credit; over it responses are dropped or truncated (--dns-slip), so a spoofed flood is not amplified (0: off)")
	f.IntVar(&cfg.DNSSlip, "dns-slip", cfg.DNSSlip, "of the UDP responses over --dns-responses-per-second, every Nth goes out truncated and empty (a real client retries over TCP), the others are dropped (0: drop them all)")
	f.IntVar(&cfg.DNSQueriesPerTenant, "dns-queries-per-tenant", cfg.DNSQueriesPerTenant, "queries a second for one tenant's names this host answers, over every client; over it UDP queries get no answer and TCP queries REFUSED, so a flood at one tenant's names costs the others nothing")
	checked(&cfg.DNSSecondaries, "dns-secondaries", "servers", dns.CheckSecondaries, "secondary name servers (BIND, Knot) the zones are transferred to, IP[:port]=KEY (comma-separated): AXFR and IXFR are allowed only from their addresses and signed with their TSIG key of --dns-tsig-keys (others are REFUSED), and each gets NOTIFY (to port 53 unless given) when the answers change")
	checked(&cfg.DNSPush, "dns-push", "zones", dns.CheckPush, "zones of --dns-zones whose A and AAAA records (the working addresses the hosts answer, wildcards included) are pushed to a primary server the operator keeps, as RFC 2136 dynamic updates signed with a TSIG key of --dns-tsig-keys, ZONE=IP[:port]=KEY (comma-separated): only the Raft leader pushes; each change goes as the difference, and the primary's zone is read (AXFR with the same key) and set right at start and every 10 minutes. teapot-lb owns the zone's A and AAAA records there, but its name servers' glue: give it a zone of its own")
	f.StringVar(&cfg.DNSTSIGKeys, "dns-tsig-keys", "", "file of the TSIG keys of --dns-secondaries and --dns-push, as tsig-keygen -a hmac-sha256 NAME writes them (the same file named.conf can include); only hmac-sha256 keys of 32 bytes or more, each used by a secondary or a push")
	checked(&cfg.DNSSEC, "dns-dnssec", "zones", dns.CheckZones, "zones of --dns-zones to sign with DNSSEC (comma-separated): each gets an ECDSA P-256 key, made once and kept in the replicated state, and answers to queries with DO are signed online, with minimal NSEC for names and types that do not exist; `teapot-lb explain node ID` shows the DS to publish in the parent zone. Signed zones are not transferred to --dns-secondaries")
	f.IntVar(&cfg.DNSSignaturesPerTenant, "dns-signatures-per-tenant", cfg.DNSSignaturesPerTenant, "new DNSSEC signatures a second one tenant's names may cost this host (each zone's other names have a budget of their own); signatures are cached per record set, so only names and answers not seen in the last day cost one; over it UDP queries with DO get no answer and TCP SERVFAIL")
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
	procs := cpubudget.HostCPUs()
	if err := checkTenantCores("cpu-per-tenant", "a tenant may make the host spend", cfg.CPUPerTenant, procs); err != nil {
		return err
	}
	if err := checkTenantCores("tls-cpu-per-tenant", "a tenant's TLS signatures may use", cfg.TLSCPUPerTenant, procs); err != nil {
		return err
	}
	if _, err := cfg.dnsSettings().Config(); err != nil {
		return err
	}
	if cfg.Join != "" && cfg.Token == "" {
		return errors.New("--join needs --token (from `teapot-lb cluster join-token` on a cluster host)")
	}
	return nil
}

// checkTenantCores refuses a per-tenant CPU budget of v cores that the
// host could not honour: below a thousandth of a core (the budgets count
// millicores, so it would become 0, the default) or above the host's
// procs CPUs (cpubudget.HostCPUs, the budgets' unit of a core: no
// tenant could reach it, so it would bound nothing). 0 is the default.
func checkTenantCores(flag, what string, v float64, procs int) error {
	switch {
	case v < 0 || math.IsNaN(v):
		return fmt.Errorf("--%s %g: give the CPU cores %s, like 0.5, or 0 for a quarter of the host's CPUs", flag, v, what)
	case v > 0 && v < 0.001:
		return fmt.Errorf("--%s %g: under a thousandth of a core, the budget's unit; give 0.001 or more, or 0 for a quarter of the host's CPUs", flag, v)
	case v > float64(procs):
		return fmt.Errorf("--%s %g: more than this host's %d CPUs (GOMAXPROCS), which no tenant could reach, so it would bound nothing; give at most %d, or 0 for a quarter of them", flag, v, procs, procs)
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

// dnsSettings are the DNS flags as proxy/dns reads them.
func (cfg serveConfig) dnsSettings() dns.Settings {
	return dns.Settings{Addrs: cfg.DNSAddr, Zones: cfg.DNSZones, NameServers: cfg.DNSNameServers, TTL: time.Duration(cfg.DNSTTL),
		ResponsesPerSecond: cfg.DNSResponsesPerSecond, Slip: cfg.DNSSlip, QueriesPerTenant: cfg.DNSQueriesPerTenant,
		Secondaries: cfg.DNSSecondaries, TSIGKeys: cfg.DNSTSIGKeys, DNSSEC: cfg.DNSSEC, SignaturesPerTenant: cfg.DNSSignaturesPerTenant, Push: cfg.DNSPush}
}

// checkDataPath checks a data-path value (whether io_uring is available
// is checked at start).
func checkDataPath(s string) error {
	_, err := proxy.ParseDataPath(s)
	return err
}
