// Package syncspec is what both ends of the TenantSync stream agree on:
// the names the agent derives for load balancers and certificates, the
// spec version that lets a reconnecting agent send only what changed, and
// the batch size an agent uses when the server names none.
//
// It is a leaf: it imports api and its protobuf model only, so the agent
// (package agent, which runs in tenant clusters) links neither the Raft
// node nor bbolt; the rules test in scenarios/rules_test.go holds it so.
package syncspec
