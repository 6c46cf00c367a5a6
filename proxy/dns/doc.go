// Package dns is the LB hosts' authoritative DNS: it answers for the
// tenants' names (route hosts, server-name route hosts) inside the zones
// the operator delegated to the LB hosts, with the VIPs of the load
// balancers that serve them, and only those that work: held or announced
// by some host, with the load balancer ready on this host (a listener
// open, a member up). It never recurses, answers nothing outside its
// zones, answers ANY minimally (RFC 8482) and limits the rate of its UDP
// responses per client prefix (response-rate limiting, as BIND does).
//
// Compile turns the committed state into an immutable Table (pure); the
// Server reads the latest Table through an atomic pointer and the
// observed state (what is held, what is ready) through the setters the
// serve command calls.
package dns
