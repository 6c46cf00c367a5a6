// Package rateshare sends each LB host's counts of its total rate limits,
// and of the hot keys of its per-client and per-header limits (a bounded
// number a tenant), to the other hosts, and counts theirs against its
// own, so that a limit holds across the hosts that serve one VIP by ECMP
// (the error bounds are in package ratelimit's share.go). It needs no store: every interval a
// host sends one datagram (or a few, when its counts do not fit) to each
// peer over UDP, authenticated with HMAC-SHA256 under the cluster's key.
package rateshare

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/teapot-lb/teapot-lb/proxy/ratelimit"
)

// DefaultInterval is how often a host sends its counts.
const DefaultInterval = 50 * time.Millisecond

// Source is the data plane whose limits are shared (proxy.Proxy).
type Source interface {
	// DrainSharedRates calls f with each total limit's arrivals admitted
	// since the last call.
	DrainSharedRates(f func(tenant, id string, n int64))
	// DebitSharedRate counts a peer's arrivals against the same limit.
	DebitSharedRate(tenant, id string, n int64)
	// DrainSharedKeys calls f with each hot key of a per-client or
	// per-header limit and its arrivals admitted since the last call.
	DrainSharedKeys(f func(tenant, id string, k ratelimit.SharedKey, n uint32))
	// DebitSharedKey counts a peer's arrivals against the same key.
	DebitSharedKey(tenant, id string, k ratelimit.SharedKey, n int64)
}

// Config configures a Sharer.
type Config struct {
	// Addr is the UDP IP:port to listen on (port 0: any).
	Addr string
	// Key authenticates the datagrams; every host of the cluster has the
	// same (derived from the cluster CA's key). Required.
	Key []byte
	// Interval between sends (DefaultInterval when 0).
	Interval time.Duration
	Source   Source
	Logger   *slog.Logger
}

// ErrConfig: the configuration cannot be used.
var ErrConfig = errors.New("rate share config")

// Sharer sends and receives the counts.
type Sharer struct {
	cfg  Config
	conn *net.UDPConn
	inc  uint64
	seq  atomic.Uint64

	mu    sync.Mutex
	peers []netip.AddrPort
	seen  map[uint64]seen // incarnation -> the last datagram taken

	sent, received, rejected, keys, bytes atomic.Int64
	done                                  chan struct{}
	closeOnce                             sync.Once
}

type seen struct {
	seq  uint64
	last time.Time
}

// New binds the socket.
func New(cfg Config) (*Sharer, error) {
	if len(cfg.Key) == 0 || cfg.Source == nil {
		return nil, fmt.Errorf("%w: a key and a source are required", ErrConfig)
	}
	if cfg.Interval <= 0 {
		cfg.Interval = DefaultInterval
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	ap, err := netip.ParseAddrPort(cfg.Addr)
	if err != nil {
		return nil, fmt.Errorf("%w: address %q: %w", ErrConfig, cfg.Addr, err)
	}
	conn, err := net.ListenUDP("udp", net.UDPAddrFromAddrPort(ap))
	if err != nil {
		return nil, fmt.Errorf("rate share: listen on %s: %w", ap, err)
	}
	var b [8]byte
	_, _ = rand.Read(b[:])
	return &Sharer{cfg: cfg, conn: conn, inc: binary.BigEndian.Uint64(b[:]), seen: map[uint64]seen{}, done: make(chan struct{})}, nil
}

// Addr is the address the socket is bound to.
func (s *Sharer) Addr() netip.AddrPort { return s.conn.LocalAddr().(*net.UDPAddr).AddrPort() }

// SetPeers replaces the hosts the counts go to (every other host of the
// cluster: only those serving the same VIPs have the same limits).
func (s *Sharer) SetPeers(peers []netip.AddrPort) {
	s.mu.Lock()
	s.peers = append([]netip.AddrPort(nil), peers...)
	s.mu.Unlock()
}

// Stats are the datagrams sent, received and taken, and rejected (not
// authentic, stale or replayed); the keys sent (each once, whatever the
// number of peers) and the bytes sent (to all peers).
type Stats struct{ Sent, Received, Rejected, Keys, Bytes int64 }

// Stats returns the counts.
func (s *Sharer) Stats() Stats {
	return Stats{Sent: s.sent.Load(), Received: s.received.Load(), Rejected: s.rejected.Load(), Keys: s.keys.Load(), Bytes: s.bytes.Load()}
}

// Run sends and receives until ctx ends or Close.
func (s *Sharer) Run(ctx context.Context) {
	go s.receive()
	t := time.NewTicker(s.cfg.Interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-s.done:
			return
		case <-t.C:
			s.send()
		}
	}
}

// Close stops Run and closes the socket.
func (s *Sharer) Close() error {
	s.closeOnce.Do(func() { close(s.done) })
	return s.conn.Close()
}

// send drains the counts and sends them to every peer. Counts drained
// with no peer to send to are dropped: a host alone counts alone.
func (s *Sharer) send() {
	var entries []entry
	s.cfg.Source.DrainSharedRates(func(tenant, id string, n int64) {
		if len(tenant) <= maxTenant && len(id) <= maxID {
			entries = append(entries, entry{tenant, id, uint32(min(n, 1<<32-1))})
		}
	})
	var keys []keyEntry
	s.cfg.Source.DrainSharedKeys(func(tenant, id string, k ratelimit.SharedKey, n uint32) {
		if len(tenant) <= maxTenant && len(id) <= maxID {
			keys = append(keys, keyEntry{tenant, id, k, n})
		}
	})
	s.mu.Lock()
	peers := s.peers
	s.mu.Unlock()
	if len(peers) == 0 {
		return
	}
	for len(entries) > 0 {
		var b []byte
		b, entries = encode(s.cfg.Key, s.inc, s.seq.Add(1), time.Now(), entries)
		s.write(b, peers)
	}
	slices.SortStableFunc(keys, func(a, b keyEntry) int {
		return cmp.Or(strings.Compare(a.tenant, b.tenant), strings.Compare(a.id, b.id))
	})
	s.keys.Add(int64(len(keys)))
	for len(keys) > 0 {
		var b []byte
		b, keys = encodeKeys(s.cfg.Key, s.inc, s.seq.Add(1), time.Now(), keys)
		s.write(b, peers)
	}
}

func (s *Sharer) write(b []byte, peers []netip.AddrPort) {
	for _, p := range peers {
		if _, err := s.conn.WriteToUDPAddrPort(b, p); err == nil {
			s.sent.Add(1)
			s.bytes.Add(int64(len(b)))
		}
	}
}

// receive reads datagrams and debits their counts.
func (s *Sharer) receive() {
	buf := make([]byte, maxDatagram)
	for {
		n, _, err := s.conn.ReadFromUDPAddrPort(buf)
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			continue
		}
		d, err := decode(s.cfg.Key, buf[:n])
		if err != nil || !s.fresh(d, time.Now()) {
			s.rejected.Add(1)
			continue
		}
		s.received.Add(1)
		for _, e := range d.entries {
			s.cfg.Source.DebitSharedRate(e.tenant, e.id, int64(e.n))
		}
		for _, e := range d.keys {
			s.cfg.Source.DebitSharedKey(e.tenant, e.id, e.key, int64(e.n))
		}
	}
}

// maxSkew bounds how far a datagram's time may be from this host's clock;
// an incarnation unheard for forgetAfter is forgotten (its datagrams are
// stale by then).
const (
	maxSkew     = 5 * time.Second
	forgetAfter = 30 * time.Second
)

// fresh reports whether d is new: within maxSkew of now and after the
// last datagram taken of its incarnation, so that a replayed datagram
// is not counted twice.
func (s *Sharer) fresh(d datagram, now time.Time) bool {
	if d.at.Before(now.Add(-maxSkew)) || d.at.After(now.Add(maxSkew)) {
		return false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if d.inc == s.inc {
		return false // our own
	}
	if last, ok := s.seen[d.inc]; ok && d.seq <= last.seq {
		return false
	}
	s.seen[d.inc] = seen{seq: d.seq, last: now}
	if len(s.seen) > 64 {
		for inc, v := range s.seen {
			if now.Sub(v.last) > forgetAfter {
				delete(s.seen, inc)
			}
		}
	}
	return true
}
