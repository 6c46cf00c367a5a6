package consensus

import (
	"net/netip"
	"slices"
	"strings"
	"sync"

	"google.golang.org/protobuf/proto"

	"github.com/teapot-lb/teapot-lb/api"
	pb "github.com/teapot-lb/teapot-lb/api/proto/teapotv1"
)

// reader is what validation reads: the committed state, or an overlay of
// uncommitted changes over it.
type reader interface {
	get(kind, key string) *pb.Object
	// list returns a kind's objects sorted by key; for LoadBalancer and
	// Certificate a non-empty tenant restricts the list to that tenant.
	list(kind, tenant string) []*pb.Object
	addressUsers(addr netip.Addr) []*pb.Object
	// usedAddresses returns the distinct load balancer addresses within
	// [from, to], ascending.
	usedAddresses(from, to netip.Addr) []netip.Addr
	// tenantUsage sums what the tenant's load balancers use of its
	// quotas.
	tenantUsage(tenant string) api.TenantUsage
	// generation grows whenever the reader, or one under it, changes.
	generation() uint64
}

// keyOf is the map key of a reference: "tenant/name" or "name".
func keyOf(r *pb.ObjectRef) string {
	if api.Namespaced(r.GetKind()) {
		return r.GetTenant() + "/" + r.GetName()
	}
	return r.GetName()
}

// state is the committed replicated state. It is only changed by the FSM
// (under the node's lock) and never handed out: readers get clones.
type state struct {
	revision uint64
	objects  map[string]map[string]*pb.Object // kind → key → object
	byTenant map[string]map[string]*pb.Object // tenant → "kind/name" → namespaced object
	byAddr   map[netip.Addr][]*pb.Object
	used     []netip.Addr // keys of byAddr, sorted
	usage    map[string]api.TenantUsage
	gen      uint64 // counts puts and removals
	// sorted caches each kind's objects in key order. Readers fill it
	// under the state's read lock, hence its own mutex; a cached slice is
	// never changed, only dropped when its kind changes.
	sortedMu sync.Mutex
	sorted   map[string][]*pb.Object
}

var allKinds = []string{
	api.KindVIPPool, api.KindTenant, api.KindLoadBalancer, api.KindCertificate, api.KindNode, api.KindJoinToken,
	api.KindStorageItem, api.KindStorageLock,
}

func newState() *state {
	s := &state{
		objects:  make(map[string]map[string]*pb.Object),
		byTenant: make(map[string]map[string]*pb.Object),
		byAddr:   make(map[netip.Addr][]*pb.Object),
		sorted:   make(map[string][]*pb.Object),
		usage:    make(map[string]api.TenantUsage),
	}
	for _, k := range allKinds {
		s.objects[k] = make(map[string]*pb.Object)
	}
	return s
}

func (s *state) get(kind, key string) *pb.Object { return s.objects[kind][key] }

// list returns a shared slice: callers must not modify it.
func (s *state) list(kind, tenant string) []*pb.Object {
	var out []*pb.Object
	if tenant == "" || !api.Namespaced(kind) {
		s.sortedMu.Lock()
		defer s.sortedMu.Unlock()
		if cached, ok := s.sorted[kind]; ok {
			return cached
		}
		out = make([]*pb.Object, 0, len(s.objects[kind]))
		for _, o := range s.objects[kind] {
			out = append(out, o)
		}
		sortObjects(out)
		s.sorted[kind] = out
		return out
	}
	if tenant != "" && api.Namespaced(kind) {
		for _, o := range s.byTenant[tenant] {
			if api.RefOf(o).GetKind() == kind {
				out = append(out, o)
			}
		}
	} else {
		out = make([]*pb.Object, 0, len(s.objects[kind]))
		for _, o := range s.objects[kind] {
			out = append(out, o)
		}
	}
	sortObjects(out)
	return out
}

func (s *state) addressUsers(addr netip.Addr) []*pb.Object {
	var out []*pb.Object
	for _, o := range s.byAddr[addr] {
		out = append(out, o)
	}
	sortObjects(out)
	return out
}

func (s *state) usedAddresses(from, to netip.Addr) []netip.Addr {
	i, _ := slices.BinarySearchFunc(s.used, from, netip.Addr.Compare)
	j, found := slices.BinarySearchFunc(s.used, to, netip.Addr.Compare)
	if found {
		j++
	}
	if i >= j {
		return nil
	}
	return s.used[i:j:j]
}

// names returns an object's tenant and name without allocating.
func names(o *pb.Object) (tenant, name string) {
	switch v := o.GetKind().(type) {
	case *pb.Object_Tenant:
		return "", v.Tenant.GetName()
	case *pb.Object_VipPool:
		return "", v.VipPool.GetName()
	case *pb.Object_LoadBalancer:
		return v.LoadBalancer.GetTenant(), v.LoadBalancer.GetName()
	case *pb.Object_Node:
		return "", v.Node.GetId()
	case *pb.Object_Certificate:
		return v.Certificate.GetTenant(), v.Certificate.GetName()
	case *pb.Object_JoinToken:
		return "", v.JoinToken.GetId()
	case *pb.Object_StorageItem:
		return "", v.StorageItem.GetKey()
	case *pb.Object_StorageLock:
		return "", v.StorageLock.GetName()
	}
	return "", ""
}

// compareObjects orders objects of one kind by tenant, then name: the order
// of every list the state hands out.
func compareObjects(a, b *pb.Object) int {
	at, an := names(a)
	bt, bn := names(b)
	if c := strings.Compare(at, bt); c != 0 {
		return c
	}
	return strings.Compare(an, bn)
}

func sortObjects(objs []*pb.Object) { slices.SortFunc(objs, compareObjects) }

func lbAddress(o *pb.Object) (netip.Addr, bool) {
	lb := o.GetLoadBalancer()
	if lb == nil {
		return netip.Addr{}, false
	}
	a, err := netip.ParseAddr(lb.GetStatus().GetAddress())
	return a, err == nil
}

// lbAddrs returns every address the load balancer in o holds (one per
// family of a dual-stack one), nil for any other object.
func lbAddrs(o *pb.Object) []netip.Addr { return api.StatusAddrs(o.GetLoadBalancer()) }

// put stores o (replacing any object with its reference) and keeps the
// indexes right. Replacing an object keeps its place in the sorted list
// (one copy of the list, not two) and, when the address stays, the used
// addresses as they are: an update costs what it changes, not the length
// of those lists.
func (s *state) put(o *pb.Object) {
	s.gen++
	ref := api.RefOf(o)
	key := keyOf(ref)
	old := s.objects[ref.Kind][key]
	s.unindex(ref, key, old, o)
	s.objects[ref.Kind][key] = o
	s.sortedMu.Lock()
	if cached, ok := s.sorted[ref.Kind]; ok {
		i, found := slices.BinarySearchFunc(cached, o, compareObjects)
		if found {
			// old's place (unindex left it when old was there): the
			// list may be shared with readers, so a copy.
			c := slices.Clone(cached)
			c[i] = o
			s.sorted[ref.Kind] = c
		} else {
			s.sorted[ref.Kind] = slices.Insert(slices.Clip(cached), i, o)
		}
	}
	s.sortedMu.Unlock()
	if api.Namespaced(ref.Kind) {
		m := s.byTenant[ref.Tenant]
		if m == nil {
			m = make(map[string]*pb.Object)
			s.byTenant[ref.Tenant] = m
		}
		m[ref.Kind+"/"+ref.Name] = o
	}
	s.usageAdd(o, 1)
	for _, a := range lbAddrs(o) {
		// An address in the index is in the used addresses, even with no
		// user left: unindex keeps it for the object replacing its user.
		users, known := s.byAddr[a]
		if !known {
			i, _ := slices.BinarySearchFunc(s.used, a, netip.Addr.Compare)
			s.used = slices.Insert(s.used, i, a)
		}
		s.byAddr[a] = append(slices.Clip(users), o)
	}
}

// manyChanges is the number of changes of one kind above which a commit
// drops the kind's sorted list rather than copy it for each.
const manyChanges = 32

// dropSorted forgets the sorted list of kind.
func (s *state) dropSorted(kind string) {
	s.sortedMu.Lock()
	delete(s.sorted, kind)
	s.sortedMu.Unlock()
}

func (s *state) remove(ref *pb.ObjectRef) {
	s.gen++
	key := keyOf(ref)
	s.unindex(ref, key, s.objects[ref.Kind][key], nil)
}

// unindex takes old (nil: nothing) out of the state and its indexes. With
// next, the object about to replace it, old keeps its place in the sorted
// list and its address in the used addresses if next has the same one:
// put takes them over.
func (s *state) unindex(ref *pb.ObjectRef, key string, old, next *pb.Object) {
	if old == nil {
		return
	}
	delete(s.objects[ref.Kind], key)
	if next == nil {
		s.sortedMu.Lock()
		if cached, ok := s.sorted[ref.Kind]; ok {
			if i, found := slices.BinarySearchFunc(cached, old, compareObjects); found {
				s.sorted[ref.Kind] = slices.Delete(slices.Clone(cached), i, i+1)
			}
		}
		s.sortedMu.Unlock()
	}
	if api.Namespaced(ref.Kind) {
		delete(s.byTenant[ref.Tenant], ref.Kind+"/"+ref.Name)
		if len(s.byTenant[ref.Tenant]) == 0 {
			delete(s.byTenant, ref.Tenant)
		}
	}
	nextAddrs := lbAddrs(next)
	for _, a := range lbAddrs(old) {
		users := slices.DeleteFunc(slices.Clone(s.byAddr[a]), func(u *pb.Object) bool { return u == old })
		s.byAddr[a] = users
		if len(users) == 0 && !slices.Contains(nextAddrs, a) {
			delete(s.byAddr, a)
			if i, ok := slices.BinarySearchFunc(s.used, a, netip.Addr.Compare); ok {
				s.used = slices.Delete(s.used, i, i+1)
			}
		}
	}
	s.usageAdd(old, -1)
}

// toProto copies the whole state for a snapshot.
func (s *state) toProto() *pb.State {
	lists := make(map[string][]*pb.Object, len(stateKinds))
	for _, kind := range stateKinds {
		lists[kind] = s.list(kind, "")
	}
	return stateProto(s.revision, lists)
}

// stateKinds are the kinds a pb.State holds.
var stateKinds = []string{api.KindTenant, api.KindVIPPool, api.KindLoadBalancer, api.KindNode,
	api.KindCertificate, api.KindJoinToken, api.KindStorageItem, api.KindStorageLock}

// stateProto is the pb.State of revision holding each kind's sorted
// objects.
func stateProto(revision uint64, lists map[string][]*pb.Object) *pb.State {
	out := &pb.State{Revision: revision}
	for _, o := range lists[api.KindTenant] {
		out.Tenants = append(out.Tenants, o.GetTenant())
	}
	for _, o := range lists[api.KindVIPPool] {
		out.VipPools = append(out.VipPools, o.GetVipPool())
	}
	for _, o := range lists[api.KindLoadBalancer] {
		out.LoadBalancers = append(out.LoadBalancers, o.GetLoadBalancer())
	}
	for _, o := range lists[api.KindNode] {
		out.Nodes = append(out.Nodes, o.GetNode())
	}
	for _, o := range lists[api.KindCertificate] {
		out.Certificates = append(out.Certificates, o.GetCertificate())
	}
	for _, o := range lists[api.KindJoinToken] {
		out.JoinTokens = append(out.JoinTokens, o.GetJoinToken())
	}
	for _, o := range lists[api.KindStorageItem] {
		out.StorageItems = append(out.StorageItems, o.GetStorageItem())
	}
	for _, o := range lists[api.KindStorageLock] {
		out.StorageLocks = append(out.StorageLocks, o.GetStorageLock())
	}
	return out
}

// unsortedList is kind's objects: its sorted list when one is kept
// (sorted true), else the objects in no order, for the caller to sort
// once it no longer holds the state. It builds no sorted list.
func (s *state) unsortedList(kind string) (objs []*pb.Object, sorted bool) {
	s.sortedMu.Lock()
	defer s.sortedMu.Unlock()
	if cached, ok := s.sorted[kind]; ok {
		return cached, true
	}
	out := make([]*pb.Object, 0, len(s.objects[kind]))
	for _, o := range s.objects[kind] {
		out = append(out, o)
	}
	return out, false
}

func stateFromProto(p *pb.State) *state {
	s := newState()
	s.revision = p.GetRevision()
	for _, m := range p.GetTenants() {
		s.put(api.Wrap(m))
	}
	for _, m := range p.GetVipPools() {
		s.put(api.Wrap(m))
	}
	for _, m := range p.GetLoadBalancers() {
		s.put(api.Wrap(m))
	}
	for _, m := range p.GetNodes() {
		s.put(api.Wrap(m))
	}
	for _, m := range p.GetCertificates() {
		s.put(api.Wrap(m))
	}
	for _, m := range p.GetJoinTokens() {
		s.put(api.Wrap(m))
	}
	for _, m := range p.GetStorageItems() {
		s.put(api.Wrap(m))
	}
	for _, m := range p.GetStorageLocks() {
		s.put(api.Wrap(m))
	}
	return s
}

// all returns every object, in kind order then key order.
func (s *state) all() []*pb.Object {
	var out []*pb.Object
	for _, k := range allKinds {
		out = append(out, s.list(k, "")...)
	}
	return out
}

// overlay is a set of uncommitted changes over a reader. A nil object in
// changes is a deletion.
type overlay struct {
	parent  reader
	changes map[string]map[string]*pb.Object
	order   []*pb.ObjectRef
	// sets counts the overlay's changes.
	sets uint64
	// at indexes the changed load balancers that hold an address, by
	// address and key; it follows every set (overlay_index.go).
	at map[netip.Addr]map[string]*pb.Object
	// usage and used cache tenantUsage and usedAddresses; every set keeps
	// them right, and they are dropped when the parent's generation moves
	// from parentGen.
	usage     map[string]api.TenantUsage
	used      map[addrRange][]netip.Addr
	parentGen uint64
}

func newOverlay(parent reader) *overlay {
	return &overlay{parent: parent, changes: make(map[string]map[string]*pb.Object), parentGen: parent.generation()}
}

func (o *overlay) lookup(kind, key string) (*pb.Object, bool) {
	obj, ok := o.changes[kind][key]
	return obj, ok
}

func (o *overlay) get(kind, key string) *pb.Object {
	if obj, ok := o.lookup(kind, key); ok {
		return obj
	}
	return o.parent.get(kind, key)
}

func (o *overlay) list(kind, tenant string) []*pb.Object {
	base := o.parent.list(kind, tenant)
	ch := o.changes[kind]
	if len(ch) == 0 {
		return base
	}
	var added []*pb.Object
	for _, c := range ch {
		if c == nil || (tenant != "" && api.Namespaced(kind) && api.RefOf(c).GetTenant() != tenant) {
			continue
		}
		added = append(added, c)
	}
	sortObjects(added)
	out := make([]*pb.Object, 0, len(base)+len(added))
	for _, b := range base {
		t, n := names(b)
		if _, changed := ch[keyOf(&pb.ObjectRef{Kind: kind, Tenant: t, Name: n})]; changed {
			continue
		}
		for len(added) > 0 && compareObjects(added[0], b) < 0 {
			out = append(out, added[0])
			added = added[1:]
		}
		out = append(out, b)
	}
	return append(out, added...)
}

func (o *overlay) set(ref *pb.ObjectRef, obj *pb.Object) {
	m := o.changes[ref.Kind]
	if m == nil {
		m = make(map[string]*pb.Object)
		o.changes[ref.Kind] = m
	}
	key := keyOf(ref)
	switch ref.Kind {
	case api.KindLoadBalancer:
		o.setLoadBalancer(key, obj)
	case api.KindCertificate, api.KindStorageItem:
		prev, changed := m[key]
		if !changed {
			prev = o.parent.get(ref.Kind, key)
		}
		m[key] = obj
		o.setStored(prev, obj)
	default:
		m[key] = obj
	}
	o.order = append(o.order, ref)
	o.sets++
}

// mergeInto moves o's changes into its parent overlay.
func (o *overlay) mergeInto(parent *overlay) {
	for _, ref := range o.order {
		obj, _ := o.lookup(ref.Kind, keyOf(ref))
		parent.set(ref, obj)
	}
}

// catalog adapts a reader to api.Catalog. prior, when set, is the state
// before the write that r is a view of (api.PriorCatalog).
type catalog struct {
	r     reader
	prior reader
}

// Prior returns the state before the write, or nil when c is not a view
// of one.
func (c catalog) Prior() api.Catalog {
	if c.prior == nil {
		return nil
	}
	return catalog{r: c.prior}
}

// Nodes returns the LB hosts.
func (c catalog) Nodes() []*pb.Node {
	objs := c.r.list(api.KindNode, "")
	out := make([]*pb.Node, len(objs))
	for i, o := range objs {
		out[i] = o.GetNode()
	}
	return out
}

var (
	_ api.Catalog            = catalog{}
	_ api.AddressIndex       = catalog{}
	_ api.NodeCatalog        = catalog{}
	_ api.CertificateCatalog = catalog{}
	_ api.JoinTokenCatalog   = catalog{}
	_ api.PriorCatalog       = catalog{}
	_ api.NodeLister         = catalog{}
)

func (c catalog) Tenant(name string) *pb.Tenant {
	return c.r.get(api.KindTenant, name).GetTenant()
}

func (c catalog) Tenants() []*pb.Tenant {
	objs := c.r.list(api.KindTenant, "")
	out := make([]*pb.Tenant, len(objs))
	for i, o := range objs {
		out[i] = o.GetTenant()
	}
	return out
}

func (c catalog) Pool(name string) *pb.VIPPool {
	return c.r.get(api.KindVIPPool, name).GetVipPool()
}

func (c catalog) Pools() []*pb.VIPPool {
	objs := c.r.list(api.KindVIPPool, "")
	out := make([]*pb.VIPPool, len(objs))
	for i, o := range objs {
		out[i] = o.GetVipPool()
	}
	return out
}

func (c catalog) LoadBalancer(tenant, name string) *pb.LoadBalancer {
	return c.r.get(api.KindLoadBalancer, tenant+"/"+name).GetLoadBalancer()
}

func (c catalog) LoadBalancers(tenant string) []*pb.LoadBalancer {
	objs := c.r.list(api.KindLoadBalancer, tenant)
	out := make([]*pb.LoadBalancer, len(objs))
	for i, o := range objs {
		out[i] = o.GetLoadBalancer()
	}
	return out
}

func (c catalog) UsedAddresses(from, to netip.Addr) []netip.Addr {
	return c.r.usedAddresses(from, to)
}

func (c catalog) Node(id string) *pb.Node { return c.r.get(api.KindNode, id).GetNode() }

func (c catalog) Certificate(tenant, name string) *pb.Certificate {
	return c.r.get(api.KindCertificate, tenant+"/"+name).GetCertificate()
}

func (c catalog) JoinToken(id string) *pb.JoinToken {
	return c.r.get(api.KindJoinToken, id).GetJoinToken()
}

func (c catalog) AddressUsers(addr netip.Addr) []*pb.LoadBalancer {
	objs := c.r.addressUsers(addr)
	out := make([]*pb.LoadBalancer, len(objs))
	for i, o := range objs {
		out[i] = o.GetLoadBalancer()
	}
	return out
}

func clone(o *pb.Object) *pb.Object {
	if o == nil {
		return nil
	}
	return proto.Clone(o).(*pb.Object)
}
