package certs

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"net"
	"sync"
	"time"

	"github.com/mholt/acmez/v3/acme"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/teapot-lb/teapot-lb/api"
	pb "github.com/teapot-lb/teapot-lb/api/proto/teapotv1"
)

// writeTimeout bounds one status write or store read of the manager.
const writeTimeout = 10 * time.Second

// writeStatus brings the Certificate objects of ACME hosts in line with
// the cache. Every host runs it; a host writes only what moves an object
// forward (a newer certificate, a failure it saw itself, a first pending
// record), so hosts never undo each other and repeated writes are no-ops.
func (m *Manager) writeStatus(d *desired) {
	var writes []*pb.Certificate
	for host, tenant := range d.managed {
		old := d.status[tenant+"/"+host]
		if old != nil && old.GetSource() != SourceACME {
			continue
		}
		want := &pb.Certificate{Name: host, Tenant: tenant, Hosts: []string{host}, Source: SourceACME}
		failure, _ := m.failures.Load(host)
		lastErr, _ := failure.(string)
		if c, ok := m.managedCert(host); ok {
			notAfter := c.Leaf.NotAfter
			if old.GetState() == StateValid && old.GetNotAfter().AsTime().After(notAfter) {
				continue // another host already has a newer one
			}
			want.State, want.Issuer, want.NotAfter = StateValid, issuerName(c.Leaf.Issuer.CommonName, c.Leaf.Issuer.String()), timestamppb.New(notAfter)
			want.LastError = lastErr
			if lastErr == "" && old.GetNotAfter().AsTime().Equal(notAfter) {
				want.LastError = old.GetLastError()
			}
		} else if old.GetState() == StateValid && old.GetNotAfter().AsTime().After(time.Now()) {
			// Another host obtained it: load it from the store rather
			// than wait for this host's own attempt.
			m.loadManaged(host)
			continue
		} else if lastErr != "" {
			want.State, want.LastError = StateFailed, lastErr
			want.Issuer, want.NotAfter = old.GetIssuer(), old.GetNotAfter()
		} else {
			if old != nil {
				continue
			}
			want.State = StatePending
		}
		if !sameStatus(old, want) {
			writes = append(writes, want)
		}
	}
	for host, r := range d.refused {
		old := d.status[r.tenant+"/"+host]
		if old != nil && old.GetSource() != SourceACME {
			continue
		}
		want := &pb.Certificate{Name: host, Tenant: r.tenant, Hosts: []string{host}, Source: SourceACME, State: StateRefused, LastError: r.reason}
		if !sameStatus(old, want) {
			writes = append(writes, want)
		}
	}
	var stale []*pb.Certificate
	for _, c := range d.status {
		if c.GetSource() != SourceACME {
			continue
		}
		if _, ok := d.managed[c.GetName()]; ok {
			continue
		}
		if _, ok := d.refused[c.GetName()]; ok {
			continue
		}
		stale = append(stale, c)
	}
	if len(writes) == 0 && len(stale) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(m.ctx, writeTimeout)
	defer cancel()
	var objs []*pb.Object
	for _, c := range writes {
		if c.GetState() != StatePending {
			objs = append(objs, api.Wrap(c))
			continue
		}
		// A first record only: never over what another host wrote.
		req := &pb.ApplyRequest{Objects: []*pb.Object{api.Wrap(c)}, Mode: pb.ApplyMode_APPLY_MODE_CREATE}
		if _, err := m.cfg.Store.Apply(ctx, req, true); err != nil && !errors.Is(err, api.ErrExists) {
			m.log.Debug("write certificate status", "err", err)
		}
	}
	if len(objs) > 0 {
		if _, err := m.cfg.Store.Apply(ctx, &pb.ApplyRequest{Objects: objs}, true); err != nil {
			m.log.Debug("write certificate status", "err", err)
		}
	}
	for _, c := range stale {
		ref := &pb.ObjectRef{Kind: api.KindCertificate, Tenant: c.GetTenant(), Name: c.GetName()}
		if _, err := m.cfg.Store.Delete(ctx, &pb.DeleteRequest{Ref: ref}, true); err != nil && !errors.Is(err, api.ErrNotFound) {
			m.log.Debug("delete certificate status", "cert", c.GetTenant()+"/"+c.GetName(), "err", err)
		}
	}
}

// loadManaged puts the certificate of host that another LB host obtained
// into the cache.
func (m *Manager) loadManaged(host string) {
	ctx, cancel := context.WithTimeout(m.ctx, writeTimeout)
	defer cancel()
	if _, err := m.magic.CacheManagedCertificate(ctx, host); err != nil {
		m.log.Debug("load certificate from the store", "host", host, "err", err)
	}
}

func issuerName(cn, full string) string {
	if cn != "" {
		return cn
	}
	return full
}

// sameStatus compares the fields the manager writes.
func sameStatus(old, want *pb.Certificate) bool {
	if old == nil {
		return false
	}
	o := proto.Clone(old).(*pb.Certificate)
	o.Meta = nil
	return proto.Equal(o, want)
}

// UploadKey is where an uploaded certificate's chain and key are kept in
// the certificate store.
func UploadKey(tenant, name string) string { return "uploaded/" + tenant + "/" + name }

// loadUploads puts the uploaded certificates of the state into the cache
// (with their OCSP staples) and takes out the ones gone or replaced.
func (m *Manager) loadUploads(d *desired) {
	for key, c := range d.uploaded {
		gen := c.GetMeta().GetGeneration()
		if l, ok := m.uploaded[key]; ok && l.generation == gen {
			continue
		}
		ctx, cancel := context.WithTimeout(m.ctx, writeTimeout)
		data, err := m.store.Load(ctx, UploadKey(c.GetTenant(), c.GetName()))
		if err != nil {
			cancel()
			m.log.Warn("load uploaded certificate", "cert", key, "err", err)
			continue
		}
		certPEM, keyPEM := splitPEM(data)
		tag := uploadTag(c.GetTenant(), c.GetName())
		if why := storedKeyProblem(certPEM); why != "" {
			// Stored before uploads were bounded: never served, each
			// handshake would cost its tenant's neighbours too.
			cancel()
			m.log.Warn("uploaded certificate not served", "cert", key, "reason", why)
			m.dropUpload(key)
			m.uploaded[key] = loaded{generation: gen}
			continue
		}
		if len(c.GetHosts()) == 0 {
			// A certificate naming no host stays out of certmagic's
			// cache, which indexes certificates by every name they
			// hold (common name and URIs included): it is only ever
			// a listener's default.
			cancel()
			pair, err := tls.X509KeyPair(certPEM, keyPEM)
			if err != nil {
				m.log.Warn("load uploaded certificate", "cert", key, "err", err)
				continue
			}
			m.dropUpload(key)
			m.hostless.Store(tag, &pair)
			m.uploaded[key] = loaded{generation: gen}
			continue
		}
		hash, err := m.magic.CacheUnmanagedCertificatePEMBytes(ctx, certPEM, keyPEM, []string{tag})
		cancel()
		if err != nil {
			m.log.Warn("cache uploaded certificate", "cert", key, "err", err)
			continue
		}
		if l, ok := m.uploaded[key]; ok && l.hash != hash {
			m.dropUpload(key)
		}
		m.uploaded[key] = loaded{generation: gen, hash: hash}
		m.uploadHost.Store(tag, c.GetHosts()[0])
	}
	for key := range m.uploaded {
		if _, ok := d.uploaded[key]; !ok {
			m.dropUpload(key)
			delete(m.uploaded, key)
		}
	}
}

// dropUpload takes the uploaded certificate loaded under key out of the
// cache and of the maps that find it.
func (m *Manager) dropUpload(key string) {
	if l, ok := m.uploaded[key]; ok && l.hash != "" {
		m.cache.Remove([]string{l.hash})
	}
	m.uploadHost.Delete("upload:" + key)
	m.hostless.Delete("upload:" + key)
}

// uploadTag marks an uploaded certificate in the cache with its owner.
func uploadTag(tenant, name string) string { return "upload:" + tenant + "/" + name }

// storedKeyProblem applies api.KeyProblem to the leaf of a stored chain.
func storedKeyProblem(certPEM []byte) string {
	b, _ := pem.Decode(certPEM)
	if b == nil {
		return "holds no certificate"
	}
	c, err := x509.ParseCertificate(b.Bytes)
	if err != nil {
		return "does not parse: " + err.Error()
	}
	return api.KeyProblem(c.PublicKey)
}

// splitPEM separates the certificate blocks from the private key block.
func splitPEM(data []byte) (certPEM, keyPEM []byte) {
	for {
		var b *pem.Block
		b, data = pem.Decode(data)
		if b == nil {
			return certPEM, keyPEM
		}
		if b.Type == "CERTIFICATE" {
			certPEM = append(certPEM, pem.EncodeToMemory(b)...)
		} else {
			keyPEM = pem.EncodeToMemory(b)
		}
	}
}

// findChallenge returns the challenge in progress for a host this cluster
// manages. Lookups in the store are rate limited: they reach the Raft
// leader, and anyone can send challenge requests.
func (m *Manager) findChallenge(ctx context.Context, host string) (acme.Challenge, bool) {
	if _, ok := (*m.acme.Load())[host]; !ok {
		return acme.Challenge{}, false
	}
	m.iss.localMu.Lock()
	c, ok := m.iss.local[host]
	m.iss.localMu.Unlock()
	if ok {
		return c, true
	}
	if !m.lookups.allow(time.Now()) {
		return acme.Challenge{}, false
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	return m.iss.challenge(ctx, host)
}

// limiter is a token bucket.
type limiter struct {
	mu     sync.Mutex
	rate   float64
	burst  float64
	tokens float64
	last   time.Time
}

func newLimiter(perSecond, burst float64) limiter {
	return limiter{rate: perSecond, burst: burst, tokens: burst}
}

func (l *limiter) allow(now time.Time) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.last.IsZero() {
		l.tokens = min(l.burst, l.tokens+now.Sub(l.last).Seconds()*l.rate)
	}
	l.last = now
	if l.tokens < 1 {
		return false
	}
	l.tokens--
	return true
}

// hostOnly strips a port and IPv6 brackets.
func hostOnly(hostport string) string {
	if h, _, err := net.SplitHostPort(hostport); err == nil {
		return h
	}
	if len(hostport) > 1 && hostport[0] == '[' && hostport[len(hostport)-1] == ']' {
		return hostport[1 : len(hostport)-1]
	}
	return hostport
}

// Uploaded returns the tenant's uploaded certificate name with its key
// as this host has loaded it, or nil: the client certificate a pool
// presents to its members (BackendTLS.clientCertificate).
func (m *Manager) Uploaded(tenant, name string) *tls.Certificate {
	tag := uploadTag(tenant, name)
	if c, ok := m.hostless.Load(tag); ok {
		return c.(*tls.Certificate)
	}
	if host, ok := m.uploadHost.Load(tag); ok {
		for _, c := range m.cache.AllMatchingCertificates(host.(string)) {
			if len(c.Tags) == 1 && c.Tags[0] == tag {
				cert := c.Certificate
				return &cert
			}
		}
	}
	return nil
}
