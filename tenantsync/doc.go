// Package tenantsync connects tenant clusters to the LB cluster: the
// tenant-facing gRPC stream server, tenant authentication and authorisation,
// and the agent (teapot-lb agent) that runs inside a tenant's Kubernetes
// cluster, streams its Services, Ingresses and EndpointSlices, and writes the
// assigned VIPs back into their status.
//
// Every tenant request is validated and sanitised before it reaches Raft; a
// tenant sees and changes only its own objects. The package imports api, and
// reaches consensus only through a small interface it declares.
package tenantsync
