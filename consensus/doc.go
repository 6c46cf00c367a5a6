// Package consensus is teapot-lb's replicated state: a hashicorp/raft node
// with raft-boltdb (bbolt) log and stable stores and file snapshots, a thin
// FSM that applies typed, versioned commands, the write path that validates
// and stamps writes on the leader (forwarding from followers), linearizable
// reads, join and removal of hosts, and a revision-numbered watch.
//
// See DESIGN.md for how a write travels and why Apply re-validates.
package consensus
