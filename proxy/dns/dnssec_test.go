package dns

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	mdns "github.com/miekg/dns"
	"google.golang.org/protobuf/encoding/prototext"

	"github.com/teapot-lb/teapot-lb/api/observe"
	pb "github.com/teapot-lb/teapot-lb/api/proto/teapotv1"
)

// memKeys is a KeyStore in memory, with one lock for all names.
type memKeys struct {
	sem    chan struct{}
	mu     sync.Mutex
	m      map[string][]byte
	stores int
}

func newMemKeys() *memKeys { return &memKeys{sem: make(chan struct{}, 1), m: map[string][]byte{}} }

func (k *memKeys) Lock(ctx context.Context, _ string) error {
	select {
	case k.sem <- struct{}{}:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (k *memKeys) Unlock(context.Context, string) error { <-k.sem; return nil }

func (k *memKeys) Load(_ context.Context, key string) ([]byte, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if b, ok := k.m[key]; ok {
		return b, nil
	}
	return nil, fs.ErrNotExist
}

func (k *memKeys) Store(_ context.Context, key string, v []byte) error {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.m[key] = v
	k.stores++
	return nil
}

func (k *memKeys) Delete(_ context.Context, key string) error {
	k.mu.Lock()
	defer k.mu.Unlock()
	delete(k.m, key)
	return nil
}

// signedConfig signs acme.example (not lb.example.com), with response-rate
// limiting off.
func signedConfig(keys KeyStore) Config {
	cfg := testConfig()
	cfg.ResponsesPerSecond = -1
	cfg.DNSSEC = []string{"acme.example."}
	cfg.Keys = keys
	return cfg
}

// startSigned serves testState (and more) signed and waits for the
// zones' keys.
func startSigned(t *testing.T, cfg Config, more ...*pb.Object) (*Server, string) {
	t.Helper()
	s, addr := startServer(t, cfg, append(testState(), more...))
	for _, z := range cfg.DNSSEC {
		for deadline := time.Now().Add(10 * time.Second); s.sec.key(mdns.CanonicalName(z)) == nil; {
			if time.Now().After(deadline) {
				t.Fatalf("the key of %s was not loaded", z)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	return s, addr
}

// askDO queries with EDNS0 and DO (and CO when co) over network.
func askDO(t *testing.T, network, addr, name string, qtype uint16, co bool) *mdns.Msg {
	t.Helper()
	q := query(name, qtype)
	q.SetEdns0(1232, true)
	if co {
		q.IsEdns0().SetCo(true)
	}
	m, _, err := (&mdns.Client{Net: network, Timeout: 5 * time.Second, UDPSize: 1232}).Exchange(q, addr)
	if err != nil {
		t.Fatalf("%s %s: %v", name, mdns.TypeToString[qtype], err)
	}
	return m
}

// verifySection checks that every RRset of rrs has a valid RRSIG by key
// and returns the RRsets' types.
func verifySection(t *testing.T, what string, rrs []mdns.RR, key *mdns.DNSKEY) []string {
	t.Helper()
	sets := map[string][]mdns.RR{}
	sigs := map[string]*mdns.RRSIG{}
	var order []string
	for _, rr := range rrs {
		h := rr.Header()
		if h.Rrtype == mdns.TypeOPT {
			continue
		}
		if sig, ok := rr.(*mdns.RRSIG); ok {
			sigs[strings.ToLower(h.Name)+"/"+mdns.TypeToString[sig.TypeCovered]] = sig
			continue
		}
		k := strings.ToLower(h.Name) + "/" + mdns.TypeToString[h.Rrtype]
		if sets[k] == nil {
			order = append(order, k)
		}
		sets[k] = append(sets[k], rr)
	}
	for _, k := range order {
		sig := sigs[k]
		if sig == nil {
			t.Fatalf("%s: %s has no RRSIG", what, k)
		}
		if err := sig.Verify(key, sets[k]); err != nil {
			t.Fatalf("%s: RRSIG of %s does not verify: %v", what, k, err)
		}
		if !sig.ValidityPeriod(time.Now()) {
			t.Fatalf("%s: RRSIG of %s not valid now", what, k)
		}
		if sig.KeyTag != key.KeyTag() || sig.Algorithm != mdns.ECDSAP256SHA256 {
			t.Fatalf("%s: RRSIG of %s: key tag %d, algorithm %d", what, k, sig.KeyTag, sig.Algorithm)
		}
	}
	return order
}

func nsecOf(m *mdns.Msg) *mdns.NSEC {
	for _, rr := range append(append([]mdns.RR{}, m.Answer...), m.Ns...) {
		if n, ok := rr.(*mdns.NSEC); ok {
			return n
		}
	}
	return nil
}

func bitmap(n *mdns.NSEC) string {
	var out []string
	for _, t := range n.TypeBitMap {
		out = append(out, mdns.TypeToString[t])
	}
	return strings.Join(out, " ")
}

// TestSignedAnswersVerify asks a signed zone over real sockets and checks
// every answer with miekg/dns's RRSIG.Verify against the zone's DNSKEY,
// which signs itself: positive answers, a wildcard, names that do not
// exist (NOERROR with a minimal NSEC, NXDOMAIN with CO), NODATA, empty
// non-terminals; without DO and in an unsigned zone nothing is signed.
func TestSignedAnswersVerify(t *testing.T) {
	t.Parallel()
	s, addr := startSigned(t, signedConfig(newMemKeys()))

	km := askDO(t, "udp", addr, "acme.example.", mdns.TypeDNSKEY, false)
	if len(km.Answer) != 2 {
		t.Fatalf("DNSKEY: %v", km)
	}
	key := km.Answer[0].(*mdns.DNSKEY)
	if key.Flags != 257 || key.Algorithm != mdns.ECDSAP256SHA256 {
		t.Fatalf("DNSKEY flags %d algorithm %d", key.Flags, key.Algorithm)
	}
	verifySection(t, "DNSKEY", km.Answer, key)

	for _, c := range []struct {
		name   string
		qtype  uint16
		co     bool
		rcode  int
		answer string // the answer's RRsets
		nsec   string // the NSEC's owner and bitmap ("" for none)
	}{
		{"shop.acme.example.", mdns.TypeA, false, mdns.RcodeSuccess, "shop.acme.example./A", ""},
		{"ShOp.AcMe.ExAmPlE.", mdns.TypeA, false, mdns.RcodeSuccess, "shop.acme.example./A", ""},
		{"six.acme.example.", mdns.TypeAAAA, false, mdns.RcodeSuccess, "six.acme.example./AAAA", ""},
		{"x.y.apps.acme.example.", mdns.TypeA, false, mdns.RcodeSuccess, "x.y.apps.acme.example./A", ""},
		{"acme.example.", mdns.TypeSOA, false, mdns.RcodeSuccess, "acme.example./SOA", ""},
		{"acme.example.", mdns.TypeNS, false, mdns.RcodeSuccess, "acme.example./NS", ""},
		{"acme.example.", mdns.TypeANY, false, mdns.RcodeSuccess, "acme.example./HINFO", ""},
		{"nope.acme.example.", mdns.TypeA, false, mdns.RcodeSuccess, "", "nope.acme.example. RRSIG NSEC NXNAME"},
		{"nope.acme.example.", mdns.TypeA, true, mdns.RcodeNameError, "", "nope.acme.example. RRSIG NSEC NXNAME"},
		{"shop.acme.example.", mdns.TypeAAAA, false, mdns.RcodeSuccess, "", "shop.acme.example. A RRSIG NSEC"},
		{"shop.acme.example.", mdns.TypeTXT, false, mdns.RcodeSuccess, "", "shop.acme.example. A RRSIG NSEC"},
		{"apps.acme.example.", mdns.TypeA, false, mdns.RcodeSuccess, "", "apps.acme.example. RRSIG NSEC"},
		{"acme.example.", mdns.TypeTXT, false, mdns.RcodeSuccess, "", "acme.example. NS SOA RRSIG NSEC DNSKEY"},
		{"shop.acme.example.", mdns.TypeNSEC, false, mdns.RcodeSuccess, "shop.acme.example./NSEC", ""},
	} {
		what := fmt.Sprintf("%s %s co=%t", c.name, mdns.TypeToString[c.qtype], c.co)
		for _, network := range []string{"udp", "tcp"} {
			m := askDO(t, network, addr, c.name, c.qtype, c.co)
			if m.Rcode != c.rcode || !m.Authoritative {
				t.Fatalf("%s over %s: rcode %s aa %t", what, network, mdns.RcodeToString[m.Rcode], m.Authoritative)
			}
			if opt := m.IsEdns0(); opt == nil || !opt.Do() {
				t.Fatalf("%s: the response does not echo DO", what)
			}
			if got := strings.Join(verifySection(t, what, m.Answer, key), ","); got != c.answer {
				t.Fatalf("%s: answer %q, want %q", what, got, c.answer)
			}
			verifySection(t, what, m.Ns, key)
			verifySection(t, what, m.Extra, key)
			n := nsecOf(m)
			switch {
			case c.nsec == "" && n != nil && c.qtype != mdns.TypeNSEC:
				t.Fatalf("%s: an NSEC in a positive answer", what)
			case c.nsec != "":
				if n == nil {
					t.Fatalf("%s: no NSEC: %v", what, m)
				}
				if got := strings.ToLower(n.Hdr.Name) + " " + bitmap(n); got != c.nsec {
					t.Fatalf("%s: NSEC %q, want %q", what, got, c.nsec)
				}
				if want := `\000.` + strings.ToLower(c.name); n.NextDomain != want {
					t.Fatalf("%s: NSEC next %q, want %q (it must cover no other name)", what, n.NextDomain, want)
				}
			}
		}
	}
	// A member down: the NODATA that follows says the name has no A now.
	s.SetReadyFor(map[string]string{"acme/v6": "no member is up"}, nil)
	if n := nsecOf(askDO(t, "udp", addr, "six.acme.example.", mdns.TypeAAAA, false)); n == nil || bitmap(n) != "RRSIG NSEC" {
		t.Fatalf("NODATA of a name whose address is down: NSEC %v", n)
	}
	// Without DO: nothing signed, NXDOMAIN stays NXDOMAIN.
	if m := ask(t, "udp", addr, "nope.acme.example.", mdns.TypeA, true); m.Rcode != mdns.RcodeNameError || nsecOf(m) != nil {
		t.Fatalf("without DO: %v", m)
	}
	for _, rr := range ask(t, "udp", addr, "shop.acme.example.", mdns.TypeA, true).Answer {
		if rr.Header().Rrtype == mdns.TypeRRSIG {
			t.Fatal("an RRSIG without DO")
		}
	}
	// A zone not signed: DO changes nothing.
	if m := askDO(t, "udp", addr, "x.acme.lb.example.com.", mdns.TypeA, false); len(m.Answer) != 1 {
		t.Fatalf("unsigned zone with DO: %v", m)
	}
	if m := askDO(t, "udp", addr, "nope.lb.example.com.", mdns.TypeA, false); m.Rcode != mdns.RcodeNameError || nsecOf(m) != nil {
		t.Fatalf("unsigned zone, a name that does not exist, with DO: %v", m)
	}
}

// TestSignaturesCachedPerRRset: a flood of queries for one name costs one
// signature, not one per query; a changed RRset costs one more; a cached
// signature is made again once it is SigRefresh old.
func TestSignaturesCachedPerRRset(t *testing.T) {
	t.Parallel()
	s, addr := startSigned(t, signedConfig(newMemKeys()))
	askDO(t, "udp", addr, "shop.acme.example.", mdns.TypeA, false)
	signed := s.sec.stats.Signed.Load()
	c := &mdns.Client{Net: "udp", Timeout: 5 * time.Second, UDPSize: 1232}
	q := query("shop.acme.example.", mdns.TypeA)
	q.SetEdns0(1232, true)
	const flood = 2000
	for range flood {
		if _, _, err := c.Exchange(q, addr); err != nil {
			t.Fatal(err)
		}
	}
	if n := s.sec.stats.Signed.Load() - signed; n != 0 {
		t.Fatalf("%d queries for one name made %d signatures", flood, n)
	}
	if n := s.sec.stats.Cached.Load(); n < flood {
		t.Fatalf("%d signatures answered from the cache, want %d", n, flood)
	}
	s.SetReadyFor(map[string]string{"acme/shop2": "no member is up"}, nil)
	for range 100 {
		askDO(t, "udp", addr, "shop.acme.example.", mdns.TypeA, false)
	}
	if n := s.sec.stats.Signed.Load() - signed; n != 1 {
		t.Fatalf("a changed RRset asked 100 times made %d signatures, want 1", n)
	}

	// Refresh: the signer itself, with the clock as an argument.
	zk := s.sec.key("acme.example.")
	set := []mdns.RR{addrRR("shop.acme.example.", netip.MustParseAddr("192.0.2.10"), 30)}
	now := time.Now()
	first, err := s.sec.rrsig(zk, set, "acme", now)
	if err != nil {
		t.Fatal(err)
	}
	again, _ := s.sec.rrsig(zk, set, "acme", now.Add(SigRefresh-time.Minute))
	if again.Inception != first.Inception {
		t.Fatal("a signature younger than SigRefresh was made again")
	}
	later, _ := s.sec.rrsig(zk, set, "acme", now.Add(SigRefresh))
	if later.Inception == first.Inception || later.Verify(zk.dnskey, set) != nil {
		t.Fatal("a signature SigRefresh old was not made again")
	}
	if left := time.Unix(int64(later.Expiration), 0).Sub(now.Add(SigRefresh)); left < SigValidity-SigRefresh {
		t.Fatalf("a refreshed signature lives %s", left)
	}
}

// TestSignatureBudget: names a flood makes new signatures for (random
// names under a tenant's wildcard) spend that tenant's signature budget:
// past it UDP gets no answer and TCP SERVFAIL, while the zone's own names
// and another tenant's new names are still signed.
func TestSignatureBudget(t *testing.T) {
	t.Parallel()
	cfg := signedConfig(newMemKeys())
	cfg.DNSSEC = append(cfg.DNSSEC, "lb.example.com.")
	cfg.SignaturesPerTenant = 5
	cfg.QueriesPerTenant = 1_000_000
	s, addr := startSigned(t, cfg, tenant("globex", "globex.lb.example.com"), lb("globex", "g", "192.0.2.10", "*.globex.lb.example.com"))
	servfail := 0
	for i := range 40 {
		if m := askDO(t, "tcp", addr, fmt.Sprintf("r%d.apps.acme.example.", i), mdns.TypeA, false); m.Rcode == mdns.RcodeServerFailure {
			servfail++
		}
	}
	if servfail < 30 || s.sec.stats.OverBudget.Load() < 30 {
		t.Fatalf("40 new names at a budget of 5 a second: %d SERVFAIL, %d over budget", servfail, s.sec.stats.OverBudget.Load())
	}
	q := query("r99.apps.acme.example.", mdns.TypeA)
	q.SetEdns0(1232, true)
	if m, _, err := (&mdns.Client{Net: "udp", Timeout: 100 * time.Millisecond}).Exchange(q, addr); err == nil {
		t.Fatalf("over budget over UDP: answered %v", m)
	}
	// Cached signatures cost nothing: the first names still answer.
	if m := askDO(t, "udp", addr, "r0.apps.acme.example.", mdns.TypeA, false); len(m.Answer) != 2 {
		t.Fatalf("a name signed before: %v", m)
	}
	if m := askDO(t, "udp", addr, "acme.example.", mdns.TypeSOA, false); len(m.Answer) != 2 {
		t.Fatalf("the apex while the tenant is over its budget: %v", m)
	}
	for i := range 3 {
		if m := askDO(t, "udp", addr, fmt.Sprintf("n%d.globex.lb.example.com.", i), mdns.TypeA, false); len(m.Answer) != 2 {
			t.Fatalf("another tenant's new name while acme is over its budget: %v", m)
		}
	}
}

// TestZoneKeyKeptInTheStore: the key is made once and kept in the store;
// a second host loads it; explain shows the DS and DNSKEY, never the
// private key; while the key is not loaded, DO answers are SERVFAIL.
func TestZoneKeyKeptInTheStore(t *testing.T) {
	t.Parallel()
	keys := newMemKeys()
	s1, _ := startSigned(t, signedConfig(keys))
	s2, addr2 := startSigned(t, signedConfig(keys))
	k1, k2 := s1.sec.key("acme.example."), s2.sec.key("acme.example.")
	if keys.stores != 1 || k1.dnskey.PublicKey != k2.dnskey.PublicKey {
		t.Fatalf("%d keys stored; hosts sign with %d and %d", keys.stores, k1.tag, k2.tag)
	}
	pemKey, _ := keys.Load(context.Background(), "dnssec/acme.example/csk.pem")
	if !strings.Contains(string(pemKey), "PRIVATE KEY") {
		t.Fatalf("stored: %q", pemKey)
	}
	var h pb.HostObservation
	s2.Observe(observe.Filter{}, &h)
	if len(h.GetDnsZones()) != 2 {
		t.Fatalf("zones observed: %v", h.GetDnsZones())
	}
	z := h.GetDnsZones()[0]
	ds := k1.DS()
	if z.GetZone() != "acme.example." || !z.GetSigned() || z.GetKeyTag() != uint32(k1.tag) ||
		!strings.HasPrefix(z.GetDs(), "acme.example. 3600 IN DS "+fmt.Sprint(k1.tag)+" 13 2 ") || !strings.Contains(z.GetDs(), strings.ToUpper(ds.Digest)) {
		t.Fatalf("observed %v", z)
	}
	if h.GetDnsZones()[1].GetSigned() {
		t.Fatal("lb.example.com observed signed")
	}
	text := prototext.Format(&h)
	d := k1.priv.D.Text(16)
	if strings.Contains(text, "PRIVATE") || strings.Contains(strings.ToLower(text), d) || strings.Contains(text, string(pemKey[40:80])) {
		t.Fatal("the observation shows the private key")
	}

	// A host whose store does not answer yet: SERVFAIL with DO, answers
	// without it, and explain says why.
	cfg := signedConfig(blockedKeys{})
	s3, addr3 := startServer(t, cfg, testState())
	if m := askDO(t, "udp", addr3, "shop.acme.example.", mdns.TypeA, false); m.Rcode != mdns.RcodeServerFailure {
		t.Fatalf("no key yet: rcode %s", mdns.RcodeToString[m.Rcode])
	}
	if m := ask(t, "udp", addr3, "shop.acme.example.", mdns.TypeA, true); len(m.Answer) != 2 {
		t.Fatalf("no key yet, without DO: %v", m)
	}
	var h3 pb.HostObservation
	s3.Observe(observe.Filter{}, &h3)
	if z := h3.GetDnsZones()[0]; z.GetDs() != "" || z.GetError() == "" {
		t.Fatalf("observed without a key: %v", z)
	}
	_ = addr2
}

// blockedKeys is a store that never answers (no leader).
type blockedKeys struct{}

func (blockedKeys) Lock(ctx context.Context, _ string) error {
	<-ctx.Done()
	return ctx.Err()
}
func (blockedKeys) Unlock(context.Context, string) error { return nil }
func (blockedKeys) Load(context.Context, string) ([]byte, error) {
	return nil, errors.New("no leader")
}
func (blockedKeys) Store(context.Context, string, []byte) error { return errors.New("no leader") }
func (blockedKeys) Delete(context.Context, string) error        { return errors.New("no leader") }

func TestDNSSECRefusals(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		st   Settings
		want string
	}{
		{Settings{Addrs: "127.0.0.1:0", Zones: "acme.example", NameServers: "ns1.acme.example=192.0.2.53", DNSSEC: "other.example"},
			"--dns-dnssec other.example.: not a zone of --dns-zones"},
		{Settings{DNSSEC: "acme.example"}, "--dns-dnssec acme.example.: not a zone of --dns-zones"},
		{Settings{Addrs: "127.0.0.1:0", Zones: "acme.example", NameServers: "ns1.acme.example=192.0.2.53", DNSSEC: "*.x"},
			`--dns-dnssec: zone "*.x": give a domain name`},
		{Settings{Addrs: "127.0.0.1:0", Zones: "acme.example", NameServers: "ns1.acme.example=192.0.2.53", DNSSEC: "acme.example", SignaturesPerTenant: -1},
			"--dns-signatures-per-tenant -1"},
	} {
		if _, err := c.st.Config(); err == nil || !strings.Contains(err.Error(), c.want) || !errors.Is(err, ErrConfig) {
			t.Errorf("%+v: %v, want %q", c.st, err, c.want)
		}
	}
	cfg := signedConfig(nil)
	if _, err := New(cfg); err == nil {
		t.Error("signing without a key store")
	}
}

// TestSignedZonesNotTransferred: with secondaries, a signed zone is not
// transferred (its secondary would answer it unsigned: NOTAUTH), the
// others are.
func TestSignedZonesNotTransferred(t *testing.T) {
	t.Parallel()
	cfg := xfrConfig("127.0.0.1:9")
	cfg.DNSSEC, cfg.Keys = []string{"acme.example."}, newMemKeys()
	_, addr := startSigned(t, cfg)
	for deadline := time.Now().Add(10 * time.Second); ; {
		rrs, err := transfer("127.0.0.1", addr, "lb.example.com.", testSecret, 0)
		if err == nil && len(rrs) > 2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the unsigned zone: %v %v", rrs, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if rrs, err := transfer("127.0.0.1", addr, "acme.example.", testSecret, 0); err == nil || len(rrs) > 0 {
		t.Fatalf("the signed zone transferred: %v %v", rrs, err)
	}
}

// signedBench is a server of testState with acme.example signed, every
// VIP held and every load balancer ready, without sockets.
func signedBench(b testing.TB) (*Server, *Table) {
	cfg := signedConfig(newMemKeys())
	cfg.SignaturesPerTenant = 1 << 30
	cfg.Addrs = nil
	s := &Server{cfg: cfg, sec: newSigner(cfg.DNSSEC, cfg.SignaturesPerTenant), ready: map[string]string{}}
	k, err := loadOrCreateKey(context.Background(), cfg.Keys, "acme.example.")
	if err != nil {
		b.Fatal(err)
	}
	s.sec.setKey(k)
	s.HeldHere()
	ready := map[string]string{}
	for _, o := range testState() {
		if l := o.GetLoadBalancer(); l != nil {
			ready[l.GetTenant()+"/"+l.GetName()] = ""
		}
	}
	s.SetReady(ready)
	return s, Compile(cfg, testState(), 7)
}

// benchSigned answers and signs name/A with DO, as ServeDNS does.
func benchSigned(b *testing.B, s *Server, t *Table, name func(i int) string) {
	b.ReportAllocs()
	now := time.Now()
	for i := 0; b.Loop(); i++ {
		q := query(name(i), mdns.TypeA)
		q.SetEdns0(1232, true)
		m, res := t.Answer(q, s, nil)
		m.SetEdns0(MaxUDPSize, true)
		if err := s.sec.secure(m, q, res, t, s, now); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkSignedAnswerCached: one name asked again and again (its
// signature cached).
func BenchmarkSignedAnswerCached(b *testing.B) {
	s, t := signedBench(b)
	benchSigned(b, s, t, func(int) string { return "shop.acme.example." })
	if s.sec.stats.Signed.Load() != 1 {
		b.Fatalf("%d signatures", s.sec.stats.Signed.Load())
	}
}

// BenchmarkSignedAnswerUncached: a new name under a wildcard each time
// (a signature made per answer).
func BenchmarkSignedAnswerUncached(b *testing.B) {
	s, t := signedBench(b)
	benchSigned(b, s, t, func(i int) string { return fmt.Sprintf("n%d.apps.acme.example.", i) })
}

// BenchmarkUnsignedAnswer is the same answer without DNSSEC.
func BenchmarkUnsignedAnswer(b *testing.B) {
	s, t := signedBench(b)
	b.ReportAllocs()
	for b.Loop() {
		q := query("shop.acme.example.", mdns.TypeA)
		q.SetEdns0(1232, false)
		t.Answer(q, s, nil)
	}
}

// TestSetKey: an RRset asked in another case shares its cache key; rdata
// that differs only in case does not.
func TestSetKey(t *testing.T) {
	t.Parallel()
	rr := func(s string) mdns.RR {
		r, err := mdns.NewRR(s)
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	key := func(rrs ...mdns.RR) string {
		var arr [64]byte
		b, ok := setKey(arr[:0], "acme.example.", rrs)
		if !ok {
			t.Fatal("no key")
		}
		return string(b)
	}
	long := strings.Repeat("x", 300)
	for _, c := range []struct {
		a, b []mdns.RR
		same bool
	}{
		{[]mdns.RR{rr("Shop.ACME.example. 30 IN A 192.0.2.10"), rr("SHOP.acme.example. 30 IN A 192.0.2.11")},
			[]mdns.RR{rr("shop.acme.example. 30 IN A 192.0.2.10"), rr("shop.acme.example. 30 IN A 192.0.2.11")}, true},
		{[]mdns.RR{rr("shop.acme.example. 30 IN A 192.0.2.10")}, []mdns.RR{rr("shop.acme.example. 31 IN A 192.0.2.10")}, false},
		{[]mdns.RR{rr(`_acme-challenge.acme.example. 30 IN TXT "AbC"`)}, []mdns.RR{rr(`_acme-challenge.acme.example. 30 IN TXT "abc"`)}, false},
		// rdata of 3 bytes after one of 259: the walk reads each length.
		{[]mdns.RR{rr(`a.acme.example. 30 IN TXT "` + long[:255] + `" "xxx"`), rr(`a.ACME.example. 30 IN TXT "Q"`)},
			[]mdns.RR{rr(`A.acme.example. 30 IN TXT "` + long[:255] + `" "xxx"`), rr(`a.acme.example. 30 IN TXT "Q"`)}, true},
		{[]mdns.RR{rr(`a.acme.example. 30 IN TXT "` + long[:255] + `" "xxx"`), rr(`A.acme.example. 30 IN TXT "Q"`)},
			[]mdns.RR{rr(`a.acme.example. 30 IN TXT "` + long[:255] + `" "xxx"`), rr(`a.acme.example. 30 IN TXT "q"`)}, false},
	} {
		if got := key(c.a...) == key(c.b...); got != c.same {
			t.Errorf("%v and %v: same key %t, want %t", c.a, c.b, got, c.same)
		}
	}
}

// FuzzSecure signs the answer to any message that unpacks, as the server
// does for a query with DO: it must not panic, and what it builds must
// pack.
func FuzzSecure(f *testing.F) {
	for _, q := range []*mdns.Msg{query("shop.acme.example.", mdns.TypeA), query("nope.a.b.apps.acme.example.", mdns.TypeAAAA),
		query("acme.example.", mdns.TypeDNSKEY), query("Nope.acme.example.", mdns.TypeNSEC),
		query(strings.Repeat("a.", 120)+"acme.example.", mdns.TypeA)} {
		b, _ := q.Pack()
		f.Add(b)
	}
	s, tab := signedBench(f)
	now := time.Now()
	f.Fuzz(func(t *testing.T, b []byte) {
		var req mdns.Msg
		if err := req.Unpack(b); err != nil {
			return
		}
		if req.IsEdns0() == nil {
			req.SetEdns0(1232, true)
		}
		m, res := tab.Answer(&req, s, nil)
		if m == nil {
			return
		}
		if err := s.sec.secure(m, &req, res, tab, s, now); err != nil {
			return
		}
		if _, err := m.Pack(); err != nil {
			t.Fatalf("signed response does not pack: %v\n%v", err, m)
		}
	})
}
