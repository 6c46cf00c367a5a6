package health

import (
	"crypto"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net/netip"

	"github.com/teapot-lb/teapot-lb/proxy/cpubudget"
	"github.com/teapot-lb/teapot-lb/proxy/snapshot"
)

// ErrCheckTLSConfig: an https check's CA bundle or client certificate
// does not parse (validation refuses such checks; this guards the data
// plane all the same).
var ErrCheckTLSConfig = errors.New("https check: bad TLS settings")

// tlsKey is what an https check's TLS configuration is built from: its
// PEM fields, and the tenant its client signatures are charged to.
type tlsKey struct {
	tenant        string
	ca, cert, key string
	insecure      bool
}

// tlsEntry is a parsed TLS configuration shared by every target whose
// check has the same PEM fields (a pool's members share one).
type tlsEntry struct {
	conf *tls.Config
	err  error
	refs int // guarded by Registry.mu
}

func tlsKeyOf(tenant string, hc *snapshot.HealthCheck) tlsKey {
	return tlsKey{tenant: tenant, ca: hc.CAPEM, cert: hc.ClientCertPEM, key: hc.ClientKeyPEM, insecure: hc.InsecureSkipVerify}
}

// acquireTLS returns the shared TLS configuration of a tenant's https
// check; called under r.mu.
func (r *Registry) acquireTLS(tb *tenantBudget, hc *snapshot.HealthCheck) *tlsEntry {
	k := tlsKeyOf(tb.tenant, hc)
	e := r.tlsConfs[k]
	if e == nil {
		conf, err := buildTLS(hc, tb.cpu)
		e = &tlsEntry{conf: conf, err: err}
		r.tlsConfs[k] = e
	}
	e.refs++
	return e
}

// releaseTLS drops a reference taken by acquireTLS; called under r.mu.
func (r *Registry) releaseTLS(tenant string, hc *snapshot.HealthCheck, e *tlsEntry) {
	if e.refs--; e.refs > 0 {
		return
	}
	if k := tlsKeyOf(tenant, hc); r.tlsConfs[k] == e {
		delete(r.tlsConfs, k)
	}
}

// buildTLS parses a check's TLS settings; the client key signs through
// the tenant's CPU budget. Each target resumes its own sessions (see
// activeCheck.sessions): nothing carries over between members or tenants.
func buildTLS(hc *snapshot.HealthCheck, cpu *cpubudget.Tenant) (*tls.Config, error) {
	conf := &tls.Config{
		MinVersion:         tls.VersionTLS12,
		NextProtos:         []string{"http/1.1"},
		InsecureSkipVerify: hc.InsecureSkipVerify, //nolint:gosec // set on purpose by the load balancer's owner, documented
	}
	if hc.CAPEM != "" {
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM([]byte(hc.CAPEM)) {
			return nil, fmt.Errorf("%w: caPem holds no certificate", ErrCheckTLSConfig)
		}
		conf.RootCAs = pool
	}
	if hc.ClientCertPEM != "" || hc.ClientKeyPEM != "" {
		cert, err := tls.X509KeyPair([]byte(hc.ClientCertPEM), []byte(hc.ClientKeyPEM))
		if err != nil {
			return nil, fmt.Errorf("%w: client certificate: %v", ErrCheckTLSConfig, err)
		}
		if s, ok := cert.PrivateKey.(crypto.Signer); ok && cpu != nil {
			cert.PrivateKey = cpu.ClientSigner(s)
		}
		conf.Certificates = []tls.Certificate{cert}
	}
	return conf, nil
}

// serverName is the name an https check of addr verifies.
func serverName(hc *snapshot.HealthCheck, addr netip.AddrPort) string {
	switch {
	case hc.ServerName != "":
		return hc.ServerName
	case hc.Host != "":
		return hc.Host
	}
	return addr.Addr().Unmap().String()
}
