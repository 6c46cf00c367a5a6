package api

import (
	"fmt"

	"google.golang.org/protobuf/proto"

	pb "github.com/teapot-lb/teapot-lb/api/proto/teapotv1"
)

// DefaultStoredBytes is quotas.storedBytes when a tenant sets none: the
// encoded bytes of everything a tenant stores (load balancers,
// certificates and their keys). Every LB host keeps all of it, decoded,
// in its state, its data plane and its Raft log: the state and the
// compiled snapshot hold 1.3 bytes of heap per stored byte and a host's
// resident memory grows by 2.7 (a single Raft node) to 5.4 (the whole
// serve process, measured by the attack that stored 180 MB) bytes per
// stored byte. At 6 MiB, 100 tenants at their quota take at most about
// 3.3 GiB, which fits a 4 GiB host with its own 130 MB.
const DefaultStoredBytes = 6 << 20

// storedBytesOf is what the tenant stores in c: from its UsageIndex, or
// the sum of its load balancers' sizes when c keeps none.
func storedBytesOf(c Catalog, tenant string) int64 {
	if idx, ok := c.(UsageIndex); ok {
		return idx.TenantUsage(tenant).StoredBytes
	}
	var n int64
	for _, lb := range c.LoadBalancers(tenant) {
		n += int64(proto.Size(Wrap(lb)))
	}
	return n
}

// checkStoredBytes refuses a write that takes what the tenant stores over
// quotas.storedBytes; c is the state with the write, prior the state
// before it. A write that does not grow what the tenant stores is
// allowed, so lowering the quota never blocks a deletion or a shrink.
func checkStoredBytes(ck *checker, field, tenant string, q *pb.Quotas, c, prior Catalog) {
	after, before := storedBytesOf(c, tenant), storedBytesOf(prior, tenant)
	if limit := q.GetStoredBytes(); after > int64(limit) && after > before {
		ck.conflictf(field, "tenant %s would store %s in all (load balancers and certificates); at most %s (quotas.storedBytes; delete or shrink some, or %s)",
			tenant, mib(after), mib(int64(limit)), raiseHint)
	}
}

// CheckStoredBytes is checkStoredBytes for a write of another kind than a
// load balancer (a certificate and its key): ref names the object.
func CheckStoredBytes(ref, tenant string, c Catalog) error {
	t := c.Tenant(tenant)
	if t == nil {
		return nil
	}
	ck := &checker{}
	checkStoredBytes(ck, "", tenant, EffectiveQuotas(t), c, priorOf(c))
	return ck.err(ref)
}

// mib renders a byte count as "1.9 MiB (1992294 bytes)".
func mib(n int64) string {
	return fmt.Sprintf("%.1f MiB (%d bytes)", float64(n)/(1<<20), n)
}
