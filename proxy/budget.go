package proxy

import "syscall"

// Budgets are the default connection bounds of a host.
type Budgets struct {
	// Host bounds the connections and UDP flows of all tenants together.
	Host int
	// Tenant bounds one tenant's, over all its listeners.
	Tenant int
}

// DeriveBudgets derives the default bounds from the host's descriptor
// limit (RLIMIT_NOFILE). A tenth of it plus 512 descriptors are kept for
// the admin API, Raft, the cluster API, health checks and files; a proxied
// connection costs two descriptors (client and member), so the rest
// carries half as many connections. One tenant may use a quarter of that.
func DeriveBudgets(nofile uint64) Budgets {
	const fixedReserve = 512
	reserve := nofile/10 + fixedReserve
	var host int
	if nofile > reserve {
		host = int((nofile - reserve) / 2)
	}
	host = max(host, 1)
	return Budgets{Host: host, Tenant: max(host/4, 1)}
}

// DescriptorLimit returns the process's soft RLIMIT_NOFILE (1024 when it
// cannot be read).
func DescriptorLimit() uint64 {
	var r syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &r); err != nil || r.Cur == 0 {
		return 1024
	}
	return r.Cur
}
