// Package observe is the host side of observed state: what one LB host
// sees (listeners, member health, VIPs, certificates, traffic) and a
// bounded ring of its recent events. The parts that own each thing (the
// data plane, the VIP manager, the certificate manager) add it through the
// Source interface when asked; nothing here is written to Raft.
package observe
