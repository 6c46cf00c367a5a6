package api

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"

	pb "github.com/teapot-lb/teapot-lb/api/proto/teapotv1"
)

// Validation is pure and deterministic: the functions here read only their
// arguments and the Catalog, never the clock or the network, and every
// list they report is in a fixed order, because they also run inside the
// replicated state machine on every host.

// NodeCatalog is implemented by a Catalog that can look up LB hosts;
// ValidateDelete uses it when present.
type NodeCatalog interface {
	Node(id string) *pb.Node
}

// CertificateCatalog is implemented by a Catalog that can look up
// certificates; ValidateDelete and ValidateLoadBalancer use it when present.
type CertificateCatalog interface {
	Certificate(tenant, name string) *pb.Certificate
}

// JoinTokenCatalog is implemented by a Catalog that can look up join
// tokens; ValidateDelete uses it when present.
type JoinTokenCatalog interface {
	JoinToken(id string) *pb.JoinToken
}

// NodeLister is implemented by a Catalog that can list the LB hosts;
// member checks use it to refuse the hosts' own service addresses.
type NodeLister interface {
	Nodes() []*pb.Node
}

// AddressIndex is implemented by a Catalog that keeps the status addresses
// of its load balancers in order. AllocateAddress then binary-searches the
// used addresses of a pool for the first gap instead of reading every load
// balancer, which keeps allocation in large pools in microseconds.
type AddressIndex interface {
	// UsedAddresses returns the distinct status addresses (every one of
	// status.addresses) of all load balancers within [from, to] (one
	// family), in ascending order.
	// Callers do not modify the slice.
	UsedAddresses(from, to netip.Addr) []netip.Addr
}

const nameRule = "must be 1 to 63 lowercase letters, digits or '-', starting and ending with a letter or digit"

// IsLabel reports whether s is a DNS label: [a-z0-9-]{1,63}, alphanumeric
// at both ends.
func IsLabel(s string) bool {
	if len(s) == 0 || len(s) > 63 || s[0] == '-' || s[len(s)-1] == '-' {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-') {
			return false
		}
	}
	return true
}

// checkName reports a broken object or map-key name.
func checkName(ck *checker, field, s string) bool {
	switch {
	case s == "":
		ck.invalidf(field, "required; it %s", nameRule)
	case len(s) > 63:
		ck.invalidf(field, "is %d bytes long; it %s", len(s), nameRule)
	case !IsLabel(s):
		if l := strings.ToLower(s); l != s && IsLabel(l) {
			ck.invalidf(field, "%q must be lowercase; use %q", s, l)
		} else {
			ck.invalidf(field, "%q %s", s, nameRule)
		}
	default:
		return true
	}
	return false
}

// checkNameList checks a list of names at field (list: its last part, as
// a duplicate's reason names it): each a name (checkName), each once, and
// what missing says about it ("" when it exists).
func checkNameList(ck *checker, field, list string, names []string, missing func(name string) string) {
	seen := map[string]int{}
	for i, name := range names {
		f := fmt.Sprintf("%s[%d]", field, i)
		if !checkName(ck, f, name) {
			continue
		}
		if j, dup := seen[name]; dup {
			ck.invalidf(f, "%s is already listed as %s[%d]", name, list, j)
			continue
		}
		seen[name] = i
		if why := missing(name); why != "" {
			ck.invalidf(f, "%s", why)
		}
	}
}

// DNSNameProblem says why s is not a lowercase DNS name without a trailing
// dot, or returns "".
func DNSNameProblem(s string) string {
	switch {
	case s == "":
		return "empty; give a DNS name like acme.example"
	case strings.HasSuffix(s, "."):
		return fmt.Sprintf("%s: remove the trailing dot", Excerpt(s))
	case len(s) > MaxHostLen:
		return fmt.Sprintf("%.40q... is longer than 253 characters", s)
	}
	if IsDNSName(s) {
		return ""
	}
	if l := strings.ToLower(s); l != s && IsDNSName(l) {
		return fmt.Sprintf("%s must be lowercase; use %s", Excerpt(s), Clip(l, MaxQuoted))
	}
	return fmt.Sprintf("%s is not a DNS name: each dot-separated label %s", Excerpt(s), nameRule)
}

// IsDNSName reports whether s is a lowercase DNS name without a trailing
// dot: at most 253 bytes of dot-separated labels (IsLabel). It does not
// allocate.
func IsDNSName(s string) bool {
	if s == "" || len(s) > MaxHostLen {
		return false
	}
	for {
		label, rest, more := strings.Cut(s, ".")
		if !IsLabel(label) {
			return false
		}
		if !more {
			return true
		}
		s = rest
	}
}

// InDomain reports whether host is domain or one of its subdomains.
func InDomain(host, domain string) bool {
	if domain == "" {
		return false
	}
	return host == domain || strings.HasSuffix(host, "."+domain)
}

// HostInDomains reports whether a host (exact or "*.suffix") lies inside
// one of domains.
func HostInDomains(host string, domains []string) bool {
	h := strings.TrimPrefix(host, "*.")
	for _, d := range domains {
		if InDomain(h, d) {
			return true
		}
	}
	return false
}

func listOrNone(items []string, none string) string {
	if len(items) == 0 {
		return none
	}
	return strings.Join(items, ", ")
}

// specialBlocks are ranges members may use only when a tenant network lies
// inside the block: the operator put them there on purpose.
var specialBlocks = []struct {
	prefix netip.Prefix
	what   string
}{
	{netip.MustParsePrefix("0.0.0.0/32"), "an unspecified"},
	{netip.MustParsePrefix("::/128"), "an unspecified"},
	{netip.MustParsePrefix("127.0.0.0/8"), "a loopback"},
	{netip.MustParsePrefix("::1/128"), "a loopback"},
	{netip.MustParsePrefix("169.254.0.0/16"), "a link-local"},
	{netip.MustParsePrefix("fe80::/10"), "a link-local"},
	{netip.MustParsePrefix("224.0.0.0/4"), "a multicast"},
	{netip.MustParsePrefix("ff00::/8"), "a multicast"},
	{netip.MustParsePrefix("255.255.255.255/32"), "the broadcast"},
}

// tenantNetworks parses a tenant's networks, skipping broken ones.
func tenantNetworks(t *pb.Tenant) []netip.Prefix {
	var out []netip.Prefix
	for _, s := range t.GetNetworks() {
		if p, err := netip.ParsePrefix(s); err == nil && p == p.Masked() {
			out = append(out, p)
		}
	}
	return out
}

// MemberNetworkProblem says why a member address may not be dialled for a tenant
// with networks nets (as written: names), or returns "".
func MemberNetworkProblem(a netip.Addr, nets []netip.Prefix, names []string) string {
	for _, b := range specialBlocks {
		if !b.prefix.Contains(a) {
			continue
		}
		for _, n := range nets {
			if n.Contains(a) && b.prefix.Bits() <= n.Bits() && b.prefix.Contains(n.Addr()) {
				return ""
			}
		}
		return fmt.Sprintf("%s is %s address, refused unless a tenant network lies inside %s", a, b.what, b.prefix)
	}
	for _, n := range nets {
		if n.Contains(a) {
			return ""
		}
	}
	return fmt.Sprintf("%s is outside the tenant's networks (%s)", a, listOrNone(names, "the tenant has none; the operator sets them"))
}

// parseMember parses "IP:port" / "[IPv6]:port".
func parseMember(s string) (netip.AddrPort, string) {
	ap, err := netip.ParseAddrPort(s)
	switch {
	case err != nil:
		return ap, fmt.Sprintf("%s is not IP:port (like 10.20.0.11:30080 or [2001:db8::1]:80)", Excerpt(s))
	case ap.Addr().Zone() != "":
		return ap, fmt.Sprintf("%s: zones are not allowed", s)
	case ap.Addr().Is4In6():
		return ap, fmt.Sprintf("%s is an IPv4-mapped address; use %s", s, netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port()))
	case ap.Port() == 0:
		return ap, fmt.Sprintf("%s: port must be between 1 and 65535", s)
	}
	return ap, ""
}

func objRef(kind, tenant, name string) string {
	if name == "" {
		name = "(unnamed)"
	}
	return RefString(&pb.ObjectRef{Kind: kind, Tenant: tenant, Name: name})
}

func lbRef(lb *pb.LoadBalancer) string {
	return objRef(KindLoadBalancer, lb.GetTenant(), lb.GetName())
}

func sameLB(a, b *pb.LoadBalancer) bool {
	return a.GetTenant() == b.GetTenant() && a.GetName() == b.GetName()
}

func cmpLB(a, b *pb.LoadBalancer) int {
	if c := strings.Compare(a.GetTenant(), b.GetTenant()); c != 0 {
		return c
	}
	return strings.Compare(a.GetName(), b.GetName())
}

// sortedLBs returns a sorted copy; callers sort only short lists.
func sortedLBs(lbs []*pb.LoadBalancer) []*pb.LoadBalancer {
	out := slices.Clone(lbs)
	slices.SortFunc(out, cmpLB)
	return out
}

func sortedTenants(c Catalog) []*pb.Tenant {
	out := slices.Clone(c.Tenants())
	slices.SortFunc(out, func(a, b *pb.Tenant) int { return strings.Compare(a.GetName(), b.GetName()) })
	return out
}

// parsedPool is a stored pool with its ranges parsed.
type parsedPool struct {
	pool   *pb.VIPPool
	ranges []poolRange
}

func parsePools(c Catalog) []parsedPool {
	pools := slices.Clone(c.Pools())
	slices.SortFunc(pools, func(a, b *pb.VIPPool) int { return strings.Compare(a.GetName(), b.GetName()) })
	out := make([]parsedPool, 0, len(pools))
	for _, p := range pools {
		out = append(out, parsedPool{pool: p, ranges: parseRanges(p.GetCidrs())})
	}
	return out
}

// poolNameOf names the VIP pool a stored load balancer uses: vip.pool, else
// the pool holding vip.address or status.address.
func poolNameOf(lb *pb.LoadBalancer, pools []parsedPool) string {
	if n := lb.GetVip().GetPool(); n != "" {
		return n
	}
	for _, s := range []string{lb.GetVip().GetAddress(), lb.GetStatus().GetAddress()} {
		a, err := netip.ParseAddr(s)
		if err != nil {
			continue
		}
		for _, p := range pools {
			if rangesContain(p.ranges, a) && ownPool(p.pool, lb.GetTenant()) {
				return p.pool.GetName()
			}
		}
	}
	return ""
}

// listenerKind folds protocols onto the transport they bind: udp or tcp.
func listenerKind(protocol string) string {
	if protocol == "udp" {
		return "udp"
	}
	return "tcp"
}

// listenerKeys are the port/kind pairs a listener binds: an https
// listener with http3 binds its port over UDP too.
func listenerKeys(l *pb.Listener) []string {
	k := fmt.Sprintf("%d/%s", l.GetPort(), listenerKind(l.GetProtocol()))
	if l.GetHttp3() && l.GetProtocol() == "https" {
		return []string{k, fmt.Sprintf("%d/udp", l.GetPort())}
	}
	return []string{k}
}

// portClash returns the first (port/kind) both load balancers listen on.
func portClash(a, b *pb.LoadBalancer) string {
	used := map[string]bool{}
	for _, l := range a.GetListeners() {
		for _, k := range listenerKeys(l) {
			used[k] = true
		}
	}
	for _, l := range b.GetListeners() {
		for _, k := range listenerKeys(l) {
			if used[k] {
				return k
			}
		}
	}
	return ""
}

// shareProblem says why lb may not share an address in pool with other,
// or returns "" when it may.
func shareProblem(lb, other *pb.LoadBalancer, pool *pb.VIPPool) string {
	switch {
	case !pool.GetAllowShared():
		return fmt.Sprintf("VIP pool %s does not allow shared addresses", pool.GetName())
	case other.GetTenant() != lb.GetTenant():
		return "it belongs to another tenant"
	case lb.GetVip().GetSharingKey() == "" || lb.GetVip().GetSharingKey() != other.GetVip().GetSharingKey():
		return "to share it, give both the same vip.sharingKey"
	}
	if k := portClash(lb, other); k != "" {
		return "both listen on " + k
	}
	return ""
}

// addressBlocker says why lb may not hold a in pool, or returns "".
func addressBlocker(lb *pb.LoadBalancer, a netip.Addr, pool *pb.VIPPool, c Catalog) string {
	var users []*pb.LoadBalancer
	for _, u := range c.AddressUsers(a) {
		if !sameLB(u, lb) && !(pool.GetAttachment() != "" && u.GetTenant() != lb.GetTenant()) {
			users = append(users, u)
		}
	}
	for _, u := range sortedLBs(users) {
		why := shareProblem(lb, u, pool)
		switch {
		case why == "":
		case u.GetTenant() != lb.GetTenant():
			// Never name another tenant's objects.
			return fmt.Sprintf("address %s is taken; choose another address or let the pool allocate one", a)
		default:
			return fmt.Sprintf("address %s is in use by %s (%s)", a, lbRef(u), why)
		}
	}
	return ""
}

// holdsAddress reports whether a load balancer of lb's tenant other than
// lb holds a (status.address or status.addresses).
func holdsAddress(lb *pb.LoadBalancer, a netip.Addr, c Catalog) bool {
	for _, u := range c.AddressUsers(a) {
		if u.GetTenant() == lb.GetTenant() && !sameLB(u, lb) {
			return true
		}
	}
	return false
}

// tenantAddressCount counts the distinct status addresses of the tenant's
// load balancers other than lb: from the catalog's usage index when it
// keeps one, else by reading them all.
func tenantAddressCount(lb *pb.LoadBalancer, c Catalog) int {
	idx, ok := c.(UsageIndex)
	if !ok {
		out := map[netip.Addr]bool{}
		for _, o := range c.LoadBalancers(lb.GetTenant()) {
			if sameLB(o, lb) {
				continue
			}
			for _, a := range StatusAddrs(o) {
				out[a] = true
			}
		}
		return len(out)
	}
	n := idx.TenantUsage(lb.GetTenant()).Addresses
	// lb's own addresses count unless another of the tenant's holds them.
	if cur := c.LoadBalancer(lb.GetTenant(), lb.GetName()); cur != nil {
		for _, a := range StatusAddrs(cur) {
			if !holdsAddress(lb, a, c) {
				n--
			}
		}
	}
	return n
}

// emptyCatalog stands in for a nil Catalog.
type emptyCatalog struct{}

func (emptyCatalog) Tenant(string) *pb.Tenant                     { return nil }
func (emptyCatalog) Tenants() []*pb.Tenant                        { return nil }
func (emptyCatalog) Pool(string) *pb.VIPPool                      { return nil }
func (emptyCatalog) Pools() []*pb.VIPPool                         { return nil }
func (emptyCatalog) LoadBalancer(string, string) *pb.LoadBalancer { return nil }
func (emptyCatalog) LoadBalancers(string) []*pb.LoadBalancer      { return nil }
func (emptyCatalog) AddressUsers(netip.Addr) []*pb.LoadBalancer   { return nil }
func orEmpty(c Catalog) Catalog {
	if c == nil {
		return emptyCatalog{}
	}
	return c
}
