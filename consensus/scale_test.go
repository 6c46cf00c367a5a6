package consensus

import (
	"fmt"
	"testing"

	"github.com/hashicorp/raft"
)

// BenchmarkApplyTenantAtScale applies one new tenant to a state holding
// 2,000 others.
func BenchmarkApplyTenantAtScale(b *testing.B) {
	f := newFSM(testLogger())
	t := &testing.T{}
	f.Apply(entry(t, 1, commandVersion, puts(pool("public", "192.0.2.0/24"))))
	for i := 0; i < 2000; i++ {
		f.Apply(entry(t, uint64(i+2), commandVersion, puts(tenant(fmt.Sprintf("t%05d", i), "public"))))
	}
	entries := make([]*raft.Log, b.N)
	for i := range entries {
		entries[i] = entry(t, uint64(5000+i), commandVersion, puts(tenant(fmt.Sprintf("new%07d", i), "public")))
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		res := f.Apply(entries[i]).(*applyResult)
		if res.errs[0] != nil {
			b.Fatal(res.errs[0])
		}
	}
}
