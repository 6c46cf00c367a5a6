// Package observe is the host side of observed state: what one LB host
// sees (listeners, member health, VIPs, certificates, traffic) and a
// bounded ring of its recent events. The parts that own each thing (the
// data plane, the VIP manager, the certificate manager) add it through the
// Source interface when asked; nothing here is written to Raft. Plane is
// the data plane's part that other parts of the host follow: the
// readiness and member health of each load balancer as a revisioned
// watch, read from a cursor the way the committed state is.
package observe
