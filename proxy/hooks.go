package proxy

import (
	"context"
	"net"
	"time"
)

// ConnHandler serves the connections of http and https listeners (the L7
// proxy). ServeConn owns c until it returns; the proxy closes c afterwards.
//
// current returns the listener's snapshot in service at the time of the
// call (route table, TLS policy, limits and live pools), so that each
// request on a kept-alive connection sees the latest configuration; it
// returns nil once the listener or its load balancer is gone.
//
// ctx ends when the connection should finish: its listener was removed,
// its load balancer lost the listener, or the proxy is closing. The handler
// should then complete the request in flight and close; the proxy closes c
// itself DrainTimeout later.
type ConnHandler interface {
	ServeConn(ctx context.Context, c net.Conn, current func() *ListenerSnapshot)
}

// Metrics receives the data plane's counters. lb is "tenant/name",
// listener the listen key ("192.0.2.10:443/tcp"), member the member
// address. Implementations must be safe for concurrent use and fast: they
// are called on the connection path.
type Metrics interface {
	// ConnOpened counts an accepted connection or a new UDP flow.
	ConnOpened(lb, listener string)
	// ConnClosed counts a finished connection or expired flow.
	ConnClosed(lb, listener string, d time.Duration)
	// ConnRefused counts a connection, flow or HTTP/2 stream turned away;
	// reason is one of the Refused constants.
	ConnRefused(lb, listener, reason string)
	// BytesIn and BytesOut count bytes from and to clients.
	BytesIn(lb, listener string, n int64)
	BytesOut(lb, listener string, n int64)
	// MemberRequest counts one request to a member: for L7 the HTTP
	// status; for L4 a connect, StatusConnected, StatusConnectFailed or
	// StatusConnectTimeout, d being the connect time.
	MemberRequest(lb, pool, member string, status int, d time.Duration)
	// RouteRequest counts one L7 request matched to a route ("routes[2]").
	RouteRequest(lb, route string, status int, d time.Duration)
}

// UDPReplyMetrics is implemented by a Metrics that counts the bytes of
// member replies a UDP listener dropped: over the reply budget of a flow
// whose client has not sent enough to receive them (see udpReplyFloor).
type UDPReplyMetrics interface {
	UDPReplyDropped(lb, listener string, n int64)
}

// Statuses of L4 connects in MemberRequest, in the HTTP codes a gateway
// would use.
const (
	StatusConnected      = 0
	StatusConnectFailed  = 502
	StatusConnectTimeout = 504
)

// Reasons for ConnRefused.
const (
	// RefusedNoMember: no member is usable, or none accepted the connect.
	RefusedNoMember = "no-member"
	// RefusedListenerLimit: the listener is at max_connections (UDP: its
	// flow table is full).
	RefusedListenerLimit = "listener-limit"
	// RefusedTenantLimit: the tenant is at its connections or descriptors
	// (MaxConnectionsPerTenant, MaxDescriptorsPerTenant, or its quota).
	RefusedTenantLimit = "tenant-limit"
	// RefusedHostLimit: every tenant together is at MaxHostConnections
	// or MaxHostDescriptors.
	RefusedHostLimit = "host-limit"
	// RefusedTenantStreams: an HTTP/2 stream refused (REFUSED_STREAM) as
	// its HEADERS were read: the tenant's streams in flight are at its
	// connection bound (quotas.connections, else MaxConnectionsPerTenant).
	RefusedTenantStreams = "tenant-streams"
	// RefusedSource: the client's address is outside the listener's
	// allowedSources or inside its deniedSources.
	RefusedSource = "source"
	// RefusedRateLimit: the listener's connectionsPerSecond is spent for
	// the client (or all clients), or the tenant's rate-limit table is
	// full.
	RefusedRateLimit = "rate-limit"
	// RefusedConnIDs and RefusedStatelessReset (h3ids.go) count a QUIC
	// connection ID not issued and a stateless reset not sent.
)

type nopMetrics struct{}

func (nopMetrics) ConnOpened(string, string)                                {}
func (nopMetrics) ConnClosed(string, string, time.Duration)                 {}
func (nopMetrics) ConnRefused(string, string, string)                       {}
func (nopMetrics) BytesIn(string, string, int64)                            {}
func (nopMetrics) BytesOut(string, string, int64)                           {}
func (nopMetrics) MemberRequest(string, string, string, int, time.Duration) {}
func (nopMetrics) RouteRequest(string, string, int, time.Duration)          {}

var _ Metrics = nopMetrics{}
