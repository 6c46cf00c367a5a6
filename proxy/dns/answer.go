package dns

import (
	"net/netip"
	"strings"

	mdns "github.com/miekg/dns"
)

// Serving tells whether a target's address is answered now: "" when it
// is, else why not (for explain).
type Serving interface {
	Serves(t Target) string
}

// Kind is what an answer is, for response-rate limiting and metrics.
type Kind uint8

const (
	// KindAnswer: records for the name asked (or NODATA).
	KindAnswer Kind = iota
	// KindNXDomain: the name does not exist in a zone served.
	KindNXDomain
	// KindError: an error rcode (REFUSED, NOTIMP, FORMERR) for the query.
	KindError
	// KindOverBudget: the tenant's query budget was spent: no answer.
	KindOverBudget
)

// Result says what Answer did.
type Result struct {
	Kind Kind
	// Tenant owns the name asked ("" for the zone's own names).
	Tenant string
	// Key is the name response-rate limiting counts the response under:
	// the name asked, or the zone for NXDOMAIN.
	Key   string
	Qtype uint16
	// Zone is the zone of the name asked ("" when none).
	Zone string
}

// Answer builds the response to req from the table and what is served.
// allow, when not nil, is asked before a tenant's name is answered: false
// leaves the response nil (KindOverBudget). Only the question is read:
// recursion is never offered and no name outside the zones is answered.
func (t *Table) Answer(req *mdns.Msg, s Serving, allow func(tenant string) bool) (*mdns.Msg, Result) {
	m := new(mdns.Msg)
	m.SetReply(req)
	m.Authoritative = true
	m.RecursionAvailable = false
	if req.Opcode != mdns.OpcodeQuery {
		m.SetRcode(req, mdns.RcodeNotImplemented)
		return m, Result{Kind: KindError}
	}
	if len(req.Question) != 1 {
		m.SetRcode(req, mdns.RcodeFormatError)
		return m, Result{Kind: KindError}
	}
	q := req.Question[0]
	name := strings.ToLower(q.Name)
	res := Result{Key: name, Qtype: q.Qtype}
	z := t.zoneOf(name)
	if z == nil || q.Qclass != mdns.ClassINET {
		m.Authoritative = false
		m.SetRcode(req, mdns.RcodeRefused)
		res.Kind, res.Key = KindError, ""
		return m, res
	}
	res.Zone = z.name
	switch q.Qtype {
	case mdns.TypeAXFR, mdns.TypeIXFR:
		m.SetRcode(req, mdns.RcodeRefused)
		res.Kind, res.Key = KindError, ""
		return m, res
	}
	soa := z.soa
	if ss, ok := s.(interface{ zoneSOA(string) *mdns.SOA }); ok {
		if x := ss.zoneSOA(z.name); x != nil {
			soa = x
		}
	}
	if txts := challengeTXT(s, name); txts != nil {
		// An ACME DNS-01 challenge of the LB hosts' certificate manager:
		// in front of a wildcard that would cover the name. Nobody's
		// query budget: the orders are charged to their tenant.
		answerChallenge(m, q, txts, soa)
		return m, res
	}
	targets, tenant, exists := t.lookup(z, name)
	res.Tenant = tenant
	if tenant != "" && allow != nil && !allow(tenant) {
		res.Kind = KindOverBudget
		return nil, res
	}
	if !exists {
		m.SetRcode(req, mdns.RcodeNameError)
		m.Ns = append(m.Ns, soa)
		res.Kind, res.Key = KindNXDomain, z.name
		return m, res
	}
	switch q.Qtype {
	case mdns.TypeANY:
		// RFC 8482: one small record, not everything the name has.
		m.Answer = append(m.Answer, &mdns.HINFO{Hdr: t.hdr(q.Name, mdns.TypeHINFO, t.ttl), Cpu: "RFC8482"})
		return m, res
	case mdns.TypeSOA:
		if name == z.name {
			m.Answer = append(m.Answer, soa)
		}
	case mdns.TypeDNSKEY:
		if kk, ok := s.(interface{ zoneDNSKEY(string) []mdns.RR }); ok && name == z.name {
			m.Answer = append(m.Answer, kk.zoneDNSKEY(z.name)...)
		}
	case mdns.TypeNS:
		if name == z.name {
			m.Answer = append(m.Answer, z.ns...)
			t.addGlue(m, z)
		}
	case mdns.TypeA, mdns.TypeAAAA:
		v4 := q.Qtype == mdns.TypeA
		for _, a := range z.glue[name] {
			if a.Is4() == v4 {
				m.Answer = append(m.Answer, addrRR(q.Name, a, uint32(InfraTTL/1e9)))
			}
		}
		for i, tg := range targets {
			if tg.Addr.Is4() != v4 || s.Serves(tg) != "" || seenAddr(targets[:i], tg.Addr, s) {
				continue
			}
			m.Answer = append(m.Answer, addrRR(q.Name, tg.Addr, t.ttl))
		}
	}
	if len(m.Answer) == 0 {
		// NODATA: the name exists, with nothing of this type that works.
		m.Ns = append(m.Ns, soa)
	}
	return m, res
}

// seenAddr reports whether an address already answered is in ts.
func seenAddr(ts []Target, a netip.Addr, s Serving) bool {
	for _, t := range ts {
		if t.Addr == a && s.Serves(t) == "" {
			return true
		}
	}
	return false
}

// lookup finds the targets of name: its own, else those of the longest
// wildcard covering it (a wildcard covers one or more labels, as the
// router's does). exists is false for NXDOMAIN.
func (t *Table) lookup(z *zone, name string) (targets []Target, tenant string, exists bool) {
	if ts, ok := t.names[name]; ok {
		return ts, tenantOf(ts), true
	}
	if name == z.name || t.inner[name] || z.glue[name] != nil {
		return nil, "", true
	}
	for off, end := mdns.NextLabel(name, 0); !end; off, end = mdns.NextLabel(name, off) {
		p := name[off:]
		if len(p) < len(z.name) {
			break
		}
		if ts, ok := t.wild[p]; ok && off > 0 {
			return ts, tenantOf(ts), true
		}
	}
	return nil, "", false
}

func tenantOf(ts []Target) string {
	if len(ts) == 0 {
		return ""
	}
	return ts[0].Tenant
}

func (t *Table) addGlue(m *mdns.Msg, z *zone) {
	for _, ns := range t.cfg.NameServers {
		for _, a := range z.glue[ns.Name] {
			m.Extra = append(m.Extra, addrRR(ns.Name, a, uint32(InfraTTL/1e9)))
		}
	}
}

func (t *Table) hdr(name string, typ uint16, ttl uint32) mdns.RR_Header {
	return mdns.RR_Header{Name: name, Rrtype: typ, Class: mdns.ClassINET, Ttl: ttl}
}

func addrRR(name string, a netip.Addr, ttl uint32) mdns.RR {
	if a.Is4() {
		b := a.As4()
		return &mdns.A{Hdr: mdns.RR_Header{Name: name, Rrtype: mdns.TypeA, Class: mdns.ClassINET, Ttl: ttl}, A: b[:]}
	}
	b := a.As16()
	return &mdns.AAAA{Hdr: mdns.RR_Header{Name: name, Rrtype: mdns.TypeAAAA, Class: mdns.ClassINET, Ttl: ttl}, AAAA: b[:]}
}
