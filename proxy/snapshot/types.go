package snapshot

import (
	"crypto/x509"
	"encoding/binary"
	"net/netip"
	"slices"
	"strings"
	"time"

	"github.com/teapot-lb/teapot-lb/proxy/internal/pmap"
)

// Network is the transport a listener binds.
type Network uint8

// Networks.
const (
	TCP Network = iota + 1
	UDP
)

func (n Network) String() string {
	switch n {
	case TCP:
		return "tcp"
	case UDP:
		return "udp"
	}
	return "unknown"
}

// Key identifies a listening socket: a VIP address, a port and a transport.
// Load balancers sharing a VIP get separate keys by port.
type Key struct {
	Addr    netip.AddrPort
	Network Network
	// Space is the tenant whose attachment (its network namespace) the
	// address lives in, for a VIP of a pool in it; "" for the host's own
	// network.
	Space string
}

// String renders "192.0.2.10:443/tcp" or "[2001:db8::1]:53/udp", and
// "10.0.0.100:80/tcp@acme" in tenant acme's attachment.
func (k Key) String() string {
	s := k.Addr.String() + "/" + k.Network.String()
	if k.Space != "" {
		s += "@" + k.Space
	}
	return s
}

// Protocol is what a listener speaks.
type Protocol string

// Listener protocols, as written in the model.
const (
	ProtoTCP            Protocol = "tcp"
	ProtoUDP            Protocol = "udp"
	ProtoHTTP           Protocol = "http"
	ProtoHTTPS          Protocol = "https"
	ProtoTLSPassthrough Protocol = "tls-passthrough"
)

// L7 reports whether the listener's connections go to the HTTP handler.
func (p Protocol) L7() bool { return p == ProtoHTTP || p == ProtoHTTPS }

// Network returns the transport the protocol binds.
func (p Protocol) Network() Network {
	if p == ProtoUDP {
		return UDP
	}
	return TCP
}

// Algorithm is a backend pool's balancing algorithm.
type Algorithm string

// Algorithms, as written in the model.
const (
	RoundRobin   Algorithm = "round-robin"
	LeastRequest Algorithm = "least-request"
	Hash         Algorithm = "hash"
)

// Problem is something wrong with one field of a load balancer. The field
// is a path inside the object ("listeners[1].port", "pools.web.members[0]").
type Problem struct {
	Field  string
	Reason string
}

// Member is one backend of a pool.
type Member struct {
	Addr netip.AddrPort
	// Weight is 0 to 1000; 0 drains the member.
	Weight uint32
}

// HealthCheck is an active check of a pool's members. It is comparable so
// that health state can be keyed by member address and check.
type HealthCheck struct {
	// HTTP selects an HTTP GET of Path; otherwise the check is a TCP connect.
	HTTP bool
	Path string
	// Host is the Host header of HTTP checks; "" sends the member address.
	Host string
	// ExpectStatus is the wanted HTTP status; 0 accepts any 2xx or 3xx.
	ExpectStatus int
	Interval     time.Duration
	Timeout      time.Duration
	// Rise successes bring a member up, Fall failures take it down.
	Rise, Fall int
	// Port replaces the member's port when non-zero (healthCheckNodePort).
	Port uint16
	// TLS runs the HTTP GET over TLS (HTTP is then set too).
	TLS bool
	// ServerName is sent in the ClientHello and verified in the member's
	// certificate; "" uses Host, else the member's IP address.
	ServerName string
	// CAPEM verifies the member's certificate; InsecureSkipVerify accepts
	// any (validation requires one of them).
	CAPEM              string
	InsecureSkipVerify bool
	// ClientCertPEM and ClientKeyPEM are the client certificate, if any.
	ClientCertPEM, ClientKeyPEM string
	// CloseOnDown closes a member's tcp connections when this check takes
	// it down (otherwise they drain).
	CloseOnDown bool
}

// Pool is a compiled backend pool with its defaults filled in.
type Pool struct {
	// LB is the owning load balancer, "tenant/name".
	LB   string
	Name string
	// Algorithm is never empty.
	Algorithm Algorithm
	// HashHeader names the header whose value is hashed; "" hashes the
	// client IP. Only for Algorithm Hash.
	HashHeader string
	// Members are in the order written, without the ones that failed to
	// compile.
	Members []Member
	// Health is nil when the pool has no active check.
	Health *HealthCheck
	// ProxyProtocol is 0 (none), 1 or 2.
	ProxyProtocol int
	// BackendProtocol is http1, h2c, tls or h2 (L7 only).
	BackendProtocol string
	ConnectTimeout  time.Duration
	// TLS verifies the members (tls and h2 only); nil: not verified.
	TLS *BackendTLS
	// ClientSource: member connections are made from the client's own
	// address (L4 pools only).
	ClientSource bool
}

// Equal reports whether p and o compile to the same pool.
func (p *Pool) Equal(o *Pool) bool {
	if p == o {
		return true
	}
	if p == nil || o == nil {
		return false
	}
	return p.LB == o.LB && p.Name == o.Name && p.Algorithm == o.Algorithm &&
		p.HashHeader == o.HashHeader && slices.Equal(p.Members, o.Members) &&
		equalHealth(p.Health, o.Health) && p.ProxyProtocol == o.ProxyProtocol &&
		p.BackendProtocol == o.BackendProtocol && p.ConnectTimeout == o.ConnectTimeout && p.TLS.Equal(o.TLS) &&
		p.ClientSource == o.ClientSource
}

func equalHealth(a, b *HealthCheck) bool {
	if a == nil || b == nil {
		return a == b
	}
	return *a == *b
}

// TLS is an https listener's TLS policy.
type TLS struct {
	ACME         bool
	Certificates []string
	// MinVersion is a crypto/tls version constant.
	MinVersion uint16
	// Client is nil when clients are not asked for a certificate.
	Client *ClientTLS
	// SNIScopes, when not empty, answers 421 to a request whose Host
	// belongs to another scope than its connection's server name.
	SNIScopes SNIScopes
}

// SNIScopes are the host names of the sites an https listener serves
// ("" one without a name, "*.x" a wildcard): listeners[].tls.sniScopes.
type SNIScopes []string

// Of returns the index of the most specific scope that covers host (lower
// case, without a trailing dot): the one equal to it, else the wildcard
// with the longest suffix, else "". -1: none covers it.
func (s SNIScopes) Of(host string) int {
	best, bestLen := -1, -1
	for i, sc := range s {
		switch {
		case sc == host:
			return i
		case sc == "":
			if bestLen < 0 {
				best, bestLen = i, 0
			}
		case len(sc) > 2 && sc[0] == '*' && sc[1] == '.':
			suffix := sc[1:]
			if len(host) > len(suffix) && strings.HasSuffix(host, suffix) && len(suffix) > bestLen {
				best, bestLen = i, len(suffix)
			}
		}
	}
	return best
}

// ClientTLS is the client certificate validation of an https listener.
type ClientTLS struct {
	// CAs are the certificates of Bundle, the PEM text they came from.
	CAs    *x509.CertPool
	Bundle string
	// Required fails the handshake of a client without a certificate
	// the CAs signed; otherwise every client is served.
	Required bool
	// SubjectHeader carries a verified client's subject to the members
	// ("" none); canonical.
	SubjectHeader string
}

func equalTLS(a, b *TLS) bool {
	if a == nil || b == nil {
		return a == b
	}
	return a.ACME == b.ACME && a.MinVersion == b.MinVersion && slices.Equal(a.Certificates, b.Certificates) && equalClientTLS(a.Client, b.Client) &&
		slices.Equal(a.SNIScopes, b.SNIScopes)
}

func equalClientTLS(a, b *ClientTLS) bool {
	if a == nil || b == nil {
		return a == b
	}
	return a.Bundle == b.Bundle && a.Required == b.Required && a.SubjectHeader == b.SubjectHeader
}

// Limits bound one listener.
type Limits struct {
	// MaxConnections bounds concurrent connections (TCP) or flows (UDP):
	// listeners[].maxConnections, else the tenant's
	// quotas.connectionsPerListener, else the default.
	MaxConnections int
	// TenantConnections is the tenant's quotas.connections: its bound over
	// all its listeners on a host (0: the host's default).
	TenantConnections int
	// IdleTimeout closes a connection or UDP flow without traffic.
	IdleTimeout time.Duration
	// RegexCPUMillicores is the tenant's quotas.regexCpuMillicores: the
	// CPU a host may spend matching its regular expressions, in
	// thousandths of a core (0: api.DefaultRegexCPUMillicores).
	RegexCPUMillicores int
	// RateLimitKeys is the tenant's quotas.rateLimitKeys: the client keys
	// a host tracks for its rate limits (0: api.DefaultRateLimitKeys).
	RateLimitKeys int
	// WAFCPUMillicores is the tenant's quotas.wafCpuMillicores (0:
	// api.DefaultWAFCPUMillicores).
	WAFCPUMillicores int
	// CPUMillicores is the tenant's quotas.cpuMillicores: the CPU a host
	// may spend on everything the tenant makes it compute, in thousandths
	// of a core (0: the host's default).
	CPUMillicores int
}

// Listener is the compiled form of one listener of one load balancer.
type Listener struct {
	Key Key
	// Name is Key.String(), computed once.
	Name string
	// LB is the owning load balancer, "tenant/name".
	LB     string
	Tenant string
	// Index is the listener's position in the load balancer's listeners.
	Index    int
	Protocol Protocol
	// Pool receives the traffic of tcp, udp and tls-passthrough listeners.
	Pool *Pool
	// Routes route the requests of http and https listeners.
	Routes          *RouteTable
	RedirectToHTTPS bool
	// HTTP3 (https) also serves HTTP/3 over QUIC on UDP at Key's address.
	HTTP3 bool
	// HTTP3ZeroRTT (with HTTP3) accepts 0-RTT from resuming clients;
	// requests in it with other methods than GET, HEAD and OPTIONS are
	// answered 425 Too Early.
	HTTP3ZeroRTT bool
	// TLS is set for https listeners, and for tls-passthrough listeners
	// with server-name routes that terminate.
	TLS *TLS
	// TrustedProxies (http and https) are the client networks whose
	// forwarding fields are kept; nil trusts none.
	TrustedProxies []netip.Prefix
	Limits         Limits
	// AccessLog (http and https) is the share of requests written to the
	// access log; 0 writes none.
	AccessLog float64
	// Sources are the client networks that may connect; nil allows all.
	Sources *Sources
	// Rate is the listener's rate limit (connections at accept, requests
	// over all its routes).
	Rate RateSpec
}

// equal compares two listeners whose pools were already deduplicated, so
// pools compare by identity.
func (l *Listener) equal(o *Listener) bool {
	return l.Key == o.Key && l.LB == o.LB && l.Tenant == o.Tenant && l.Index == o.Index &&
		l.Protocol == o.Protocol && l.Pool == o.Pool && l.Routes.equal(o.Routes) &&
		l.RedirectToHTTPS == o.RedirectToHTTPS && l.HTTP3 == o.HTTP3 && l.HTTP3ZeroRTT == o.HTTP3ZeroRTT && equalTLS(l.TLS, o.TLS) && l.Limits == o.Limits &&
		slices.Equal(l.TrustedProxies, o.TrustedProxies) && l.AccessLog == o.AccessLog &&
		l.Sources.equal(o.Sources) && l.Rate == o.Rate
}

// Snapshot is the immutable data-plane configuration. Nothing in it may be
// modified once Compile returns it. Its maps are persistent: a snapshot
// compiled from another shares every part the change did not touch with
// it, and pmap.Diff of the two visits only the parts that differ.
type Snapshot struct {
	Revision uint64
	// Listeners holds the listener serving each listen key.
	Listeners *pmap.Map[Key, *Listener]
	// Problems holds every load balancer of the input, "tenant/name", with
	// the problems found (an empty slice when there are none).
	Problems *pmap.Map[string, []Problem]
	// Stats is the work the Compile that made this snapshot did.
	Stats Stats

	// entries, claims, tenants, tenantLBs (load balancers per tenant) and
	// env are what the next Compile reuses.
	entries   *pmap.Map[string, *entry]
	claims    *pmap.Map[Key, []claim]
	tenants   map[string]*tenantInfo
	tenantLBs map[string]int
	env       *env
}

// Listener returns the listener serving k, or nil.
func (s *Snapshot) Listener(k Key) *Listener {
	l, _ := s.Listeners.Get(k)
	return l
}

// ListenersOf returns the listeners a load balancer ("tenant/name")
// serves, in its listener order.
func (s *Snapshot) ListenersOf(lb string) []*Listener {
	e, ok := s.entries.Get(lb)
	if !ok {
		return nil
	}
	var out []*Listener
	for _, cl := range e.claims {
		if l := s.Listener(cl.l.Key); l != nil && l.LB == lb {
			out = append(out, l)
		}
	}
	return out
}

// ListenAddrs returns the address and port of every listener (tcp and
// udp): the proxy never dials them.
func (s *Snapshot) ListenAddrs() map[netip.AddrPort]bool {
	out := make(map[netip.AddrPort]bool, s.Listeners.Len())
	for k := range s.Listeners.All() {
		out[netip.AddrPortFrom(k.Addr.Addr().Unmap(), k.Addr.Port())] = true
	}
	return out
}

// Pools returns every distinct pool the listeners use, L4 and routed.
func (s *Snapshot) Pools() []*Pool {
	seen := map[*Pool]bool{}
	var out []*Pool
	for _, l := range s.Listeners.All() {
		for _, p := range l.Pools() {
			if !seen[p] {
				seen[p] = true
				out = append(out, p)
			}
		}
	}
	return out
}

// Pools returns the pools the listener sends to: its L4 pool and its
// routes' pools, each once.
func (l *Listener) Pools() []*Pool {
	var out []*Pool
	if l.Pool != nil {
		out = append(out, l.Pool)
	}
	if l.Routes != nil {
		for _, r := range l.Routes.routes {
			if r.Pool != nil && !slices.Contains(out, r.Pool) {
				out = append(out, r.Pool)
			}
			for _, p := range r.Ext.pools() {
				if !slices.Contains(out, p) {
					out = append(out, p)
				}
			}
		}
	}
	return out
}

// HashKey spreads listen keys over a persistent map's shards.
func HashKey(k Key) uint64 {
	a := k.Addr.Addr().As16()
	h := pmap.Mix(binary.LittleEndian.Uint64(a[:8]))
	h = pmap.Mix(h ^ binary.LittleEndian.Uint64(a[8:]))
	return pmap.Mix(h ^ uint64(k.Addr.Port())<<8 ^ uint64(k.Network))
}

// Defaults fill what the model leaves unset.
type Defaults struct {
	ConnectTimeout time.Duration
	// TCPIdleTimeout applies to tcp and tls-passthrough listeners.
	TCPIdleTimeout time.Duration
	// HTTPIdleTimeout applies to http and https listeners (keep-alive).
	HTTPIdleTimeout time.Duration
	UDPIdleTimeout  time.Duration
	// MaxConnections bounds each TCP listener; MaxUDPFlows each UDP one.
	MaxConnections int
	MaxUDPFlows    int
	HealthInterval time.Duration
	HealthTimeout  time.Duration
	HealthRise     int
	HealthFall     int
}

// DefaultDefaults are the values used for zero fields of Defaults.
var DefaultDefaults = Defaults{
	ConnectTimeout:  5 * time.Second,
	TCPIdleTimeout:  time.Hour,
	HTTPIdleTimeout: 60 * time.Second,
	UDPIdleTimeout:  30 * time.Second,
	MaxConnections:  65536,
	MaxUDPFlows:     65536,
	HealthInterval:  5 * time.Second,
	HealthTimeout:   2 * time.Second,
	HealthRise:      2,
	HealthFall:      3,
}

// WithDefaults returns d with its zero fields taken from DefaultDefaults.
func (d Defaults) WithDefaults() Defaults {
	z := DefaultDefaults
	pick := func(v *time.Duration, def time.Duration) {
		if *v <= 0 {
			*v = def
		}
	}
	pickInt := func(v *int, def int) {
		if *v <= 0 {
			*v = def
		}
	}
	pick(&d.ConnectTimeout, z.ConnectTimeout)
	pick(&d.TCPIdleTimeout, z.TCPIdleTimeout)
	pick(&d.HTTPIdleTimeout, z.HTTPIdleTimeout)
	pick(&d.UDPIdleTimeout, z.UDPIdleTimeout)
	pickInt(&d.MaxConnections, z.MaxConnections)
	pickInt(&d.MaxUDPFlows, z.MaxUDPFlows)
	pick(&d.HealthInterval, z.HealthInterval)
	pick(&d.HealthTimeout, z.HealthTimeout)
	pickInt(&d.HealthRise, z.HealthRise)
	pickInt(&d.HealthFall, z.HealthFall)
	return d
}
