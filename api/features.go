package api

import (
	"fmt"
	"slices"
	"strings"

	pb "github.com/teapot-lb/teapot-lb/api/proto/teapotv1"
)

// Admin API features a host reports in NodeStatus.features, which cluster
// status shows. A request that uses a feature is built so that a host
// without it refuses the request (a call of its own, a case of a oneof it
// does not know) rather than ignore what it does not know: the list is read
// before a request, and hosts that do not answer are not in it.
const (
	// FeatureDryRun: dry runs of applies and deletes (the DryRun call).
	FeatureDryRun = "dry-run"
	// FeatureCheckedWrites: dry runs and revision preconditions
	// (ApplyRequest.preconditions) travel to the leader as checked writes
	// (ForwardRequest.checked), which a leader of an older release refuses.
	FeatureCheckedWrites = "checked-writes"
	// FeatureHTTPSCheck: health checks over TLS (healthCheck.https). A
	// host of an earlier release ignores the field and checks nothing.
	FeatureHTTPSCheck = "https-health-check"
	// FeatureCloseOnDown: a member taken down by its check has its tcp
	// connections closed (healthCheck.closeOnDown). A host of an earlier
	// release ignores the field and lets them drain.
	FeatureCloseOnDown = "close-on-down"
	// FeatureRouteRules: a route's matches, weighted backends, filters and
	// timeouts (routes[].matches, backends, filters, timeouts), and regular
	// expression paths (routes[].pathType regex). A host of an earlier
	// release ignores the former and routes by host and path alone; it
	// skips a route with a regular expression path.
	FeatureRouteRules = "route-rules"
	// FeatureBackendH2: HTTP/2 over TLS to a pool's members
	// (pools.*.backendProtocol h2). A host of an earlier release ignores
	// the value and speaks cleartext HTTP/1.1 to members that expect TLS.
	FeatureBackendH2 = "backend-h2"
	// FeatureSNIRoutes: tls-passthrough listeners routed by server name
	// (listeners[].sniRoutes). A host of an earlier release ignores them
	// and sends every connection to the listener's pool.
	FeatureSNIRoutes = "sni-routes"
	// FeatureRoutePorts: routes served by some http and https listeners
	// only (routes[].ports). A host of an earlier release ignores them and
	// serves each route on every listener.
	FeatureRoutePorts = "route-ports"
	// FeatureTenantBGP: a tenant's BGP sessions with the LB hosts
	// (tenant.bgp). A host of an earlier release ignores the field: it
	// neither peers nor installs the tenant's routes.
	FeatureTenantBGP = "tenant-bgp"
	// FeatureDualStack: one VIP per address family (vip.families,
	// vip.familyPolicy, status.addresses). A host of an earlier release
	// ignores them and serves and announces the first address only.
	FeatureDualStack = "dual-stack"
	// FeatureHostnames: DNS names a load balancer's VIP is answered for
	// (hostnames). A host of an earlier release ignores them and its DNS
	// (it has none) answers nothing.
	FeatureHostnames = "hostnames"
	// FeatureSourceRanges: listeners open to some client networks only
	// (listeners[].allowedSources, deniedSources). A host of an earlier
	// release ignores them and serves every address.
	FeatureSourceRanges = "source-ranges"
	// FeatureRateLimits: rate limits of listeners and routes
	// (listeners[].rateLimit, routes[].rateLimit). A host of an earlier
	// release ignores them.
	FeatureRateLimits = "rate-limits"
	// FeatureWAF: request inspection by the web application firewall
	// (routes[].waf). A host of an earlier release ignores it.
	FeatureWAF = "waf"
	// FeatureNotFoundRoutes: routes that answer 404 and stop the search
	// for a less specific host (routes[].notFound). A host of an earlier
	// release ignores the field and refuses the route for want of a pool.
	FeatureNotFoundRoutes = "not-found-routes"
	// FeatureCORS: the cors filter of routes (routes[].filters[].cors).
	FeatureCORS = "cors"
	// FeatureClientValidation: client certificates checked by https
	// listeners (listeners[].tls.clientValidation).
	FeatureClientValidation = "client-validation"
	// FeatureRouteRetry: retries of a route's failed attempts
	// (routes[].retry). A host of an earlier release ignores it and
	// answers with the first attempt.
	FeatureRouteRetry = "route-retry"
	// FeatureBackendHeaders: header changes per backend of a route
	// (routes[].backends[].requestHeaderModifier). A host of an earlier
	// release ignores them.
	FeatureBackendHeaders = "backend-headers"
	// FeatureBackendTLS: members' certificates verified against a pool's
	// CAs, server name and subject alternative names (pools[].tls). A
	// host of an earlier release ignores it and accepts any certificate.
	FeatureBackendTLS = "backend-tls"
	// FeatureWAFExclusions: Core Rule Set rules a route's WAF does not run
	// (routes[].waf.excludeRules). A host of an earlier release ignores
	// them and blocks what they would have let through.
	FeatureWAFExclusions = "waf-exclusions"
	// FeatureWAFRules: a tenant's own WAF rules (routes[].waf.rules). A
	// host of an earlier release ignores them and lets through what they
	// would have blocked.
	FeatureWAFRules = "waf-rules"
	// FeatureDNSKeyRollover: the host signs with both keys of a zone's
	// DNSSEC key rollover (RollDNSKey). A host of an earlier release keeps
	// signing with the key it loaded, so a rollover is refused while one
	// answers.
	FeatureDNSKeyRollover = "dnssec-rollover"
	// FeatureTLSTerminate: tls-passthrough listeners that terminate TLS
	// for some server names and forward the decrypted stream
	// (listeners[].sniRoutes[].terminate). A host of an earlier release
	// ignores the field and passes those connections through encrypted.
	FeatureTLSTerminate = "tls-terminate"
	// FeatureHTTP3: https listeners that also serve HTTP/3 over QUIC
	// (listeners[].http3). A host of an earlier release ignores the field
	// and serves no UDP port.
	FeatureHTTP3 = "http3"
	// FeatureMisdirectedRequests: https listeners that answer 421 to a
	// request whose Host belongs to another site than the connection's
	// server name (listeners[].tls.sniScopes). A host of an earlier
	// release ignores the field and serves such requests.
	FeatureMisdirectedRequests = "misdirected-requests"
	// FeatureRateLimitHeader: rate limits counted per value of a request
	// header (rateLimit.key header, rateLimit.header). A host of an
	// earlier release refuses the key.
	FeatureRateLimitHeader = "rate-limit-header"
	// FeatureWriteBudget: a tenant's write budget set by the operator
	// (quotas.writeBytesPerSecond). A host of an earlier release ignores
	// it and lets the tenant's agent write any number of bytes.
	FeatureWriteBudget = "write-budget"
	// FeaturePoolInterface: arp pools whose addresses live on an
	// interface of their own (VIPPool.interface). A host of an earlier
	// release ignores it and puts them on its --vip-interface.
	FeaturePoolInterface = "pool-interface"
	// FeatureTenantBGPUpdateRate: a bound on the route changes, and the
	// UPDATE messages, a tenant's BGP session may send
	// (bgp.maxUpdatesPerSecond). A host of an earlier release ignores it
	// and bounds nothing.
	FeatureTenantBGPUpdateRate = "tenant-bgp-update-rate"
	// FeatureACMEWildcard: wildcard route hosts ("*.acme.example") on
	// https listeners with tls.acme, issued through ACME DNS-01 from the
	// LB hosts' own DNS. A host of an earlier release leaves them out of
	// its ACME names and serves them no certificate.
	FeatureACMEWildcard = "acme-wildcard"
	// FeatureTenantBGPTotal: a bound on the prefixes all of a tenant's
	// BGP sessions hold on a host (bgp.maxPrefixesTotal). A host of an
	// earlier release ignores it and bounds each session alone.
	FeatureTenantBGPTotal = "tenant-bgp-prefix-total"
	// FeatureTenantBGPReannounce: a tenant's accepted routes announced on
	// the hosts' fabric sessions (bgp.reannounce, bgp.community). A host
	// of an earlier release ignores them and announces nothing.
	FeatureTenantBGPReannounce = "tenant-bgp-reannounce"
	// FeatureTenantAttachment: a tenant's networks attached through a
	// network namespace per host over VXLAN (tenant.attachment). A host
	// of an earlier release ignores it and dials the tenant's members
	// from its own routing table, where another tenant may own the same
	// addresses.
	FeatureTenantAttachment = "tenant-attachment"
	// FeatureHTTP3ZeroRTT: 0-RTT on HTTP/3 listeners, for safe methods
	// only (listeners[].http3ZeroRtt). A host of an earlier release
	// ignores the field and rejects 0-RTT (clients resend after the
	// handshake).
	FeatureHTTP3ZeroRTT = "http3-zero-rtt"
	// FeatureTenantCPU: a tenant's CPU budget on each host set by the
	// operator (quotas.cpuMillicores). A host of an earlier release
	// ignores it and bounds only the tenant's handshake, regex and WAF
	// CPU.
	FeatureTenantCPU = "tenant-cpu"
	// FeaturePoolAttachment: arp pools whose addresses live in a
	// tenant's attachment (VIPPool.attachment). A host of an earlier
	// release ignores it and puts them on its --vip-interface, in the
	// host's own network.
	FeaturePoolAttachment = "pool-attachment"
	// FeatureClientSource: member connections made from the client's own
	// address (pools.*.clientSource). A host of an earlier release
	// ignores it and dials from its own address.
	FeatureClientSource = "client-source"
	// FeatureTenantBGPAttached: BGP sessions of an attached tenant
	// (tenant.bgp with tenant.attachment), made and installed inside its
	// namespace. A host of an earlier release would dial the tenant's
	// speakers from its own routing table, where another tenant or the
	// host may own the same addresses, and install its routes there.
	FeatureTenantBGPAttached = "tenant-bgp-attached"
	// FeaturePoolAttachmentBGP: bgp pools in a tenant's attachment, whose
	// VIPs are announced to the tenant's own speakers over its sessions
	// (VIPPool.attachment with mode: bgp). A host of an earlier release
	// would announce them to its fabric routers, which must never learn a
	// tenant's private addresses.
	FeaturePoolAttachmentBGP = "pool-attachment-bgp"
	// FeatureTenantBFD: BFD on a tenant's BGP sessions (bgp.bfd). A host
	// of an earlier release ignores it and keeps a silent speaker's
	// routes until the BGP hold time ends.
	FeatureTenantBFD = "tenant-bfd"
)

// FeatureLevel is the highest cluster feature level this release
// understands. Level 1 is every release before levels existed; levels 2
// to 7 add the features of featureLevels. A release that adds a field or a
// request option that a host of an earlier release would ignore, or a
// command version, raises it, and the cluster accepts writes that use the
// addition only once every host reports the level.
const FeatureLevel = 7

// featureLevels is the level each feature needs on every host.
var featureLevels = map[string]uint32{
	FeatureDryRun:              2,
	FeatureCheckedWrites:       2,
	FeatureHTTPSCheck:          2,
	FeatureCloseOnDown:         2,
	FeatureRouteRules:          2,
	FeatureBackendH2:           2,
	FeatureSNIRoutes:           3,
	FeatureRoutePorts:          3,
	FeatureTenantBGP:           4,
	FeatureDualStack:           4,
	FeatureHostnames:           4,
	FeatureSourceRanges:        4,
	FeatureRateLimits:          4,
	FeatureWAF:                 4,
	FeatureNotFoundRoutes:      5,
	FeatureCORS:                5,
	FeatureClientValidation:    5,
	FeatureRouteRetry:          5,
	FeatureBackendHeaders:      5,
	FeatureBackendTLS:          5,
	FeatureWAFExclusions:       5,
	FeatureWAFRules:            5,
	FeatureTLSTerminate:        5,
	FeatureMisdirectedRequests: 5,
	FeatureRateLimitHeader:     5,
	FeatureWriteBudget:         5,
	FeaturePoolInterface:       5,
	FeatureTenantBGPUpdateRate: 5,
	FeatureACMEWildcard:        5,
	FeatureHTTP3:               5,
	FeatureDNSKeyRollover:      5,
	FeatureTenantBGPTotal:      6,
	FeatureTenantBGPReannounce: 6,
	FeatureTenantAttachment:    6,
	FeatureHTTP3ZeroRTT:        6,
	FeatureTenantCPU:           6,
	FeaturePoolAttachment:      6,
	FeatureClientSource:        7,
	FeatureTenantBGPAttached:   7,
	FeaturePoolAttachmentBGP:   7,
	FeatureTenantBFD:           7,
}

// LevelOf is the feature level a feature needs on every host (0 for a
// feature this release does not know).
func LevelOf(feature string) uint32 { return featureLevels[feature] }

// LevelNeeded is the highest level the uses need (1 for none).
func LevelNeeded(uses []FeatureUse) uint32 {
	need := uint32(1)
	for _, u := range uses {
		need = max(need, featureLevels[u.Feature])
	}
	return need
}

// HostLevel is the feature level a host reports in its NodeStatus (a host
// of a release before levels reports none: level 1).
func HostLevel(ns *pb.NodeStatus) uint32 { return max(ns.GetFeatureLevel(), 1) }

// DescribeHost names a host and its level for a refusal.
func DescribeHost(id, version string, level uint32) string {
	if version == "" {
		return fmt.Sprintf("%s is at level %d", id, level)
	}
	return fmt.Sprintf("%s (version %s) is at level %d", id, version, level)
}

// FeatureRefusal is the error of a write that uses features (needing
// level need) while the hosts older (described by DescribeHost) are
// below it. It wraps ErrConflict.
func FeatureRefusal(uses []FeatureUse, need uint32, older []string) error {
	what := make([]string, len(uses))
	for i, u := range uses {
		what[i] = u.String()
	}
	return fmt.Errorf("%s needs feature level %d on every host, and %s: upgrade them first (cluster status shows each host's version and level); nothing was written: %w",
		strings.Join(what, ", "), need, strings.Join(older, ", "), ErrConflict)
}

// Features returns the features this release serves.
func Features() []string {
	return []string{FeatureDryRun, FeatureCheckedWrites, FeatureHTTPSCheck, FeatureCloseOnDown, FeatureRouteRules, FeatureBackendH2, FeatureSNIRoutes, FeatureRoutePorts, FeatureTenantBGP, FeatureDualStack, FeatureHostnames, FeatureSourceRanges, FeatureRateLimits, FeatureWAF, FeatureNotFoundRoutes, FeatureCORS, FeatureClientValidation, FeatureRouteRetry, FeatureBackendHeaders, FeatureBackendTLS, FeatureWAFExclusions, FeatureTLSTerminate, FeatureMisdirectedRequests, FeatureRateLimitHeader, FeatureWriteBudget, FeaturePoolInterface, FeatureTenantBGPUpdateRate, FeatureACMEWildcard, FeatureHTTP3, FeatureWAFRules, FeatureDNSKeyRollover, FeatureTenantBGPTotal, FeatureTenantBGPReannounce, FeatureTenantAttachment, FeatureHTTP3ZeroRTT, FeatureTenantCPU, FeaturePoolAttachment, FeatureClientSource, FeatureTenantBGPAttached, FeaturePoolAttachmentBGP}
}

// FeatureUse is one place where a write uses a feature: the feature and
// the field (or request option) that uses it.
type FeatureUse struct {
	Feature string
	Field   string
}

func (u FeatureUse) String() string { return u.Field + " (" + u.Feature + ")" }

// FeaturesUsed returns the model fields of obj that need a feature, in
// a stable order. Objects of the kinds without such fields use none.
func FeaturesUsed(obj *pb.Object) []FeatureUse {
	if p := obj.GetVipPool(); p.GetInterface() != "" {
		return []FeatureUse{{Feature: FeaturePoolInterface, Field: RefString(RefOf(obj)) + ": interface"}}
	} else if p.GetAttachment() != "" {
		out := []FeatureUse{{Feature: FeaturePoolAttachment, Field: RefString(RefOf(obj)) + ": attachment"}}
		if p.GetMode() == "bgp" {
			out = append(out, FeatureUse{Feature: FeaturePoolAttachmentBGP, Field: RefString(RefOf(obj)) + ": mode bgp with attachment"})
		}
		return out
	}
	if t := obj.GetTenant(); t != nil {
		var out []FeatureUse
		if t.GetBgp() != nil {
			out = append(out, FeatureUse{Feature: FeatureTenantBGP, Field: RefString(RefOf(obj)) + ": bgp"})
		}
		if t.GetBgp().GetMaxUpdatesPerSecond() != 0 {
			out = append(out, FeatureUse{Feature: FeatureTenantBGPUpdateRate, Field: RefString(RefOf(obj)) + ": bgp.maxUpdatesPerSecond"})
		}
		if t.GetBgp().GetMaxPrefixesTotal() != 0 {
			out = append(out, FeatureUse{Feature: FeatureTenantBGPTotal, Field: RefString(RefOf(obj)) + ": bgp.maxPrefixesTotal"})
		}
		if t.GetBgp().GetReannounce() {
			out = append(out, FeatureUse{Feature: FeatureTenantBGPReannounce, Field: RefString(RefOf(obj)) + ": bgp.reannounce"})
		}
		if t.GetBgp().GetBfd() != nil {
			out = append(out, FeatureUse{Feature: FeatureTenantBFD, Field: RefString(RefOf(obj)) + ": bgp.bfd"})
		}
		if t.GetAttachment() != nil {
			out = append(out, FeatureUse{Feature: FeatureTenantAttachment, Field: RefString(RefOf(obj)) + ": attachment"})
			if t.GetBgp() != nil {
				out = append(out, FeatureUse{Feature: FeatureTenantBGPAttached, Field: RefString(RefOf(obj)) + ": bgp with attachment"})
			}
		}
		if t.GetQuotas().GetWriteBytesPerSecond() != 0 {
			out = append(out, FeatureUse{Feature: FeatureWriteBudget, Field: RefString(RefOf(obj)) + ": quotas.writeBytesPerSecond"})
		}
		if t.GetQuotas().GetCpuMillicores() != 0 {
			out = append(out, FeatureUse{Feature: FeatureTenantCPU, Field: RefString(RefOf(obj)) + ": quotas.cpuMillicores"})
		}
		return out
	}
	l := obj.GetLoadBalancer()
	if l == nil {
		return nil
	}
	var out []FeatureUse
	if len(l.GetVip().GetFamilies()) > 0 || l.GetVip().GetFamilyPolicy() != "" {
		out = append(out, FeatureUse{Feature: FeatureDualStack, Field: RefString(RefOf(obj)) + ": vip.families"})
	}
	for i, r := range l.GetRoutes() {
		at := fmt.Sprintf("%s: routes[%d]", RefString(RefOf(obj)), i)
		for _, f := range []struct {
			name string
			set  bool
		}{{"pathType", r.GetPathType() == "regex"}, {"matches", len(r.GetMatches()) > 0}, {"backends", len(r.GetBackends()) > 0},
			{"filters", len(r.GetFilters()) > 0}, {"timeouts", r.GetTimeouts() != nil}} {
			if f.set {
				out = append(out, FeatureUse{Feature: FeatureRouteRules, Field: at + "." + f.name})
			}
		}
	}
	for i, r := range l.GetRoutes() {
		if len(r.GetPorts()) > 0 {
			out = append(out, FeatureUse{Feature: FeatureRoutePorts, Field: fmt.Sprintf("%s: routes[%d].ports", RefString(RefOf(obj)), i)})
		}
	}
	for i, ls := range l.GetListeners() {
		if len(ls.GetSniRoutes()) > 0 {
			out = append(out, FeatureUse{Feature: FeatureSNIRoutes, Field: fmt.Sprintf("%s: listeners[%d].sniRoutes", RefString(RefOf(obj)), i)})
		}
		for j, r := range ls.GetSniRoutes() {
			if r.GetTerminate() {
				out = append(out, FeatureUse{Feature: FeatureTLSTerminate, Field: fmt.Sprintf("%s: listeners[%d].sniRoutes[%d].terminate", RefString(RefOf(obj)), i, j)})
			}
		}
		if usesSNIScopes(ls) {
			out = append(out, FeatureUse{Feature: FeatureMisdirectedRequests, Field: fmt.Sprintf("%s: listeners[%d].tls.sniScopes", RefString(RefOf(obj)), i)})
		}
		if ls.GetHttp3() {
			out = append(out, FeatureUse{Feature: FeatureHTTP3, Field: fmt.Sprintf("%s: listeners[%d].http3", RefString(RefOf(obj)), i)})
		}
		if ls.GetHttp3ZeroRtt() {
			out = append(out, FeatureUse{Feature: FeatureHTTP3ZeroRTT, Field: fmt.Sprintf("%s: listeners[%d].http3ZeroRtt", RefString(RefOf(obj)), i)})
		}
	}
	if usesACME(l) {
		for i, r := range l.GetRoutes() {
			if strings.HasPrefix(r.GetHost(), "*.") {
				out = append(out, FeatureUse{Feature: FeatureACMEWildcard, Field: fmt.Sprintf("%s: routes[%d].host", RefString(RefOf(obj)), i)})
			}
		}
	}
	if len(l.GetHostnames()) > 0 {
		out = append(out, FeatureUse{Feature: FeatureHostnames, Field: RefString(RefOf(obj)) + ": hostnames"})
	}
	for i, ls := range l.GetListeners() {
		at := fmt.Sprintf("%s: listeners[%d]", RefString(RefOf(obj)), i)
		if len(ls.GetAllowedSources()) > 0 {
			out = append(out, FeatureUse{Feature: FeatureSourceRanges, Field: at + ".allowedSources"})
		}
		if len(ls.GetDeniedSources()) > 0 {
			out = append(out, FeatureUse{Feature: FeatureSourceRanges, Field: at + ".deniedSources"})
		}
		if ls.GetRateLimit() != nil {
			out = append(out, FeatureUse{Feature: FeatureRateLimits, Field: at + ".rateLimit"})
		}
		if ls.GetRateLimit().GetHeader() != "" || ls.GetRateLimit().GetKey() == RateKeyHeader {
			out = append(out, FeatureUse{Feature: FeatureRateLimitHeader, Field: at + ".rateLimit.header"})
		}
		if ls.GetTls().GetClientValidation() != nil {
			out = append(out, FeatureUse{Feature: FeatureClientValidation, Field: at + ".tls.clientValidation"})
		}
	}
	for i, r := range l.GetRoutes() {
		if r.GetRateLimit() != nil {
			out = append(out, FeatureUse{Feature: FeatureRateLimits, Field: fmt.Sprintf("%s: routes[%d].rateLimit", RefString(RefOf(obj)), i)})
		}
		if r.GetRateLimit().GetHeader() != "" || r.GetRateLimit().GetKey() == RateKeyHeader {
			out = append(out, FeatureUse{Feature: FeatureRateLimitHeader, Field: fmt.Sprintf("%s: routes[%d].rateLimit.header", RefString(RefOf(obj)), i)})
		}
		if r.GetWaf() != nil {
			out = append(out, FeatureUse{Feature: FeatureWAF, Field: fmt.Sprintf("%s: routes[%d].waf", RefString(RefOf(obj)), i)})
		}
		if r.GetNotFound() {
			out = append(out, FeatureUse{Feature: FeatureNotFoundRoutes, Field: fmt.Sprintf("%s: routes[%d].notFound", RefString(RefOf(obj)), i)})
		}
		for j, fl := range r.GetFilters() {
			if fl.GetCors() != nil {
				out = append(out, FeatureUse{Feature: FeatureCORS, Field: fmt.Sprintf("%s: routes[%d].filters[%d].cors", RefString(RefOf(obj)), i, j)})
			}
		}
		out = append(out, retryFeaturesUsed(obj, i, r)...)
		if len(r.GetWaf().GetExcludeRules()) > 0 {
			out = append(out, FeatureUse{Feature: FeatureWAFExclusions, Field: fmt.Sprintf("%s: routes[%d].waf.excludeRules", RefString(RefOf(obj)), i)})
		}
		if len(r.GetWaf().GetRules()) > 0 {
			out = append(out, FeatureUse{Feature: FeatureWAFRules, Field: fmt.Sprintf("%s: routes[%d].waf.rules", RefString(RefOf(obj)), i)})
		}
	}
	names := make([]string, 0, len(l.GetPools()))
	for name := range l.GetPools() {
		names = append(names, name)
	}
	slices.Sort(names)
	for _, name := range names {
		if l.GetPools()[name].GetBackendProtocol() == "h2" {
			out = append(out, FeatureUse{Feature: FeatureBackendH2, Field: fmt.Sprintf("%s: pools.%s.backendProtocol", RefString(RefOf(obj)), name)})
		}
		hc := l.GetPools()[name].GetHealthCheck()
		at := fmt.Sprintf("%s: pools.%s.healthCheck", RefString(RefOf(obj)), name)
		if hc.GetHttps() != nil {
			out = append(out, FeatureUse{Feature: FeatureHTTPSCheck, Field: at + ".https"})
		}
		if hc.GetCloseOnDown() {
			out = append(out, FeatureUse{Feature: FeatureCloseOnDown, Field: at + ".closeOnDown"})
		}
		if l.GetPools()[name].GetTls() != nil {
			out = append(out, FeatureUse{Feature: FeatureBackendTLS, Field: fmt.Sprintf("%s: pools.%s.tls", RefString(RefOf(obj)), name)})
		}
		if l.GetPools()[name].GetClientSource() {
			out = append(out, FeatureUse{Feature: FeatureClientSource, Field: fmt.Sprintf("%s: pools.%s.clientSource", RefString(RefOf(obj)), name)})
		}
	}
	return out
}

// usesACME reports whether lb has an https listener with tls.acme.
func usesACME(lb *pb.LoadBalancer) bool {
	for _, l := range lb.GetListeners() {
		if l.GetProtocol() == "https" && l.GetTls().GetAcme() {
			return true
		}
	}
	return false
}
