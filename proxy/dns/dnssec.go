package dns

import (
	"errors"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	mdns "github.com/miekg/dns"
)

// Online signing (--dns-dnssec): see DESIGN.md, "DNSSEC".
const (
	// SigValidity is how long a signature is valid after it is made;
	// sigBackdate is how far before that its inception lies (clock skew).
	SigValidity = 72 * time.Hour
	sigBackdate = time.Hour
	// SigRefresh: a cached signature older than this is made again, so a
	// signature answered has at least SigValidity-SigRefresh (48 h) to
	// live: more than any TTL (InfraTTL, 1 h).
	SigRefresh = 24 * time.Hour
	// MaxCachedSignatures bounds the cache: two generations of this many
	// signatures (the older is dropped when the newer fills).
	MaxCachedSignatures = 50_000
	// DefaultSignaturesPerTenant is the rate of new signatures (those not
	// cached) one tenant's names may cost a host a second; each zone's
	// other names (apex, NS, names that do not exist) have a budget of
	// their own of the same rate.
	DefaultSignaturesPerTenant = 500
)

// errSignBudget: the signatures of the name's tenant (or zone) are spent.
var errSignBudget = errors.New("dnssec: signature budget spent")

// errTooBig: an RRset over 64 KiB is not signed (none of ours is).
var errTooBig = errors.New("dnssec: record set too large to sign")

// signer signs the answers of the zones of --dns-dnssec: one key per
// zone, signatures cached per RRset.
type signer struct {
	zones map[string]bool
	keys  atomic.Pointer[map[string]*zoneKeys]
	// reloadMu orders the reloads of keys from the store (reload).
	reloadMu sync.Mutex
	keyMu    sync.Mutex
	errs     map[string]string
	budget   *tenantBudget

	mu       sync.Mutex
	cur, old map[string]*cachedSig
	max      int
	stats    SignStats
}

// SignStats counts the signer's work.
type SignStats struct {
	// Signed are signatures made; Cached those answered from the cache.
	Signed, Cached atomic.Uint64
	// OverBudget are answers not sent (UDP) or SERVFAIL (TCP) because
	// their tenant's signature budget was spent; NoKey answers SERVFAIL
	// because the zone's key was not loaded yet.
	OverBudget, NoKey atomic.Uint64
}

type cachedSig struct {
	sig     *mdns.RRSIG
	refresh int64 // unix seconds
}

func newSigner(zones []string, perTenant int) *signer {
	if len(zones) == 0 {
		return nil
	}
	if perTenant <= 0 {
		perTenant = DefaultSignaturesPerTenant
	}
	sg := &signer{zones: map[string]bool{}, errs: map[string]string{}, budget: newTenantBudget(perTenant),
		cur: map[string]*cachedSig{}, old: map[string]*cachedSig{}, max: MaxCachedSignatures}
	for _, z := range zones {
		sg.zones[mdns.CanonicalName(z)] = true
	}
	sg.keys.Store(&map[string]*zoneKeys{})
	return sg
}

// key is the zone's current key (nil: not loaded yet).
func (sg *signer) key(zone string) *zoneKey {
	if sg == nil {
		return nil
	}
	if zk := (*sg.keys.Load())[zone]; zk != nil {
		return zk.cur
	}
	return nil
}

// zoneKeysOf is the zone's keys (nil: not loaded yet).
func (sg *signer) zoneKeysOf(zone string) *zoneKeys {
	if sg == nil {
		return nil
	}
	return (*sg.keys.Load())[zone]
}

// setKey makes k its zone's only key.
func (sg *signer) setKey(k *zoneKey) { sg.setKeys(&zoneKeys{cur: k}) }

// setKeys makes zk its zone's keys.
func (sg *signer) setKeys(zk *zoneKeys) {
	sg.keyMu.Lock()
	defer sg.keyMu.Unlock()
	next := map[string]*zoneKeys{}
	for z, x := range *sg.keys.Load() {
		next[z] = x
	}
	next[zk.cur.zone] = zk
	sg.keys.Store(&next)
	delete(sg.errs, zk.cur.zone)
}

func (sg *signer) setKeyErr(zone string, err error) {
	sg.keyMu.Lock()
	defer sg.keyMu.Unlock()
	sg.errs[zone] = err.Error()
}

func (sg *signer) keyErr(zone string) string {
	sg.keyMu.Lock()
	defer sg.keyMu.Unlock()
	return sg.errs[zone]
}

// zoneDNSKEY is the DNSKEY RRset of a signed zone whose key is loaded:
// during a rollover both keys.
func (s *Server) zoneDNSKEY(zone string) []mdns.RR {
	var out []mdns.RR
	for _, k := range s.sec.zoneKeysOf(zone).signing() {
		out = append(out, k.dnskey)
	}
	return out
}

// secure makes m, the answer to req (which set DO) from table t, a signed
// one when its zone is signed: denial of existence by a minimal NSEC at
// the name asked ("black lies", RFC 9824: a name that does not exist gets
// NOERROR and an NSEC whose bitmap holds NXNAME, or NXDOMAIN when the query
// sets the CO flag), and an RRSIG for every RRset. Errors (REFUSED,
// FORMERR, BADVERS) are not signed. It returns ErrNoKey while the zone's
// key is not loaded and errSignBudget when a signature it needs is not
// cached and the budget of the name's tenant (or the zone) is spent.
func (sg *signer) secure(m, req *mdns.Msg, res Result, t *Table, s Serving, now time.Time) error {
	if sg == nil || !sg.zones[res.Zone] || (m.Rcode != mdns.RcodeSuccess && m.Rcode != mdns.RcodeNameError) || len(req.Question) != 1 {
		return nil
	}
	zk := sg.zoneKeysOf(res.Zone).signing()
	if len(zk) == 0 {
		sg.stats.NoKey.Add(1)
		return ErrNoKey
	}
	q := req.Question[0]
	charge := res.Tenant
	if charge == "" {
		charge = "\x00" + res.Zone
	}
	negTTL := t.ttl
	for _, rr := range m.Ns {
		if soa, ok := rr.(*mdns.SOA); ok {
			negTTL = min(soa.Hdr.Ttl, soa.Minttl)
		}
	}
	switch {
	case m.Rcode == mdns.RcodeNameError:
		nsec, ok := blackLie(q.Name, negTTL, []uint16{mdns.TypeRRSIG, mdns.TypeNSEC, mdns.TypeNXNAME})
		if !ok {
			return ErrNoKey
		}
		if opt := req.IsEdns0(); opt == nil || !opt.Co() {
			m.Rcode = mdns.RcodeSuccess
		}
		m.Ns = append(m.Ns, nsec)
	case len(m.Answer) == 0:
		z := t.zoneOf(res.Zone)
		types := t.typesAt(z, strings.ToLower(q.Name), s)
		nsec, ok := blackLie(q.Name, negTTL, types)
		if !ok {
			return ErrNoKey
		}
		if q.Qtype == mdns.TypeNSEC {
			m.Answer, m.Ns = []mdns.RR{nsec}, nil
		} else {
			m.Ns = append(m.Ns, nsec)
		}
	}
	var err error
	if m.Answer, err = sg.signSection(m.Answer, zk, charge, now); err != nil {
		return err
	}
	if m.Ns, err = sg.signSection(m.Ns, zk, charge, now); err != nil {
		return err
	}
	m.Extra, err = sg.signSection(m.Extra, zk, charge, now)
	return err
}

// blackLie is the minimal NSEC at name: the next name is "\000.name", so
// it covers no other name and walks nowhere. ok is false when that next
// name would be too long.
func blackLie(name string, ttl uint32, types []uint16) (*mdns.NSEC, bool) {
	next := "\\000." + strings.ToLower(name)
	var buf [256]byte
	if _, err := mdns.PackDomainName(next, buf[:], 0, nil, false); err != nil {
		return nil, false
	}
	return &mdns.NSEC{Hdr: mdns.RR_Header{Name: name, Rrtype: mdns.TypeNSEC, Class: mdns.ClassINET, Ttl: ttl},
		NextDomain: next, TypeBitMap: types}, true
}

// typesAt is the types name has now, as the NSEC bitmap of a NODATA:
// A and AAAA while an address of that family is answered, the apex's
// SOA, NS and DNSKEY, and RRSIG and NSEC.
func (t *Table) typesAt(z *zone, name string, s Serving) []uint16 {
	types := []uint16{mdns.TypeRRSIG, mdns.TypeNSEC}
	if z == nil {
		return types
	}
	if name == z.name {
		types = append(types, mdns.TypeSOA, mdns.TypeNS, mdns.TypeDNSKEY)
	}
	if challengeTXT(s, name) != nil {
		types = append(types, mdns.TypeTXT)
		slices.Sort(types)
		return types
	}
	var v4, v6 bool
	for _, a := range z.glue[name] {
		v4, v6 = v4 || a.Is4(), v6 || !a.Is4()
	}
	targets, _, _ := t.lookup(z, name)
	for _, tg := range targets {
		if s.Serves(tg) == "" {
			v4, v6 = v4 || tg.Addr.Is4(), v6 || !tg.Addr.Is4()
		}
	}
	if v4 {
		types = append(types, mdns.TypeA)
	}
	if v6 {
		types = append(types, mdns.TypeAAAA)
	}
	slices.Sort(types)
	return types
}

// signSection adds an RRSIG by each of keys for each RRset of rrs (by
// owner and type; OPT, TSIG and RRSIG are not signed).
func (sg *signer) signSection(rrs []mdns.RR, keys []*zoneKey, charge string, now time.Time) ([]mdns.RR, error) {
	n := len(rrs)
	for i := 0; i < n; i++ {
		h := rrs[i].Header()
		switch h.Rrtype {
		case mdns.TypeOPT, mdns.TypeTSIG, mdns.TypeRRSIG:
			continue
		}
		if slices.ContainsFunc(rrs[:i], func(rr mdns.RR) bool { return sameSet(rr.Header(), h) }) {
			continue
		}
		var set []mdns.RR
		for _, rr := range rrs[i:n] {
			if sameSet(rr.Header(), h) {
				set = append(set, rr)
			}
		}
		for _, zk := range keys {
			sig, err := sg.rrsig(zk, set, charge, now)
			if err != nil {
				return nil, err
			}
			rrs = append(rrs, sig)
		}
	}
	return rrs, nil
}

func sameSet(a, b *mdns.RR_Header) bool {
	return a.Rrtype == b.Rrtype && a.Class == b.Class && strings.EqualFold(a.Name, b.Name)
}

// rrsig returns zk's signature of set: the cached one while it is younger
// than SigRefresh, else a new one charged to charge's budget.
func (sg *signer) rrsig(zk *zoneKey, set []mdns.RR, charge string, now time.Time) (*mdns.RRSIG, error) {
	owner := set[0].Header().Name
	var arr [512]byte
	// The key's tag leads the cache key: during a rollover each key has
	// its signature of the set (a new key never shares its tag with the
	// current one: rollKey).
	kb, ok := setKey(append(arr[:0], byte(zk.tag>>8), byte(zk.tag)), zk.zone, set)
	if !ok {
		return nil, errTooBig
	}
	sg.mu.Lock()
	e := sg.cur[string(kb)]
	if e == nil {
		if e = sg.old[string(kb)]; e != nil {
			sg.put(string(kb), e)
		}
	}
	sg.mu.Unlock()
	if e == nil || now.Unix() >= e.refresh {
		if !sg.budget.allow(charge, now) {
			sg.stats.OverBudget.Add(1)
			return nil, errSignBudget
		}
		sig := &mdns.RRSIG{Hdr: mdns.RR_Header{Ttl: set[0].Header().Ttl}, Algorithm: mdns.ECDSAP256SHA256,
			SignerName: zk.zone, KeyTag: zk.tag,
			Inception: uint32(now.Add(-sigBackdate).Unix()), Expiration: uint32(now.Add(SigValidity).Unix())}
		if err := sig.Sign(zk.priv, set); err != nil {
			return nil, err
		}
		sg.stats.Signed.Add(1)
		e = &cachedSig{sig: sig, refresh: now.Add(SigRefresh).Unix()}
		sg.mu.Lock()
		sg.put(string(kb), e)
		sg.mu.Unlock()
	} else {
		sg.stats.Cached.Add(1)
	}
	c := *e.sig
	c.Hdr.Name = owner
	return &c, nil
}

// setKey appends to b the cache key of set: the zone and the records in
// wire form, their owner in lower case (the same RRset asked in another
// case shares the signature). It packs a message rather than each record:
// PackRR writes the shared record's Rdlength. ok is false for a set over
// 64 KiB.
func setKey(b []byte, zone string, set []mdns.RR) ([]byte, bool) {
	b = append(b, zone...)
	start := len(b)
	msg := mdns.Msg{Answer: set}
	// PackBuffer packs into b's free capacity, or a buffer of its own when
	// that is too small.
	w, err := msg.PackBuffer(b[start:cap(b)])
	if err != nil || len(w) > 1<<16 {
		return nil, false
	}
	b = append(b[:start], w...)
	// The header (12 bytes), then each record: owner, type, class, TTL,
	// rdlength, rdata.
	for i := start + 12; i < len(b); {
		n := lowerName(b[i:])
		i += n + 8
		if i+2 > len(b) {
			break
		}
		i += 2 + (int(b[i])<<8 | int(b[i+1]))
	}
	return b, true
}

// lowerName lowers the ASCII letters of the uncompressed wire name at
// the start of b and returns its length.
func lowerName(b []byte) int {
	i := 0
	for i < len(b) && b[i] != 0 && b[i] < 64 {
		for j := i + 1; j <= i+int(b[i]) && j < len(b); j++ {
			if 'A' <= b[j] && b[j] <= 'Z' {
				b[j] += 'a' - 'A'
			}
		}
		i += int(b[i]) + 1
	}
	return i + 1
}

// put caches e under key; a full generation becomes the old one.
// Called with mu held.
func (sg *signer) put(key string, e *cachedSig) {
	if len(sg.cur) >= sg.max {
		sg.old, sg.cur = sg.cur, make(map[string]*cachedSig, sg.max/4)
	}
	sg.cur[key] = e
}

// forget drops the signature budgets of tenants without names.
func (sg *signer) forget(keep func(string) bool) {
	if sg == nil {
		return
	}
	sg.budget.forget(func(k string) bool { return strings.HasPrefix(k, "\x00") || keep(k) })
}
