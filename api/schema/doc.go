// Package schema describes the manifest format an operator writes: every
// field of every kind (VIPPool, Tenant, LoadBalancer) with its type,
// default, limits and description. It is built from the model itself
// (the protobuf descriptors, their comments, and the bounds and defaults
// the validation in package api uses), so the reference cannot drift from
// what the cluster accepts. It renders the reference as Markdown
// (docs/reference.md), as text for `teapot-lb schema PATH`, and as a
// JSON Schema for editors (yaml-language-server).
//
// The comments of model.proto and the kinds' examples (from examples/)
// are copied into generated.go by `make generate` (go run
// ./api/schema/gen), which also writes docs/reference.md and
// docs/teapot-lb.schema.json.
package schema
