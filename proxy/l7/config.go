package l7

import (
	"log/slog"
	"net/netip"
	"time"
)

// Config holds the server's edge defaults. Zero fields take the values of
// DefaultConfig.
type Config struct {
	Logger  *slog.Logger
	Metrics Metrics

	// HeaderTimeout bounds the arrival of a request head, from its first
	// byte (408).
	HeaderTimeout time.Duration
	// IdleTimeout closes a keep-alive connection without a request.
	IdleTimeout time.Duration
	// DrainIdleGrace is how long a drained HTTP/1.x connection that is
	// idle waits for one more request, answered with Connection: close,
	// before it closes: a client whose connection is busy reconnects after
	// its next response instead of racing a close.
	DrainIdleGrace time.Duration
	// BodyTimeout bounds each wait for request body bytes (408), and each
	// wait for response body bytes from a member.
	BodyTimeout time.Duration
	// WriteTimeout bounds each write to a client.
	WriteTimeout time.Duration
	// ConnectTimeout bounds a dial to a member (504).
	ConnectTimeout time.Duration
	// ResponseHeaderTimeout bounds the wait for a member's response head
	// (504).
	ResponseHeaderTimeout time.Duration
	// TunnelTimeout closes an upgraded connection (WebSocket) without
	// traffic in either direction.
	TunnelTimeout time.Duration
	// UpstreamIdleTimeout closes pooled member connections left unused.
	UpstreamIdleTimeout time.Duration
	// MaxIdlePerMember bounds the idle connections kept per member.
	MaxIdlePerMember int
	// MemberBudgetWait is how long a dial whose budget is spent
	// (BackendOptions.Budget) waits for a connection of the budget to
	// close before its request fails with 503.
	MemberBudgetWait time.Duration
	// MaxMembersPerConn bounds the member connections the streams of one
	// HTTP/2 client connection hold at once; a stream beyond it waits up
	// to its response header timeout for one, then fails with 503.
	MaxMembersPerConn int

	// MaxHeaderBytes bounds a request head (request line and fields; 431).
	MaxHeaderBytes int
	// MaxHeaderCount bounds the number of request header fields (431).
	MaxHeaderCount int
	// MaxBodyBytes bounds request bodies (413); 0 means no limit. A
	// backend's MaxBodyBytes overrides it.
	MaxBodyBytes int64

	// H2MaxConcurrentStreams bounds the open streams of an HTTP/2 client.
	H2MaxConcurrentStreams uint32
	// H2MaxResetsPerSecond and H2ResetBurst bound the RST_STREAM frames an
	// HTTP/2 client may send (a token bucket); beyond them the connection
	// gets a GOAWAY (rapid-reset protection).
	H2MaxResetsPerSecond int
	H2ResetBurst         int
	// H2MaxControlFramesPerSecond bounds the PING, SETTINGS, PRIORITY,
	// WINDOW_UPDATE, empty DATA and unknown frames of an HTTP/2 client (a
	// token bucket with twice this burst); beyond it the connection gets
	// a GOAWAY with ENHANCE_YOUR_CALM.
	H2MaxControlFramesPerSecond int

	// TrustedProxies lists the client addresses whose X-Forwarded-* and
	// Forwarded headers are kept and appended to. From any other client
	// they are replaced.
	TrustedProxies []netip.Prefix
	// Retries is how many other members a request may try after a
	// connect failure. Negative means none.
	Retries int
}

// DefaultConfig holds the defaults.
var DefaultConfig = Config{
	HeaderTimeout:               10 * time.Second,
	IdleTimeout:                 60 * time.Second,
	DrainIdleGrace:              time.Second,
	BodyTimeout:                 60 * time.Second,
	WriteTimeout:                60 * time.Second,
	ConnectTimeout:              5 * time.Second,
	ResponseHeaderTimeout:       60 * time.Second,
	TunnelTimeout:               time.Hour,
	UpstreamIdleTimeout:         50 * time.Second,
	MaxIdlePerMember:            512,
	MemberBudgetWait:            100 * time.Millisecond,
	MaxMembersPerConn:           32,
	MaxHeaderBytes:              64 << 10,
	MaxHeaderCount:              100,
	H2MaxConcurrentStreams:      100,
	H2MaxResetsPerSecond:        100,
	H2ResetBurst:                200,
	H2MaxControlFramesPerSecond: 1000,
	Retries:                     1,
}

func (c Config) withDefaults() Config {
	d := DefaultConfig
	dur := func(v *time.Duration, def time.Duration) {
		if *v <= 0 {
			*v = def
		}
	}
	num := func(v *int, def int) {
		if *v <= 0 {
			*v = def
		}
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.Metrics == nil {
		c.Metrics = NopMetrics{}
	}
	dur(&c.HeaderTimeout, d.HeaderTimeout)
	dur(&c.IdleTimeout, d.IdleTimeout)
	dur(&c.DrainIdleGrace, d.DrainIdleGrace)
	dur(&c.BodyTimeout, d.BodyTimeout)
	dur(&c.WriteTimeout, d.WriteTimeout)
	dur(&c.ConnectTimeout, d.ConnectTimeout)
	dur(&c.ResponseHeaderTimeout, d.ResponseHeaderTimeout)
	dur(&c.TunnelTimeout, d.TunnelTimeout)
	dur(&c.UpstreamIdleTimeout, d.UpstreamIdleTimeout)
	num(&c.MaxIdlePerMember, d.MaxIdlePerMember)
	dur(&c.MemberBudgetWait, d.MemberBudgetWait)
	num(&c.MaxMembersPerConn, d.MaxMembersPerConn)
	num(&c.MaxHeaderBytes, d.MaxHeaderBytes)
	num(&c.MaxHeaderCount, d.MaxHeaderCount)
	num(&c.H2MaxResetsPerSecond, d.H2MaxResetsPerSecond)
	num(&c.H2ResetBurst, d.H2ResetBurst)
	num(&c.H2MaxControlFramesPerSecond, d.H2MaxControlFramesPerSecond)
	if c.H2MaxConcurrentStreams == 0 {
		c.H2MaxConcurrentStreams = d.H2MaxConcurrentStreams
	}
	if c.Retries == 0 {
		c.Retries = d.Retries
	} else if c.Retries < 0 {
		c.Retries = 0
	}
	if c.MaxBodyBytes < 0 {
		c.MaxBodyBytes = 0
	}
	return c
}
