package certs

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net/http"
	"net/url"
	"path"
	"strings"
	"sync"
	"time"

	"github.com/caddyserver/certmagic"
	"github.com/mholt/acmez/v3"
	"github.com/mholt/acmez/v3/acme"
)

// LetsEncrypt is the default ACME directory: Let's Encrypt production.
const LetsEncrypt = "https://acme-v02.api.letsencrypt.org/directory"

// issuer obtains certificates from one ACME CA. It answers HTTP-01 and
// TLS-ALPN-01 challenges through the replicated store: Present writes the
// challenge there (committed before the CA is told to validate), so that
// whichever LB host the CA reaches can answer it. It never starts a
// listener of its own; the data plane's listeners answer.
type issuer struct {
	ca    string
	email string
	key   string // issuer key: where certmagic files its certificates
	store *Storage
	log   *slog.Logger

	client *acmez.Client
	// dnsClient answers DNS-01 only: the orders with a wildcard name.
	dnsClient *acmez.Client
	// dnsWait, when set, returns once this host's DNS answers a TXT
	// record presented (see dnsSolver.Wait).
	dnsWait func(ctx context.Context, name, txt string) error
	// orders bounds each tenant's orders and backs off failing names;
	// tenantOf names the tenant of a host ("" for none).
	orders   *orderLimiter
	tenantOf func(host string) string
	now      func() time.Time

	mu      sync.Mutex
	account *acme.Account

	// local holds the challenges this host presented, by identifier.
	localMu sync.Mutex
	local   map[string]acme.Challenge

	// chal counts the challenges presented by outcome.
	chal *challengeStats
}

var _ certmagic.Issuer = (*issuer)(nil)

func newIssuer(ca, email string, roots *x509.CertPool, store *Storage, log *slog.Logger) *issuer {
	iss := &issuer{
		ca:    ca,
		email: email,
		key:   issuerKey(ca),
		store: store,
		log:   log,
		local: map[string]acme.Challenge{},
		now:   time.Now,
	}
	iss.chal = newChallengeStats(func(h string) string {
		if iss.tenantOf == nil {
			return ""
		}
		return iss.tenantOf(h)
	})
	if log == nil {
		log = slog.Default()
	}
	// acmez logs the CA's verdict on each authorization: the counts read it.
	acmeLog := slog.New(verdictHandler{log.Handler(), iss.chal})
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.TLSClientConfig = &tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS12}
	iss.client = &acmez.Client{
		Client: &acme.Client{
			Directory:  ca,
			HTTPClient: &http.Client{Transport: tr, Timeout: 30 * time.Second},
			UserAgent:  "teapot-lb",
			Logger:     acmeLog,
		},
		ChallengeSolvers: map[string]acmez.Solver{
			acme.ChallengeTypeHTTP01:    solver{iss},
			acme.ChallengeTypeTLSALPN01: solver{iss},
		},
	}
	iss.dnsClient = &acmez.Client{
		Client:           iss.client.Client,
		ChallengeSolvers: map[string]acmez.Solver{acme.ChallengeTypeDNS01: dnsSolver{iss}},
	}
	return iss
}

// issuerKey turns a directory URL into a storage path element:
// "acme-v02.api.letsencrypt.org-directory".
func issuerKey(ca string) string {
	u, err := url.Parse(ca)
	s := ca
	if err == nil && u.Host != "" {
		s = u.Host + u.Path
	}
	s = strings.ToLower(strings.Trim(s, "/"))
	var b strings.Builder
	for _, c := range s {
		switch {
		case c >= 'a' && c <= 'z', c >= '0' && c <= '9', c == '.', c == '-', c == '_':
			b.WriteRune(c)
		default:
			b.WriteByte('-')
		}
	}
	return b.String()
}

// IssuerKey implements certmagic.Issuer.
func (i *issuer) IssuerKey() string { return i.key }

// Issue implements certmagic.Issuer: one ACME order for the CSR's names,
// if the tenant of the names may start one (see orderLimiter). An order
// with a wildcard name is validated by DNS-01 (dnsClient), the others by
// HTTP-01 or TLS-ALPN-01; both draw on the same per-tenant budget.
func (i *issuer) Issue(ctx context.Context, csr *x509.CertificateRequest) (*certmagic.IssuedCertificate, error) {
	name := strings.Join(csr.DNSNames, ",")
	if i.orders != nil {
		tenant := ""
		if i.tenantOf != nil && len(csr.DNSNames) > 0 {
			tenant = i.tenantOf(csr.DNSNames[0])
		}
		if err := i.orders.admit(tenant, name, i.now()); err != nil {
			return nil, err
		}
	}
	c, err := i.issue(ctx, csr)
	i.chal.orderDone(csr.DNSNames)
	if i.orders != nil && ctx.Err() == nil {
		i.orders.done(name, err != nil, i.now())
	}
	return c, err
}

func (i *issuer) issue(ctx context.Context, csr *x509.CertificateRequest) (*certmagic.IssuedCertificate, error) {
	acct, err := i.ensureAccount(ctx)
	if err != nil {
		return nil, err
	}
	params, err := acmez.OrderParametersFromCSR(acct, csr)
	if err != nil {
		return nil, fmt.Errorf("order parameters: %w", err)
	}
	client := i.client
	if hasWildcard(csr.DNSNames) {
		client = i.dnsClient
	}
	chains, err := client.ObtainCertificate(ctx, params)
	if err != nil {
		var p acme.Problem
		if errors.As(err, &p) && p.Type == acme.ProblemTypeAccountDoesNotExist {
			i.mu.Lock()
			i.account = nil
			i.mu.Unlock()
		}
		return nil, err
	}
	if len(chains) == 0 {
		return nil, errors.New("the CA returned no certificate chain")
	}
	return &certmagic.IssuedCertificate{Certificate: chains[0].ChainPEM, Metadata: chains[0]}, nil
}

func (i *issuer) accountKeyPath() string { return path.Join("acme", i.key, "account", "key.pem") }

// ensureAccount returns the ACME account of this cluster at the CA,
// creating its key (shared by every host) and registering it if needed.
// Registering an existing key returns the existing account (RFC 8555
// 7.3.1), so every host may do it.
func (i *issuer) ensureAccount(ctx context.Context) (acme.Account, error) {
	i.mu.Lock()
	defer i.mu.Unlock()
	if i.account != nil {
		return *i.account, nil
	}
	key, err := i.accountKey(ctx)
	if err != nil {
		return acme.Account{}, err
	}
	acct := acme.Account{PrivateKey: key, TermsOfServiceAgreed: true}
	if i.email != "" {
		acct.Contact = []string{"mailto:" + i.email}
	}
	acct, err = i.client.NewAccount(ctx, acct)
	if err != nil {
		return acme.Account{}, fmt.Errorf("register ACME account at %s: %w", i.ca, err)
	}
	i.account = &acct
	return acct, nil
}

// accountKey loads the cluster's account key, or creates it under a lock
// so that all hosts end up with one.
func (i *issuer) accountKey(ctx context.Context) (*ecdsa.PrivateKey, error) {
	load := func() (*ecdsa.PrivateKey, error) {
		pemBytes, err := i.store.Load(ctx, i.accountKeyPath())
		if err != nil {
			return nil, err
		}
		k, err := certmagic.PEMDecodePrivateKey(pemBytes)
		if err != nil {
			return nil, fmt.Errorf("decode ACME account key: %w", err)
		}
		ek, ok := k.(*ecdsa.PrivateKey)
		if !ok {
			return nil, fmt.Errorf("ACME account key is a %T, want ECDSA", k)
		}
		return ek, nil
	}
	if k, err := load(); !errors.Is(err, fs.ErrNotExist) {
		return k, err
	}
	lock := "acme_account_" + i.key
	if err := i.store.Lock(ctx, lock); err != nil {
		return nil, err
	}
	defer func() { _ = i.store.Unlock(context.WithoutCancel(ctx), lock) }()
	if k, err := load(); !errors.Is(err, fs.ErrNotExist) {
		return k, err
	}
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	pemBytes, err := certmagic.PEMEncodePrivateKey(k)
	if err != nil {
		return nil, err
	}
	if err := i.store.Store(ctx, i.accountKeyPath(), pemBytes); err != nil {
		return nil, err
	}
	return k, nil
}

func (i *issuer) challengeKey(identifier string) string {
	return path.Join("acme", i.key, "challenges", strings.ToLower(identifier)+".json")
}

// solver presents HTTP-01 and TLS-ALPN-01 challenges by storing them;
// the data plane answers from there.
type solver struct{ i *issuer }

func (s solver) Present(ctx context.Context, chal acme.Challenge) error {
	data, err := json.Marshal(chal)
	if err != nil {
		return err
	}
	id := strings.ToLower(chal.Identifier.Value)
	s.i.localMu.Lock()
	s.i.local[id] = chal
	s.i.localMu.Unlock()
	if err := s.i.store.Store(ctx, s.i.challengeKey(id), data); err != nil {
		return fmt.Errorf("publish %s challenge for %s: %w", chal.Type, id, err)
	}
	s.i.chal.present(chal)
	return nil
}

func (s solver) CleanUp(ctx context.Context, chal acme.Challenge) error {
	id := strings.ToLower(chal.Identifier.Value)
	s.i.localMu.Lock()
	if c, ok := s.i.local[id]; ok && c.Token == chal.Token {
		delete(s.i.local, id)
	}
	s.i.localMu.Unlock()
	s.i.chal.cleanUp(chal)
	return s.i.store.Delete(context.WithoutCancel(ctx), s.i.challengeKey(id))
}

// challenge returns the challenge in progress for identifier: the one this
// host presented, else the one in the store (presented by another host).
func (i *issuer) challenge(ctx context.Context, identifier string) (acme.Challenge, bool) {
	i.localMu.Lock()
	c, ok := i.local[identifier]
	i.localMu.Unlock()
	if ok {
		return c, true
	}
	data, err := i.store.Load(ctx, i.challengeKey(identifier))
	if err != nil {
		return acme.Challenge{}, false
	}
	if err := json.Unmarshal(data, &c); err != nil || c.Identifier.Value == "" {
		return acme.Challenge{}, false
	}
	return c, true
}
