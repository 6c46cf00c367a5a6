// Package snapshot compiles the replicated state (load balancers, tenants
// and VIP pools) into the immutable form the data plane reads: one Listener
// per listen key (VIP address, port and transport), the backend pools they
// send traffic to, the HTTP route tables and the health-check specs.
//
// Compile is a pure function: it reads only its arguments, starts no
// goroutines and never looks at the clock or the network. A broken object
// becomes a Problem of its load balancer and never takes another load
// balancer down. Compile reuses the previous snapshot's Listener and Pool
// values when they are unchanged, so pointer identity tells the caller what
// it may keep, and an unchanged input yields the previous snapshot itself.
//
// Compile is incremental: the snapshot keeps each load balancer's compiled
// form with the object it came from, and the next Compile takes it as it is
// when the object (by pointer: objects are never modified, a change is a
// new object), its tenant, the VIP pools and the defaults are the same.
// Snapshot.Stats counts what was compiled.
package snapshot
