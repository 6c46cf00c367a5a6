package connguard

import (
	"syscall"
	"time"
)

// Limits bound the connections of an API port. A zero field takes the
// value DeriveLimits gives it.
type Limits struct {
	// Unauthenticated bounds the connections that have not presented a
	// client certificate of the cluster CA: those in their TLS handshake,
	// and those through it without one (hosts joining with a token), from
	// all sources together.
	Unauthenticated int
	// PerSource bounds them per source: an IPv4 address or an IPv6 /64.
	PerSource int
	// HandshakeTimeout is how long a connection has, from its accept, to
	// finish its TLS handshake and send gRPC's preface.
	HandshakeTimeout time.Duration
	// AnonymousLifetime is how long a connection without a client
	// certificate lives after its handshake; a join takes at most 30 s.
	AnonymousLifetime time.Duration
	// Authenticated bounds the connections with a client certificate of
	// the cluster CA, all roles together.
	Authenticated int
	// Tenants bounds those with tenant certificates, all tenants
	// together; the rest of Authenticated is kept for admin and host
	// certificates.
	Tenants int
	// PerTenant bounds those of one tenant.
	PerTenant int
}

// Defaults that do not depend on the descriptor limit.
const (
	DefaultHandshakeTimeout  = 10 * time.Second
	DefaultAnonymousLifetime = 60 * time.Second
)

// DeriveLimits derives the bounds from the process's descriptor limit
// (RLIMIT_NOFILE). The data plane leaves a tenth of it plus 512
// descriptors to the admin API, Raft, the cluster API, health checks and
// files (proxy.DeriveBudgets); the API port takes half of that, split
// evenly between unauthenticated and authenticated connections. A source
// may hold a sixteenth of the unauthenticated ones (4 to 64). Tenants
// together may hold three quarters of the authenticated ones (the rest,
// at least 8, is kept for admin and host certificates), one tenant a
// thirty-second of them (8 to 32).
func DeriveLimits(nofile uint64) Limits {
	const fixedReserve = 512
	reserve := int(min(nofile/10+fixedReserve, 1<<30))
	share := reserve / 2
	unauth := share / 2
	auth := share - unauth
	tenants := auth - max(auth/4, 8)
	return Limits{
		Unauthenticated:   unauth,
		PerSource:         min(max(unauth/16, 4), 64),
		HandshakeTimeout:  DefaultHandshakeTimeout,
		AnonymousLifetime: DefaultAnonymousLifetime,
		Authenticated:     auth,
		Tenants:           tenants,
		PerTenant:         min(max(auth/32, 8), 32, tenants),
	}
}

// withDefaults fills l's zero fields from DeriveLimits(nofile).
func (l Limits) withDefaults(nofile uint64) Limits {
	d := DeriveLimits(nofile)
	pick := func(v *int, def int) {
		if *v <= 0 {
			*v = def
		}
	}
	pick(&l.Unauthenticated, d.Unauthenticated)
	pick(&l.PerSource, d.PerSource)
	pick(&l.Authenticated, d.Authenticated)
	pick(&l.Tenants, d.Tenants)
	pick(&l.PerTenant, d.PerTenant)
	if l.HandshakeTimeout <= 0 {
		l.HandshakeTimeout = d.HandshakeTimeout
	}
	if l.AnonymousLifetime <= 0 {
		l.AnonymousLifetime = d.AnonymousLifetime
	}
	return l
}

// DescriptorLimit returns the process's soft RLIMIT_NOFILE (1024 when it
// cannot be read).
func DescriptorLimit() uint64 {
	var r syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &r); err != nil || r.Cur == 0 {
		return 1024
	}
	return r.Cur
}
