// Package tenantsync connects tenant clusters to the LB cluster: the
// tenant-facing gRPC stream server (TenantSync) and the operator's calls that
// issue and revoke agent credentials (TenantCredentials). What the server
// and the agent share (load balancer naming, spec versions) is the leaf
// package syncspec, so that the agent links no Raft node; the agent itself
// is in package agent, the Kubernetes translation in package translate;
// DESIGN.md describes the protocol.
//
// Every tenant request is validated and sanitised before it reaches Raft; a
// tenant sees and changes only its own objects. The package imports api, and
// reaches consensus only through the Store interface it declares.
package tenantsync
