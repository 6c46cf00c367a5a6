package schema

import (
	"fmt"

	"github.com/teapot-lb/teapot-lb/api"
	pb "github.com/teapot-lb/teapot-lb/api/proto/teapotv1"
)

// rule is what the validation in package api enforces on one field,
// written with the same constants, and what the model leaves to defaults.
type rule struct {
	doc      string // when the model has no comment for the field
	required bool
	def      string
	limits   string
	enum     []string
	example  string
	readOnly bool
	// opaque: listed without its sub-fields (what the cluster stamps).
	opaque bool
}

const nameLimits = "1 to 63 lowercase letters, digits or '-', starting and ending with a letter or digit"

func quotaDefault(f func(*pb.Quotas) uint32) string {
	return fmt.Sprint(f(api.DefaultQuotas()))
}

func atMost(n int, what string) string { return fmt.Sprintf("at most %d %s", n, what) }

func regexLimits() string {
	return fmt.Sprintf("exact: at most %d bytes, no CR, LF or NUL; regex: at most %d bytes, repetition counts at most %d, %d compiled instructions (%d over the load balancer); a request value longer than %d bytes never matches a regex", api.MaxHeaderValueLen, api.MaxRegexLen, api.MaxRegexRepeat, api.MaxRegexInsts, api.MaxRegexInstsPerLB, api.MaxRegexSubjectLen)
}

// rules are keyed by the field's full protobuf name.
var rules = map[string]rule{
	"teapot.v1.Tenant.name":                {doc: "Name of the tenant.", required: true, limits: nameLimits, example: "acme"},
	"teapot.v1.Tenant.domains":             {limits: atMost(api.MaxTenantDomains, "names; no wildcards; no overlap with another tenant's domains"), example: "[acme.example]"},
	"teapot.v1.Tenant.networks":            {limits: atMost(api.MaxTenantNetworks, "CIDRs in canonical form, none overlapping another tenant's networks unless both tenants have an attachment"), example: "[10.20.0.0/16]"},
	"teapot.v1.Tenant.pools":               {limits: atMost(api.MaxTenantPools, "pools; each must exist"), example: "[public]"},
	"teapot.v1.Tenant.quotas":              {doc: "Bounds on what the tenant may write and use; a field left out or 0 takes the cluster's default."},
	"teapot.v1.Tenant.pods_routable":       {def: "false"},
	"teapot.v1.Tenant.revoked_credentials": {readOnly: true, limits: atMost(api.MaxRevokedCredentials, "serials")},
	"teapot.v1.Tenant.uid":                 {readOnly: true},
	"teapot.v1.Tenant.meta":                {readOnly: true, opaque: true, doc: "Revision, generation and times, stamped by the cluster."},
	"teapot.v1.Tenant.bgp":                 {example: "{ asn: 64600, peers: [10.20.0.5] }"},
	"teapot.v1.Tenant.attachment": {limits: "with bgp: the sessions are made and the routes installed inside the namespace, bgp.reannounce refused, feature level 7 on every host; not while a load balancer of the tenant has a pool with clientSource; feature level 6 on every host",
		example: "{ vxlan: { vni: 1001, remotes: [192.0.2.7] }, hosts: { lb1: 10.0.0.2/24, lb2: 10.0.0.3/24 } }"},
	"teapot.v1.TenantAttachment.hosts": {required: true, limits: fmt.Sprintf("at most %d; keyed by node ids of the cluster's hosts (cluster status lists them); each an address with its prefix length inside the tenant's networks, distinct", api.MaxAttachmentHosts),
		example: "{ lb1: 10.0.0.2/24 }"},
	"teapot.v1.TenantAttachment.gateway": {limits: "an address on the prefix of a host's address, not a host's", example: "10.0.0.1"},
	"teapot.v1.TenantAttachment.mtu":     {def: fmt.Sprint(api.DefaultAttachmentMTU), limits: fmt.Sprintf("%d to %d; with vxlan.underlay, at most the underlay's MTU less 50 (70 when a remote is IPv6): a host whose underlay cannot carry it reports the attachment failed, naming the bound", api.MinAttachmentMTU, api.MaxAttachmentMTU)},
	"teapot.v1.TenantAttachment.vxlan":   {required: true},
	"teapot.v1.AttachmentVXLAN.vni":      {required: true, limits: fmt.Sprintf("1 to %d; not another tenant's", api.MaxVNI), example: "1001"},
	"teapot.v1.AttachmentVXLAN.remotes":  {required: true, limits: atMost(api.MaxAttachmentRemotes, "unicast addresses, distinct"), example: "[192.0.2.7]"},
	"teapot.v1.AttachmentVXLAN.port":     {def: fmt.Sprint(api.DefaultVXLANPort), limits: "1 to 65535; not a UDP port of the hosts (heartbeat, rate-share) nor of a load balancer's udp or http3 listener: its socket holds the port on every address of each host"},
	"teapot.v1.AttachmentVXLAN.underlay": {limits: fmt.Sprintf("an interface name of at most %d bytes", api.MaxInterfaceNameLen), example: "eth1"},

	"teapot.v1.TenantBGP.asn":                    {required: true, example: "64600"},
	"teapot.v1.TenantBGP.peers":                  {required: true, limits: atMost(api.MaxTenantBGPPeers, "addresses, each inside the tenant's networks"), example: "[10.20.0.5]"},
	"teapot.v1.TenantBGP.password":               {limits: fmt.Sprintf("at most %d characters", api.MaxBGPPasswordLen)},
	"teapot.v1.TenantBGP.max_prefixes":           {def: fmt.Sprint(api.DefaultTenantBGPMaxPrefixes), limits: fmt.Sprintf("at most %d", api.MaxTenantBGPMaxPrefixes)},
	"teapot.v1.TenantBGP.max_prefix_length":      {def: "32", limits: "1 to 32"},
	"teapot.v1.TenantBGP.max_updates_per_second": {def: fmt.Sprint(api.DefaultTenantBGPUpdateRate), limits: fmt.Sprintf("at most %d; bursts of maxPrefixes more (UPDATE messages: at most %d more)", api.MaxTenantBGPUpdateRate, api.MaxTenantBGPUpdateBurst)},
	"teapot.v1.TenantBGP.community":              {example: "64512:100", limits: "required with reannounce, and only with it"},
	"teapot.v1.TenantBGP.reannounce":             {def: "false", limits: "needs community; not with attachment (the tenant's routes are in its own address space); feature level 6 on every host"},
	"teapot.v1.TenantBGP.max_prefixes_total":     {def: fmt.Sprintf("%d × maxPrefixes", api.DefaultTenantBGPTotalSessions), limits: fmt.Sprintf("at most %d; not under maxPrefixes when both are set", api.MaxTenantBGPMaxPrefixesTotal)},
	"teapot.v1.TenantBGP.max_prefix_length6":     {def: "128", limits: "1 to 128"},
	"teapot.v1.TenantBGP.bfd":                    {limits: "needs attachment; feature level 7 on every host", example: "{ minTx: 300ms, minRx: 300ms, multiplier: 3 }"},
	"teapot.v1.TenantBGPBFD.min_tx":              {def: api.DefaultTenantBFDInterval.String(), limits: fmt.Sprintf("%s to 1m", api.MinTenantBFDInterval)},
	"teapot.v1.TenantBGPBFD.min_rx":              {def: api.DefaultTenantBFDInterval.String(), limits: fmt.Sprintf("%s to 1m", api.MinTenantBFDInterval)},
	"teapot.v1.TenantBGPBFD.multiplier":          {def: fmt.Sprint(api.DefaultTenantBFDMultiplier), limits: fmt.Sprintf("%d to 255", api.MinTenantBFDMultiplier)},

	"teapot.v1.Quotas.load_balancers":           {doc: "Load balancers the tenant may have.", def: quotaDefault((*pb.Quotas).GetLoadBalancers)},
	"teapot.v1.Quotas.addresses":                {doc: "Distinct VIP addresses the tenant may hold (a dual-stack load balancer holds two).", def: quotaDefault((*pb.Quotas).GetAddresses)},
	"teapot.v1.Quotas.certificates":             {doc: "Certificates the tenant may have.", def: quotaDefault((*pb.Quotas).GetCertificates)},
	"teapot.v1.Quotas.listeners_per_lb":         {doc: "Listeners of one load balancer.", def: quotaDefault((*pb.Quotas).GetListenersPerLb)},
	"teapot.v1.Quotas.routes_per_lb":            {doc: "Routes of one load balancer; a route with matches counts once per match.", def: quotaDefault((*pb.Quotas).GetRoutesPerLb)},
	"teapot.v1.Quotas.pools_per_lb":             {doc: "Backend pools of one load balancer.", def: quotaDefault((*pb.Quotas).GetPoolsPerLb)},
	"teapot.v1.Quotas.members_per_pool":         {doc: "Members of one backend pool.", def: quotaDefault((*pb.Quotas).GetMembersPerPool)},
	"teapot.v1.Quotas.listeners":                {doc: "Listeners over all the tenant's load balancers.", def: quotaDefault((*pb.Quotas).GetListeners)},
	"teapot.v1.Quotas.routes":                   {doc: "Routes over all the tenant's load balancers, counted as in routesPerLb.", def: quotaDefault((*pb.Quotas).GetRoutes)},
	"teapot.v1.Quotas.members":                  {doc: "Members over all the tenant's load balancers.", def: quotaDefault((*pb.Quotas).GetMembers)},
	"teapot.v1.Quotas.health_checks":            {def: quotaDefault((*pb.Quotas).GetHealthChecks)},
	"teapot.v1.Quotas.stored_bytes":             {doc: "Encoded bytes of everything the tenant stores: its load balancers, certificates and uploaded keys. Every LB host keeps all of it in memory and in its Raft log; a write that takes the total over it is refused.", def: fmt.Sprintf("%d (%d MiB)", api.DefaultStoredBytes, api.DefaultStoredBytes>>20)},
	"teapot.v1.Quotas.write_bytes_per_second":   {doc: "Encoded bytes a second the tenant's agents may write, through all the LB hosts' streams together (the load balancers and certificates they upsert), with a burst of eight seconds' worth and at least storedBytes. A change past it waits, and the agent is told how long and why; nothing is refused.", def: fmt.Sprintf("%d (%d KiB)", api.DefaultWriteBytesPerSecond, api.DefaultWriteBytesPerSecond>>10)},
	"teapot.v1.Quotas.connections":              {def: "derived on each LB host from its descriptor limit"},
	"teapot.v1.Quotas.connections_per_listener": {def: "derived on each LB host from its descriptor limit"},
	"teapot.v1.Quotas.regex_matches_per_lb":     {doc: "Regular expressions of one load balancer: each regex path, header, query value or gRPC service and method counts once.", def: quotaDefault((*pb.Quotas).GetRegexMatchesPerLb)},
	"teapot.v1.Quotas.regex_matches":            {doc: "Regular expressions over all the tenant's load balancers, counted as in regexMatchesPerLb.", def: quotaDefault((*pb.Quotas).GetRegexMatches)},
	"teapot.v1.Quotas.waf_cpu_millicores":       {doc: "CPU each LB host may spend inspecting the tenant's requests with the WAF, in thousandths of a core; past it (after a burst of a fifth of a second's worth) a request to a route with a WAF is answered 429 with Retry-After: 1 until the budget refills. The same budget pays for building the engines of the tenant's own rules (routes[].waf.rules) when its configuration changes, and for a Core Rule Set's first load at a paranoia level on the host: a build it cannot pay waits for it (at most a second, then is charged anyway), its routes answering 503 with Retry-After: 1 meanwhile.", def: quotaDefault((*pb.Quotas).GetWafCpuMillicores)},
	"teapot.v1.Quotas.rate_limit_keys":          {doc: fmt.Sprintf("Keys (a client address or IPv6 /64 per rate limit with key client, a header value per rate limit with key header) each LB host tracks for the tenant's rate limits at once, about %d bytes each; when the table is full, keys back to a full burst are dropped, then (at most every 50 ms) the eighth of the table that owes the least, and a new key past a table still full is refused as if over its limit. Each host shares at most a 160th of this many of the tenant's hot keys with the other hosts every 50 ms, so that per-client and per-header limits hold across hosts; past that a hot key is counted on each host alone.", api.RateLimitKeyBytes), def: quotaDefault((*pb.Quotas).GetRateLimitKeys)},
	"teapot.v1.Quotas.cpu_millicores":           {doc: "CPU each LB host may spend on everything the tenant makes it compute, in thousandths of a core: reading, parsing and relaying its requests and bytes, TLS, HTTP/2 frames, its connections and UDP flows, and its handshakes, health checks (each measured as it runs) and their signatures, regexes and WAF inspections (which also have budgets of their own). What is measured where it is spent is charged as measured; the rest of the host's CPU is split every 25 ms across the tenants by the work each brought in (a request, a datagram of a UDP listener or an HTTP/3 port, or 64 KiB of an L4 connection's bytes or of an HTTP request or response body, WebSocket tunnels included, is a unit, four over TLS or QUIC; a connection two; an HTTP/2 PING or SETTINGS one, 16 other HTTP/2 control frames one, from its clients or its members; at most 250 µs a unit). Past it (after a burst of a fifth of a second's worth) the tenant is slowed where its work enters: its requests and new connections wait until its debt (at most a second's worth) is repaid, so do its open connections between two copies (bodies, tunnels, L4 bytes, HTTP/2 frames), its handshakes wait up to 200 ms and are then refused, its checks are delayed; for 2 s after that its requests, connections and bytes are spaced at its rate. Its HTTPS health checks compute on at most as many of the host's processors at once as the budget has cores, rounded up (one at 500), in turn, the wait added to their timeout. Other tenants and the admin API never wait for it; explain tenant shows each host's budget, use and throttles. Raise it per tenant (tenant update --cpu-millicores) or for every tenant without one (serve --cpu-per-tenant).", def: "each LB host's serve --cpu-per-tenant, by default a quarter of its CPUs (500 on a 2-core host, 8000 on 32 cores)", limits: "feature level 6 on every host"},
	"teapot.v1.Quotas.regex_cpu_millicores":     {doc: "CPU each LB host may spend matching the tenant's regular expressions, in thousandths of a core; past it (after a burst of a fifth of a second's worth) a request that would be matched against a regex is answered 429 with Retry-After: 1 until the budget refills.", def: quotaDefault((*pb.Quotas).GetRegexCpuMillicores)},

	"teapot.v1.VIPPool.name":         {doc: "Name of the pool.", required: true, limits: nameLimits, example: "public"},
	"teapot.v1.VIPPool.cidrs":        {required: true, limits: atMost(api.MaxPoolCIDRs, "entries; no overlap with each other or with another pool, but pools in different tenants' attachments may overlap"), example: "[192.0.2.0/28, \"2001:db8:10::/124\"]"},
	"teapot.v1.VIPPool.mode":         {doc: "How the addresses are announced: arp (the host holding an address answers ARP and NDP), bgp (every healthy host announces, routers spread flows by ECMP), static (the network routes the range to the hosts; teapot-lb only binds).", required: true, enum: []string{"arp", "bgp", "static"}},
	"teapot.v1.VIPPool.tenants":      {limits: atMost(api.MaxPoolTenants, "tenants; each must exist")},
	"teapot.v1.VIPPool.allow_shared": {def: "false"},
	"teapot.v1.VIPPool.communities":  {limits: atMost(api.MaxPoolCommunities, "communities, each ASN:VALUE with numbers from 0 to 65535"), example: "[\"65000:100\"]"},
	"teapot.v1.VIPPool.interface":    {limits: "arp pools only; an interface name of at most 15 bytes", def: "the host's --vip-interface", example: "eth1"},
	"teapot.v1.VIPPool.attachment":   {limits: "arp and bgp pools only; not with interface; a tenant with an attachment, whose networks hold every address of the pool and none of its hosts' addresses; for a bgp pool, the tenant's bgp with a speaker, and host addresses in the attachment, of each family the pool has; feature level 6 on every host (7 for a bgp pool)", example: "acme"},
	"teapot.v1.VIPPool.meta":         {readOnly: true, opaque: true, doc: "Revision, generation and times, stamped by the cluster."},

	"teapot.v1.LoadBalancer.name":       {doc: "Name of the load balancer, unique within its tenant.", required: true, limits: nameLimits, example: "shop"},
	"teapot.v1.LoadBalancer.tenant":     {doc: "Tenant the load balancer belongs to; it must exist.", required: true, example: "acme"},
	"teapot.v1.LoadBalancer.vip":        {doc: "The virtual IP: from a pool the tenant may use, or a specific address.", required: true},
	"teapot.v1.LoadBalancer.listeners":  {doc: "Ports the load balancer listens on.", required: true, limits: "at least 1; at most quotas.listenersPerLb (default " + quotaDefault((*pb.Quotas).GetListenersPerLb) + ")"},
	"teapot.v1.LoadBalancer.routes":     {doc: "HTTP routes of the http and https listeners: host, path and conditions to backend pools. A request takes the first that matches in this order: an exact host over a wildcard over any host; then an exact path over a regular expression (longer first) over a prefix (longer first); then a match with a method, then more header matches, then more query parameter matches; then the route written first, then its match written first. Write routes oldest first to rank ties as the Gateway API does.", limits: "at most quotas.routesPerLb (default " + quotaDefault((*pb.Quotas).GetRoutesPerLb) + ")"},
	"teapot.v1.LoadBalancer.pools":      {doc: "Backend pools by name, used by listeners and routes.", limits: "at most quotas.poolsPerLb (default " + quotaDefault((*pb.Quotas).GetPoolsPerLb) + "); names: " + nameLimits + fmt.Sprintf("; the whole load balancer at most %d bytes encoded", api.MaxObjectBytes)},
	"teapot.v1.LoadBalancer.access_log": {def: "off"},
	"teapot.v1.LoadBalancer.meta":       {readOnly: true, opaque: true, doc: "Revision, generation and times, stamped by the cluster."},
	"teapot.v1.LoadBalancer.status":     {readOnly: true, opaque: true, doc: "The allocated address, problems found when written, and what the hosts observe (get and explain show it)."},

	"teapot.v1.AccessLog.enabled": {def: "false"},
	"teapot.v1.AccessLog.sample":  {def: "1 (every request)", limits: "0 to 1"},

	"teapot.v1.VIPRequest.pool":        {doc: "VIP pool to allocate from; the tenant must list it. Required unless address is set.", example: "public"},
	"teapot.v1.VIPRequest.address":     {limits: atMost(api.MaxAddressLen, "bytes"), example: "192.0.2.10"},
	"teapot.v1.VIPRequest.family":      {doc: "Address family of the allocated address.", def: "ipv4 when the pool has IPv4 addresses", enum: []string{"ipv4", "ipv6"}},
	"teapot.v1.VIPRequest.sharing_key": {limits: atMost(api.MaxSharingKeyLen, "bytes"), example: "edge"},
	"teapot.v1.VIPRequest.families": {doc: "Dual stack: one VIP of each family listed, from the pool, in this order; the first is status.address and status.addresses holds them all. vip.address, when given, is the VIP of its family.",
		def: "unset: one VIP of vip.family", limits: "one or two distinct families, each ipv4 or ipv6; not with vip.family; feature level 4 on every host", example: "[ipv4, ipv6]"},
	"teapot.v1.VIPRequest.family_policy": {doc: "With two families: require refuses the load balancer unless the pool gives an address of each; prefer serves it on the families the pool has a free address of (at least one), and status.problems names the family left out.",
		def: "require", limits: "only with vip.families", enum: []string{"require", "prefer"}},

	"teapot.v1.Listener":                         {doc: "One port of the load balancer."},
	"teapot.v1.Listener.port":                    {doc: "Port on the VIP.", required: true, limits: "1 to 65535; one listener per port and transport (udp, or tcp for the others)", example: "443"},
	"teapot.v1.Listener.protocol":                {doc: "What the listener speaks.", required: true, enum: []string{"tcp", "udp", "http", "https", "tls-passthrough"}},
	"teapot.v1.Listener.pool":                    {limits: "required for tcp, udp and tls-passthrough (a key of pools); not allowed for http and https, which use routes", example: "web"},
	"teapot.v1.Listener.tls":                     {doc: "TLS termination of an https listener: tls.acme or tls.certificates is required."},
	"teapot.v1.Listener.redirect_to_https":       {def: "false", limits: "http listeners only"},
	"teapot.v1.Listener.http3":                   {def: "false", limits: "https listeners only"},
	"teapot.v1.Listener.http3_zero_rtt":          {def: "false", limits: "https listeners with http3 only, not with allowedSources or deniedSources; feature level 6 on every host"},
	"teapot.v1.Listener.max_connections":         {def: "0: derived from the tenant's connection budget"},
	"teapot.v1.Listener.idle_timeout":            {doc: "Close a client connection idle for this long.", limits: "positive", example: "5m"},
	"teapot.v1.Listener.trusted_proxies":         {limits: atMost(api.MaxTrustedProxies, "CIDRs"), example: "[10.0.0.0/8]"},
	"teapot.v1.Listener.allowed_sources":         {limits: atMost(api.MaxListenerSources, "CIDRs with deniedSources; a bare address is its /32 or /128"), example: "[192.0.2.0/24, 2001:db8::/32]"},
	"teapot.v1.Listener.denied_sources":          {limits: atMost(api.MaxListenerSources, "CIDRs with allowedSources"), example: "[192.0.2.128/25]"},
	"teapot.v1.RateLimit.requests_per_second":    {limits: fmt.Sprintf("0 to %d", api.MaxRateLimit), example: "100"},
	"teapot.v1.RateLimit.connections_per_second": {limits: fmt.Sprintf("0 to %d; listeners only", api.MaxRateLimit), example: "20"},
	"teapot.v1.RateLimit.burst":                  {limits: fmt.Sprintf("0 to %d", api.MaxRateBurst), def: "the rate"},
	"teapot.v1.RateLimit.key":                    {def: api.RateKeyClient, enum: []string{api.RateKeyClient, api.RateKeyTotal, api.RateKeyHeader}},
	"teapot.v1.RateLimit.header":                 {limits: atMost(api.MaxRateHeaderName, "bytes") + ", a header field name other than Host and X-Request-Id; with key header only", example: "X-API-Key"},
	"teapot.v1.WAF.mode":                         {required: true, enum: []string{api.WAFBlock, api.WAFDetect}},
	"teapot.v1.WAF.paranoia_level":               {def: "1", limits: "1 to 4"},
	"teapot.v1.WAF.max_body_bytes":               {def: fmt.Sprint(api.DefaultWAFBodyBytes), limits: fmt.Sprintf("at most %d", api.MaxWAFBodyBytes)},
	"teapot.v1.WAF.exclude_rules":                {limits: fmt.Sprintf("at most %d ids, each %d to %d; feature level 5 on every host", api.MaxWAFExcludedRules, api.MinWAFRuleID, api.MaxWAFRuleID), example: "[942100, 920350]"},
	"teapot.v1.WAF.rules": {limits: fmt.Sprintf("at most %d rules and %d bytes, ids %d to %d, at most %d distinct lists per load balancer; feature level 5 on every host", api.MaxWAFRules, api.MaxWAFRulesBytes, api.MinTenantRuleID, api.MaxTenantRuleID, api.MaxWAFRuleSetsPerLB),
		example: `["SecRule REQUEST_HEADERS:X-Debug \"@streq on\" \"id:1001,phase:1,deny,status:403,msg:'debug header'\""]`},

	"teapot.v1.TLSPolicy.acme":         {def: "false", limits: "every route host must be a name; a wildcard (\"*.acme.example\") is issued through DNS-01 only when it lies in a zone the LB hosts answer (serve --dns-zones), else its Certificate is refused saying so"},
	"teapot.v1.TLSPolicy.certificates": {limits: atMost(api.MaxListenerCertificates, "names of the tenant's uploaded certificates (teapot-lb cert upload)")},

	"teapot.v1.ClientValidation.ca_bundle":      {required: true, limits: fmt.Sprintf("at most %d bytes and %d PEM CERTIFICATE blocks", api.MaxCABundleBytes, api.MaxCABundleCerts)},
	"teapot.v1.ClientValidation.mode":           {def: "require"},
	"teapot.v1.ClientValidation.subject_header": {limits: fmt.Sprintf("a header name of at most %d bytes; not Host, framing, connection or forwarding headers", api.MaxHeaderNameLen), example: "X-Client-Subject"},
	"teapot.v1.TLSPolicy.sni_scopes":            {limits: atMost(api.MaxSNIScopes, "host names (exact, \"*.suffix\" or \"\"), lower case, each once; https listeners only"), example: `["", shop.acme.example, "*.acme.example"]`},
	"teapot.v1.TLSPolicy.min_version":           {doc: "Oldest TLS version accepted from clients.", def: "tls1.2", enum: []string{"tls1.2", "tls1.3"}},

	"teapot.v1.Route":           {doc: "One HTTP route: requests for host and path go to a backend pool."},
	"teapot.v1.Route.host":      {limits: "at most 253 bytes; inside the tenant's domains", example: "shop.acme.example"},
	"teapot.v1.Route.path":      {def: "/", limits: atMost(api.MaxPathLen, "bytes; no spaces, '?' or '#'"), example: "/api/"},
	"teapot.v1.Route.path_type": {doc: "How path matches: as a prefix (by path segments), exactly, or as a regular expression (RE2) the whole path must match (a request path longer than " + fmt.Sprint(api.MaxRegexSubjectLen) + " bytes never matches a regex; a regex repeats nothing more than " + fmt.Sprint(api.MaxRegexRepeat) + " times and compiles to at most " + fmt.Sprint(api.MaxRegexInsts) + " instructions, those of a load balancer to at most " + fmt.Sprint(api.MaxRegexInstsPerLB) + " together; matching them is charged to quotas.regexCpuMillicores).", def: "prefix", enum: []string{"prefix", "exact", "regex"}},
	"teapot.v1.Route.pool":      {doc: "Backend pool the route sends to (a key of pools); the shorthand for backends with one entry.", limits: "required unless backends, a requestRedirect filter or notFound is set", example: "web"},
	"teapot.v1.Route.not_found": {def: "false", limits: "not with pool, backends, filters, matches, timeouts, rateLimit or waf; feature level 5 on every host", example: "true"},
	"teapot.v1.Route.matches":   {limits: atMost(api.MaxRouteMatches, "matches; path and pathType of the route must then be left out")},
	"teapot.v1.Route.backends":  {limits: atMost(api.MaxRouteBackends, "backends; not with pool")},
	"teapot.v1.Route.filters":   {limits: atMost(api.MaxRouteFilters, fmt.Sprintf("filters; one of each kind, except up to %d requestMirror; not requestRedirect with urlRewrite", api.MaxRouteMirrors))},
	"teapot.v1.Route.timeouts":  {doc: "Bounds on the time a request may take; one that runs out gets 504."},

	"teapot.v1.RouteMatch":              {doc: "Conditions a request must all meet."},
	"teapot.v1.RouteMatch.path":         {def: "/", limits: atMost(api.MaxPathLen, "bytes; no spaces, '?' or '#' (prefix and exact)"), example: "/api/"},
	"teapot.v1.RouteMatch.path_type":    {doc: "How path matches: as a prefix (by path segments), exactly, or as a regular expression (RE2) the whole path must match (a request path longer than " + fmt.Sprint(api.MaxRegexSubjectLen) + " bytes never matches a regex; a regex repeats nothing more than " + fmt.Sprint(api.MaxRegexRepeat) + " times and compiles to at most " + fmt.Sprint(api.MaxRegexInsts) + " instructions, those of a load balancer to at most " + fmt.Sprint(api.MaxRegexInstsPerLB) + " together; matching them is charged to quotas.regexCpuMillicores).", def: "prefix", enum: []string{"prefix", "exact", "regex"}},
	"teapot.v1.RouteMatch.headers":      {limits: atMost(api.MaxMatchConditions, "headers, each name once; X-Forwarded-For, X-Real-IP, Forwarded, X-Request-Id, the other forwarding headers and the client-certificate subject header match the values the member receives (what a client outside trustedProxies sends in them is never seen)")},
	"teapot.v1.RouteMatch.query_params": {limits: atMost(api.MaxMatchConditions, "parameters, each name once")},
	"teapot.v1.RouteMatch.method":       {enum: api.RouteMethods},
	"teapot.v1.RouteMatch.grpc":         {limits: "not with path"},

	"teapot.v1.ValueMatch":       {doc: "A header or query parameter and the value it must have."},
	"teapot.v1.ValueMatch.name":  {required: true, limits: atMost(api.MaxHeaderNameLen, "bytes"), example: "X-Version"},
	"teapot.v1.ValueMatch.value": {doc: "The value, or for type regex a regular expression (RE2) the whole value must match.", limits: regexLimits(), example: "v2"},
	"teapot.v1.ValueMatch.type":  {doc: "How value matches.", def: "exact", enum: []string{"exact", "regex"}},

	"teapot.v1.GRPCMethodMatch.service": {limits: "letters, digits, '_' and '.'; a regular expression for type regex", example: "shop.v1.Cart"},
	"teapot.v1.GRPCMethodMatch.method":  {limits: "letters, digits and '_'; a regular expression for type regex", example: "AddItem"},
	"teapot.v1.GRPCMethodMatch.type":    {doc: "How service and method match.", def: "exact", enum: []string{"exact", "regex"}},

	"teapot.v1.RouteBackend.pool":        {example: "web"},
	"teapot.v1.RouteBackend.weight":      {def: "1", limits: fmt.Sprintf("0 to %d; when every backend weighs 0, requests get 500", api.MaxBackendWeight)},
	"teapot.v1.RouteBackend.unavailable": {def: "false"},

	"teapot.v1.HeaderModifier.set":    {limits: atMost(api.MaxHeaderEdits, "headers, each name once; not Host, Content-Length, Transfer-Encoding or connection headers; in a request modifier, not X-Request-Id (response modifiers may edit it)")},
	"teapot.v1.HeaderModifier.add":    {limits: atMost(api.MaxHeaderEdits, "headers, each name once; not Host, Content-Length, Transfer-Encoding or connection headers; in a request modifier, not X-Request-Id (response modifiers may edit it)")},
	"teapot.v1.HeaderModifier.remove": {limits: atMost(api.MaxHeaderEdits, "names; not Host, Content-Length, Transfer-Encoding or connection headers; in a request modifier, not X-Request-Id (response modifiers may edit it)"), example: "[X-Debug]"},
	"teapot.v1.HeaderValue.name":      {required: true, limits: atMost(api.MaxHeaderNameLen, "bytes"), example: "X-Served-By"},
	"teapot.v1.HeaderValue.value":     {limits: atMost(api.MaxHeaderValueLen, "bytes; no CR, LF or NUL"), example: "teapot"},

	"teapot.v1.RequestRedirect.scheme":            {enum: []string{"http", "https"}},
	"teapot.v1.RequestRedirect.hostname":          {limits: "a DNS name", example: "www.acme.example"},
	"teapot.v1.RequestRedirect.port":              {limits: "1 to 65535", example: "8443"},
	"teapot.v1.RequestRedirect.status_code":       {def: "302", limits: "301, 302, 303, 307 or 308"},
	"teapot.v1.URLRewrite.hostname":               {limits: "a DNS name", example: "internal.acme.example"},
	"teapot.v1.PathModifier.replace_full_path":    {limits: atMost(api.MaxPathLen, "bytes, starting with /"), example: "/new"},
	"teapot.v1.PathModifier.replace_prefix_match": {limits: "only when every match of the route has a prefix path", example: "/v2/"},
	"teapot.v1.RequestMirror.pool":                {required: true, example: "shadow"},

	"teapot.v1.CORS.allow_origins":            {limits: atMost(api.MaxCORSOrigins, fmt.Sprintf("origins of at most %d bytes each; \"*\" only alone", api.MaxCORSOriginLen)), example: "[\"https://www.acme.example\", \"https://*.acme.example\"]"},
	"teapot.v1.CORS.allow_methods":            {limits: atMost(api.MaxCORSMethods, "methods; \"*\" only alone"), example: "[GET, PUT]"},
	"teapot.v1.CORS.allow_headers":            {limits: atMost(api.MaxCORSHeaders, "header names; \"*\" only alone")},
	"teapot.v1.CORS.expose_headers":           {limits: atMost(api.MaxCORSHeaders, "header names; \"*\" only alone and without allowCredentials")},
	"teapot.v1.CORS.max_age":                  {def: fmt.Sprint(api.DefaultCORSMaxAge), limits: fmt.Sprintf("at most %d", api.MaxCORSMaxAge)},
	"teapot.v1.CORS.allow_credentials":        {def: "false"},
	"teapot.v1.RequestMirror.percent":         {def: "100", limits: "0 to 100; not with fraction"},
	"teapot.v1.Fraction.numerator":            {limits: "at most denominator"},
	"teapot.v1.Fraction.denominator":          {def: "100"},
	"teapot.v1.RouteTimeouts.request":         {limits: fmt.Sprintf("0 to %s", api.MaxRouteTimeout), example: "10s"},
	"teapot.v1.RouteTimeouts.backend_request": {limits: fmt.Sprintf("0 to %s; at most request", api.MaxRouteTimeout), example: "2s"},

	"teapot.v1.RouteRetry.codes":                     {limits: atMost(api.MaxRetryCodes, "statuses from 400 to 599, each once"), example: "[500, 502, 503, 504]"},
	"teapot.v1.RouteRetry.attempts":                  {def: fmt.Sprint(api.DefaultRetryAttempts), limits: fmt.Sprintf("1 to %d", api.MaxRetryAttempts), example: "3"},
	"teapot.v1.RouteRetry.backoff":                   {def: api.DefaultRetryBackoff.String(), limits: fmt.Sprintf("0 to %s", api.MaxRetryBackoff), example: "100ms"},
	"teapot.v1.RouteBackend.request_header_modifier": {limits: "not with unavailable"},

	"teapot.v1.BackendPool":                  {doc: "A set of members traffic is balanced over."},
	"teapot.v1.BackendPool.algorithm":        {doc: "How a member is chosen for a connection or request.", def: "round-robin", enum: []string{"round-robin", "least-request", "hash"}},
	"teapot.v1.BackendPool.hash_on":          {doc: "What algorithm hash hashes: client-ip or header:NAME. A request without the header, or with it empty, is hashed by its client's address. Host hashes the request's authority (:authority in HTTP/2 and HTTP/3). X-Forwarded-For, X-Real-IP, Forwarded, the other forwarding headers and the client-certificate subject header are hashed as the member receives them, as route matches read them (what a client outside trustedProxies sends in them is never seen).", def: "client-ip", limits: fmt.Sprintf("algorithm hash only; header names at most %d bytes; not X-Request-Id (one for each request)", api.MaxHeaderNameLen), example: "header:X-User"},
	"teapot.v1.BackendPool.members":          {doc: "Where traffic goes: \"IP:port\", or {address, weight}.", limits: "at most quotas.membersPerPool (default " + quotaDefault((*pb.Quotas).GetMembersPerPool) + "); inside the tenant's networks; never a VIP or an LB host's own port (API, Raft, heartbeat, metrics and profiling, dashboard, BGP), nor checked on one", example: "[10.20.0.11:30080, {address: \"10.20.0.12:30080\", weight: 2}]"},
	"teapot.v1.BackendPool.health_check":     {doc: "Active health check of every member: tcp, http or https (one of them)."},
	"teapot.v1.BackendPool.proxy_protocol":   {doc: "Send the client's address to the members in a PROXY protocol header.", def: "none", enum: []string{"v1", "v2"}, limits: "not for pools of udp listeners"},
	"teapot.v1.BackendPool.backend_protocol": {doc: "Protocol towards the members (http and https listeners): HTTP/1.1, HTTP/2 without TLS, HTTP/1.1 over TLS, or HTTP/2 over TLS (ALPN h2).", def: "http1", enum: []string{"http1", "h2c", "tls", "h2"}},
	"teapot.v1.BackendPool.connect_timeout":  {doc: "Give up connecting to a member after this long. A connection tries up to 3 members; every attempt but its last waits at most 1s for the member's answer (a NodePort's node drops again the SYNs it dropped once), the last this long.", limits: "positive", example: "2s"},
	"teapot.v1.BackendPool.client_source":    {def: "false: members see the LB host's address", limits: "pools of tcp, tls-passthrough and udp listeners only; not with proxyProtocol; not for a tenant with an attachment; feature level 7 on every host"},

	"teapot.v1.Member.address": {required: true, limits: atMost(api.MaxAddressLen, "bytes"), example: "10.20.0.11:30080"},
	"teapot.v1.Member.weight":  {def: "1", limits: fmt.Sprintf("0 to %d", api.MaxWeight)},

	"teapot.v1.HealthCheck.tcp":           {doc: "Connect to the member: {} turns it on."},
	"teapot.v1.HealthCheck.http":          {doc: "An HTTP GET to the member."},
	"teapot.v1.HealthCheck.interval":      {doc: "Time between two checks of a member.", def: api.DefaultHealthInterval.String(), limits: fmt.Sprintf("%s to %s", api.MinHealthInterval, api.MaxHealthInterval), example: "2s"},
	"teapot.v1.HealthCheck.timeout":       {doc: "A check that takes longer fails.", limits: fmt.Sprintf("shorter than the interval; at most %s", api.MaxHealthTimeout), example: "1s"},
	"teapot.v1.HealthCheck.rise":          {doc: "Successes in a row that mark a down member up.", limits: fmt.Sprintf("0 to %d", api.MaxRiseFall)},
	"teapot.v1.HealthCheck.fall":          {doc: "Failures in a row that mark an up member down.", limits: fmt.Sprintf("0 to %d", api.MaxRiseFall)},
	"teapot.v1.HealthCheck.port":          {def: "0: the member's port", limits: "0 to 65535"},
	"teapot.v1.HealthCheck.close_on_down": {def: "false"},

	"teapot.v1.HTTPCheck.path":          {doc: "Path requested.", def: "/", limits: atMost(api.MaxPathLen, "bytes"), example: "/healthz"},
	"teapot.v1.HTTPCheck.expect_status": {limits: "100 to 599"},
	"teapot.v1.HTTPCheck.host":          {doc: "Host header (default: the member's address).", example: "shop.acme.example"},

	"teapot.v1.HTTPSCheck.path":                 {doc: "Path requested.", def: "/", limits: atMost(api.MaxPathLen, "bytes"), example: "/readyz"},
	"teapot.v1.HTTPSCheck.expect_status":        {limits: "100 to 599"},
	"teapot.v1.HTTPSCheck.ca_pem":               {limits: atMost(api.MaxCheckCAPEMLen, fmt.Sprintf("bytes and %d certificates", api.MaxCheckCACerts))},
	"teapot.v1.HTTPSCheck.client_cert_pem":      {limits: atMost(api.MaxCheckClientCertPEMLen, fmt.Sprintf("bytes; its key ECDSA P-256 or P-384, Ed25519, or RSA of at most %d bits", api.MaxCheckClientRSABits))},
	"teapot.v1.HTTPSCheck.client_key_pem":       {doc: "Private key (PEM) of clientCertPem; never returned when the load balancer is read. Left out while clientCertPem is the stored one, the stored key is kept.", limits: atMost(api.MaxCheckClientKeyPEMLen, "bytes")},
	"teapot.v1.HTTPSCheck.insecure_skip_verify": {def: "false"},

	"teapot.v1.BackendPool.tls":               {limits: "backendProtocol tls or h2 only; not on a pool of a tcp, udp or tls-passthrough listener or sniRoute (they forward bytes as they come)"},
	"teapot.v1.BackendTLS.ca_pem":             {limits: atMost(api.MaxBackendCAPEMLen, fmt.Sprintf("bytes and %d certificates", api.MaxCheckCACerts))},
	"teapot.v1.BackendTLS.system_roots":       {def: "false"},
	"teapot.v1.BackendTLS.server_name":        {limits: "a DNS name; required", example: "web.acme.example"},
	"teapot.v1.BackendTLS.subject_alt_names":  {limits: fmt.Sprintf("at most %d", api.MaxBackendSANs)},
	"teapot.v1.BackendTLS.client_certificate": {limits: "a certificate of the tenant, uploaded with its key", example: "members-client"},
	"teapot.v1.SubjectAltName.hostname":       {example: "web.acme.example"},
	"teapot.v1.SubjectAltName.uri":            {limits: atMost(api.MaxSANURILen, "bytes"), example: "spiffe://acme.example/web"},
}
