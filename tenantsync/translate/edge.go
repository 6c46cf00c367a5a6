package translate

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/teapot-lb/teapot-lb/api"
	pb "github.com/teapot-lb/teapot-lb/api/proto/teapotv1"
)

// Annotations of edge protection (source ranges), on Services, Ingresses
// and Gateways. Ingresses also take ingress-nginx's spellings of the same
// thing, so that tenants moving from ingress-nginx keep their
// restrictions.
const (
	AnnotationAllowedSources = "teapot-lb.io/allowed-sources"
	AnnotationDeniedSources  = "teapot-lb.io/denied-sources"

	NginxAllowlistSourceRange = "nginx.ingress.kubernetes.io/allowlist-source-range"
	NginxWhitelistSourceRange = "nginx.ingress.kubernetes.io/whitelist-source-range"
	NginxDenylistSourceRange  = "nginx.ingress.kubernetes.io/denylist-source-range"
)

// csvList splits a comma-separated annotation value.
func csvList(v string) []string {
	var out []string
	for _, s := range strings.Split(v, ",") {
		if s = strings.TrimSpace(s); s != "" {
			out = append(out, s)
		}
	}
	return out
}

// sourceList reads the first of names that is set, and says which; a
// later one set to another list is a warning (the first wins).
func sourceList(ann map[string]string, d *Desired, names ...string) (string, []string) {
	used, list := "", []string(nil)
	for _, n := range names {
		v := csvList(ann[n])
		if len(v) == 0 {
			continue
		}
		if used == "" {
			used, list = n, v
		} else if !slices.Equal(v, list) {
			d.Warnings = append(d.Warnings, fmt.Sprintf("annotation %s is not read: %s is set and wins", n, used))
		}
	}
	return used, list
}

// checkSources refuses a list the LB cannot enforce as written; it
// reports whether the list is good.
func checkSources(field string, list []string, d *Desired) bool {
	if len(list) > api.MaxListenerSources {
		d.Refused = fmt.Sprintf("%s has %d ranges; at most %d: summarise them into wider CIDRs. So that it is not open to every address, it gets no load balancer and no VIP", field, len(list), api.MaxListenerSources)
		return false
	}
	for i, r := range list {
		if _, err := api.ParseSource(r); err != nil {
			d.Refused = fmt.Sprintf("%s[%d]: %s is not a CIDR (like 192.0.2.0/24 or 2001:db8::/32); so that it is not open to every address, it gets no load balancer and no VIP: correct the entry", field, i, api.Excerpt(r))
			return false
		}
	}
	return true
}

// edgeSources sets the allowed and denied sources of every listener of lb
// from the annotations (nginx: an Ingress, which also reads
// ingress-nginx's spellings). allowed, when not nil, was already set from
// a field of the object (a Service's loadBalancerSourceRanges) and wins
// over the allowed-sources annotation. It reports false when it refused
// the object (d.Refused says why).
func edgeSources(ann map[string]string, lb *pb.LoadBalancer, d *Desired, nginx bool) bool {
	allowNames, denyNames := []string{AnnotationAllowedSources}, []string{AnnotationDeniedSources}
	if nginx {
		allowNames = append(allowNames, NginxAllowlistSourceRange, NginxWhitelistSourceRange)
		denyNames = append(denyNames, NginxDenylistSourceRange)
	}
	aName, allowed := sourceList(ann, d, allowNames...)
	dName, denied := sourceList(ann, d, denyNames...)
	if len(allowed) > 0 && !checkSources("annotation "+aName, allowed, d) {
		return false
	}
	if len(denied) > 0 && !checkSources("annotation "+dName, denied, d) {
		return false
	}
	for _, l := range lb.Listeners {
		if len(allowed) > 0 {
			if len(l.AllowedSources) > 0 {
				d.Warnings = append(d.Warnings, fmt.Sprintf("annotation %s is not read: spec.loadBalancerSourceRanges is set and wins", aName))
				allowed = nil
			} else {
				l.AllowedSources = slices.Clone(allowed)
			}
		}
		if len(denied) > 0 {
			l.DeniedSources = slices.Clone(denied)
		}
	}
	return true
}

// Annotations of rate limits. On an Ingress, requests per second limit
// each route (path) on its own, as ingress-nginx's limit-rps limits each
// location; on a Gateway, each http and https listener. New connections
// per second limit every listener.
const (
	AnnotationRateLimitRPS         = "teapot-lb.io/rate-limit-rps"
	AnnotationRateLimitConnections = "teapot-lb.io/rate-limit-connections"
	AnnotationRateLimitBurst       = "teapot-lb.io/rate-limit-burst"
	AnnotationRateLimitKey         = "teapot-lb.io/rate-limit-key"
	// AnnotationRateLimitHeader names the request header whose values are
	// limited apart, with rate-limit-key header.
	AnnotationRateLimitHeader = "teapot-lb.io/rate-limit-header"

	NginxLimitRPS             = "nginx.ingress.kubernetes.io/limit-rps"
	NginxLimitBurstMultiplier = "nginx.ingress.kubernetes.io/limit-burst-multiplier"
	NginxLimitRPM             = "nginx.ingress.kubernetes.io/limit-rpm"
	NginxLimitConnections     = "nginx.ingress.kubernetes.io/limit-connections"
)

// Annotations of the web application firewall, on Ingresses: every route
// is inspected. ingress-nginx's enable-modsecurity with
// enable-owasp-core-rules is taken as teapot-lb.io/waf detect (its
// ModSecurity only detects unless a snippet turns blocking on); a
// modsecurity-snippet is not read (tenants' own rules are not taken).
const (
	AnnotationWAF             = "teapot-lb.io/waf"
	AnnotationWAFParanoia     = "teapot-lb.io/waf-paranoia-level"
	AnnotationWAFExcludeRules = "teapot-lb.io/waf-exclude-rules"

	NginxEnableModSecurity  = "nginx.ingress.kubernetes.io/enable-modsecurity"
	NginxEnableOWASPRules   = "nginx.ingress.kubernetes.io/enable-owasp-core-rules"
	NginxModSecuritySnippet = "nginx.ingress.kubernetes.io/modsecurity-snippet"
)

// edgeWAF sets the WAF of every route of an Ingress.
func edgeWAF(ann map[string]string, lb *pb.LoadBalancer, d *Desired) {
	mode := strings.TrimSpace(ann[AnnotationWAF])
	if mode == "" && parseBool(ann[NginxEnableModSecurity]) && parseBool(ann[NginxEnableOWASPRules]) {
		mode = api.WAFDetect
	}
	if strings.TrimSpace(ann[NginxModSecuritySnippet]) != "" {
		d.Warnings = append(d.Warnings, fmt.Sprintf("annotation %s is not read: the WAF runs the OWASP Core Rule Set as embedded; set %s and %s", NginxModSecuritySnippet, AnnotationWAF, AnnotationWAFParanoia))
	}
	switch mode {
	case "":
		return
	case api.WAFBlock, api.WAFDetect:
	default:
		d.Warnings = append(d.Warnings, fmt.Sprintf("annotation %s %s is not applied: block or detect", AnnotationWAF, api.Excerpt(mode)))
		return
	}
	w := &pb.WAF{Mode: mode}
	if v := strings.TrimSpace(ann[AnnotationWAFParanoia]); v != "" {
		n, err := strconv.ParseUint(v, 10, 32)
		if err != nil || n < 1 || n > 4 {
			d.Warnings = append(d.Warnings, fmt.Sprintf("annotation %s %s is not applied: 1 to 4; level 1 is used", AnnotationWAFParanoia, api.Excerpt(v)))
		} else {
			w.ParanoiaLevel = uint32(n)
		}
	}
	if v := csvList(ann[AnnotationWAFExcludeRules]); len(v) > 0 {
		var ids []uint32
		for _, s := range v {
			n, err := strconv.ParseUint(s, 10, 32)
			if err != nil || n < api.MinWAFRuleID || n > api.MaxWAFRuleID {
				ids = nil
				d.Warnings = append(d.Warnings, fmt.Sprintf("annotation %s is not applied: %s is not a Core Rule Set rule id (%d to %d); no rule is excluded", AnnotationWAFExcludeRules, api.Excerpt(s), api.MinWAFRuleID, api.MaxWAFRuleID))
				break
			}
			ids = append(ids, uint32(n))
		}
		if len(ids) > api.MaxWAFExcludedRules {
			d.Warnings = append(d.Warnings, fmt.Sprintf("annotation %s is not applied: %d ids, at most %d", AnnotationWAFExcludeRules, len(ids), api.MaxWAFExcludedRules))
			ids = nil
		}
		w.ExcludeRules = ids
	}
	for _, r := range lb.Routes {
		r.Waf = w
	}
}

// edgeKind says where an object's rate-limit annotations go.
type edgeKind int

const (
	edgeService edgeKind = iota
	edgeIngress
	edgeGateway
)

// rateNumber parses a rate-limit annotation; a malformed or out-of-range
// value is a warning and 0 (not applied).
func rateNumber(ann map[string]string, name string, d *Desired) uint32 {
	v := strings.TrimSpace(ann[name])
	if v == "" {
		return 0
	}
	n, err := strconv.ParseUint(v, 10, 32)
	if err != nil || n == 0 || n > api.MaxRateLimit {
		d.Warnings = append(d.Warnings, fmt.Sprintf("annotation %s %s is not applied: give a whole number from 1 to %d", name, api.Excerpt(v), api.MaxRateLimit))
		return 0
	}
	return uint32(n)
}

// rateKey reads the rate-limit-key and rate-limit-header annotations; what
// cannot be applied is a warning, and each client address is limited on
// its own.
func rateKey(ann map[string]string, d *Desired) (key, header string) {
	key = strings.TrimSpace(ann[AnnotationRateLimitKey])
	header = strings.TrimSpace(ann[AnnotationRateLimitHeader])
	switch key {
	case "", api.RateKeyClient, api.RateKeyTotal:
		if header != "" {
			d.Warnings = append(d.Warnings, fmt.Sprintf("annotation %s is not applied without %s header", AnnotationRateLimitHeader, AnnotationRateLimitKey))
		}
		return key, ""
	case api.RateKeyHeader:
		rl := &pb.RateLimit{RequestsPerSecond: 1, Key: key, Header: header}
		if errs := api.CheckRouteRateLimit("annotation", &pb.Route{RateLimit: rl}); len(errs) > 0 {
			d.Warnings = append(d.Warnings, fmt.Sprintf("annotations %s and %s are not applied (%s): each client address is limited on its own", AnnotationRateLimitKey, AnnotationRateLimitHeader, errs[0].Reason))
			return "", ""
		}
		return key, header
	}
	d.Warnings = append(d.Warnings, fmt.Sprintf("annotation %s %s is not applied: client, total or header (each client address is limited on its own)", AnnotationRateLimitKey, api.Excerpt(key)))
	return "", ""
}

// edgeRates sets the rate limits the annotations ask for.
func edgeRates(ann map[string]string, lb *pb.LoadBalancer, d *Desired, kind edgeKind) {
	rps := rateNumber(ann, AnnotationRateLimitRPS, d)
	conns := rateNumber(ann, AnnotationRateLimitConnections, d)
	burst := rateNumber(ann, AnnotationRateLimitBurst, d)
	key, header := rateKey(ann, d)
	if kind == edgeIngress {
		if n := rateNumber(ann, NginxLimitRPS, d); n > 0 {
			if rps == 0 {
				rps = n
				mult := uint32(5) // ingress-nginx's default
				if m := rateNumber(ann, NginxLimitBurstMultiplier, d); m > 0 {
					mult = m
				}
				if burst == 0 {
					burst = uint32(min(uint64(n)*uint64(mult), api.MaxRateBurst))
				}
			} else {
				d.Warnings = append(d.Warnings, fmt.Sprintf("annotation %s is not read: %s is set and wins", NginxLimitRPS, AnnotationRateLimitRPS))
			}
		}
		for _, n := range []string{NginxLimitRPM, NginxLimitConnections} {
			if strings.TrimSpace(ann[n]) != "" {
				d.Warnings = append(d.Warnings, fmt.Sprintf("annotation %s is not applied: teapot-lb limits requests per second (%s, %s) and new connections per second (%s), not requests per minute or concurrent connections", n, AnnotationRateLimitRPS, NginxLimitRPS, AnnotationRateLimitConnections))
			}
		}
	}
	if rps > 0 && kind == edgeService {
		d.Warnings = append(d.Warnings, fmt.Sprintf("annotation %s is not applied: a Service's listeners carry connections, not requests; use %s", AnnotationRateLimitRPS, AnnotationRateLimitConnections))
		rps = 0
	}
	if rps == 0 && conns == 0 {
		if burst > 0 || key != "" {
			d.Warnings = append(d.Warnings, fmt.Sprintf("annotations %s and %s are not applied without %s or %s", AnnotationRateLimitBurst, AnnotationRateLimitKey, AnnotationRateLimitRPS, AnnotationRateLimitConnections))
		}
		return
	}
	spec := func(r, c uint32) *pb.RateLimit {
		return &pb.RateLimit{RequestsPerSecond: r, ConnectionsPerSecond: c, Burst: burst, Key: key, Header: header}
	}
	for _, l := range lb.Listeners {
		r := uint32(0)
		if kind == edgeGateway && (l.Protocol == "http" || l.Protocol == "https") {
			r = rps
		}
		if r > 0 || conns > 0 {
			l.RateLimit = spec(r, conns)
		}
	}
	if kind == edgeIngress && rps > 0 {
		for _, r := range lb.Routes {
			r.RateLimit = spec(rps, 0)
		}
	}
}
