// Package proxy is teapot-lb's data plane: the listeners on the virtual IPs,
// L4 TCP and UDP forwarding, and the seam where the L7 HTTP proxy plugs in.
//
// Update takes the full desired state, compiles it with the pure
// snapshot.Compile off the hot path, opens the listeners it needs (with
// IP_FREEBIND, so a VIP can be bound before this host holds it) and swaps
// the result in through an atomic pointer that every new connection reads
// once, at accept time. Listening sockets are reference-counted and keyed
// by address, port and transport: a socket that the new configuration
// still serves is kept, with its accepted connections; one no longer
// served stops accepting and its connections drain for DrainTimeout.
// With Config.Steer, a TCP key has no socket of its own: a BPF sk_lookup
// program (proxy/steer) hands its connections to a socket its tenant's
// TCP listeners share, one per address family (steered.go).
// Member health (proxy/health), balancers (proxy/balance) and the live
// pools outlive a swap wherever the compiled pool did not change.
//
// TCP connections are forwarded with io.Copy between bare *net.TCPConn,
// which Linux serves with splice(2); PROXY protocol v1/v2 headers
// (proxy/proxyproto) are written when the pool asks. UDP uses a flow table
// per listener with replies sent from the VIP. http and https listeners
// hand their connections to Config.HTTP, a ConnHandler. Counters go to a
// Metrics; proxy/metrics keeps them in memory.
package proxy
