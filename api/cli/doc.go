// Package cli holds the operator commands of the teapot-lb binary: apply
// (and apply --dry-run), diff, get, delete, edit, tenant, pool, lb,
// cluster, schema, version and completion. They talk to the cluster's
// admin API through package client (schema reads package schema and asks
// no one); the server side (serve, agent) is added to the same root by
// the main package.
//
// Output is a table by default, or JSON or YAML with -o where the command
// prints data. Errors are returned from the commands; Main prints them as
// one line and turns them into the exit code.
package cli
