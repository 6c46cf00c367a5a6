package certs

import (
	"context"
	"crypto"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/caddyserver/certmagic"
	"github.com/mholt/acmez/v3"

	"github.com/teapot-lb/teapot-lb/proxy/cpubudget"
	"github.com/teapot-lb/teapot-lb/proxy/snapshot"
)

// The TLS policy of https listeners: TLS 1.2 at least, only ECDHE key
// exchange with AEAD ciphers (TLS 1.3 has nothing else), HTTP/2 and
// HTTP/1.1 through ALPN, session resumption with tickets.
var (
	// CipherSuites are the TLS 1.2 suites offered: forward secret, AEAD.
	CipherSuites = []uint16{
		tls.TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256,
		tls.TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256,
		tls.TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384,
		tls.TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256,
		tls.TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256,
		tls.TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384,
	}
	// NextProtos are the ALPN protocols served, in order of preference.
	NextProtos = []string{"h2", "http/1.1"}
)

// TicketRotation is how long one session ticket key encrypts new tickets;
// tickets stay valid for one more period.
const TicketRotation = time.Hour

// Errors of handshakes.
var (
	// ErrUnknownName: the listener has no certificate for the server name
	// (or the client sent none and the listener has several).
	ErrUnknownName = errors.New("certs: no certificate for this server name on this listener")
	// ErrNoChallenge: a TLS-ALPN-01 handshake for a name without a
	// challenge in progress.
	ErrNoChallenge = errors.New("certs: no ACME challenge in progress for this name")
)

// tlsState is the base configuration every handshake clones and the
// current ticket period. Ticket keys derive from the secret, the listener
// and the period, so hosts with the same secret share them and resume each
// other's sessions, while a session never resumes on another listener.
type tlsState struct {
	secret []byte
	base   atomic.Pointer[baseConfig]
	mu     sync.Mutex
	epoch  int64

	// policies caches each listener's policy by its compiled value, which
	// stays the same pointer while the listener does not change.
	policies sync.Map // *snapshot.Listener -> *policy
	count    atomic.Int64
}

func (s *tlsState) init(secret []byte) {
	if len(secret) == 0 {
		secret = make([]byte, 32)
		_, _ = rand.Read(secret)
	}
	s.secret = secret
	s.epoch = -1
	s.rotate(time.Now())
}

// baseConfig is the configuration of one ticket period.
type baseConfig struct {
	cfg   *tls.Config
	epoch int64
}

// ticketKey derives the session ticket key of one listener for one rotation
// period: HMAC-SHA256 over the secret of a label, the listener's tenant,
// load balancer and port (each length-prefixed) and the period. Listeners
// differing in any of them get unrelated keys, so a ticket issued on one
// (another tenant's above all) is not readable on another and the client
// does a full handshake there, presenting that listener's certificate.
func ticketKey(secret []byte, l *snapshot.Listener, epoch int64) [32]byte {
	mac := hmac.New(sha256.New, secret)
	mac.Write([]byte("teapot-lb session tickets v2"))
	var b [8]byte
	for _, f := range []string{l.Tenant, l.LB} {
		binary.BigEndian.PutUint64(b[:], uint64(len(f)))
		mac.Write(b[:])
		mac.Write([]byte(f))
	}
	binary.BigEndian.PutUint64(b[:], uint64(l.Key.Addr.Port()))
	mac.Write(b[:])
	if l.TLS != nil && l.TLS.Client != nil {
		// A session made under other client CAs (or none) does not
		// resume: its client certificate was checked against those.
		c := l.TLS.Client
		mac.Write([]byte{'c', boolByte(c.Required)})
		binary.BigEndian.PutUint64(b[:], uint64(len(c.Bundle)))
		mac.Write(b[:])
		mac.Write([]byte(c.Bundle))
	}
	binary.BigEndian.PutUint64(b[:], uint64(epoch))
	mac.Write(b[:])
	var k [32]byte
	copy(k[:], mac.Sum(nil))
	return k
}

func boolByte(v bool) byte {
	if v {
		return 1
	}
	return 0
}

// rotate starts the period holding now: listener configurations are rebuilt
// with the keys of this period (new tickets) and of the one before (still
// accepted).
func (s *tlsState) rotate(now time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	e := now.Unix() / int64(TicketRotation/time.Second)
	if e == s.epoch {
		return
	}
	s.epoch = e
	cfg := &tls.Config{
		MinVersion:   tls.VersionTLS12,
		CipherSuites: CipherSuites,
		NextProtos:   NextProtos,
	}
	s.base.Store(&baseConfig{cfg: cfg, epoch: e})
}

// policy is what one listener may present: its tenant's certificates only.
type policy struct {
	m *Manager
	// acme holds the listener's ACME hosts (nil without acme: true).
	acme map[string]bool
	// acmeWild: some ACME host is a wildcard.
	acmeWild bool
	// uploads holds the cache tags of the uploaded certificates listed in
	// tls.certificates; order lists them as listed.
	uploads map[string]bool
	order   []string
	// single is the only name the listener can present a certificate
	// for, used for clients without SNI; "" when there are several.
	single string
	built  atomic.Pointer[builtConfig]
	// cpu is the budget of the listener's tenant: every certificate the
	// listener presents signs through it (charged holds the charged
	// signers, by certmagic hash or *tls.Certificate).
	cpu      *cpubudget.Tenant
	charged  sync.Map
	nCharged atomic.Int32
}

// maxCharged bounds a listener's wrapped certificates (renewals add
// some while the listener stays the same).
const maxCharged = 64

// chargedCert returns c with its signatures charged to the listener's
// tenant: a full handshake signs (and waits or is refused over budget), a
// resumed one does not sign and is not charged. The signers are kept by
// key (certmagic's hash, or the *tls.Certificate); the certificate is
// copied each time, so that a staple certmagic refreshed is served.
func (p *policy) chargedCert(key any, c *tls.Certificate) *tls.Certificate {
	var s crypto.Signer
	if v, ok := p.charged.Load(key); ok {
		s = v.(crypto.Signer)
	} else {
		k, ok := c.PrivateKey.(crypto.Signer)
		if !ok {
			return c
		}
		s = p.cpu.Signer(k)
		if p.nCharged.Add(1) > maxCharged {
			p.charged.Clear()
			p.nCharged.Store(0)
		}
		p.charged.Store(key, s)
	}
	w := *c
	w.PrivateKey = s
	return &w
}

func (m *Manager) policy(l *snapshot.Listener) *policy {
	if p, ok := m.tls.policies.Load(l); ok {
		return p.(*policy)
	}
	p := &policy{m: m, uploads: map[string]bool{}, cpu: m.cpu.Tenant(l.Tenant)}
	if l.TLS != nil {
		for _, n := range l.TLS.Certificates {
			tag := uploadTag(l.Tenant, n)
			if !p.uploads[tag] {
				p.order = append(p.order, tag)
			}
			p.uploads[tag] = true
		}
		if l.TLS.ACME && l.Routes != nil {
			p.acme = map[string]bool{}
			for _, r := range l.Routes.Routes() {
				if r.Host != "" {
					p.acme[r.Host] = true // a wildcard too: see computeDesired
					p.acmeWild = p.acmeWild || strings.HasPrefix(r.Host, "*.")
				}
			}
		}
	}
	if len(p.acme) == 1 && len(p.uploads) == 0 {
		for h := range p.acme {
			p.single = h
		}
	}
	if m.tls.count.Add(1) > maxPolicies {
		m.tls.policies.Clear()
		m.tls.count.Store(0)
	}
	m.tls.policies.Store(l, p)
	return p
}

// maxPolicies bounds the cached listener policies; the cache is emptied
// when it grows past it (listeners are replaced on config changes).
const maxPolicies = 8192

// ServerConfig returns the TLS configuration of one handshake on an https
// listener.
// The configuration is built once per listener and ticket key period.
func (m *Manager) ServerConfig(l *snapshot.Listener) *tls.Config {
	p := m.policy(l)
	base := m.tls.base.Load()
	if b := p.built.Load(); b != nil && b.from == base {
		return b.cfg
	}
	cfg := base.cfg.Clone()
	cfg.SetSessionTicketKeys([][32]byte{ticketKey(m.tls.secret, l, base.epoch), ticketKey(m.tls.secret, l, base.epoch-1)})
	if l.TLS != nil && l.TLS.MinVersion > cfg.MinVersion {
		cfg.MinVersion = l.TLS.MinVersion
	}
	if p.acme != nil {
		cfg.NextProtos = append(cfg.NextProtos[:len(cfg.NextProtos):len(cfg.NextProtos)], acmez.ACMETLS1Protocol)
	}
	if l.TLS != nil && l.TLS.Client != nil {
		p.clientAuth(cfg, l.TLS.Client)
	}
	cfg.GetCertificate = p.getCertificate
	cfg.GetConfigForClient = p.hello
	p.built.Store(&builtConfig{from: base, cfg: cfg})
	return cfg
}

// hello admits a ClientHello against the tenant's CPU budget before the
// key exchange: a tenant in debt waits briefly, then its handshake ends
// here (see cpubudget.Tenant.Hello). It changes nothing of the
// configuration.
func (p *policy) hello(*tls.ClientHelloInfo) (*tls.Config, error) {
	return nil, p.cpu.Hello()
}

// builtConfig is a listener's configuration and the base it came from.
type builtConfig struct {
	from *baseConfig
	cfg  *tls.Config
}

// getCertificate picks the certificate for a ClientHello: a TLS-ALPN-01
// challenge certificate, else the listener's ACME certificate for the
// name, else one of its uploaded certificates covering the name (exact
// names before wildcards, the latest expiry first) or the ACME certificate
// of its wildcard route host covering it, else the listener's
// default: the first certificate it lists that names no host.
func (p *policy) getCertificate(hello *tls.ClientHelloInfo) (*tls.Certificate, error) {
	name := strings.ToLower(strings.TrimSuffix(hello.ServerName, "."))
	if len(hello.SupportedProtos) == 1 && hello.SupportedProtos[0] == acmez.ACMETLS1Protocol {
		return p.challengeCert(hello.Context(), name)
	}
	if _, err := netip.ParseAddr(name); err == nil {
		// An IP address is no server name (RFC 6066 section 3), though
		// some clients (wrk) send one: they get what a client without
		// SNI gets.
		name = ""
	}
	if name == "" {
		name = p.single
		if name == "" {
			c, err := p.onlyUpload()
			if err != nil {
				if d := p.hostless(); d != nil {
					return p.chargedCert(d, d), nil
				}
			}
			return c, err
		}
	}
	var best *certmagic.Certificate
	var bestRank int
	wild := "" // the wildcard covering name: "*.acme.example" for "shop.acme.example"
	if _, rest, ok := strings.Cut(name, "."); ok && p.acmeWild && !strings.HasPrefix(name, "*.") {
		wild = "*." + rest
	}
	for _, c := range p.m.cache.AllMatchingCertificates(name) {
		if c.Leaf == nil || time.Now().After(c.Leaf.NotAfter) {
			continue
		}
		rank := 0
		switch {
		case len(c.Tags) == 0 && p.acme[name] && containsName(c.Names, name):
			rank = 3
		case len(c.Tags) == 1 && p.uploads[c.Tags[0]] && containsName(c.Names, name):
			rank = 2
		case len(c.Tags) == 1 && p.uploads[c.Tags[0]]:
			rank = 1 // a wildcard
		case len(c.Tags) == 0 && wild != "" && p.acme[wild] && containsName(c.Names, wild):
			rank = 1 // the ACME certificate of a wildcard route host
		default:
			continue
		}
		if best == nil || rank > bestRank || rank == bestRank && c.Leaf.NotAfter.After(best.Leaf.NotAfter) {
			c := c
			best, bestRank = &c, rank
		}
	}
	if best == nil {
		if d := p.hostless(); d != nil {
			return p.chargedCert(d, d), nil
		}
		return nil, fmt.Errorf("%w: %q", ErrUnknownName, name)
	}
	return p.chargedCert(best.Hash(), &best.Certificate), nil
}

// hostless returns the listener's default certificate: the first of its
// uploaded certificates that names no host, or nil. Such a certificate
// claims no name, so it is served only on the listeners of its tenant that
// list it, and only when none of their certificates covers the name asked
// for.
func (p *policy) hostless() *tls.Certificate {
	for _, tag := range p.order {
		if c, ok := p.m.hostless.Load(tag); ok {
			return c.(*tls.Certificate)
		}
	}
	return nil
}

// onlyUpload serves a client without SNI when the listener has exactly
// one uploaded certificate and no ACME hosts.
func (p *policy) onlyUpload() (*tls.Certificate, error) {
	if len(p.uploads) != 1 || len(p.acme) != 0 {
		return nil, fmt.Errorf("%w: the client sent no server name", ErrUnknownName)
	}
	var tag string
	for t := range p.uploads {
		tag = t
	}
	if host, ok := p.m.uploadHost.Load(tag); ok {
		for _, c := range p.m.cache.AllMatchingCertificates(host.(string)) {
			if len(c.Tags) == 1 && c.Tags[0] == tag {
				return p.chargedCert(c.Hash(), &c.Certificate), nil
			}
		}
	}
	return nil, fmt.Errorf("%w: the client sent no server name", ErrUnknownName)
}

func (p *policy) challengeCert(ctx context.Context, name string) (*tls.Certificate, error) {
	if !p.acme[name] {
		return nil, fmt.Errorf("%w: %q", ErrNoChallenge, name)
	}
	if ctx == nil {
		ctx = context.Background()
	}
	chal, ok := p.m.findChallenge(ctx, name)
	if !ok || chal.Type != "tls-alpn-01" {
		return nil, fmt.Errorf("%w: %q", ErrNoChallenge, name)
	}
	return acmez.TLSALPN01ChallengeCert(chal)
}

func containsName(names []string, s string) bool {
	for _, n := range names {
		if n == s {
			return true
		}
	}
	return false
}
