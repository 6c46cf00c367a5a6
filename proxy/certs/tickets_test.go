package certs

import (
	"crypto/tls"
	"io"
	"sync"
	"testing"
	"time"

	"github.com/teapot-lb/teapot-lb/api/porttest"
	pb "github.com/teapot-lb/teapot-lb/api/proto/teapotv1"
	"github.com/teapot-lb/teapot-lb/proxy/snapshot"
)

// leakyCache is a client session cache that offers the last session it got
// to every server, whatever its name: what an attacker holding a ticket of
// one listener tries on another.
type leakyCache struct {
	mu   sync.Mutex
	last *tls.ClientSessionState
}

func (c *leakyCache) Get(string) (*tls.ClientSessionState, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.last, c.last != nil
}

func (c *leakyCache) Put(_ string, s *tls.ClientSessionState) {
	if s == nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.last = s
}

// TestSessionsNeverResumeAcrossTenants: a TLS 1.3 session of tenant acme's
// listener does not resume on globex's listener (nor on another load
// balancer of acme), so globex's handler is never reached without globex's
// certificate; on the same listener, and on another host with the same
// secret, it resumes.
func TestSessionsNeverResumeAcrossTenants(t *testing.T) {
	ca := newTestCA(t)
	store := newMemStore()
	store.put(acmeTenant("acme", 0, "acme.example"))
	store.put(acmeTenant("globex", 0, "globex.example"))
	svc := NewService(store)
	for _, u := range []struct{ tenant, host string }{{"acme", "shop.acme.example"}, {"globex", "shop.globex.example"}} {
		certPEM, keyPEM := ca.issue(t, time.Now().Add(-time.Hour), time.Now().Add(24*time.Hour), u.host)
		if _, err := svc.Upload(ctxT(t), &pb.UploadCertificateRequest{Tenant: u.tenant, Name: "shop", CertPem: certPEM, KeyPem: keyPEM}); err != nil {
			t.Fatal(err)
		}
	}
	lis := func(tenant, lb string) *snapshot.Listener {
		l := listener(tenant, false, []string{"shop"})
		l.LB = tenant + "/" + lb
		return l
	}
	host := func() func(*snapshot.Listener) string {
		m, err := New(Config{Store: store, Host: "h", CA: "https://127.0.0.1:1/dir", TicketSecret: []byte("cluster secret"), Logger: testLogger(t)})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(m.Close)
		m.Update(store.objectsWith())
		m.reconcile(m.latest.Load())
		term := m.Terminator(greeter{})
		return func(l *snapshot.Listener) string {
			addr := porttest.Addr(t, "127.0.0.1")
			serveTLS(t, addr, term, l)
			return addr
		}
	}
	h1, h2 := host(), host()
	acme, acmeOther, globex := h1(lis("acme", "web")), h1(lis("acme", "other")), h1(lis("globex", "web"))
	acmeOnH2 := h2(lis("acme", "web"))

	// dial reports whether the session resumed and what the handler said.
	dial := func(cache tls.ClientSessionCache, addr, name string) (resumed bool, said string, err error) {
		c, err := tls.Dial("tcp", addr, &tls.Config{ServerName: name, RootCAs: ca.pool, ClientSessionCache: cache, MinVersion: tls.VersionTLS13})
		if err != nil {
			return false, "", err
		}
		defer c.Close()
		b, _ := io.ReadAll(c) // TLS 1.3 tickets come after the handshake
		return c.ConnectionState().DidResume, string(b), nil
	}
	fresh := func() *leakyCache {
		c := &leakyCache{}
		if resumed, said, err := dial(c, acme, "shop.acme.example"); err != nil || resumed || said == "" || c.last == nil {
			t.Fatalf("first handshake: resumed %v, said %q, ticket %v, %v", resumed, said, c.last != nil, err)
		}
		return c
	}

	t.Run("acme's session with acme's name on globex's listener", func(t *testing.T) {
		resumed, said, err := dial(fresh(), globex, "shop.acme.example")
		if err == nil {
			t.Fatalf("handshake succeeded (resumed %v); globex's handler said %q", resumed, said)
		}
	})
	t.Run("acme's session offered to globex's listener under globex's name", func(t *testing.T) {
		resumed, said, err := dial(fresh(), globex, "shop.globex.example")
		if err != nil || resumed || said == "" {
			t.Fatalf("resumed %v, said %q, %v; want a full handshake with globex's certificate", resumed, said, err)
		}
	})
	t.Run("another load balancer of the same tenant", func(t *testing.T) {
		if resumed, _, err := dial(fresh(), acmeOther, "shop.acme.example"); err != nil || resumed {
			t.Fatalf("resumed %v, %v; want a full handshake", resumed, err)
		}
	})
	t.Run("the same listener resumes", func(t *testing.T) {
		if resumed, said, err := dial(fresh(), acme, "shop.acme.example"); err != nil || !resumed || said == "" {
			t.Fatalf("resumed %v, said %q, %v", resumed, said, err)
		}
	})
	t.Run("the same listener on another host resumes", func(t *testing.T) {
		if resumed, said, err := dial(fresh(), acmeOnH2, "shop.acme.example"); err != nil || !resumed || said == "" {
			t.Fatalf("resumed %v, said %q, %v", resumed, said, err)
		}
	})
}
