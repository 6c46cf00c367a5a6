package scenarios

import (
	"testing"

	"github.com/teapot-lb/teapot-lb/api/porttest"
)

// Loopback addresses of 127.0.44.0/24, which no other test uses, for the
// parallel scenarios whose hosts bind a port again after a restart or
// whose test binds again a port it closed. A port picked free on
// 127.0.0.1 and closed may be taken before it is bound again, by another
// scenario's pick or as the local port of a client connection (which
// leaves from 127.0.0.1 whatever loopback address it goes to); a port of
// an address that no other test binds stays free. Each scenario has
// addresses of its own, so that they may run beside one another.
const (
	dnssecHostA = "127.0.44.1" // TestDNSSECValidatesFromTheRealBinary's first host
	dnssecHostB = "127.0.44.2" // and the host that joins it

	drainHost = "127.0.44.11" // TestStopDrainsOpenConnections' host
	drainVIP  = "127.0.44.12" // and its load balancer's VIP

	explainHost   = "127.0.44.21" // TestExplainThroughARealHost's host,
	explainVIP    = "127.0.44.22" // its load balancer's VIP
	explainMember = "127.0.44.23" // and the member that starts late
)

// freeAddrsOn returns n distinct TCP addresses on ip whose ports were
// free when it returned.
func freeAddrsOn(tb testing.TB, ip string, n int) []string {
	tb.Helper()
	return porttest.Addrs(tb, ip, n)
}

// newNodeOn is newNode with the node's raft, API and metrics addresses
// on ip, and extra more addresses there for the node's other listeners
// (--dns-addr), all distinct.
func (c *cluster) newNodeOn(ip string, extra int) (*node, []string) {
	c.tb.Helper()
	addrs := freeAddrsOn(c.tb, ip, 3+extra)
	return c.nodeAt(addrs[:3]), addrs[3:]
}
