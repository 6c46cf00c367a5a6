package l7

import (
	"context"
	"crypto/tls"
	"net"
	"net/http"
	"net/netip"
	"time"
)

// Router maps a request to a route. It is read on every request through
// ConnInfo.Router, so a config swap reaches the next request of every open
// connection. Implementations must be safe for concurrent use and must not
// retain host or path: both alias a connection buffer.
type Router interface {
	// Route returns the route for a normalised host (lower case, no port,
	// no trailing dot; "" when the request has none) and a cleaned path
	// (no dot segments, no query). nil means no route: 404.
	Route(host, path string) *Route
}

// Route is where a request goes. Exactly one of Backend, RedirectHTTPS and
// Handler is used, in that order of precedence: a redirect wins over the
// others, a Handler over a Backend.
type Route struct {
	// Name labels the route in metrics ("tenant/lb/routes[2]").
	Name string
	// Backend receives the request.
	Backend Backend
	// RedirectHTTPS answers with a redirect to https://host[:HTTPSPort]
	// and the same target: 301 for GET and HEAD, 308 for other methods.
	RedirectHTTPS bool
	// HTTPSPort is the port of the redirect; 0 and 443 leave it out.
	HTTPSPort uint16
	// Handler answers the request locally (ACME HTTP-01 challenges).
	Handler http.Handler
	// Select, when set, chooses the route by the whole request (its
	// method, headers and query; host and path as Route got them); nil
	// means no route: 404. The route it returns is served as if Route had
	// returned it, on the fast paths when it needs nothing more; it must
	// not have Select itself.
	Select func(r Request, host, path string) *Route
	// Ext, when set, splits traffic, changes the request or response, or
	// redirects; the request takes the net/http path (see RouteExt).
	Ext *RouteExt
	// Gate, when set, is asked with the client's address and the request
	// (its header fields, as Select reads them; not retained) once the
	// route is chosen (after Select), before anything else is done for
	// the request; a non-nil handler answers it instead (a rate limit's
	// 429), counted under the route's Name. It must not allocate when it
	// lets the request through.
	Gate func(client netip.Addr, r Request) http.Handler
	// Inspect, when set, is asked with the request before it is sent on,
	// with the first InspectBody bytes of its body read and kept (the
	// member still gets the whole body); a non-nil handler answers the
	// request instead, with status (a WAF's 403); note, when not empty,
	// goes to the request's access-log line (a WAF's rule ids, whether or
	// not it answered). Such a route takes the net/http path.
	Inspect     func(r *http.Request, body []byte, client, local netip.AddrPort) (h http.Handler, status int, note string)
	InspectBody int
}

// gated returns the route that answers a request the route's Gate stops,
// or nil when it lets the request through.
func (r *Route) gated(client netip.Addr, req Request) *Route {
	if r == nil || r.Gate == nil {
		return nil
	}
	if h := r.Gate(client, req); h != nil {
		return &Route{Name: r.Name, Handler: h}
	}
	return nil
}

// extended reports whether the route needs the net/http path's serveExt.
func (r *Route) extended() bool { return r.Select != nil || r.Ext != nil || r.Inspect != nil }

// Protocol is the protocol spoken to a backend's members.
type Protocol uint8

// Backend protocols.
const (
	// HTTP1 is HTTP/1.1 over TCP with keep-alive connection pools.
	HTTP1 Protocol = iota
	// H2C is cleartext HTTP/2 with prior knowledge (gRPC backends).
	H2C
	// HTTP1TLS is HTTP/1.1 over TLS.
	HTTP1TLS
	// H2TLS is HTTP/2 over TLS, negotiated with ALPN "h2".
	H2TLS
)

func (p Protocol) String() string {
	switch p {
	case H2C:
		return "h2c"
	case HTTP1TLS:
		return "tls"
	case H2TLS:
		return "h2"
	}
	return "http1"
}

// BackendOptions tune how requests reach a backend's members. A published
// value is never modified.
type BackendOptions struct {
	Protocol Protocol
	// Pool names the backend in metrics (RequestStats.Pool).
	Pool string
	// TLS configures HTTP1TLS and H2TLS connections; nil dials without
	// verifying the member's certificate, as members are addressed by IP.
	TLS *tls.Config
	// ConnectTimeout bounds a dial; 0 takes Config.ConnectTimeout.
	ConnectTimeout time.Duration
	// ResponseHeaderTimeout bounds the wait for the response head after
	// the request was sent; 0 takes Config.ResponseHeaderTimeout.
	ResponseHeaderTimeout time.Duration
	// ProxyProtocol is 0 (none), 1 or 2: a PROXY protocol header with the
	// client's address starts every connection to a member. Such
	// connections carry one client's requests only.
	ProxyProtocol uint8
	// HashHeader names the request header whose value is passed to Pick
	// as the hash key: for Host the request's authority, for a
	// forwarding field its value as the member receives it
	// (routeRequest.hashKey); "" passes nil (hash on the client IP).
	HashHeader string
	// MaxBodyBytes refuses larger request bodies with 413; 0 takes
	// Config.MaxBodyBytes.
	MaxBodyBytes int64
	// Budget, when set, is charged a descriptor for every connection to
	// a member (idle pooled ones included) while it is open; backends
	// share pooled connections only with backends of the same budget.
	Budget *MemberBudget
	// Dialer, when set, makes the connections to members (from the
	// namespace of the tenant's attachment); nil dials from the host's.
	// Backends share pooled connections only with backends of the same
	// Dialer.
	Dialer Dialer
}

// Dialer makes member connections as d would, from a network namespace
// of its choosing.
type Dialer interface {
	DialContext(ctx context.Context, d *net.Dialer, network, addr string) (net.Conn, error)
}

// Backend is a pool of members.
type Backend interface {
	// Pick returns a member for a request, or ok=false when every member
	// is down or drained (503). hashKey is the HashHeader value, nil or
	// empty when the option is unset or the header absent or empty (a
	// hashing backend then hashes client). Every successful Pick is
	// followed by exactly one Done on the member.
	Pick(client netip.Addr, hashKey []byte) (m Member, ok bool)
	// Options returns the backend's options; the result is not modified.
	Options() *BackendOptions
}

// Member is one backend server.
type Member interface {
	// Addr is where the member listens. Connection pools are keyed by it
	// and outlive config swaps.
	Addr() netip.AddrPort
	// Done reports the outcome of one request when it ends: err is nil
	// when a response came back (any status; a WebSocket counts until
	// its tunnel closes), status the member's status code, d the time
	// from the pick to the end of the response head (or the failure).
	// err == nil with status 0 means the client gave up first: not the
	// member's fault. Errors wrap ErrConnect, ErrUpstreamTimeout,
	// ErrUpstreamClosed or ErrUpstreamProtocol. It feeds passive health
	// checks and least-request accounting.
	Done(err error, status int, d time.Duration)
}

// ConnInfo describes the listener a connection arrived on.
type ConnInfo struct {
	// Listener, LB and Tenant label the connection in metrics.
	Listener string
	LB       string
	Tenant   string
	// TLS is set when the connection was TLS-terminated (scheme https).
	TLS bool
	// Local is the VIP and port; zero takes the connection's local address.
	Local netip.AddrPort
	// Client is the client's address; zero takes the remote address. Set
	// it when the listener read a PROXY protocol header.
	Client netip.AddrPort
	// Router returns the current router; it is called once per request.
	Router func() Router
	// IdleTimeout closes a keep-alive connection without requests; 0
	// takes Config.IdleTimeout.
	IdleTimeout time.Duration
	// TrustedProxies are the listener's trusted client networks; nil
	// takes Config.TrustedProxies.
	TrustedProxies []netip.Prefix
	// AccessLog is the share of requests whose RequestStats carry the
	// access-log fields (Host, Method, Path, RequestID); 0 none.
	AccessLog float64
	// State, when not nil, is kept up to date by the engine while it
	// serves the connection (see ConnState).
	State *ConnState
	// ClientCertHeader, when set, names the request field that carries
	// ClientSubject, the subject of the client's verified certificate
	// ("" when it sent none or it did not verify), to the members; what
	// the client sent in that field (in any case, with '_' for '-') is
	// dropped. Every codec and path does both (forwardFields).
	ClientCertHeader, ClientSubject string
	// Streams, when not nil, bounds the HTTP/2 streams of the
	// connection's tenant whose handlers run, over all its connections:
	// a stream past it is refused as its HEADERS are read (RST_STREAM
	// REFUSED_STREAM), before a goroutine or a buffer is spent on it.
	Streams Streams
	// CPU, when not nil, is the tenant's host CPU budget: the body bytes
	// and HTTP/2 control frames the connection moves count in it, and
	// the connection waits there while the tenant is over it.
	CPU CPU
	// AltSvc, when not empty, is the Alt-Svc value (`h3=":443"; ma=86400`)
	// added to every HTTP/1.x and HTTP/2 response head of the connection:
	// the listener also serves HTTP/3.
	AltSvc string
}

// Streams is a bound on work in progress: the HTTP/2 streams of one
// tenant being served at once. Implementations must be safe for
// concurrent use and allocate nothing.
type Streams interface {
	// TakeStream charges one stream; false when the bound is reached.
	TakeStream() bool
	// ReleaseStream gives back one that TakeStream charged.
	ReleaseStream()
}

// Outcome classifies how a request ended, for metrics.
type Outcome uint8

// Outcomes.
const (
	// OutcomeOK: the member's response was relayed.
	OutcomeOK Outcome = iota
	// OutcomeClientError: the request was refused (400, 408, 413, 425,
	// 431).
	OutcomeClientError
	// OutcomeNoRoute: 404.
	OutcomeNoRoute
	// OutcomeRedirect: redirected to HTTPS.
	OutcomeRedirect
	// OutcomeLocal: answered by a route's Handler.
	OutcomeLocal
	// OutcomeNoMember: every member down (503).
	OutcomeNoMember
	// OutcomeUpstreamError: connect refused or a broken response (502).
	OutcomeUpstreamError
	// OutcomeUpstreamTimeout: connect or response timeout (504).
	OutcomeUpstreamTimeout
	// OutcomeAborted: the client went away before the response ended.
	OutcomeAborted
	// OutcomeMemberLimit: no member connection within the tenant's
	// descriptor budget or the client connection's bound (503).
	OutcomeMemberLimit
	// OutcomeMemberTLS: the member's certificate failed the backend's
	// verification (ErrMemberCertificate; 502).
	OutcomeMemberTLS
	// OutcomeInspectLimit: the body read for the route's Inspect would
	// have passed its tenant's bound on this server
	// (MaxTenantInspectBodies; 503).
	OutcomeInspectLimit
	// OutcomeBodyLimit: the HTTP/2 request body bytes its tenant's
	// clients had sent and its members not yet read, or the HTTP/2
	// response body bytes its members had sent and its clients not yet
	// taken, passed their bound on this server (MaxTenantH2Bodies): the
	// stream was reset.
	OutcomeBodyLimit
)

// RequestStats describes one finished request.
type RequestStats struct {
	Listener, LB, Tenant string
	// Route is the route's Name, "" without a route.
	Route string
	// Member is the member that served the request; zero without one.
	Member netip.AddrPort
	// Pool is the BackendOptions.Pool of the member's backend.
	Pool string
	// HTTP2 is set for requests from HTTP/2 clients, HTTP3 for those
	// from HTTP/3 clients.
	HTTP2   bool
	HTTP3   bool
	Status  int
	Outcome Outcome
	// Duration runs from the complete request head to the end of the
	// response.
	Duration time.Duration
	// Upstream runs from the first attempt to reach the member to its
	// response head; zero without a member response.
	Upstream time.Duration
	// RequestBytes and ResponseBytes count body bytes.
	RequestBytes, ResponseBytes int64
	// Retries counts the attempts sent again by the route's Retry;
	// RetriesDenied the failed attempts that were not, because the
	// tenant's retry budget was spent.
	Retries, RetriesDenied int
	// Client is the client's address.
	Client netip.AddrPort
	// AccessLog is ConnInfo.AccessLog; when it is not 0, Host, Method,
	// Path and RequestID are filled in (copies, safe to keep).
	AccessLog                     float64
	Host, Method, Path, RequestID string
	// Inspected is the route's Inspect note (a WAF's rule ids).
	Inspected string
}

// Metrics receives counters. Implementations must be cheap and safe for
// concurrent use; they are called on the request path.
type Metrics interface {
	// Request is called once per finished request.
	Request(RequestStats)
	// Conn is called when a client connection opens (open) and closes.
	Conn(info *ConnInfo, open bool)
}

// NopMetrics discards everything.
type NopMetrics struct{}

// Request implements Metrics.
func (NopMetrics) Request(RequestStats) {}

// Conn implements Metrics.
func (NopMetrics) Conn(*ConnInfo, bool) {}

var _ Metrics = NopMetrics{}
