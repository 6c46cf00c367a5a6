// Package api holds teapot-lb's domain model (protobuf in api/proto), the
// pure validation of model objects, VIP allocation from pools, and the pieces
// a client needs to talk to the admin API.
//
// Nothing in api imports another teapot-lb package: every other package may
// import it.
package api
