// Package bfd is Bidirectional Forwarding Detection (RFC 5880)
// in asynchronous mode for single-hop IP peers (RFC 5881), without
// authentication: an Endpoint runs the sessions with the peers reachable
// from one network namespace, one receiving socket per address family,
// and tells its user when a session goes Down.
package bfd
