package api

import (
	"fmt"
	"net/netip"
	"strings"

	pb "github.com/teapot-lb/teapot-lb/api/proto/teapotv1"
)

// Bounds of the edge protection fields (source ranges and rate limits).
const (
	// MaxListenerSources bounds a listener's allowedSources and
	// deniedSources together. Each entry costs the data plane one
	// comparison per prefix length in use at accept.
	MaxListenerSources = 1024
	// MaxRateLimit bounds requestsPerSecond and connectionsPerSecond.
	MaxRateLimit = 1_000_000
	// MaxRateBurst bounds a rate limit's burst.
	MaxRateBurst = 1_000_000
	// DefaultRateLimitKeys is quotas.rateLimitKeys when unset: the client
	// keys one LB host tracks for one tenant's rate limits at once.
	DefaultRateLimitKeys = 20000
	// RateLimitKeyBytes is what one tracked key costs an LB host, as the
	// docs state it (a map entry: limit, address, arrival time).
	RateLimitKeyBytes = 100
	// DefaultWAFCPUMillicores is quotas.wafCpuMillicores when unset: a
	// quarter of a core per tenant and host (about 250 inspected requests
	// a second at paranoia level 1).
	DefaultWAFCPUMillicores = 250
	// DefaultWAFBodyBytes and MaxWAFBodyBytes bound waf.maxBodyBytes.
	DefaultWAFBodyBytes = 128 << 10
	MaxWAFBodyBytes     = 1 << 20
	// MaxWAFExcludedRules bounds waf.excludeRules; MinWAFRuleID and
	// MaxWAFRuleID are the Core Rule Set's rule ids.
	MaxWAFExcludedRules = 64
	MinWAFRuleID        = 900000
	MaxWAFRuleID        = 999999
)

// WAF modes.
const (
	WAFBlock  = "block"
	WAFDetect = "detect"
)

// Rate limit keys.
const (
	RateKeyClient = "client"
	RateKeyTotal  = "total"
	RateKeyHeader = "header"
	// MaxRateHeaderName bounds rateLimit.header.
	MaxRateHeaderName = 64
)

// ParseSources parses a listener's allowedSources or deniedSources into
// masked prefixes (IPv4 ones in their 4-byte form); a malformed entry is
// an error naming its index.
func ParseSources(list []string) ([]netip.Prefix, error) {
	out := make([]netip.Prefix, 0, len(list))
	for i, s := range list {
		p, err := ParseSource(s)
		if err != nil {
			return nil, fmt.Errorf("[%d]: %w", i, err)
		}
		out = append(out, p)
	}
	return out, nil
}

// ParseSource takes a CIDR, or a bare address as its host prefix (/32,
// /128), as Kubernetes' loadBalancerSourceRanges writers sometimes do.
func ParseSource(s string) (netip.Prefix, error) {
	if p, err := netip.ParsePrefix(s); err == nil {
		if p.Addr().Is4In6() {
			bits := p.Bits() - 96
			if bits < 0 {
				return netip.Prefix{}, fmt.Errorf("%s: an IPv4-mapped prefix shorter than /96 %w", Excerpt(s), ErrInvalid)
			}
			p = netip.PrefixFrom(p.Addr().Unmap(), bits)
		}
		return p.Masked(), nil
	}
	if a, err := netip.ParseAddr(s); err == nil && a.Zone() == "" {
		a = a.Unmap()
		return netip.PrefixFrom(a, a.BitLen()), nil
	}
	return netip.Prefix{}, fmt.Errorf("%s is not a CIDR (like 192.0.2.0/24 or 2001:db8::/32): %w", Excerpt(s), ErrInvalid)
}

// checkListenerEdge checks a listener's source ranges and rate limit.
func checkListenerEdge(ck *checker, f string, l *pb.Listener) {
	n := len(l.GetAllowedSources()) + len(l.GetDeniedSources())
	if n > MaxListenerSources {
		ck.invalidf(f+".allowedSources", "allowedSources and deniedSources have %d entries together; at most %d (summarise them into wider CIDRs)", n, MaxListenerSources)
	} else {
		for _, list := range []struct {
			name string
			v    []string
		}{{"allowedSources", l.GetAllowedSources()}, {"deniedSources", l.GetDeniedSources()}} {
			for j, s := range list.v {
				if _, err := ParseSource(s); err != nil {
					ck.invalidf(fmt.Sprintf("%s.%s[%d]", f, list.name, j), "%s is not a CIDR (like 192.0.2.0/24 or 2001:db8::/32)", Excerpt(s))
				}
			}
		}
	}
	if rl := l.GetRateLimit(); rl != nil {
		l7 := l.GetProtocol() == "http" || l.GetProtocol() == "https"
		if rl.GetRequestsPerSecond() > 0 && !l7 {
			ck.invalidf(f+".rateLimit.requestsPerSecond", "only http and https listeners count requests; use connectionsPerSecond for %s listeners", Excerpt(l.GetProtocol()))
		}
		checkRateLimit(ck, f+".rateLimit", rl, true)
	}
}

// CheckRouteRateLimit checks a route's rateLimit (field "routes[2]").
func CheckRouteRateLimit(field string, r *pb.Route) []FieldError {
	var ck checker
	if rl := r.GetRateLimit(); rl != nil {
		if rl.GetConnectionsPerSecond() > 0 {
			ck.invalidf(field+".rateLimit.connectionsPerSecond", "routes count requests; set connectionsPerSecond on the listener's rateLimit instead")
		}
		checkRateLimit(&ck, field+".rateLimit", rl, false)
	}
	if w := r.GetWaf(); w != nil {
		switch w.GetMode() {
		case WAFBlock, WAFDetect:
		case "":
			ck.invalidf(field+".waf.mode", "required: block or detect")
		default:
			ck.invalidf(field+".waf.mode", "%s is not one of block, detect", Excerpt(w.GetMode()))
		}
		if pl := w.GetParanoiaLevel(); pl > 4 {
			ck.invalidf(field+".waf.paranoiaLevel", "is %d; from 1 to 4", pl)
		}
		if b := w.GetMaxBodyBytes(); b > MaxWAFBodyBytes {
			ck.invalidf(field+".waf.maxBodyBytes", "is %d; at most %d", b, MaxWAFBodyBytes)
		}
		if n := len(w.GetExcludeRules()); n > MaxWAFExcludedRules {
			ck.invalidf(field+".waf.excludeRules", "has %d ids; at most %d (exclude a rule the log names, or lower paranoiaLevel)", n, MaxWAFExcludedRules)
		} else {
			for i, id := range w.GetExcludeRules() {
				if id < MinWAFRuleID || id > MaxWAFRuleID {
					ck.invalidf(fmt.Sprintf("%s.waf.excludeRules[%d]", field, i), "is %d; Core Rule Set rule ids are %d to %d", id, MinWAFRuleID, MaxWAFRuleID)
				}
			}
		}
		if len(w.GetRules()) > 0 {
			checkWAFRules(&ck, field+".waf.rules", w.GetRules())
		}
	}
	return ck.errs
}

func checkRateLimit(ck *checker, f string, rl *pb.RateLimit, listener bool) {
	if rl.GetRequestsPerSecond() == 0 && rl.GetConnectionsPerSecond() == 0 {
		what := "requestsPerSecond"
		if listener {
			what = "requestsPerSecond or connectionsPerSecond"
		}
		ck.invalidf(f, "sets no rate: give %s, or remove rateLimit", what)
	}
	if rl.GetRequestsPerSecond() > MaxRateLimit {
		ck.invalidf(f+".requestsPerSecond", "is %d; at most %d", rl.GetRequestsPerSecond(), MaxRateLimit)
	}
	if rl.GetConnectionsPerSecond() > MaxRateLimit {
		ck.invalidf(f+".connectionsPerSecond", "is %d; at most %d", rl.GetConnectionsPerSecond(), MaxRateLimit)
	}
	if rl.GetBurst() > MaxRateBurst {
		ck.invalidf(f+".burst", "is %d; at most %d", rl.GetBurst(), MaxRateBurst)
	}
	switch rl.GetKey() {
	case "", RateKeyClient, RateKeyTotal:
		if rl.GetHeader() != "" {
			ck.invalidf(f+".header", "is read only with key: header; set key: header or remove header")
		}
	case RateKeyHeader:
		checkRateHeader(ck, f, rl)
	default:
		ck.invalidf(f+".key", "%s is not one of client, total, header", Excerpt(rl.GetKey()))
	}
}

// checkRateHeader checks a rate limit keyed by a request header.
func checkRateHeader(ck *checker, f string, rl *pb.RateLimit) {
	h := rl.GetHeader()
	switch {
	case h == "":
		ck.invalidf(f+".header", "is required with key: header: name the request header to count by (for example X-API-Key)")
	case len(h) > MaxRateHeaderName:
		ck.invalidf(f+".header", "is %d bytes; at most %d", len(h), MaxRateHeaderName)
	case !IsToken(h):
		ck.invalidf(f+".header", "%s is not a header field name", Excerpt(h))
	case strings.EqualFold(h, "Host"):
		ck.invalidf(f+".header", "Host is the route's; count by another header, or use one route per host")
	case IsRequestID(h):
		ck.invalidf(f+".header", "%s is the request id, one for each request (the proxy makes one when no trusted proxy sent it), so a limit counted by it limits nothing and fills the limiter's table; count by another header", h)
	}
}

// IsRequestID reports whether name is X-Request-Id, in any case and with
// _ for -: the request id the proxy fixes for each request before a
// route is chosen (a trusted proxy's, or one it makes).
func IsRequestID(name string) bool {
	const id = "x-request-id"
	if len(name) != len(id) {
		return false
	}
	for i := range len(id) {
		c := name[i]
		switch {
		case c == '_':
			c = '-'
		case 'A' <= c && c <= 'Z':
			c += 'a' - 'A'
		}
		if c != id[i] {
			return false
		}
	}
	return true
}

// RequestIDRate reports whether rl is counted by the request id (key
// header, header X-Request-Id), which checkRateHeader refuses: each
// request has its own id, so such a limit limits no request. A listener
// or route stored before the rule is served without its request limit.
func RequestIDRate(rl *pb.RateLimit) bool {
	return rl.GetKey() == RateKeyHeader && IsRequestID(rl.GetHeader())
}
