package snapshot

import (
	"net/netip"
	"net/textproto"
	"slices"
	"strconv"
	"strings"

	"github.com/teapot-lb/teapot-lb/api"
	pb "github.com/teapot-lb/teapot-lb/api/proto/teapotv1"
)

// Sources is a listener's allowedSources and deniedSources, compiled for
// a lookup at accept that allocates nothing. A nil *Sources allows every
// address.
type Sources struct {
	// Allowed and Denied are the masked prefixes, sorted; Allowed empty
	// allows every address not denied.
	Allowed, Denied []netip.Prefix
	allow, deny     prefixSet
}

// fewPrefixes: up to this many prefixes a set is scanned; more are
// looked up by prefix length.
const fewPrefixes = 16

// prefixSet answers "does some prefix contain a?".
type prefixSet struct {
	few []netip.Prefix
	// byLen holds, for each prefix length in use, the set of masked
	// addresses of that length.
	byLen []lenSet
}

type lenSet struct {
	bits int
	v4   bool
	set  map[netip.Addr]struct{}
}

func newPrefixSet(ps []netip.Prefix) prefixSet {
	if len(ps) <= fewPrefixes {
		return prefixSet{few: ps}
	}
	var s prefixSet
	for _, p := range ps {
		i := slices.IndexFunc(s.byLen, func(l lenSet) bool { return l.bits == p.Bits() && l.v4 == p.Addr().Is4() })
		if i < 0 {
			s.byLen = append(s.byLen, lenSet{bits: p.Bits(), v4: p.Addr().Is4(), set: map[netip.Addr]struct{}{}})
			i = len(s.byLen) - 1
		}
		s.byLen[i].set[p.Addr()] = struct{}{}
	}
	return s
}

func (s *prefixSet) contains(a netip.Addr) bool {
	for _, p := range s.few {
		if p.Contains(a) {
			return true
		}
	}
	for _, l := range s.byLen {
		if l.v4 != a.Is4() {
			continue
		}
		p, err := a.Prefix(l.bits)
		if err != nil {
			continue
		}
		if _, ok := l.set[p.Addr()]; ok {
			return true
		}
	}
	return false
}

func (s *prefixSet) empty() bool { return len(s.few) == 0 && len(s.byLen) == 0 }

// NewSources compiles the two lists; nil when both are empty.
func NewSources(allowed, denied []netip.Prefix) *Sources {
	if len(allowed) == 0 && len(denied) == 0 {
		return nil
	}
	sortPrefixes := func(ps []netip.Prefix) []netip.Prefix {
		ps = slices.Clone(ps)
		slices.SortFunc(ps, func(a, b netip.Prefix) int {
			if c := a.Addr().Compare(b.Addr()); c != 0 {
				return c
			}
			return a.Bits() - b.Bits()
		})
		return slices.Compact(ps)
	}
	s := &Sources{Allowed: sortPrefixes(allowed), Denied: sortPrefixes(denied)}
	s.allow, s.deny = newPrefixSet(s.Allowed), newPrefixSet(s.Denied)
	return s
}

// Allow reports whether a client at a may connect: not denied, and
// allowed when the listener lists allowed sources. IPv4-mapped IPv6
// addresses are taken as the IPv4 address.
func (s *Sources) Allow(a netip.Addr) bool {
	if s == nil {
		return true
	}
	a = a.Unmap().WithZone("")
	if s.deny.contains(a) {
		return false
	}
	return s.allow.empty() || s.allow.contains(a)
}

func (s *Sources) equal(o *Sources) bool {
	if s == nil || o == nil {
		return s == o
	}
	return slices.Equal(s.Allowed, o.Allowed) && slices.Equal(s.Denied, o.Denied)
}

// RateSpec is a compiled rate limit; the zero value limits nothing.
type RateSpec struct {
	// Requests and Conns are per second; 0 does not limit.
	Requests, Conns uint32
	// Burst is how many may arrive at once (at least 1 when a rate is set).
	Burst uint32
	// Total counts every client together; else each client address (IPv6:
	// its /64) on its own, or with Header each value of that request
	// header (canonical form; requests without it by client address).
	Total  bool
	Header string
}

// WAFSpec is a route's web application firewall; the zero value is off.
type WAFSpec struct {
	On, Block bool
	// Paranoia is the CRS paranoia level (1 to 4); MaxBody the bytes of
	// a request body inspected.
	Paranoia, MaxBody int
	// Exclude are the rule ids not run, sorted, comma-separated (a
	// string, so that the spec stays comparable).
	Exclude string
	// Rules are the tenant's own rules (waf.rules), one a line (a
	// string, so that the spec stays comparable); empty for none.
	Rules string
}

func wafSpec(w *pb.WAF) WAFSpec {
	if w == nil {
		return WAFSpec{}
	}
	s := WAFSpec{On: true, Block: w.GetMode() == api.WAFBlock, Paranoia: int(max(w.GetParanoiaLevel(), 1)), MaxBody: int(w.GetMaxBodyBytes())}
	if s.MaxBody == 0 {
		s.MaxBody = api.DefaultWAFBodyBytes
	}
	s.Rules = strings.Join(w.GetRules(), "\n")
	if ids := w.GetExcludeRules(); len(ids) > 0 {
		sorted := slices.Sorted(slices.Values(ids))
		b := make([]byte, 0, 7*len(sorted))
		for i, id := range slices.Compact(sorted) {
			if i > 0 {
				b = append(b, ',')
			}
			b = strconv.AppendUint(b, uint64(id), 10)
		}
		s.Exclude = string(b)
	}
	return s
}

// Set reports whether the spec limits anything.
func (r RateSpec) Set() bool { return r.Requests > 0 || r.Conns > 0 }

func rateSpec(rl *pb.RateLimit) RateSpec {
	if rl == nil {
		return RateSpec{}
	}
	s := RateSpec{Requests: rl.GetRequestsPerSecond(), Conns: rl.GetConnectionsPerSecond(), Burst: rl.GetBurst(), Total: rl.GetKey() == api.RateKeyTotal}
	if rl.GetKey() == api.RateKeyHeader {
		s.Header = textproto.CanonicalMIMEHeaderKey(rl.GetHeader())
	}
	return s
}

// requestIDRate compiles a rate limit counted by the request id
// (api.RequestIDRate), which a listener or route may hold from before
// the API refused it, and says what the data plane does instead. Every
// request has its own id (the proxy makes one when no trusted proxy sent
// it), so the limit as written limits no request and fills the tenant's
// key table: its requestsPerSecond is left out, and the listener or
// route is served, not skipped, since a limit that holds back no request
// protects nothing that serving without it opens. A listener's
// connectionsPerSecond is counted by client address whatever the key, so
// it still holds.
func requestIDRate(rl *pb.RateLimit) (RateSpec, string) {
	s := rateSpec(rl)
	s.Requests, s.Header = 0, ""
	switch {
	case rl.GetRequestsPerSecond() == 0:
		return s, "connectionsPerSecond counted by client address"
	case s.Conns > 0:
		return s, "requestsPerSecond not enforced; connectionsPerSecond counted by client address"
	}
	return s, "requestsPerSecond not enforced"
}

// edgeField reports whether field names a source-range or rate-limit
// field of a listener: such a listener is not served rather than served
// open.
func edgeField(field string) bool {
	for _, p := range []string{".allowedSources", ".deniedSources", ".rateLimit"} {
		if len(field) >= len(p) && field[:len(p)] == p {
			return true
		}
	}
	return false
}

// listenerSources compiles l's source ranges (validated before).
func listenerSources(l *pb.Listener) *Sources {
	allowed, err1 := api.ParseSources(l.GetAllowedSources())
	denied, err2 := api.ParseSources(l.GetDeniedSources())
	if err1 != nil || err2 != nil {
		return nil // unreachable: edgeField skipped the listener
	}
	return NewSources(allowed, denied)
}
