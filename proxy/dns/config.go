package dns

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"slices"
	"strings"
	"time"

	mdns "github.com/miekg/dns"

	pb "github.com/teapot-lb/teapot-lb/api/proto/teapotv1"
)

// Bounds and defaults of the settings.
const (
	// DefaultTTL is the TTL of A and AAAA answers and of negative answers.
	DefaultTTL = 30 * time.Second
	MinTTL     = time.Second
	MaxTTL     = time.Hour
	// InfraTTL is the TTL of SOA, NS and glue records.
	InfraTTL = time.Hour
	// DefaultResponsesPerSecond is the rate of UDP responses one client
	// prefix gets for one name and type (BIND's responses-per-second).
	DefaultResponsesPerSecond = 20
	// DefaultSlip: every second response over the rate goes out truncated
	// (the client retries over TCP); the others are dropped.
	DefaultSlip = 2
	// DefaultQueriesPerTenant is the rate of queries for one tenant's
	// names one host answers, over every client.
	DefaultQueriesPerTenant = 5000
	// MaxUDPSize is the largest UDP response, whatever EDNS0 offers
	// (DNS flag day 2020).
	MaxUDPSize = 1232
	// MaxTCPConns bounds the TCP connections open at once per address.
	MaxTCPConns = 256
)

// ErrConfig is the error of a setting refused.
var ErrConfig = errors.New("dns setting refused")

// NameServer is one name the zones' NS records name, and the addresses
// its glue gives.
type NameServer struct {
	Name  string
	Addrs []netip.Addr
}

// Config is the server's configuration.
type Config struct {
	// Addrs are the IP:port the server listens on, UDP and TCP.
	Addrs []string
	// Zones are the zones served ("lb.acme.example").
	Zones []string
	// NameServers are named in every zone's NS records (the first is the
	// SOA's primary).
	NameServers []NameServer
	// TTL of A and AAAA answers and of negative answers (0: DefaultTTL).
	TTL time.Duration
	// ResponsesPerSecond and Slip: response-rate limiting of UDP
	// (0: the defaults; ResponsesPerSecond < 0 turns it off).
	ResponsesPerSecond int
	Slip               int
	// QueriesPerTenant bounds the queries for one tenant's names a
	// second (0: the default).
	QueriesPerTenant int
	// Secondaries get the zones by AXFR or IXFR, signed with their key of
	// TSIGKeys (name to base64 HMAC-SHA256 secret), and NOTIFY on change.
	Secondaries []Secondary
	TSIGKeys    map[string]string
	// DNSSEC are the zones (of Zones) signed online with a key per zone
	// kept in Keys; SignaturesPerTenant bounds the new signatures a
	// second one tenant's names cost (0: the default).
	DNSSEC              []string
	SignaturesPerTenant int
	Keys                KeyStore
	// Push are the zones pushed to operators' primaries as RFC 2136
	// updates signed with their key of TSIGKeys; only while Leader says
	// so (nil: always), so that one host pushes at a time.
	Push   []Push
	Leader func() bool
	// Cluster, when set, reports every host's applied Raft index
	// (consensus.Node.Status), and NodeID is this host's: WaitChallenge
	// then also waits until every host that answers has applied the
	// state this host answers a challenge from (see challenges.go).
	Cluster func(ctx context.Context) (*pb.ClusterStatusResponse, error)
	NodeID  string
	// State returns the whole committed state and its revision, which
	// Follow compiles.
	State  func() ([]*pb.Object, uint64)
	Logger *slog.Logger
}

// Enabled reports whether the configuration asks for a DNS server.
func (c Config) Enabled() bool { return len(c.Addrs) > 0 }

// Check refuses settings that cannot work together.
func (c Config) Check() error {
	if err := c.checkTransfers(); err != nil {
		return err
	}
	if err := c.checkDNSSEC(); err != nil {
		return err
	}
	if len(c.Addrs) == 0 {
		if len(c.Zones) > 0 || len(c.NameServers) > 0 {
			return fmt.Errorf("--dns-zones and --dns-ns need --dns-addr (the IP:port the LB hosts answer DNS on): %w", ErrConfig)
		}
		return nil
	}
	if len(c.Zones) == 0 {
		return fmt.Errorf("--dns-addr needs at least one zone in --dns-zones (a zone delegated to the LB hosts, like lb.example.com): %w", ErrConfig)
	}
	if len(c.NameServers) == 0 {
		return fmt.Errorf("--dns-addr needs at least one --dns-ns NAME=IP (the name servers the zones' NS records name): %w", ErrConfig)
	}
	if c.TTL != 0 && (c.TTL < MinTTL || c.TTL > MaxTTL) {
		return fmt.Errorf("--dns-ttl %s: give %s to %s (default %s): %w", c.TTL, MinTTL, MaxTTL, DefaultTTL, ErrConfig)
	}
	if c.Slip < 0 || c.Slip > 10 {
		return fmt.Errorf("--dns-slip %d: give 0 (drop every response over the rate) to 10 (default %d): %w", c.Slip, DefaultSlip, ErrConfig)
	}
	if c.QueriesPerTenant < 0 {
		return fmt.Errorf("--dns-queries-per-tenant %d: give a rate a second, or 0 for %d: %w", c.QueriesPerTenant, DefaultQueriesPerTenant, ErrConfig)
	}
	return nil
}

// CheckZone checks one --dns-zone value.
func CheckZone(s string) error {
	if _, err := canonicalZone(s); err != nil {
		return err
	}
	return nil
}

func canonicalZone(s string) (string, error) {
	z := mdns.CanonicalName(strings.TrimSpace(s))
	if _, ok := mdns.IsDomainName(z); !ok || z == "." || strings.Contains(z, "*") || len(z) > 253 {
		return "", fmt.Errorf("zone %q: give a domain name like lb.example.com: %w", excerpt(s), ErrConfig)
	}
	return z, nil
}

// ParseNameServer reads NAME=IP, like ns1.lb.example.com=192.0.2.53.
func ParseNameServer(s string) (NameServer, error) {
	name, addr, ok := strings.Cut(s, "=")
	if !ok {
		return NameServer{}, fmt.Errorf("name server %q: give NAME=IP, like ns1.lb.example.com=192.0.2.53: %w", excerpt(s), ErrConfig)
	}
	n, err := canonicalZone(name)
	if err != nil {
		return NameServer{}, fmt.Errorf("name server: %w", err)
	}
	a, err := netip.ParseAddr(strings.TrimSpace(addr))
	if err != nil {
		return NameServer{}, fmt.Errorf("name server %s: address %q: give an IPv4 or IPv6 address: %w", n, excerpt(addr), ErrConfig)
	}
	return NameServer{Name: n, Addrs: []netip.Addr{a.Unmap()}}, nil
}

// MergeNameServers joins the entries of one name (NAME=IP given twice).
func MergeNameServers(in []NameServer) []NameServer {
	var out []NameServer
	for _, ns := range in {
		merged := false
		for i := range out {
			if out[i].Name == ns.Name {
				out[i].Addrs = append(out[i].Addrs, ns.Addrs...)
				merged = true
			}
		}
		if !merged {
			out = append(out, NameServer{Name: ns.Name, Addrs: append([]netip.Addr(nil), ns.Addrs...)})
		}
	}
	return out
}

func excerpt(s string) string {
	if len(s) > 64 {
		return s[:61] + "..."
	}
	return s
}

func (c Config) ttl() uint32 {
	if c.TTL == 0 {
		return uint32(DefaultTTL / time.Second)
	}
	return uint32(c.TTL / time.Second)
}

func (c Config) checkDNSSEC() error {
	if len(c.DNSSEC) == 0 {
		return nil
	}
	for _, z := range c.DNSSEC {
		if !slices.ContainsFunc(c.Zones, func(x string) bool { return mdns.CanonicalName(x) == mdns.CanonicalName(z) }) {
			return fmt.Errorf("--dns-dnssec %s: not a zone of --dns-zones; sign only zones this host serves: %w", z, ErrConfig)
		}
	}
	if c.SignaturesPerTenant < 0 {
		return fmt.Errorf("--dns-signatures-per-tenant %d: give a rate a second, or 0 for %d: %w", c.SignaturesPerTenant, DefaultSignaturesPerTenant, ErrConfig)
	}
	return nil
}
